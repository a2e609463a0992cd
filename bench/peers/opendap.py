"""The OPeNDAP peer: pydap's own DAP server (netCDF handler) on waitress, and the pydap client.

Server: ``python -m bench.peers.opendap --root CATALOG --host ADDR`` serves every ccm3 file
as a DAP2 dataset (``/ccm3_1990-01.nc.dds``, ``.das``, ``.dods?T``…) with
``pydap.wsgi.app.DapServer``, which reads the files itself with netCDF4.

Client: OPeNDAP has no query language and pydap's netCDF handler supports no selections on
arrays, so :class:`OpendapClient` downloads hyperslabs and filters them itself, file by file
in time order: ``open_url`` (DDS + DAS), packed ``RELHUM`` and ``time``, then ``T``, keeping
humidity > 50 until it has N records. It never opens a file it does not need. That is five
HTTP requests per file, and pydap 3.5.9 sends each on a new TCP connection (``pydap.net.
build_session`` makes a fresh ``requests.Session`` per request, copying only a bearer token
from the one passed in), so on a long path every request pays a handshake and a slow start.
``pydap.client.open_dods_url`` would fetch several variables in one request, but it fails on
remote URLs in 3.5.9 (``AttributeError: 'Response' object has no attribute 'body'``).

**Whole variables, not time-step hyperslabs.** The natural request is one time step
(``T[k:1:k][0:1:17][0:1:63][0:1:127]``), but pydap 3.5.9 (the last release for Python
3.11) fails every strict subset in its netCDF handler: ``LazyVariable.__getitem__``
reshapes the slice to the variable's full shape, the server logs ``ValueError: cannot
reshape array of size … into shape (6, 18, 64, 128)`` and the client sees a truncated body
(``ChunkedEncodingError: IncompleteRead``); upstream pydap/pydap#130 and #184. Whole
variables work, so the client fetches each needed file's ``RELHUM``, ``time`` and ``T``
whole (6 time steps; at most one file more than needed). :func:`probe_hyperslab` records
the failure in the results at every run, so the note stays true or is seen to go stale.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import numpy as np

from bench.peers.records import humidity_mask, time_labels


class OpendapClient:
    """A pydap client of the OPeNDAP peer; the file list comes from the server's catalog.xml."""

    def __init__(self, url: str, threshold: float = 50.0) -> None:
        import requests

        self.base = url.rstrip("/") + "/"
        self.threshold = threshold
        self._session = requests.Session()
        listing = self._session.get(self.base + "catalog.xml", timeout=60)
        listing.raise_for_status()
        self.files = sorted(set(re.findall(r"(ccm3_[^\"'/<>]+?\.nc)", listing.text)))
        if not self.files:
            raise RuntimeError(f"the OPeNDAP server lists no ccm3 files at {self.base}catalog.xml")

    def fetch(self, limit: int) -> tuple[np.ndarray, np.ndarray]:
        """Return (temperature, time) of the first ``limit`` matching records, fetched and filtered here."""
        from pydap.client import open_url

        temps: list[np.ndarray] = []
        times: list[np.ndarray] = []
        left = limit
        for name in self.files:
            if left <= 0:
                break
            ds = open_url(self.base + name, session=self._session, protocol="dap2")
            hum = ds["RELHUM"]
            raw = np.asarray(hum[:].data)
            keep = humidity_mask(raw, dict(hum.attributes), self.threshold).reshape(raw.shape[0], -1)
            per_step = keep.sum(axis=1)
            steps = int(np.searchsorted(np.cumsum(per_step), left) + 1)
            steps = min(steps, raw.shape[0])
            temperature = np.asarray(ds["T"][:].data).reshape(raw.shape[0], -1)
            tvar = ds["time"]
            labels = time_labels(np.asarray(tvar[:].data), tvar.attributes["units"],
                                 tvar.attributes.get("calendar", "standard"))
            for step in range(steps):
                chosen = temperature[step][keep[step]][:left].astype(np.float32)
                temps.append(chosen)
                times.append(np.full(chosen.size, labels[step]))
                left -= chosen.size
        return (np.concatenate(temps) if temps else np.empty(0, np.float32),
                np.concatenate(times) if times else np.empty(0, "datetime64[us]"))

    def describe(self, result: tuple[np.ndarray, np.ndarray]) -> dict[str, Any]:
        """Return rows, temperature sum and first/last time of a fetched result."""
        temperature, when = result
        return {"rows": int(temperature.size), "temperature_sum": float(temperature.astype(np.float64).sum()),
                "time_first": str(when[0].astype("datetime64[s]")) if when.size else None,
                "time_last": str(when[-1].astype("datetime64[s]")) if when.size else None}

    def notes(self) -> dict[str, str]:
        """Return what the suite records about this peer: the outcome of a hyperslab request."""
        return {"hyperslab_request": self.probe_hyperslab()}

    def probe_hyperslab(self) -> str:
        """Return "ok" if the server answers a one-time-step hyperslab of T, else the failure seen."""
        from pydap.client import open_url

        try:
            ds = open_url(self.base + self.files[0], session=self._session, protocol="dap2")
            part = np.asarray(ds["T"][0:1].data)
            return "ok" if part.shape[0] == 1 else f"wrong shape {part.shape}"
        except Exception as exc:  # noqa: BLE001 - the point is to record whatever pydap raises
            return f"{type(exc).__name__}: {str(exc)[:300]}"

    def close(self) -> None:
        """Return after closing the HTTP session."""
        self._session.close()


def main(argv: list[str] | None = None) -> None:
    """Return when the OPeNDAP server is stopped (SIGTERM)."""
    from pydap.wsgi.app import DapServer

    from bench.peers.records import ccm3_files
    from bench.peers.wsgi_server import serve_forever

    parser = argparse.ArgumentParser(prog="python -m bench.peers.opendap", description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, required=True, help="catalog root holding ccm3/")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    folder = ccm3_files(args.root)[0].parent
    serve_forever("opendap", DapServer(str(folder)), args.host, args.port)


if __name__ == "__main__":
    main()

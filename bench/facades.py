"""The facades against the ways users get the same data elsewhere: a slab into xarray, a table through ERDDAP.

Everything runs on loopback against a ``dstp serve`` process (gRPC, HTTP) and
pydap's own OPeNDAP server (:mod:`bench.peers.opendap`) over the same ccm3
files; every timing is the client's clock around the whole request, medians of
interleaved runs after one warm-up each.

**The slab**: ``ds.temperature.sel(time=<one month>, lat=slice(30, 60)).load()``
(one time step, all levels, a latitude band, all longitudes):

* *xarray engine="dstp"*: ``xr.open_dataset("dstp://…/ccm3", engine="dstp")`` once, then the
  selection (one query reading exactly the slab; the server's read counters are recorded);
* *xarray engine="pydap" (OPeNDAP)*: ``xr.open_dataset(<file url>, engine="pydap")`` of the
  file holding that month (``drop_variables=["time_bnds"]``: decoding the bounds, a strict subset
  request, already fails), then the same selection. pydap 3.5.9's netCDF handler fails strict
  subsets (bench.peers.opendap explains), so the selection is tried and its outcome recorded,
  and what a user then has to do is timed: load the whole variable of that file, then select;
* *native client*: ``c.query("select … where time = … and lat between 30 and 60")`` then
  ``dstp.to_xarray``.

**The table**: the same band over half a year as records (time, lev, lat, lon, temperature):

* *erddapy .csv*: ``ERDDAP(…, protocol="tabledap")`` with constraints, ``to_pandas(response="csv")``
  (erddapy caches responses by URL; the cache is cleared before every run);
* *native Arrow*: ``c.query(sql).to_pandas()`` over gRPC.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

import dstp
from bench.dstp_process import serve
from bench.peers.process import LineProcess
from bench.report import markdown_table, median, write_json, write_markdown

NAME = "facades"
MONTH = "1990-07-16T12:00:00"
LAT = (30.0, 60.0)
#: The table case: the same latitude band over half a year.
TABLE_TIMES = ("1990-07-01", "1990-12-31")


def _timed(fn: Callable[[], Any], repeats: int) -> tuple[float, Any, list[float]]:
    fn()  # warm-up: connections, caches
    runs, result = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        result = fn()
        runs.append(time.perf_counter() - started)
    return median(runs), result, runs


def _opendap_file(url: str, month: str) -> str:
    import re

    import requests

    listing = requests.get(url.rstrip("/") + "/catalog.xml", timeout=60).text
    files = sorted(set(re.findall(r"(ccm3_[^\"'/<>]+?\.nc)", listing)))
    stamp = month[:7]
    # the files hold consecutive months from the one in their name: pick the last that starts before
    chosen = [f for f in files if f.split("_")[1][:7] <= stamp][-1]
    return url.rstrip("/") + "/" + chosen


def run(quick: bool, samples: dict[str, Path], repeats: int = 5) -> dict[str, Any]:
    import xarray as xr
    from erddapy import ERDDAP
    from erddapy.core.url import _urlopen as urlcache

    from dstp.client._backend import record_reads

    root = samples["small" if quick else "medium"]
    repeats = 1 if quick else repeats
    rows: list[dict[str, Any]] = []
    notes: dict[str, Any] = {}
    with serve(root, "--http-port", "0", "--data-port", "-1", "--udt-port", "-1") as srv, \
            dstp.connect(srv.endpoints["grpc"]) as client:
        grpc, http = srv.endpoints["grpc"], f"http://{srv.endpoints['http']}"
        month = str(client.query("select time from ccm3").column(0)[6].as_py().isoformat())
        sel = {"time": month, "lat": slice(*LAT)}
        sql = (f"select time, lev, lat, lon, temperature from ccm3 where time = '{month.replace('T', ' ')}' "
               f"and lat between {LAT[0]} and {LAT[1]}")

        # -- the slab into xarray ----------------------------------------------------------
        ds = xr.open_dataset(f"dstp://{grpc}/ccm3", engine="dstp")
        with record_reads() as log:
            seconds, slab, runs = _timed(lambda: ds.temperature.sel(sel).load(), repeats)
        per_run = log.elements // max(1, log.queries)
        rows.append({"case": "slab", "how": 'xarray engine="dstp"', "seconds": seconds, "values": int(slab.size),
                     "server_elements_read": per_run, "runs": runs})
        want = slab.values
        native_s, native_slab, runs = _timed(lambda: dstp.to_xarray(client.query(sql)).temperature, repeats)
        np.testing.assert_array_equal(np.squeeze(native_slab.values), np.squeeze(want))
        rows.append({"case": "slab", "how": "native client + to_xarray", "seconds": native_s,
                     "values": int(native_slab.size), "runs": runs})
        rows.append(_opendap_slab(root, month, sel, want, repeats, notes))

        # -- the table: erddapy's .csv vs native Arrow ------------------------------------------
        e = ERDDAP(server=f"{http}/erddap", protocol="tabledap")
        e.dataset_id = "ccm3"
        e.variables = ["time", "lev", "lat", "lon", "temperature"]
        e.constraints = {"time>=": f"{TABLE_TIMES[0]}T00:00:00Z", "time<=": f"{TABLE_TIMES[1]}T00:00:00Z",
                         "lat>=": LAT[0], "lat<=": LAT[1]}
        table_sql = (f"select time, lev, lat, lon, temperature from ccm3 where time between '{TABLE_TIMES[0]}' "
                     f"and '{TABLE_TIMES[1]}' and lat between {LAT[0]} and {LAT[1]}")

        def via_erddapy() -> Any:
            urlcache.cache_clear()  # erddapy keeps responses by URL: every run must fetch
            return e.to_pandas(response="csv", skiprows=[1])

        csv_s, frame, runs = _timed(via_erddapy, repeats)
        arrow_s, table, runs_a = _timed(lambda: client.query(table_sql).to_pandas(), repeats)
        assert len(frame) == len(table), (len(frame), len(table))
        np.testing.assert_array_equal(frame["temperature"].to_numpy("f4"), table["temperature"].to_numpy("f4"))
        rows.append({"case": "table", "how": "erddapy .csv (ERDDAP facade)", "seconds": csv_s,
                     "values": len(frame), "runs": runs})
        rows.append({"case": "table", "how": "native client, Arrow over gRPC", "seconds": arrow_s,
                     "values": len(table), "runs": runs_a})
    result = {"rows": rows, "slab_sql": sql, "table_sql": table_sql, "selection": f"time={month}, lat=slice{LAT}", **notes,
              "sample": "small" if quick else "medium", "repeats": repeats}
    if not quick:
        write_json(NAME, result)
        fastest = {c: min(r["seconds"] for r in rows if r["case"] == c and r.get("seconds")) for c in ("slab", "table")}
        for r in rows:
            r["vs_fastest"] = r["seconds"] / fastest[r["case"]] if r.get("seconds") else None
        table_md = markdown_table(rows, [("case", "case"), ("how", "how"), ("seconds", "median s"),
                                         ("vs_fastest", "× fastest"), ("values", "values"),
                                         ("server_elements_read", "server elements read")])
        write_markdown(NAME, "Facades: a slab into xarray, a table through ERDDAP", (
            f"ccm3 ({result['sample']} samples), `{result['selection']}`; medians of {repeats} runs after a "
            f"warm-up, loopback, client's clock. Table: `{table_sql}`.\n\n{table_md}\n\nOPeNDAP slab request: "
            f"{notes.get('opendap_subset', '')}\n"))
    return result


def _opendap_slab(root: Path, month: str, sel: dict[str, Any], want: np.ndarray, repeats: int,
                  notes: dict[str, Any]) -> dict[str, Any]:
    """Time the OPeNDAP path (pydap's server and xarray's pydap engine) to the same slab."""
    import sys
    import tempfile

    import xarray as xr

    with tempfile.TemporaryDirectory(prefix="dstp-facades-") as tmp:
        peer = LineProcess([sys.executable, "-m", "bench.peers.opendap", "--root", str(root), "--host", "127.0.0.1"],
                           Path(tmp) / "opendap.log")
        try:
            url = _opendap_file(peer.next_line(120).split()[2], month)
            ds = xr.open_dataset(url, engine="pydap", drop_variables=["time_bnds"])
            try:
                direct = ds.T.sel(sel).load()
                notes["opendap_subset"] = "ok"
                seconds, got, runs = _timed(lambda: xr.open_dataset(url, engine="pydap", drop_variables=["time_bnds"]).T.sel(sel).load(), repeats)
                how = 'xarray engine="pydap": the selection'
            except Exception as exc:  # noqa: BLE001 - the point is to record what pydap does
                notes["opendap_subset"] = f"{type(exc).__name__}: {str(exc)[:200]}"
                seconds, got, runs = _timed(lambda: xr.open_dataset(url, engine="pydap", drop_variables=["time_bnds"]).T.load().sel(sel), repeats)
                how = 'xarray engine="pydap": whole variable, then select (subsets fail)'
                direct = got
            np.testing.assert_array_equal(np.squeeze(direct.values), np.squeeze(want))
            return {"case": "slab", "how": how, "seconds": seconds, "values": int(got.size), "runs": runs}
        finally:
            peer.close()

"""The Arrow Flight peer: a ``pyarrow.flight`` server whose DoGet streams the matching records.

Server: ``python -m bench.peers.flight --root CATALOG --host ADDR``. The ticket is JSON,
``{"threshold": 50, "limit": N}``; DoGet reads the ccm3 files itself
(:mod:`bench.peers.records`: netCDF4 + numpy, one record batch per time step) and streams
``temperature: float32, time: timestamp[us]`` as it reads. No dstp code is involved.

Client: :class:`FlightClient` connects once (untimed) and times ``do_get(ticket).read_all()``.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.flight as fl

from bench.peers.records import matching_chunks

SCHEMA = pa.schema([("temperature", pa.float32()), ("time", pa.timestamp("us"))])


class Ccm3FlightServer(fl.FlightServerBase):  # type: ignore[misc]
    """A Flight service answering ``humidity > threshold limit N`` tickets over the ccm3 files."""

    def __init__(self, root: Path, location: str) -> None:
        super().__init__(location)
        self.root = root

    def do_get(self, context: Any, ticket: fl.Ticket) -> fl.GeneratorStream:
        """Return a stream of the matching records, one batch per time step."""
        request = json.loads(ticket.ticket)
        limit = request.get("limit")
        chunks = matching_chunks(self.root, float(request.get("threshold", 50.0)),
                                 int(limit) if limit is not None and int(limit) >= 0 else None)

        def batches() -> Iterator[pa.RecordBatch]:
            for chunk in chunks:
                yield pa.record_batch([pa.array(chunk.temperature),
                                       pa.array(np.full(len(chunk), chunk.time), pa.timestamp("us"))],
                                      schema=SCHEMA)

        return fl.GeneratorStream(SCHEMA, batches())


class FlightClient:
    """A client of the Flight peer."""

    def __init__(self, url: str, threshold: float = 50.0) -> None:
        self.threshold = threshold
        self._client = fl.FlightClient(url)
        self._client.wait_for_available(timeout=30)

    def fetch(self, limit: int) -> pa.Table:
        """Return the matching records of one DoGet as a table."""
        ticket = fl.Ticket(json.dumps({"threshold": self.threshold, "limit": limit}).encode())
        return self._client.do_get(ticket).read_all()

    def describe(self, result: pa.Table) -> dict[str, Any]:
        """Return rows, temperature sum and first/last time of a fetched result."""
        when = result.column("time")
        return {"rows": result.num_rows,
                "temperature_sum": float(np.sum(result.column("temperature").to_numpy(), dtype=np.float64)),
                "time_first": when[0].as_py().isoformat(timespec="seconds") if len(when) else None,
                "time_last": when[-1].as_py().isoformat(timespec="seconds") if len(when) else None}

    def close(self) -> None:
        """Return after closing the connection."""
        self._client.close()


def main(argv: list[str] | None = None) -> None:
    """Return when the Flight server is stopped (SIGTERM)."""
    from bench.peers.wsgi_server import announce

    parser = argparse.ArgumentParser(prog="python -m bench.peers.flight", description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, required=True, help="catalog root holding ccm3/")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    server = Ccm3FlightServer(args.root, f"grpc+tcp://{args.host}:{args.port}")
    signal.signal(signal.SIGTERM, lambda *_: server.shutdown())
    announce("flight", f"grpc+tcp://{args.host}:{server.port}")
    server.serve()
    sys.exit(0)


if __name__ == "__main__":
    main()

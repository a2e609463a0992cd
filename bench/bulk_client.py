"""One query in a fresh process, as a user runs it; prints one JSON line.

    python -m bench.bulk_client --server HOST:PORT --sql SQL [--transport auto] [--streams N] [--digest]

The batches are counted and dropped as they arrive (a streaming consumer), so
the client's memory does not grow with the result. ``--digest`` adds a
CRC-32C over every batch in Arrow IPC form, to compare results across
channels in the quick mode (it costs CPU, so timed runs leave it off).
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bulk_client", description=__doc__)
    parser.add_argument("--server", required=True)
    parser.add_argument("--sql", required=True)
    parser.add_argument("--transport", default="auto", choices=["auto", "grpc", "striped", "udt"])
    parser.add_argument("--streams", type=int, default=0)
    parser.add_argument("--congestion-control", default="")
    parser.add_argument("--digest", action="store_true")
    args = parser.parse_args(argv)

    import crc32c

    import dstp

    started = time.perf_counter()
    with dstp.connect(args.server) as client:
        stream = client.query_batches(args.sql, transport=args.transport, streams=args.streams,
                                      congestion_control=args.congestion_control)
        rows = nbytes = batches = 0
        digest = 0
        try:
            for batch in stream:
                rows += batch.num_rows
                nbytes += batch.nbytes
                batches += 1
                if args.digest:
                    digest = crc32c.crc32c(batch.serialize(), digest)
        finally:
            stream.close()
        seconds = time.perf_counter() - started
        summary = stream.summary
    print(json.dumps({
        "rows": rows, "bytes": nbytes, "batches": batches, "seconds": seconds, "transport": stream.transport,
        "choice": stream.choice, "wire_bytes": summary.wire_bytes if summary else None,
        "digest": digest if args.digest else None, "streams": len(summary.paths) if summary and summary.paths else None,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Client driver: ``python -m bench.peers.client --peer NAME --url URL [--size N --repeats R]``.

One process per peer (and per network path) holds one connected client and times requests
*inside* the process, so the 0.5–1 s of Python imports and the session set-up (WSDL, catalog,
channel) are never part of a measurement. Two ways to drive it:

* ``--size N [--repeats R]``: one-shot; prints one JSON line per request and exits.
* no ``--size``: prints ``{"ready": true, …}`` once set up, then answers JSON lines on stdin
  (``{"size": N}``) with one JSON line each, until stdin closes. ``bench.table4`` uses this so it
  can interleave the peers request by request.

Each answer has ``seconds`` (the timed region: request sent → every record decoded into client
memory), ``rows``, ``temperature_sum``, ``time_first``/``time_last`` (checked against dstp by
the suite), or ``error``. Garbage from the previous answer is collected before the clock starts.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from typing import Any, Callable, Protocol


class PeerClient(Protocol):
    """What every peer's client offers the driver."""

    def fetch(self, limit: int) -> Any:
        """Return the first ``limit`` matching records in the peer's own client-side form."""

    def describe(self, result: Any) -> dict[str, Any]:
        """Return rows, temperature_sum, time_first, time_last (and extras) of a fetched result."""

    def close(self) -> None:
        """Return after releasing connections."""


def _soap(url: str) -> PeerClient:
    from bench.peers.soap import SoapClient

    return SoapClient(url)


def _opendap(url: str) -> PeerClient:
    from bench.peers.opendap import OpendapClient

    return OpendapClient(url)


def _csv(url: str) -> PeerClient:
    from bench.peers.http_csv import HttpCsvClient

    return HttpCsvClient(url)


def _flight(url: str) -> PeerClient:
    from bench.peers.flight import FlightClient

    return FlightClient(url)


def _dstp(transport: str, streams: int = 0) -> Callable[[str], PeerClient]:
    def make(url: str) -> PeerClient:
        from bench.peers.dstp_client import DstpClient

        return DstpClient(url, transport, streams)

    return make


#: peer name -> (service it talks to, endpoint key of that service, client factory)
PEERS: dict[str, tuple[str, str, Callable[[str], PeerClient]]] = {
    "soap": ("soap", "url", _soap),
    "opendap": ("opendap", "url", _opendap),
    "http-csv": ("dstp", "http", _csv),
    "flight": ("flight", "url", _flight),
    "dstp-grpc": ("dstp", "grpc", _dstp("grpc")),
    "dstp-striped8": ("dstp", "grpc", _dstp("striped", 8)),
    "dstp-auto": ("dstp", "grpc", _dstp("auto")),
    "dstp-udt": ("dstp", "grpc", _dstp("udt")),
}


def timed_fetch(client: PeerClient, size: int) -> dict[str, Any]:
    """Return the answer to one request of ``size`` records: seconds, rows, checksums, or an error."""
    gc.collect()
    started = time.perf_counter()
    try:
        result = client.fetch(size)
    except Exception as exc:  # noqa: BLE001 - a failing peer is a result row, not a crash
        return {"size": size, "error": f"{type(exc).__name__}: {str(exc)[:500]}"}
    seconds = time.perf_counter() - started
    answer = {"size": size, "seconds": seconds, **client.describe(result)}
    del result
    return answer


def emit(message: dict[str, Any]) -> None:
    """Return after writing ``message`` as one JSON line on stdout."""
    sys.stdout.write(json.dumps(message, default=str) + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    """Return the exit status after driving one peer's client (see module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m bench.peers.client", description=__doc__.splitlines()[0])
    parser.add_argument("--peer", required=True, choices=sorted(PEERS))
    parser.add_argument("--url", required=True, help="the service endpoint (as printed by its server)")
    parser.add_argument("--size", type=int, help="one-shot: records to ask for")
    parser.add_argument("--repeats", type=int, default=1, help="one-shot: requests in a row")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    try:
        client = PEERS[args.peer][2](args.url)
        notes = client.notes() if hasattr(client, "notes") else {}
    except Exception as exc:  # noqa: BLE001 - reported to the suite as the peer's error
        emit({"ready": False, "peer": args.peer, "error": f"{type(exc).__name__}: {str(exc)[:500]}"})
        return 1
    try:
        if args.size is not None:
            for _ in range(args.repeats):
                emit({"peer": args.peer, **timed_fetch(client, args.size)})
            return 0
        emit({"ready": True, "peer": args.peer, "setup_s": time.perf_counter() - started, "notes": notes})
        for line in sys.stdin:
            if line.strip():
                emit({"peer": args.peer, **timed_fetch(client, int(json.loads(line)["size"]))})
        return 0
    finally:
        client.close()


if __name__ == "__main__":
    sys.exit(main())

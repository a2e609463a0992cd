"""A recording proxy in front of dstp's HTTP door, then a replay server that answers with the recorded bytes.

The doors benchmark (:mod:`bench.doors`) asks each protocol client (netCDF-C, pydap, zarr-python, httpx) to read
the slab once through this process in **record** mode: every connection the client opens here gets one
connection of its own to dstp (so dstp sees the client's pattern of connections), every request is forwarded
as it came, and dstp's whole response — status line, headers and body, with its own framing — is kept byte for
byte, with the time dstp took to answer it (first byte and last byte, on this process's clock, next to the
server). In **replay** mode the same requests get those bytes back from memory in one write: a server that costs
nothing, so the client's time against it is the floor of that protocol and client on that path.

Both modes count, per label the driver sets, the TCP connections the client opened and each request's method,
target, status and response bytes. The driver sets the mode and the label with ``GET /__bench__/set?mode=…&label=…``
and reads the counts with ``GET /__bench__/stats`` (JSON); these control requests close their connection and are
not counted.

    python -m bench.replay --host H --upstream HOST:PORT      # prints "port N", serves until stdin closes
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

import h11

CONTROL = "/__bench__/"


class Replay:
    """The records (request key → raw response bytes), the mode, the current label and the counts per label."""

    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.rpartition(":")
        self.upstream = (host.strip("[]"), int(port))
        self.mode = "record"
        self.label = ""
        self.records: dict[tuple[str, str, str], bytes] = {}
        self.stats: dict[str, dict[str, Any]] = {}

    def _count(self, label: str) -> dict[str, Any]:
        return self.stats.setdefault(label, {"connections": 0, "requests": [], "misses": 0})

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        counted = False
        upstream: _Upstream | None = None
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                line, *lines = head[:-4].decode("latin-1").split("\r\n")
                method, target, version = line.split(" ", 2)
                headers = [tuple(h.split(":", 1)) for h in lines if ":" in h]
                lower = {k.strip().lower(): v.strip() for k, v in headers}
                body = await reader.readexactly(int(lower.get("content-length", "0")))
                if target.startswith(CONTROL):
                    writer.write(self._control(target))
                    await writer.drain()
                    return
                stat = self._count(self.label)
                if not counted:
                    stat["connections"] += 1
                    counted = True
                key = (method, target, lower.get("range", ""))
                closes = False
                if self.mode == "record":
                    if upstream is None:
                        upstream = await _Upstream.open(*self.upstream)
                    started = time.perf_counter()
                    raw, status, first_s, closes = await upstream.exchange(method, target, headers, body)
                    done_s = time.perf_counter() - started
                    self.records[key] = raw
                    stat["requests"].append({"method": method, "target": target, "status": status,
                                             "bytes": len(raw), "first_byte_ms": first_s * 1e3,
                                             "server_ms": done_s * 1e3})
                    if closes:
                        upstream.close()
                        upstream = None
                else:
                    raw = self.records.get(key, b"")
                    if not raw:
                        stat["misses"] += 1
                        raw = b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"
                    stat["requests"].append({"method": method, "target": target, "bytes": len(raw)})
                    closes = b"\r\nconnection: close\r\n" in raw[:raw.find(b"\r\n\r\n") + 2].lower()
                writer.write(raw)
                await writer.drain()
                if closes or version == "HTTP/1.0" or lower.get("connection", "").lower() == "close":
                    return
        finally:
            if upstream is not None:
                upstream.close()
            writer.close()

    def _control(self, target: str) -> bytes:
        url = urlsplit(target)
        if url.path == CONTROL + "set":
            q = {k: v[0] for k, v in parse_qs(url.query).items()}
            self.mode = q.get("mode", self.mode)
            self.label = q.get("label", self.label)
            body = b"ok"
        else:
            body = json.dumps({"stats": self.stats, "records": len(self.records)}).encode()
        return b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)


class _Upstream:
    """One keep-alive connection to dstp; each exchange returns dstp's response exactly as it was sent."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=1 << 20)

    @classmethod
    async def open(cls, host: str, port: int) -> _Upstream:
        reader, writer = await asyncio.open_connection(host, port, limit=1 << 20)
        return cls(reader, writer)

    async def exchange(self, method: str, target: str, headers: list[Any],
                       body: bytes) -> tuple[bytes, int, float, bool]:
        """Send a request; return the raw response, its status, seconds to its first byte, and whether it closes."""
        started = time.perf_counter()
        request = h11.Request(method=method, target=target, headers=[(k.strip(), v.strip()) for k, v in headers])
        self.writer.write(self.conn.send(request) + (self.conn.send(h11.Data(data=body)) if body else b"")
                          + self.conn.send(h11.EndOfMessage()))
        raw = bytearray()
        first = 0.0
        status = 0
        while True:
            event = self.conn.next_event()
            if event is h11.NEED_DATA:
                data = await self.reader.read(1 << 20)
                if not first:
                    first = time.perf_counter() - started
                raw += data
                self.conn.receive_data(data)
                continue
            if isinstance(event, h11.Response):
                status = event.status_code
            if isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                break
        trailing = len(self.conn.trailing_data[0])
        closes = self.conn.their_state is not h11.DONE or self.conn.our_state is not h11.DONE or \
            self.conn.their_state is h11.MUST_CLOSE
        if not closes:
            self.conn.start_next_cycle()
        return bytes(raw[:len(raw) - trailing]), status, first, closes

    def close(self) -> None:
        self.writer.close()


async def _main(host: str, upstream: str) -> None:
    replay = Replay(upstream)
    server = await asyncio.start_server(replay.serve, host, 0, limit=1 << 20)
    port = server.sockets[0].getsockname()[1]
    print(f"port {port}", flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)  # the driver closes our stdin when it is done
    server.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.replay", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--upstream", required=True)
    args = parser.parse_args(argv)
    asyncio.run(_main(args.host, args.upstream))
    return 0


if __name__ == "__main__":
    sys.exit(main())

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
    """One keep-alive connection to dstp; each exchange returns dstp's response exactly as it was sent.

    The response's end is found from its head (Content-Length, chunked, or no body); the body is read in large
    pieces, not parsed, so the time measured is dstp's and not this process's.
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, host: str, port: int) -> _Upstream:
        reader, writer = await asyncio.open_connection(host, port, limit=1 << 20)
        return cls(reader, writer)

    async def exchange(self, method: str, target: str, headers: list[Any],
                       body: bytes) -> tuple[bytes, int, float, bool]:
        """Send a request; return the raw response, its status, seconds to its first byte, and whether it closes."""
        started = time.perf_counter()
        lines = [f"{method} {target} HTTP/1.1", *(f"{k.strip()}: {v.strip()}" for k, v in headers)]
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        while True:  # 1xx answers (100 Continue) come before the response
            head = await self.reader.readuntil(b"\r\n\r\n")
            first = time.perf_counter() - started
            status = int(head.split(b" ", 2)[1])
            if status >= 200:
                break
        fields = {k.strip().lower(): v.strip() for k, _, v in
                  (line.partition(b":") for line in head[:-4].split(b"\r\n")[1:])}
        closes = fields.get(b"connection", b"").lower() == b"close"
        parts = [head]
        if method == "HEAD" or status in (204, 304):
            pass
        elif b"content-length" in fields:
            parts.append(await self.reader.readexactly(int(fields[b"content-length"])))
        elif b"chunked" in fields.get(b"transfer-encoding", b"").lower():
            while True:
                size_line = await self.reader.readuntil(b"\r\n")
                parts.append(size_line)
                size = int(size_line.split(b";")[0], 16)
                if size == 0:
                    while True:  # trailers, then the empty line
                        line = await self.reader.readuntil(b"\r\n")
                        parts.append(line)
                        if line == b"\r\n":
                            break
                    break
                parts.append(await self.reader.readexactly(size + 2))
        else:  # the body runs to the end of the connection
            parts.append(await self.reader.read())
            closes = True
        return b"".join(parts), status, first, closes

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

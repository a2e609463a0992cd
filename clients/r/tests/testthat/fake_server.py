"""A stand-in dstp HTTP server whose results fail the ways docs/web.md describes.

A real server cannot be made to fail mid-stream on cue from outside its process,
so this one sends, for GET /query:

* sql containing "trailer": a 200 CSV result that ends with the ``# dstp-error:``
  trailer (NDJSON: an ``{"error": ...}`` line), then drops the connection without
  the final chunk, as the server does when a query fails after its first batch;
* sql containing "cut": the same without any trailer (a connection that broke);
* format=arrow: a schema and one record batch but no end-of-stream marker;
  with limit=0 (a schema request) a complete, empty stream;
* format=json: an unterminated array;
* sql containing "forecast": a whole 200 result of two records that the server
  cut (its truncation trailer, docs/web.md "Truncated results": CSV
  ``# dstp-truncated:`` line, JSON/NDJSON ``{"truncated": ...}`` line, Arrow
  marked last batch and no end-of-stream marker) although its
  ``X-Dstp-Truncated`` header said ``false``, as a server whose forecast was
  wrong sends it.

It prints "  http  127.0.0.1:PORT" when ready.
"""

from __future__ import annotations

import io
import json
import socket
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pyarrow as pa

SCHEMA = pa.schema([pa.field("temperature", pa.float32()), pa.field("time", pa.timestamp("us"))])
TABLE = pa.table({"temperature": pa.array([201.5, 202.25, None], pa.float32()),
                  "time": pa.array([0, 1_000_000, 2_000_000], pa.timestamp("us"))}, schema=SCHEMA)
ERROR = {"error": {"code": "bad_data_file", "message": "cannot read ccm3_1990-09.nc: NetCDF: HDF error"}}
CUT = {"truncated": {"reason": "result cut at max_result_rows=2", "rows": 2}}


def arrow_bytes(with_batch: bool, end: bool) -> bytes:
    sink = io.BytesIO()
    writer = pa.ipc.new_stream(sink, SCHEMA)
    if with_batch:
        writer.write_table(TABLE)
    if end:
        writer.close()
    data = sink.getvalue()
    return data


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _start(self, media_type: str, truncated: str | None = None) -> None:
        self.send_response(200)
        self.send_header("Content-Type", media_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("X-Dstp-Query-Id", "q000001-fake")
        if truncated is not None:
            self.send_header("X-Dstp-Truncated", truncated)
        self.end_headers()

    def _cut_result(self, fmt: str) -> None:
        """A complete response whose body ends with the truncation trailer, its header saying ``false``."""
        media = {"csv": "text/csv; charset=utf-8", "json": "application/json", "ndjson": "application/x-ndjson",
                 "arrow": "application/vnd.apache.arrow.stream"}[fmt]
        notice = json.dumps(CUT, separators=(",", ":")).encode() + b"\n"
        records = TABLE.slice(0, 2)
        if fmt == "csv":
            body = (b'"temperature","time"\n201.5,1970-01-01 00:00:00.000000\n202.25,1970-01-01 00:00:01.000000\n'
                    b"# dstp-truncated: " + notice)
        elif fmt == "json":
            body = (b'[\n{"temperature":201.5,"time":"1970-01-01T00:00:00"},\n'
                    b'{"temperature":202.25,"time":"1970-01-01T00:00:01"}\n]\n' + notice)
        elif fmt == "ndjson":
            body = (b'{"temperature":201.5,"time":"1970-01-01T00:00:00"}\n'
                    b'{"temperature":202.25,"time":"1970-01-01T00:00:01"}\n' + notice)
        else:
            sink = io.BytesIO()
            writer = pa.ipc.new_stream(sink, SCHEMA)
            writer.write_table(records)
            writer.write_batch(pa.record_batch([pa.array([], f.type) for f in SCHEMA], schema=SCHEMA),
                               custom_metadata={"dstp:truncated": "true",
                                                "dstp:truncated_reason": CUT["truncated"]["reason"],
                                                "dstp:truncated_rows": "2"})
            body = sink.getvalue()  # no end-of-stream marker
        self._start(media, truncated="false")
        self._chunk(body)
        self.wfile.write(b"0\r\n\r\n")

    def _drop(self) -> None:
        """End the body without its final chunk, like the real server after a failure."""
        self.wfile.flush()
        self.connection.shutdown(socket.SHUT_RDWR)
        self.close_connection = True

    def _send(self, status: int, body: bytes, media_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", media_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        url = urlparse(self.path)
        q = {k: v[0] for k, v in parse_qs(url.query).items()}
        if url.path == "/datasets.json":
            return self._send(200, b"[]", "application/json")
        if url.path != "/query":
            return self._send(404, json.dumps({"error": {"code": "not_found", "message": "no such page"}}).encode(),
                              "application/json")
        sql, fmt = q.get("sql", ""), q.get("format", "csv")
        if fmt == "arrow" and q.get("limit") == "0":
            return self._send(200, arrow_bytes(False, True), "application/vnd.apache.arrow.stream")
        if "forecast" in sql and fmt in ("csv", "json", "ndjson", "arrow"):
            return self._cut_result(fmt)
        if fmt == "csv":
            self._start("text/csv; charset=utf-8")
            self._chunk(b'"temperature","time"\n201.5,1970-01-01 00:00:00.000000\n202.25,1970-01-01 00:00:01.000000\n')
            if "trailer" in sql:
                self._chunk(b"# dstp-error: " + json.dumps(ERROR).encode() + b"\n")
            return self._drop()
        if fmt == "ndjson":
            self._start("application/x-ndjson")
            self._chunk(b'{"temperature":201.5,"time":"1970-01-01T00:00:00"}\n')
            if "trailer" in sql:
                self._chunk(json.dumps(ERROR).encode() + b"\n")
            return self._drop()
        if fmt == "json":
            self._start("application/json")
            self._chunk(b'[\n{"temperature":201.5,"time":"1970-01-01T00:00:00"},\n')
            return self._drop()
        if fmt == "arrow":
            self._start("application/vnd.apache.arrow.stream")
            self._chunk(arrow_bytes(True, False))
            return self._drop()
        return self._send(400, json.dumps({"error": {"code": "invalid_query", "message": "bad format"}}).encode(),
                          "application/json")


def main() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(f"  http  127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())

"""The R package's bridge to the dstp Python client (loaded through reticulate).

R asks for a query over a data channel only the Python client speaks (gRPC,
striped TCP, UDT); the records are written as an uncompressed Arrow IPC
stream to a file that R decodes with the same reader as ``GET /query?format=arrow``.
A file is used instead of converting NumPy arrays through reticulate: it is as
fast (one sequential write and read of the Arrow buffers), keeps the schema's
units and calendars, and does not depend on reticulate's NumPy support
(reticulate before 1.36 cannot convert NumPy 2 arrays).

Errors come back as data, ``{"error": {"code", "message", "line", "column"}}``,
so R raises the same condition classes as over HTTP. A result the server cut
at a limit is fetched whole and reported in the summary (``truncated``,
``truncated_reason``): R decides whether that is an error or a warning.

From a scale-out server (``dstp serve --cluster``) the Python client fetches one
piece per worker, in parallel; the summary then says how many (``partitions``),
from where (``endpoints``) and how many were fetched again (``refetched``).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pyarrow as pa

import dstp
from dstp.errors import DstpError, TransportError


def _error(err: DstpError) -> dict[str, Any]:
    out: dict[str, Any] = {"code": err.code, "message": err.message, "status": err.http_status}
    for key in ("line", "column", "token"):
        value = getattr(err, key, None)
        if value is not None:
            out[key] = value
    return {"error": out}


#: The clients of this R session, one per (server, token, TLS, CA file): kept, so that what a client learned
#: about the path (its round-trip time, the tuner's stream counts, warm striped connections) serves the
#: next query as it does in Python, rather than every query starting cold.
_clients: dict[tuple[str, str, bool, str], dstp.Client] = {}
_clients_lock = threading.Lock()


def _client(target: str, token: str, tls: bool, ca_file: str) -> dstp.Client:
    """Return the session's client of ``target`` with these credentials, connecting on first use."""
    key = (target, token, bool(tls), ca_file)
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = dstp.connect(target, token=token or None, tls=bool(tls) or None,
                                                  ca_file=ca_file or None)
        return client


def _forget(target: str, token: str, tls: bool, ca_file: str) -> None:
    """Close and drop a kept client whose connection failed, so that the next query connects afresh."""
    with _clients_lock:
        client = _clients.pop((target, token, bool(tls), ca_file), None)
    if client is not None:
        client.close()


def fetch(target: str, sql: str, transport: str, streams: int, path: str, limit: int = -1, token: str = "",
          tls: bool = False, ca_file: str = "") -> dict[str, Any]:
    """Run ``sql`` on the server at ``target`` over ``transport``; write the result to ``path``.

    ``limit`` >= 0 keeps that many records and then stops the transfer. ``token``, ``tls`` and
    ``ca_file`` are the R connection's (an https:// server speaks TLS on gRPC too).
    Returns the fetch summary (rows, transport, seconds, ...) or an error.
    """
    started = time.perf_counter()
    try:
        client = _client(target, token, tls, ca_file)
        # R signals truncation itself (a dstp_truncated condition), from the summary returned below
        stream = client.query_batches(sql, transport=transport, streams=streams, allow_truncated=True)
        stream._warn = False
        rows = 0
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_stream(sink, stream.schema) as writer:
            try:
                for batch in stream:
                    if 0 <= limit <= rows + batch.num_rows:
                        writer.write_batch(batch.slice(0, limit - rows))
                        rows = limit
                        break
                    writer.write_batch(batch)
                    rows += batch.num_rows
            finally:
                stream.close()
    except TransportError as err:  # the connection failed: the next query connects afresh
        _forget(target, token, tls, ca_file)
        return _error(err)
    except DstpError as err:
        return _error(err)
    summary = {k: v for k, v in (stream.summary.as_dict() if stream.summary else {}).items()
               if isinstance(v, (bool, int, float, str))}
    summary.update({"rows": rows, "transport": stream.transport, "seconds": time.perf_counter() - started,
                    "choice": stream.choice, "query_id": stream.info.query_id})
    parts = getattr(stream, "partitions", None)
    if parts:  # a scale-out server: the pieces came from these worker endpoints, fetched at once
        summary["partitions"] = len(parts)
        summary["endpoints"] = ",".join(sorted({p.endpoint for p in parts}))
        summary["refetched"] = sum(p.attempts > 1 for p in parts)
    return summary

"""Federation: this server reading another dstp server's datasets, through the dstp Python client.

The query layer sees a remote dataset only through the
:class:`~dstp.catalog.remote.RemoteSource` protocol; :class:`ClientRemoteSource`
implements it with :mod:`dstp.client`, so a query that names a remote dataset
makes this server a client of the other one:

* its schema (columns, types, dimensions, calendars, keys) comes from
  ``describe`` and the schema of a planned ``select`` of every column
  (nothing is read to learn it);
* a 1-D coordinate's values come from ``select <coordinate> from <dataset>``
  (one record per grid index);
* records come from the dstp query :mod:`dstp.query.plan` writes for the
  remote reference, fetched over the channel the client's policy picks
  (``transport="auto"``: striped TCP with auto-tuned streams across a long fat
  path, gRPC for small results) — GridFTP third-party style: the two servers
  talk to each other, the user's client only sees the answer.

Clients are pooled per server: a stream borrows one for its lifetime, so
concurrent queries never share a connection's channel policy. Errors of the
other server come back as the same dstp error class, prefixed with who said
it; a server that cannot be reached is a TransportError (UNAVAILABLE).
"""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np
import pyarrow as pa

from dstp.catalog.remote import RemoteColumn, RemoteSchema
from dstp.errors import DstpError, TransportError

if TYPE_CHECKING:
    from dstp.client import Client

__all__ = ["ClientRemoteSource"]


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class _Stream:
    """The records of one remote query, with the bytes that arrived for them."""

    def __init__(self, source: "ClientRemoteSource", server: str, token: str | None, client: "Client",
                 stream: Any) -> None:
        self._source, self._server, self._token, self._client = source, server, token, client
        self._stream = stream
        self.schema: pa.Schema = stream.schema
        self._closed = False

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        try:
            yield from self._stream
        except DstpError as exc:
            raise self._source.relay(exc, self._server) from None

    @property
    def bytes_received(self) -> int:
        summary = self._stream.summary
        if summary is None:
            return 0
        return int(summary.wire_bytes or summary.bytes)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._stream.close()
        finally:
            self._source.give_back(self._server, self._token, self._client)


class ClientRemoteSource:
    """Reaches other dstp servers with the dstp client (see the module docstring)."""

    def __init__(self, *, transport: str = "auto", timeout: float = 30.0, max_idle: int = 4) -> None:
        self.transport = transport
        self.timeout = timeout
        self.max_idle = max_idle
        self._idle: dict[tuple[str, str | None], list[Client]] = defaultdict(list)
        self._lock = threading.Lock()

    # -- connections -----------------------------------------------------------------------

    def _borrow(self, server: str, token: str | None) -> "Client":
        with self._lock:
            idle = self._idle[(server, token)]
            if idle:
                return idle.pop()
        import dstp

        try:
            return dstp.connect(server, timeout=self.timeout, token=token)
        except DstpError as exc:
            raise self.relay(exc, server) from None

    def give_back(self, server: str, token: str | None, client: "Client") -> None:
        with self._lock:
            idle = self._idle[(server, token)]
            if len(idle) < self.max_idle:
                idle.append(client)
                return
        client.close()

    def relay(self, exc: DstpError, server: str) -> DstpError:
        """Return the other server's error as the same class, saying who said it."""
        if isinstance(exc, TransportError) and type(exc) is TransportError:
            return TransportError(f"the dstp server {server} that serves a dataset of this query cannot be "
                                  f"reached: {exc}")
        try:
            return type(exc)(f"{server} answered: {exc}")
        except TypeError:
            return TransportError(f"{server} answered: {exc}")

    def close(self) -> None:
        with self._lock:
            clients = [c for idle in self._idle.values() for c in idle]
            self._idle.clear()
        for client in clients:
            client.close()

    # -- RemoteSource ----------------------------------------------------------------------

    def schema(self, server: str, dataset: str, token: str | None) -> RemoteSchema:
        client = self._borrow(server, token)
        try:
            details = client.describe(dataset)
            coordinates = {c.name: c for c in details.coordinates}
            attributes = {c.name: c for c in details.attributes}
            names = [*coordinates, *attributes]
            planned = client.plan(f"select {', '.join(_quoted(n) for n in names)} from {_quoted(dataset)}").schema
            star = client.plan(f"select * from {_quoted(dataset)}").schema.names
        except DstpError as exc:
            raise self.relay(exc, server) from None
        finally:
            self.give_back(server, token, client)
        axes = {d.coordinate: d.axis for d in details.dimensions if d.coordinate}
        columns = []
        for name in names:
            info = coordinates.get(name) or attributes[name]
            field = planned.field(name)
            meta = {k.decode(): v.decode() for k, v in (field.metadata or {}).items()}
            columns.append(RemoteColumn(
                name=name, dimensions=tuple(info.dimensions), arrow_type=field.type,
                units=info.units or None, cf=tuple(info.cf), axis=axes.get(name) or dict(info.cf).get("axis"),
                calendar=meta.get("calendar"), role=info.role or ("data" if name in attributes else "auxiliary")))
        return RemoteSchema(
            dataset=dataset, columns=tuple(columns),
            dimensions=tuple((d.name, d.size) for d in details.dimensions),
            star=tuple(star), keys=tuple((k.name, k.column) for k in details.correlation_keys))

    def coordinate(self, server: str, dataset: str, column: str, token: str | None) -> np.ndarray:
        client = self._borrow(server, token)
        try:
            table = client.query(f"select {_quoted(column)} from {_quoted(dataset)}")
        except DstpError as exc:
            raise self.relay(exc, server) from None
        finally:
            self.give_back(server, token, client)
        values = table.column(0)
        if pa.types.is_timestamp(values.type):
            return np.asarray(values.cast(pa.timestamp("us")).to_numpy(zero_copy_only=False))
        return np.asarray(values.to_numpy(zero_copy_only=False))

    def stream(self, server: str, sql: str, token: str | None, cancel: threading.Event | None) -> _Stream:
        client = self._borrow(server, token)
        try:
            stream = client.query_batches(sql, transport=self.transport)
        except DstpError as exc:
            self.give_back(server, token, client)
            raise self.relay(exc, server) from None
        except BaseException:
            self.give_back(server, token, client)
            raise
        return _Stream(self, server, token, client, stream)

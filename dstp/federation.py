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

Who this server is there: the credential the descriptor names
(``<remote credential="b_reader">``), looked up in this server's own
``remote_credentials`` file (:func:`load_remote_credentials`); with none named,
it asks anonymously — never with the ``$DSTP_TOKEN`` of the server process,
which made it a confused deputy (an operator's own token, exported for the CLI,
re-published to anonymous users whatever it could read on the other server).
The schema says how the other server serves the dataset (``access_policy``:
"public" only when it answers an anonymous ``describe``), so the catalog can
refuse a descriptor looser than that (:mod:`dstp.catalog.remote`).

Clients are pooled per server and credential: a stream borrows one for its
lifetime, so concurrent queries never share a connection's channel policy.
Errors of the other server come back as the same dstp error class, prefixed
with who said it — except its refusal of this server's credential, which is
this server's configuration, not the user's token: a CatalogError naming the
credential. A server that cannot be reached is a TransportError (UNAVAILABLE).
"""

from __future__ import annotations

import json
import os
import stat
import threading
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping

import numpy as np
import pyarrow as pa

from dstp.catalog.remote import RemoteColumn, RemoteSchema
from dstp.errors import AuthenticationError, CatalogError, DstpError, NotFoundError, ServerError, TransportError

if TYPE_CHECKING:
    from dstp.client import Client

__all__ = ["ClientRemoteSource", "RemoteCredential", "load_remote_credentials"]


class RemoteCredential:
    """What this server presents to another one under a name: a token, and how to reach it (TLS)."""

    def __init__(self, token: str, tls: bool = False, ca_file: str | None = None) -> None:
        self.token, self.tls, self.ca_file = token, tls, ca_file

    def __repr__(self) -> str:  # never the secret
        return f"RemoteCredential(tls={self.tls}, ca_file={self.ca_file!r})"


def load_remote_credentials(path: Path | None) -> dict[str, RemoteCredential]:
    """Return the named credentials of ``path`` (JSON: ``{"b_reader": {"token": "dstp_…", "tls": true,
    "ca_file": "b.pem"}}``, or ``{"b_reader": "dstp_…"}``); {} for None. CatalogError saying what is wrong."""
    if path is None:
        return {}
    try:
        mode = path.stat().st_mode
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise CatalogError(f"cannot read the remote credentials file {path}: {exc}") from exc
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise CatalogError(f"the remote credentials file {path} can be read by others (mode {stat.S_IMODE(mode):o}); "
                           f"it holds tokens: chmod 600 {path}")
    if not isinstance(raw, dict):
        raise CatalogError(f"{path}: expected a JSON object of credential names")
    found = {}
    for name, entry in raw.items():
        if isinstance(entry, str):
            entry = {"token": entry}
        if not isinstance(entry, dict) or not isinstance(entry.get("token"), str) or not entry["token"]:
            raise CatalogError(f"{path}: credential {name!r} needs a \"token\"")
        ca_file = entry.get("ca_file")
        if ca_file is not None:
            ca_file = os.fspath(path.parent / ca_file)
        found[name] = RemoteCredential(entry["token"], bool(entry.get("tls", ca_file is not None)), ca_file)
    return found


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class _Stream:
    """The records of one remote query, with the bytes that arrived for them."""

    def __init__(self, source: "ClientRemoteSource", server: str, credential: str, client: "Client",
                 stream: Any) -> None:
        self._source, self._server, self._credential, self._client = source, server, credential, client
        self._stream = stream
        self.schema: pa.Schema = stream.schema
        self._closed = False

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        try:
            yield from self._stream
        except DstpError as exc:
            raise self._source.relay(exc, self._server, self._credential) from exc

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
            self._source.give_back(self._server, self._credential, self._client)


class ClientRemoteSource:
    """Reaches other dstp servers with the dstp client (see the module docstring)."""

    def __init__(self, credentials: Mapping[str, RemoteCredential] | None = None, *, transport: str = "auto",
                 timeout: float = 30.0, max_idle: int = 4) -> None:
        self.credentials = dict(credentials or {})
        self.transport = transport
        self.timeout = timeout
        self.max_idle = max_idle
        self._idle: dict[tuple[str, str], list[Client]] = defaultdict(list)
        self._lock = threading.Lock()

    # -- connections -----------------------------------------------------------------------

    def _borrow(self, server: str, credential: str) -> "Client":
        """Return a client of ``server`` presenting ``credential`` ("" none; "NAME#anonymous": none, over the
        TLS settings of NAME)."""
        with self._lock:
            idle = self._idle[(server, credential)]
            if idle:
                return idle.pop()
        import dstp

        name, _, anonymous = credential.partition("#")
        if name:
            found = self.credentials.get(name)
            if found is None:
                raise CatalogError(f"the descriptor of a dataset served by {server} names the credential "
                                   f"{name!r}, which is not in this server's remote_credentials file")
            token, tls, ca_file = ("" if anonymous else found.token), found.tls, found.ca_file
        else:
            token, tls, ca_file = "", False, None  # "": anonymous, never $DSTP_TOKEN
        try:
            return dstp.connect(server, timeout=self.timeout, token=token, tls=tls, ca_file=ca_file)
        except DstpError as exc:
            raise self.relay(exc, server, credential) from exc

    def give_back(self, server: str, credential: str, client: "Client") -> None:
        with self._lock:
            idle = self._idle[(server, credential)]
            if len(idle) < self.max_idle:
                idle.append(client)
                return
        client.close()

    def relay(self, exc: DstpError, server: str, credential: str = "") -> DstpError:
        """Return the other server's error as the same class, saying who said it (its refusal of this server's
        own credential as a CatalogError: the user's token is not the one at fault)."""
        if isinstance(exc, AuthenticationError):
            who = f"the credential {credential!r} of this server" if credential else "anonymous requests"
            return CatalogError(f"{server}, which serves a dataset of this query, refused {who} (it answered "
                                "unauthenticated); "
                               "this server's operator must give that dataset's <remote> a credential the other "
                               "server accepts (remote_credentials)")
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

    def schema(self, server: str, dataset: str, credential: str) -> RemoteSchema:
        client = self._borrow(server, credential)
        try:
            details = client.describe(dataset)
            coordinates = {c.name: c for c in details.coordinates}
            attributes = {c.name: c for c in details.attributes}
            names = [*coordinates, *attributes]
            planned = client.plan(f"select {', '.join(_quoted(n) for n in names)} from {_quoted(dataset)}").schema
            star = client.plan(f"select * from {_quoted(dataset)}").schema.names
            policy = self._access_policy(server, dataset, credential, details.summary.access_policy)
        except DstpError as exc:
            raise self.relay(exc, server, credential) from exc
        finally:
            self.give_back(server, credential, client)
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
            star=tuple(star), keys=tuple((k.name, k.column) for k in details.correlation_keys), access_policy=policy)

    def _access_policy(self, server: str, dataset: str, credential: str, reported: str) -> str:
        """Return how ``server`` serves ``dataset``: "public" only if it answers an anonymous describe."""
        if not credential:
            return "public"  # it just answered us, anonymous
        anonymous = self._borrow(server, f"{credential}#anonymous")
        try:
            anonymous.describe(dataset)
        except (AuthenticationError, NotFoundError):  # not for anonymous callers (restricted, embargoed)
            return reported if reported in ("registered", "restricted") else "restricted"
        finally:
            self.give_back(server, f"{credential}#anonymous", anonymous)
        return "public"

    def coordinate(self, server: str, dataset: str, column: str, credential: str) -> np.ndarray:
        client = self._borrow(server, credential)
        try:
            table = client.query(f"select {_quoted(column)} from {_quoted(dataset)}")
        except DstpError as exc:
            raise self.relay(exc, server, credential) from exc
        finally:
            self.give_back(server, credential, client)
        values = table.column(0)
        if pa.types.is_timestamp(values.type):
            return np.asarray(values.cast(pa.timestamp("us")).to_numpy(zero_copy_only=False))
        return np.asarray(values.to_numpy(zero_copy_only=False))

    def stream(self, server: str, sql: str, credential: str, cancel: threading.Event | None) -> _Stream:
        client = self._borrow(server, credential)
        try:
            stream = client.query_batches(sql, transport=self.transport)
        except DstpError as exc:
            self.give_back(server, credential, client)
            raise self.relay(exc, server, credential) from exc
        except BaseException:
            self.give_back(server, credential, client)
            raise
        return _Stream(self, server, credential, client, stream)

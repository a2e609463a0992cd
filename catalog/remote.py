"""Remote datasets: a descriptor that names a dataset of another dstp server.

    <dataset xmlns="urn:dstp:descriptor:1" id="ocean_eu" version="1">
      <title>Ocean model, served by the Amsterdam server</title>
      <remote server="ams.example.org:50051" dataset="ocean"/>
      <access policy="public"/>
    </dataset>

A query may name ``ocean_eu`` like a local dataset, alone or joined with local
ones; the server then reads from the other server only what the query needs
(the columns it names, filtered by its conditions on that dataset, and the key
ranges a join or matchup needs), over dstp's data channel, GridFTP
third-party style. The catalog never talks to the network itself: reaching
the other server is a :class:`RemoteSource` the server assembly injects
(``dstp.federation.ClientRemoteSource``, built on the dstp client), so this
layer stays free of sockets and gRPC.

What the remote dataset offers (columns, types, dimensions, calendars, keys)
is asked for on first use and kept for ``SCHEMA_TTL_S`` seconds; a coordinate's
values (for nearest matching) likewise.

Who this server is to the other one: ``<remote credential="b_reader">`` names
an entry of this server's credentials file (resolved by the RemoteSource, never
an environment variable); without one it asks anonymously. Whatever this server
can read there it could re-publish, so the descriptor's own access policy may
never be looser than the remote dataset's (public < registered < restricted):
a descriptor that publishes to everyone a dataset the other server does not
serve to anonymous callers is refused on first use, as not found, with the
reason in the log for the operator (SECURITY.md, "Federation").
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Protocol

import numpy as np
import pyarrow as pa

from dstp.catalog.columns import ColumnTraits
from dstp.catalog.descriptor import Descriptor
from dstp.errors import CatalogError, DatasetNotFoundError

__all__ = ["RemoteColumn", "RemoteDataset", "RemoteSchema", "RemoteSource", "RemoteStream", "SCHEMA_TTL_S",
           "looser_than"]

log = logging.getLogger("dstp.catalog")

#: Access policies from the loosest to the strictest.
POLICY_ORDER = ("public", "registered", "restricted")

#: Seconds a remote dataset's schema and coordinates are kept before they are asked for again.
SCHEMA_TTL_S = 300.0


@dataclass(frozen=True, slots=True)
class RemoteColumn:
    """One column of a remote dataset, as its server describes it."""

    name: str
    dimensions: tuple[str, ...]
    arrow_type: pa.DataType
    units: str | None = None
    cf: tuple[tuple[str, str], ...] = ()
    axis: str | None = None
    calendar: str | None = None
    #: dimension, scalar, auxiliary, bounds, derived, weight or data
    role: str = "data"


@dataclass(frozen=True, slots=True)
class RemoteSchema:
    """What a remote dataset offers: its columns, dimensions (sizes), ``select *`` and correlation keys."""

    dataset: str
    columns: tuple[RemoteColumn, ...]
    dimensions: tuple[tuple[str, int], ...]
    star: tuple[str, ...]
    #: (key name, column) pairs, as the remote descriptor declares them.
    keys: tuple[tuple[str, str], ...] = ()
    #: How the other server serves it: "public" only if it answers anonymous callers; else its policy as it
    #: reports it ("registered", "restricted"; "restricted" when it cannot tell).
    access_policy: str = "restricted"


def looser_than(policy: str, other: str) -> bool:
    """Return whether access ``policy`` lets in more callers than ``other`` (an unknown policy: the strictest)."""
    def rank(p: str) -> int:
        return POLICY_ORDER.index(p) if p in POLICY_ORDER else len(POLICY_ORDER)

    return rank(policy) < rank(other)


class RemoteStream(Protocol):
    """Records arriving from a remote server."""

    schema: pa.Schema

    def __iter__(self) -> Iterator[pa.RecordBatch]: ...

    @property
    def bytes_received(self) -> int: ...

    def close(self) -> None: ...


class RemoteSource(Protocol):
    """How this server reaches other dstp servers (injected by the server assembly)."""

    def schema(self, server: str, dataset: str, credential: str) -> RemoteSchema:
        """Return what ``dataset`` of ``server`` offers, asked with the named ``credential`` ("" none);
        DatasetNotFoundError / ServerError if it cannot."""

    def coordinate(self, server: str, dataset: str, column: str, credential: str) -> np.ndarray:
        """Return the values of a 1-D coordinate column of a remote dataset, in grid order."""

    def stream(self, server: str, sql: str, credential: str, cancel: threading.Event | None) -> RemoteStream:
        """Start ``sql`` (dstp SQL over the remote's own dataset names) on ``server``; return its records."""


@dataclass(eq=False)
class RemoteDimension:
    name: str
    size: int


@dataclass(eq=False)
class RemoteDataset:
    """A dataset of another dstp server, published here under its own id."""

    descriptor: Descriptor
    source: RemoteSource | None = None
    clock: Callable[[], float] = time.monotonic
    _schema: RemoteSchema | None = field(default=None, repr=False)
    _fetched: float = field(default=-1e18, repr=False)
    _coordinates: dict[str, tuple[float, np.ndarray]] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    is_remote = True
    layout: Any = None

    @property
    def id(self) -> str:
        return self.descriptor.id

    @property
    def server(self) -> str:
        assert self.descriptor.remote is not None
        return self.descriptor.remote.server

    @property
    def remote_id(self) -> str:
        """The dataset's id on its own server."""
        assert self.descriptor.remote is not None
        return self.descriptor.remote.dataset

    @property
    def credential(self) -> str:
        """The name of the credential presented to the other server ("" none: asked anonymously)."""
        assert self.descriptor.remote is not None
        return self.descriptor.remote.credential

    def schema(self) -> RemoteSchema:
        """Return the remote dataset's schema (asked for at most every SCHEMA_TTL_S seconds)."""
        with self._lock:
            if self._schema is None or self.clock() - self._fetched > SCHEMA_TTL_S:
                if self.source is None:
                    raise DatasetNotFoundError(
                        f"dataset {self.id!r} is served by {self.server}, and this server was started without a "
                        "way to reach other servers")
                schema = self.source.schema(self.server, self.remote_id, self.credential)
                self._check_policy(schema)
                self._schema = schema
                self._fetched = self.clock()
                self._coordinates.clear()
            return self._schema

    def _check_policy(self, schema: RemoteSchema) -> None:
        """Refuse to serve a remote dataset under a policy looser than the other server's own."""
        ours = self.descriptor.access_policy
        if self.descriptor.embargo_until is not None:
            ours = "restricted"  # until the embargo ends, only its groups: as strict as it gets
        if not looser_than(ours, schema.access_policy):
            return
        log.warning("dataset %s (%s of %s) is not served: its descriptor publishes it as %s, but %s serves it as "
                    "%s; give its <access> a policy at least as strict (restricted with groups, or registered)",
                    self.id, self.remote_id, self.server, ours, self.server, schema.access_policy)
        raise CatalogError(f"dataset {self.id!r} cannot be served: this server would publish it more openly than "
                           f"{self.server} does; its operator must make its access policy stricter (the server log "
                           "says how)")

    def _column(self, name: str) -> RemoteColumn:
        for column in self.schema().columns:
            if column.name == name:
                return column
        raise KeyError(name)

    # -- what the query layer asks of any dataset ------------------------------------------

    def column_names(self) -> list[str]:
        return [c.name for c in self.schema().columns]

    def star_columns(self) -> list[str]:
        return list(self.schema().star)

    @property
    def dimensions(self) -> dict[str, RemoteDimension]:
        return {name: RemoteDimension(name, size) for name, size in self.schema().dimensions}

    def column_dimensions(self, name: str) -> tuple[str, ...]:
        return self._column(name).dimensions

    def dimension_order(self, dims: set[str] | tuple[str, ...]) -> tuple[str, ...]:
        return tuple(d for d, _ in self.schema().dimensions if d in dims)

    def grid_size(self, dims: tuple[str, ...]) -> int:
        sizes = dict(self.schema().dimensions)
        total = 1
        for d in dims:
            total *= sizes[d]
        return total

    def dimension_coordinates(self) -> dict[str, str]:
        return {c.name: c.dimensions[0] for c in self.schema().columns
                if c.role == "dimension" and len(c.dimensions) == 1}

    def declared_keys(self) -> dict[str, str]:
        """Return {column: correlation key} as the other server's descriptor declares them."""
        return {column: key for key, column in self.schema().keys}

    def key_info(self, name: str) -> ColumnTraits:
        column = self._column(name)
        is_time = column.calendar is not None
        return ColumnTraits(units=None if is_time else column.units, cf=dict(column.cf), axis=column.axis,
                            calendar=column.calendar, iso=is_time and pa.types.is_string(column.arrow_type),
                            value_range=self._value_range(column))

    def _value_range(self, column: RemoteColumn) -> tuple[float, float] | None:
        if column.role != "dimension" or not pa.types.is_floating(column.arrow_type) \
                and not pa.types.is_integer(column.arrow_type):
            return None
        values = self.coordinate_values(column.name)
        return (float(np.nanmin(values)), float(np.nanmax(values))) if values.size else None

    def coordinate_values(self, name: str) -> np.ndarray:
        """Return the values of a 1-D coordinate of the remote grid (asked for once per SCHEMA_TTL_S)."""
        schema = self.schema()
        with self._lock:
            held = self._coordinates.get(name)
            if held is not None and self.clock() - held[0] <= SCHEMA_TTL_S:
                return held[1]
        assert self.source is not None
        values = self.source.coordinate(self.server, schema.dataset, name, self.credential)
        with self._lock:
            self._coordinates[name] = (self.clock(), values)
        return values

    def arrow_type(self, name: str) -> pa.DataType:
        return self._column(name).arrow_type

    def close(self) -> None:
        """Nothing to close: the remote source holds the connections."""

"""Executors: where the service's queries run — on this server, or partitioned over a cluster's workers.

    LocalExecutor()                  every query runs here (the default)
    dstp.cluster.Coordinator         select-where queries as partitions on Dask workers, reductions split

The server assembly (dstp/server.py) picks one and hands it to
:class:`~dstp.service.DstpService`'s constructor; every door then gets the
same strategy through the service. Each prepared query passes through
:meth:`Executor.prepare` (a coordinator turns a reduction into partial
aggregates on its workers, combined here — for gRPC, HTTP, Flight and
ERDDAP alike). A door whose protocol can hand a client several places to
fetch from (gRPC ``Query``/``Run``/``Resolve``, ``OpenFile`` shares) asks
:meth:`Executor.partitions` and :meth:`Executor.file_parts`; None or ``[]``
means "answer as a single server".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from dstp.auth import Principal
from dstp.errors import NotFoundError
from dstp.query.execute import PreparedQuery

if TYPE_CHECKING:
    from dstp.service._service import DstpService
    from dstp.service.files import FileHandle
    from dstp.transport.wire.values import FilePartInfo, PartitionInfo, QueryInfo

__all__ = ["Executor", "LocalExecutor"]


class Executor(Protocol):
    """How the queries and downloads of one service are executed."""

    #: True when queries may be answered as partitions fetched from other hosts.
    partitioned: bool

    def prepare(self, prepared: PreparedQuery) -> PreparedQuery:
        """Return how ``prepared`` runs: itself, or a reduction whose pieces run elsewhere."""
        ...

    def partitions(self, service: DstpService, sql: str, principal: Principal, compression: str,
                   streams: int = 0, kind: str = "striped") -> QueryInfo | None:
        """Return an answer listing the partitions of ``sql`` (each with its own tickets), or None."""
        ...

    def resolve(self, service: DstpService, query_id: str, index: int, principal: Principal) -> PartitionInfo:
        """Return where partition ``index`` of ``query_id`` can be fetched now (NotFoundError if unknown)."""
        ...

    def file_parts(self, service: DstpService, handle: FileHandle, streams: int, congestion_control: str,
                   principal: Principal) -> list[FilePartInfo]:
        """Return shares of a download fetched from other hosts; [] when this server sends it."""
        ...


class LocalExecutor:
    """Every query and download runs on this server."""

    partitioned = False

    def prepare(self, prepared: PreparedQuery) -> PreparedQuery:
        return prepared

    def partitions(self, service: DstpService, sql: str, principal: Principal, compression: str,
                   streams: int = 0, kind: str = "striped") -> QueryInfo | None:
        return None

    def resolve(self, service: DstpService, query_id: str, index: int, principal: Principal) -> PartitionInfo:
        raise NotFoundError(f"no partitioned query {query_id!r} is known here: this server runs its queries "
                            "itself (it is not a cluster coordinator, docs/scale-out.md)")

    def file_parts(self, service: DstpService, handle: FileHandle, streams: int, congestion_control: str,
                   principal: Principal) -> list[FilePartInfo]:
        return []

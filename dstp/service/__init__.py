"""The dstp service: catalog, queries, files and tickets, without any wire protocol.

Every adapter (gRPC, HTTP, the data channels) calls this one object, so
limits, errors and tickets behave the same whichever way a request arrives.

    service.queries.plan(sql, channels=[...])       -> QueryHandle (schema, sizes, offers with tickets)
    service.queries.run(sql, cancel)                -> Execution, at once and without a ticket (HTTP, gRPC Run)
    service.queries.run_or_offer(sql, channels, n)  -> Execution if the result is under n bytes, else QueryHandle
    service.queries.prepare(sql)                    -> PreparedQuery: the validated plan and schema, nothing run
    service.files.open(dataset, file, …)            -> FileHandle (size, CRC-32C, offers with tickets)
    service.open_source(ticket, kind, cancel)       -> (MessageSource, key): the one way a ticket becomes data
    service.axis_values(dataset, dimension)         -> pa.Array: a dimension's values, from the catalog's memory
    service.executor                                -> where queries run: LocalExecutor, or a cluster coordinator

It is split along its seams: ``queries`` (plan, run, the Execution),
``files`` (checked, checksummed bulk requests), ``offers`` (channels and
tickets), ``admission`` (transfer slots and what is running) and
``executor`` (local or cluster, given to the constructor).
"""

from dstp.service._service import DstpService
from dstp.service.admission import Admission
from dstp.service.executor import Executor, LocalExecutor
from dstp.service.files import FileHandle, FileRequest, Files
from dstp.service.offers import CHANNELS, ChannelInfo, Grant, Offer, Offers
from dstp.service.queries import Execution, Queries, QueryHandle, row_bytes

__all__ = [
    "CHANNELS",
    "Admission",
    "ChannelInfo",
    "DstpService",
    "Execution",
    "Executor",
    "FileHandle",
    "FileRequest",
    "Files",
    "Grant",
    "LocalExecutor",
    "Offer",
    "Offers",
    "Queries",
    "QueryHandle",
    "row_bytes",
]

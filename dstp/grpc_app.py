"""The gRPC adapter: translates the control plane and the Fetch streams to the service.

Thin by design: each rpc converts its request with the wire codec
(:mod:`dstp.transport.codec`), calls :class:`DstpService`, and converts the
answer back. A ticket becomes data only through ``service.open_source``
(Fetch, FetchFile); ``Run`` plans and starts its query directly, with no
ticket to issue and redeem. :func:`grpc_errors` turns every dstp error into
its gRPC status with trailing metadata (code, line, column), and every
unexpected exception into INTERNAL with an incident id; no traceback reaches
a client.

Record batches and file blocks are not built into protobuf messages: the
streams' response serializers (:func:`add_to_server`) frame an IPC message's
own buffers, or a block of the file's memory map, with one copy into the
bytes gRPC sends (see ``fetch_response_bytes`` in the codec).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from typing import Any, Iterator

import grpc

from dstp.errors import DstpError, QueryError, ServerError, TicketError
from dstp.proto import dstp_pb2 as pb
from dstp.proto import dstp_pb2_grpc as pb_grpc
from dstp.service import DstpService, Offer, QueryHandle
from dstp.transport import codec
from dstp.transport.codec import ChannelOffer, QueryInfo
from dstp.transport.sources import FileSource, MessageSource, QuerySource

__all__ = ["DstpServicer", "add_to_server", "fetch_response_bytes", "grpc_errors"]

log = logging.getLogger("dstp.grpc")

MAX_PING_BYTES = 2**20
GRPC_CHUNK = 2 * 2**20  # file bytes per FileChunk message

#: The serializer of Fetch and Run responses (IPC messages framed without protobuf's copies).
fetch_response_bytes = codec.fetch_response_bytes


@contextlib.contextmanager
def grpc_errors(context: grpc.ServicerContext) -> Iterator[None]:
    """Translate dstp errors (and surprises) into gRPC statuses with metadata."""
    try:
        yield
    except DstpError as exc:
        metadata = [("dstp-error-code", exc.code)]
        if isinstance(exc, QueryError) and exc.line is not None:
            metadata += [("dstp-error-line", str(exc.line)), ("dstp-error-column", str(exc.column))]
        context.set_trailing_metadata(tuple(metadata))
        context.abort(getattr(grpc.StatusCode, exc.grpc_status), exc.message)
    except grpc.RpcError:
        raise
    except Exception:  # noqa: BLE001 - the last line of defence for clients
        incident = uuid.uuid4().hex[:12]
        log.exception("incident %s: unexpected error", incident)
        err = ServerError(f"unexpected server error (incident {incident}); the server log has the details")
        context.set_trailing_metadata((("dstp-error-code", err.code),))
        context.abort(grpc.StatusCode.INTERNAL, err.message)


def _offer(o: Offer) -> ChannelOffer:
    return ChannelOffer(o.kind, o.ticket.token, o.ticket.expires_at_unix_ms, o.endpoint, o.streams, o.compression,
                        o.congestion_control)


def _plan(handle: QueryHandle, offers: tuple[ChannelOffer, ...]) -> pb.QueryResponse:
    """Return the QueryResponse of a planned query with ``offers``."""
    prepared = handle.prepared
    sampling = prepared.query.sampling
    return codec.query_response_pb(QueryInfo(
        query_id=handle.query_id, schema=handle.schema, scan_rows=prepared.scan_rows,
        estimated_rows=handle.estimated_rows, estimated_bytes=handle.estimated_bytes,
        grid=tuple(handle.plan.grid), hyperslab=handle.plan.hyperslab.as_dict(), offers=offers,
        sample_seed=sampling.seed if sampling else None, max_rows=handle.max_rows, max_bytes=handle.max_bytes,
    ))


class DstpServicer(pb_grpc.DstpServicer):
    """The Dstp gRPC service over a :class:`DstpService` (register it with :func:`add_to_server`)."""

    def __init__(self, service: DstpService) -> None:
        self.service = service

    def ListDatasets(self, request: pb.ListDatasetsRequest, context: grpc.ServicerContext) -> pb.ListDatasetsResponse:
        with grpc_errors(context):
            return pb.ListDatasetsResponse(datasets=[codec.summary_pb(s) for s in self.service.datasets()])
        raise AssertionError("unreachable")

    def Describe(self, request: pb.DescribeRequest, context: grpc.ServicerContext) -> pb.DatasetDescription:
        with grpc_errors(context):
            return codec.details_pb(self.service.describe(request.id))
        raise AssertionError("unreachable")

    def Query(self, request: pb.QueryRequest, context: grpc.ServicerContext) -> pb.QueryResponse:
        with grpc_errors(context):
            handle = self.service.query(
                request.sql,
                [codec.channel_kind_name(k) for k in request.channels],
                streams=request.streams,
                compression=codec.compression_name(request.compression),
                congestion_control=request.congestion_control,
            )
            return _plan(handle, tuple(_offer(o) for o in handle.offers))
        raise AssertionError("unreachable")

    def Fetch(self, request: pb.FetchRequest, context: grpc.ServicerContext) -> Iterator[Any]:
        with grpc_errors(context):
            source = self.service.open_source(request.ticket, "grpc", _cancel_on_exit(context))
            if not isinstance(source, QuerySource):
                source.close()
                raise TicketError("this ticket is for a file; fetch it with FetchFile or `dstp get`")
            yield from _records(source)

    def Run(self, request: pb.QueryRequest, context: grpc.ServicerContext) -> Iterator[Any]:
        with grpc_errors(context):
            compression = codec.compression_name(request.compression)
            execution = self.service.run(request.sql, _cancel_on_exit(context))
            try:
                source = execution.source(compression)
            except BaseException:
                execution.close()
                raise
            # Nothing to redeem: the only offer is this stream, without a ticket.
            here = ChannelOffer("grpc", b"", 0, "", 1, compression)
            try:
                plan = _plan(execution.handle, (here,))
            except BaseException:
                source.close()
                raise
            yield pb.FetchResponse(plan=plan)
            yield from _records(source)

    def OpenFile(self, request: pb.OpenFileRequest, context: grpc.ServicerContext) -> pb.OpenFileResponse:
        with grpc_errors(context):
            channels = [codec.channel_kind_name(k) for k in request.channels]
            length = request.range.length if request.HasField("range") else -1
            offset = request.range.offset if request.HasField("range") else 0
            handle = self.service.open_file(
                request.dataset, request.file, offset, length,
                [(r.offset, r.length) for r in request.missing], channels,
                streams=request.streams, congestion_control=request.congestion_control,
            )
            f = handle.request
            return pb.OpenFileResponse(
                size=f.size, mtime_ns=f.mtime_ns, range=pb.ByteRange(offset=f.offset, length=f.length),
                crc32c=f.crc32c, block_size=handle.block_size,
                offers=[codec.offer_pb(_offer(o)) for o in handle.offers],
            )
        raise AssertionError("unreachable")

    def FetchFile(self, request: pb.FetchRequest, context: grpc.ServicerContext) -> Iterator[Any]:
        with grpc_errors(context):
            source = self.service.open_source(request.ticket, "grpc", _cancel_on_exit(context))
            if not isinstance(source, FileSource):
                source.close()
                raise TicketError("this ticket is for a query; fetch it with Fetch")
            blocks = source.messages()
            try:
                for block, offset in blocks:
                    for start in range(0, block.nbytes, GRPC_CHUNK):
                        chunk = block[start:start + GRPC_CHUNK]
                        yield offset + start, chunk  # serialized (one copy) before the generator resumes
                        chunk.release()
                    block.release()
            finally:
                blocks.close()
                source.close()

    def Ping(self, request: pb.PingRequest, context: grpc.ServicerContext) -> pb.PingResponse:
        with grpc_errors(context):
            if len(request.payload) > MAX_PING_BYTES:
                raise QueryError(f"ping payload is limited to {MAX_PING_BYTES} bytes")
            return pb.PingResponse(payload=request.payload, server_time_unix_ns=time.time_ns())
        raise AssertionError("unreachable")


def _cancel_on_exit(context: grpc.ServicerContext) -> threading.Event:
    """Return an event set when the rpc ends (client gone, deadline): the query stops reading files."""
    cancel = threading.Event()
    context.add_callback(cancel.set)
    return cancel


def _records(source: MessageSource) -> Iterator[Any]:
    """Yield a query source's IPC messages (schema first), then its FetchSummary."""
    messages = source.messages()
    try:
        for message, _ in messages:
            yield message
        summary = source.summary()
    finally:
        messages.close()
        source.close()
    log.info("query %s sent %d rows, %d bytes in %.3f s%s", source.label, summary.rows, summary.bytes,
             summary.server_seconds, " (truncated)" if summary.truncated else "")
    yield pb.FetchResponse(summary=codec.fetch_summary_pb(summary))


def _file_chunk_bytes(chunk: tuple[int, memoryview]) -> bytes:
    return codec.file_chunk_bytes(*chunk)


def add_to_server(servicer: DstpServicer, server: grpc.Server) -> None:
    """Register ``servicer``'s rpcs with ``server``: the generated handlers, except for the streams' serializers."""
    def unary(method: Any, request: Any, response: Any) -> grpc.RpcMethodHandler:
        return grpc.unary_unary_rpc_method_handler(method, request_deserializer=request.FromString,
                                                   response_serializer=response.SerializeToString)

    def stream(method: Any, request: Any, serializer: Any) -> grpc.RpcMethodHandler:
        return grpc.unary_stream_rpc_method_handler(method, request_deserializer=request.FromString,
                                                    response_serializer=serializer)

    handlers = {
        "ListDatasets": unary(servicer.ListDatasets, pb.ListDatasetsRequest, pb.ListDatasetsResponse),
        "Describe": unary(servicer.Describe, pb.DescribeRequest, pb.DatasetDescription),
        "Query": unary(servicer.Query, pb.QueryRequest, pb.QueryResponse),
        "Fetch": stream(servicer.Fetch, pb.FetchRequest, fetch_response_bytes),
        "Run": stream(servicer.Run, pb.QueryRequest, fetch_response_bytes),
        "Ping": unary(servicer.Ping, pb.PingRequest, pb.PingResponse),
        "OpenFile": unary(servicer.OpenFile, pb.OpenFileRequest, pb.OpenFileResponse),
        "FetchFile": stream(servicer.FetchFile, pb.FetchRequest, _file_chunk_bytes),
    }
    name = pb.DESCRIPTOR.services_by_name["Dstp"].full_name
    missing = {m.name for m in pb.DESCRIPTOR.services_by_name["Dstp"].methods} - set(handlers)
    assert not missing, f"rpcs without a handler: {missing}"
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(name, handlers),))
    server.add_registered_method_handlers(name, handlers)  # type: ignore[attr-defined]  # grpc-stubs lag

"""The gRPC adapter: translates the control plane and the Fetch streams to the service.

Thin by design: each rpc converts its request with the protobuf codec
(:mod:`dstp.grpc_codec`), calls :class:`DstpService`, and converts the
answer back. A ticket becomes data only through ``service.open_source``
(Fetch, FetchFile); ``Run`` plans and starts its query directly, with no
ticket to issue and redeem (or, asked with ``inline_max_bytes`` when the
result may be larger, answers with offers as Query does). :func:`grpc_errors`
turns every dstp error into its gRPC status with trailing metadata (code,
line, column), and every unexpected failure into INTERNAL naming an incident
id whose traceback and cause the server log holds (:mod:`dstp.incidents`);
no traceback reaches a client.

Identity arrives through :class:`AuthInterceptor`: it reads the metadata
``authorization: Bearer …`` of every call, has the
:class:`~dstp.auth.Authenticator` turn it into a
:class:`~dstp.auth.Principal` (UNAUTHENTICATED, with a message saying how to
pass a token, when it cannot) and hands the servicer a context that carries
it; each rpc passes ``principal_of(context)`` to the service. Fetch and
FetchFile also prove the ticket with ``FetchRequest.proof`` (an HMAC keyed
by the offer's key), and must come from the principal that asked.

Record batches and file blocks are not built into protobuf messages: the
streams' response serializers (:func:`add_to_server`) frame an IPC message's
own buffers, or a block of the file's memory map, with one copy into the
bytes gRPC sends (see ``fetch_response_bytes`` in the codec).
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
import urllib.parse
from typing import Any, Iterator, Sequence

import grpc

from dstp.auth import ANONYMOUS, Authenticator, Principal
from dstp.connections import Warden, peer_address
from dstp.errors import QueryError, TicketError
from dstp.incidents import for_client
from dstp.proto import dstp_pb2 as pb
from dstp.proto import dstp_pb2_grpc as pb_grpc
from dstp.service import DstpService, Offer, QueryHandle
from dstp.grpc_feed import Watchers, max_watchers, watch_catalog
from dstp.metadata import dataset_summary
from dstp.service.feed import MAX_PAGE
from dstp.service.queries import max_result_bytes
from dstp.service.files import FileHandle
from dstp import grpc_codec as codec
from dstp.transport.wire.values import ChannelOffer, FilePartInfo, QueryInfo
from dstp.transport.server.sources import FileSource, MessageSource, QuerySource
from dstp.transport.wire.proofs import check_proof, fetch_proof

__all__ = ["AuthInterceptor", "DstpServicer", "add_to_server", "fetch_response_bytes", "grpc_errors",
           "principal_of"]

log = logging.getLogger("dstp.grpc")

MAX_PING_BYTES = 2**20
GRPC_CHUNK = 2 * 2**20  # file bytes per FileChunk message

#: The serializer of Fetch and Run responses (IPC messages framed without protobuf's copies).
fetch_response_bytes = codec.fetch_response_bytes


#: UTF-8 bytes of an error message sent in a status: gRPC percent-encodes it into a header (up to 3× as long)
#: that clients refuse past 8 KiB of metadata (a soft limit; 16 KiB hard), so a message quoting a long literal is cut.
STATUS_MESSAGE_BYTES = 2048


def status_message(message: str) -> str:
    """Return ``message`` short enough for a gRPC status: its start and end, the middle cut and said so."""
    raw = message.encode()
    if len(raw) <= STATUS_MESSAGE_BYTES:
        return message
    head = raw[: STATUS_MESSAGE_BYTES * 3 // 4].decode(errors="ignore")
    tail = raw[-(STATUS_MESSAGE_BYTES // 5):].decode(errors="ignore")
    return f"{head} … [{len(raw) - len(head.encode()) - len(tail.encode()):,} bytes of this message cut] … {tail}"


@contextlib.contextmanager
def grpc_errors(context: grpc.ServicerContext) -> Iterator[None]:
    """Translate dstp errors (and surprises) into gRPC statuses with metadata; an incident is logged once, by id."""
    try:
        yield
    except grpc.RpcError:
        raise
    except Exception as exc:  # noqa: BLE001 - the last line of defence for clients
        err = for_client(exc, "grpc")
        metadata = [("dstp-error-code", err.code)]
        if isinstance(err, QueryError) and err.line is not None:
            metadata += [("dstp-error-line", str(err.line)), ("dstp-error-column", str(err.column))]
            token = urllib.parse.quote(err.token or "", safe="")  # (metadata values are ASCII)
            if token and len(token) <= 512:  # the word it points at, as HTTP's JSON error carries it; not a
                metadata.append(("dstp-error-token", token))  # long literal: gRPC's headers hold 16 KiB
        retry = getattr(err, "retry_after_s", None)
        if retry is not None:  # back-pressure: when trying again may succeed (whole seconds, as HTTP's header)
            metadata.append(("retry-after", str(max(1, math.ceil(retry)))))
        context.set_trailing_metadata(tuple(metadata))
        context.abort(getattr(grpc.StatusCode, err.grpc_status), status_message(err.message))


class _AuthenticatedContext:
    """An rpc's context, plus the principal :class:`AuthInterceptor` authenticated for it."""

    def __init__(self, context: grpc.ServicerContext, principal: Principal) -> None:
        self._context = context
        self.principal = principal

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)


def principal_of(context: Any) -> Principal:
    """Return the principal of an rpc (ANONYMOUS for a context no interceptor authenticated)."""
    principal = getattr(context, "principal", ANONYMOUS)
    return principal if isinstance(principal, Principal) else ANONYMOUS


class AuthInterceptor(grpc.ServerInterceptor):
    """Authenticates every call from its ``authorization`` metadata; the servicer sees the Principal.

    The credential is checked on the worker thread that runs the call (a token
    store read, or a JWKS fetch, never blocks the server's polling thread),
    with the caller's address (``context.peer()``): failed authentications are
    counted per address, and anonymous callers get a fair share per address.
    With a ``warden`` (dstp/connections.py) each call is counted on its
    connection while it runs, so the per-address cap never closes a busy one.
    """

    def __init__(self, authenticator: Authenticator, warden: Warden | None = None) -> None:
        self.authenticator = authenticator
        self.warden = warden

    def intercept_service(self, continuation: Any, handler_call_details: Any) -> Any:
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        metadata = handler_call_details.invocation_metadata or ()
        authorization = next((str(v) for k, v in metadata if k == "authorization"), None)
        warden = self.warden

        def authenticated(context: grpc.ServicerContext) -> _AuthenticatedContext:
            with grpc_errors(context):
                principal = self.authenticator.authenticate(authorization, peer_address(context.peer()))
                return _AuthenticatedContext(context, principal)
            raise AssertionError("unreachable")

        def counted(context: grpc.ServicerContext) -> Any:
            return warden.call(context.peer()) if warden is not None else contextlib.nullcontext()

        if handler.unary_unary is not None:
            behavior = handler.unary_unary

            def unary(request: Any, context: grpc.ServicerContext) -> Any:
                with counted(context):
                    return behavior(request, authenticated(context))

            return handler._replace(unary_unary=unary)
        if handler.unary_stream is not None:
            streaming = handler.unary_stream

            def stream(request: Any, context: grpc.ServicerContext) -> Any:
                with counted(context):
                    yield from streaming(request, authenticated(context))

            return handler._replace(unary_stream=stream)
        return handler  # dstp has no client-streaming rpcs


def _offer(o: Offer) -> ChannelOffer:
    return ChannelOffer(o.kind, o.ticket.token, o.ticket.expires_at_unix_ms, o.endpoint, o.streams, o.compression,
                        o.congestion_control, o.ticket.key, o.cipher)


def _proves(request: pb.FetchRequest) -> Any:
    """Return the check of a Fetch/FetchFile request's proof against a ticket key."""
    return lambda key: bool(key) and check_proof(fetch_proof(key, request.ticket), request.proof)


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


def _partition_kind(request: pb.QueryRequest) -> str:
    """Return the channel a partitioned answer to ``request`` uses: striped TCP (also when the request names
    no channel: every channel), else UDT, else "" (the client takes neither: answered as a single server)."""
    channels = [codec.channel_kind_name(k) for k in request.channels]
    return "striped" if not channels or "striped" in channels else "udt" if "udt" in channels else ""


class DstpServicer(pb_grpc.DstpServicer):
    """The Dstp gRPC service over a :class:`DstpService` (register it with :func:`add_to_server`)."""

    def __init__(self, service: DstpService) -> None:
        self.service = service
        self.watchers = Watchers(max_watchers(service.settings.grpc_workers))

    def ListDatasets(self, request: pb.ListDatasetsRequest, context: grpc.ServicerContext) -> pb.ListDatasetsResponse:
        with grpc_errors(context):
            principal = principal_of(context)
            if not (request.offset or request.limit or request.search):  # the whole catalog, as before paging
                listed = self.service.datasets(principal)
                return pb.ListDatasetsResponse(datasets=[codec.summary_pb(s) for s in listed], total=len(listed),
                                               catalog_version=self.service.catalog.version)
            page = self.service.page(request.offset, request.limit or MAX_PAGE, request.search, principal)
            end = page.offset + len(page.datasets)
            return pb.ListDatasetsResponse(datasets=[codec.summary_pb(dataset_summary(d)) for d in page.datasets],
                                           total=page.total, next_offset=end if end < page.total else 0,
                                           catalog_version=page.version)
        raise AssertionError("unreachable")

    def WatchCatalog(self, request: pb.WatchCatalogRequest, context: grpc.ServicerContext) -> Iterator[Any]:
        with grpc_errors(context):
            yield from watch_catalog(self.service, request, context, principal_of(context), self.watchers)

    def Describe(self, request: pb.DescribeRequest, context: grpc.ServicerContext) -> pb.DatasetDescription:
        with grpc_errors(context):
            return codec.details_pb(self.service.describe(request.id, principal_of(context)))
        raise AssertionError("unreachable")

    def AxisValues(self, request: pb.AxisValuesRequest, context: grpc.ServicerContext) -> pb.AxisValuesResponse:
        with grpc_errors(context):
            values = self.service.axis_values(request.dataset, request.dimension, principal_of(context))
            return codec.axis_values_pb(request.dimension, values)
        raise AssertionError("unreachable")

    def _partitions(self, request: pb.QueryRequest, context: grpc.ServicerContext) -> QueryInfo | None:
        """Return the partitioned answer of a scaled-out server's executor for ``request``, or None: answer here."""
        kind = _partition_kind(request)
        if not kind or not self.service.executor.partitioned:
            return None
        return self.service.executor.partitions(self.service, request.sql, principal_of(context),
                                                codec.compression_name(request.compression), request.streams, kind)

    def Query(self, request: pb.QueryRequest, context: grpc.ServicerContext) -> pb.QueryResponse:
        with grpc_errors(context):
            info = self._partitions(request, context)
            if info is not None:
                return codec.query_response_pb(info)
            handle = self.service.queries.plan(
                request.sql,
                [codec.channel_kind_name(k) for k in request.channels],
                streams=request.streams,
                compression=codec.compression_name(request.compression),
                congestion_control=request.congestion_control,
                principal=principal_of(context),
            )
            return _plan(handle, tuple(_offer(o) for o in handle.offers))
        raise AssertionError("unreachable")

    def Fetch(self, request: pb.FetchRequest, context: grpc.ServicerContext) -> Iterator[Any]:
        with grpc_errors(context):
            source, _ = self.service.open_source(request.ticket, "grpc", _cancel_on_exit(context),
                                              proof=_proves(request), principal=principal_of(context))
            if not isinstance(source, QuerySource):
                source.close()
                raise TicketError("this ticket is for a file; fetch it with FetchFile or `dstp get`")
            _cancel_when_stalled(source, context)
            yield from _records(source)

    def Run(self, request: pb.QueryRequest, context: grpc.ServicerContext) -> Iterator[Any]:
        with grpc_errors(context):
            compression = codec.compression_name(request.compression)
            if request.HasField("inline_max_bytes") and self.service.executor.partitioned:
                # A client that lets the server choose gets the partitions, as from Query, unless the result
                # surely fits the inline limit.
                most = max_result_bytes(self.service.queries.prepare(request.sql, principal_of(context)))
                info = None if 0 <= most < request.inline_max_bytes else self._partitions(request, context)
                if info is not None:
                    yield pb.FetchResponse(plan=codec.query_response_pb(info))
                    return
            if request.HasField("inline_max_bytes"):  # `auto`: the records here if small, else offers
                outcome = self.service.queries.run_or_offer(
                    request.sql, [codec.channel_kind_name(k) for k in request.channels], request.inline_max_bytes,
                    _cancel_on_exit(context), principal_of(context), streams=request.streams,
                    compression=compression, congestion_control=request.congestion_control)
                if isinstance(outcome, QueryHandle):
                    yield pb.FetchResponse(plan=_plan(outcome, tuple(_offer(o) for o in outcome.offers)))
                    return
                execution = outcome
            else:
                execution = self.service.queries.run(request.sql, _cancel_on_exit(context), principal_of(context),
                                             channel="grpc")
            try:
                source = execution.source(compression)
            except BaseException:
                execution.close()
                raise
            _cancel_when_stalled(source, context)
            # Nothing to redeem: the only offer is this stream, without a ticket.
            here = ChannelOffer("grpc", b"", 0, "", 1, compression)
            try:
                plan = _plan(execution.handle, (here,))
            except BaseException:
                source.close()
                raise
            source.pace.blocked()  # a client that never reads the plan stalls too
            yield pb.FetchResponse(plan=plan)
            source.pace.unblocked()
            yield from _records(source)

    def OpenFile(self, request: pb.OpenFileRequest, context: grpc.ServicerContext) -> pb.OpenFileResponse:
        with grpc_errors(context):
            handle = self._open_file(request, context)
            channels = [codec.channel_kind_name(k) for k in request.channels]
            parts: Sequence[FilePartInfo] = ()
            if request.accept_parts and (not channels or "striped" in channels) and self.service.executor.partitioned:
                parts = self.service.executor.file_parts(self.service, handle, request.streams,
                                                         request.congestion_control, principal_of(context))
            return self._file_response(handle, parts)
        raise AssertionError("unreachable")

    def _open_file(self, request: pb.OpenFileRequest, context: grpc.ServicerContext) -> FileHandle:
        """Check an OpenFile request and issue this server's offers for it."""
        length = request.range.length if request.HasField("range") else -1
        offset = request.range.offset if request.HasField("range") else 0
        return self.service.files.open(
            request.dataset, request.file, offset, length,
            [(r.offset, r.length) for r in request.missing], [codec.channel_kind_name(k) for k in request.channels],
            streams=request.streams, congestion_control=request.congestion_control,
            principal=principal_of(context),
        )

    @staticmethod
    def _file_response(handle: FileHandle, parts: Sequence[FilePartInfo] = ()) -> pb.OpenFileResponse:
        f = handle.request
        return pb.OpenFileResponse(
            size=f.size, mtime_ns=f.mtime_ns, range=pb.ByteRange(offset=f.offset, length=f.length),
            crc32c=f.crc32c, block_size=handle.block_size,
            offers=[codec.offer_pb(_offer(o)) for o in handle.offers],
            parts=[codec.file_part_pb(p) for p in parts],
        )

    def FetchFile(self, request: pb.FetchRequest, context: grpc.ServicerContext) -> Iterator[Any]:
        with grpc_errors(context):
            source, _ = self.service.open_source(request.ticket, "grpc", _cancel_on_exit(context),
                                              proof=_proves(request), principal=principal_of(context))
            if not isinstance(source, FileSource):
                source.close()
                raise TicketError("this ticket is for a query; fetch it with Fetch")
            _cancel_when_stalled(source, context)
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

    def Usage(self, request: pb.UsageRequest, context: grpc.ServicerContext) -> pb.UsageResponse:
        with grpc_errors(context):
            usage = self.service.usage(principal_of(context))
            reply = pb.UsageResponse(principal=usage.principal, running=usage.running, waiting=usage.waiting,
                                     concurrent_limit=usage.concurrent_limit, bytes_today=usage.bytes_today,
                                     resets_at_unix_ms=int(usage.resets_at * 1000))
            if usage.bytes_per_day > 0:
                reply.bytes_per_day = usage.bytes_per_day
            return reply
        raise AssertionError("unreachable")

    def Resolve(self, request: pb.ResolveRequest, context: grpc.ServicerContext) -> pb.Partition:
        if not self.service.executor.partitioned:  # only a scale-out coordinator (dstp/cluster/) partitions
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "this server is not a cluster coordinator: its queries "
                          "have no partitions to resolve (docs/scale-out.md)")
        with grpc_errors(context):
            found = self.service.executor.resolve(self.service, request.query_id, request.partition,
                                                  principal_of(context))
            return codec.partition_pb(found)
        raise AssertionError("unreachable")

    def Ping(self, request: pb.PingRequest, context: grpc.ServicerContext) -> pb.PingResponse:
        with grpc_errors(context):
            if len(request.payload) > MAX_PING_BYTES:
                raise QueryError(f"ping payload is limited to {MAX_PING_BYTES} bytes")
            return pb.PingResponse(payload=request.payload, server_time_unix_ns=time.time_ns())
        raise AssertionError("unreachable")


def _cancel_when_stalled(source: MessageSource, context: grpc.ServicerContext) -> None:
    """Cancel the rpc if its reader stalls: its thread, blocked in a send, is freed with the slot."""
    source.pace.on_stall(lambda error: context.cancel())


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
        "AxisValues": unary(servicer.AxisValues, pb.AxisValuesRequest, pb.AxisValuesResponse),
        "Query": unary(servicer.Query, pb.QueryRequest, pb.QueryResponse),
        "Fetch": stream(servicer.Fetch, pb.FetchRequest, fetch_response_bytes),
        "Run": stream(servicer.Run, pb.QueryRequest, fetch_response_bytes),
        "Ping": unary(servicer.Ping, pb.PingRequest, pb.PingResponse),
        "OpenFile": unary(servicer.OpenFile, pb.OpenFileRequest, pb.OpenFileResponse),
        "FetchFile": stream(servicer.FetchFile, pb.FetchRequest, _file_chunk_bytes),
        "Usage": unary(servicer.Usage, pb.UsageRequest, pb.UsageResponse),
        "Resolve": unary(servicer.Resolve, pb.ResolveRequest, pb.Partition),
        "WatchCatalog": stream(servicer.WatchCatalog, pb.WatchCatalogRequest, pb.WatchCatalogResponse.SerializeToString),
    }
    name = pb.DESCRIPTOR.services_by_name["Dstp"].full_name
    missing = {m.name for m in pb.DESCRIPTOR.services_by_name["Dstp"].methods} - set(handlers)
    assert not missing, f"rpcs without a handler: {missing}"
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(name, handlers),))
    server.add_registered_method_handlers(name, handlers)  # type: ignore[attr-defined]  # grpc-stubs lag

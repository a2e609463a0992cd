"""The gRPC adapter: translates the control plane and the Fetch stream to the service.

Thin by design: each rpc converts its request, calls :class:`DstpService`,
and converts the answer to protobuf. :func:`grpc_errors` turns every dstp
error into its gRPC status with trailing metadata (code, line, column), and
every unexpected exception into INTERNAL with an incident id; no traceback
reaches a client.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from typing import Iterator

import grpc

from dstp.errors import DstpError, QueryError, ServerError, TicketError
from dstp.metadata import ColumnInfo, DatasetDetails, DatasetSummary
from dstp.proto import dstp_pb2 as pb
from dstp.proto import dstp_pb2_grpc as pb_grpc
from dstp.service import DstpService, QueryHandle
from dstp.transport.ipc import BatchEncoder
from dstp.transport.sources import FileSource

__all__ = ["DstpServicer", "grpc_errors", "CHANNEL_KIND", "COMPRESSION"]

log = logging.getLogger("dstp.grpc")

CHANNEL_KIND = {"grpc": pb.GRPC_STREAM, "striped": pb.STRIPED_TCP, "udt": pb.UDT}
CHANNEL_NAME = {v: k for k, v in CHANNEL_KIND.items()}
COMPRESSION = {"none": pb.NONE, "lz4": pb.LZ4_FRAME, "zstd": pb.ZSTD}
COMPRESSION_NAME = {v: k for k, v in COMPRESSION.items()} | {pb.COMPRESSION_UNSPECIFIED: "none"}
MAX_PING_BYTES = 2**20
GRPC_CHUNK = 2 * 2**20  # file bytes per FileChunk message


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


def summary_pb(s: DatasetSummary) -> pb.DatasetSummary:
    msg = pb.DatasetSummary(
        id=s.id, title=s.title, summary=s.summary, keywords=list(s.keywords), attributes=list(s.attributes),
        default_grid=list(s.default_grid), default_grid_rows=s.default_grid_rows,
        time_start=s.time_start, time_end=s.time_end, size_bytes=s.size_bytes, access_policy=s.access_policy,
    )
    if s.bbox is not None:
        msg.has_bbox = True
        msg.lat_min, msg.lat_max, msg.lon_min, msg.lon_max = s.bbox
    return msg


def _column_pb(c: ColumnInfo) -> pb.Column:
    return pb.Column(
        name=c.name, variable=c.variable, dimensions=list(c.dimensions), units=c.units,
        description=c.description, arrow_type=c.arrow_type,
        cf=[pb.KeyValue(key=k, value=v) for k, v in c.cf],
        packed=c.packed, nullable=c.nullable, coordinate=c.coordinate, missing_from=list(c.missing_from),
        role=c.role, note=c.note,
    )


def details_pb(d: DatasetDetails) -> pb.DatasetDescription:
    return pb.DatasetDescription(
        summary=summary_pb(d.summary),
        dimensions=[
            pb.Dimension(name=x.name, size=x.size, coordinate=x.coordinate, min=x.min, max=x.max,
                         order=x.order, units=x.units, calendar=x.calendar, axis=x.axis)
            for x in d.dimensions
        ],
        coordinates=[_column_pb(c) for c in d.coordinates],
        attributes=[_column_pb(c) for c in d.attributes],
        files=[pb.DataFile(name=f.name, size_bytes=f.size_bytes, format=f.format, start=f.start, count=f.count,
                           first=f.first, last=f.last)
               for f in d.files],
        correlation_keys=[pb.CorrelationKey(name=k.name, column=k.column, standard_name=k.standard_name,
                                            units=k.units) for k in d.correlation_keys],
        aggregate_dimension=d.aggregate_dimension,
        global_attributes=[pb.KeyValue(key=k, value=v) for k, v in d.global_attributes],
        license=d.license, source=d.source, descriptor_xml=d.descriptor_xml,
        coverage=[pb.CoverageRun(first=r.first, last=r.last, start=r.start, stop=r.stop) for r in d.coverage],
        warnings=list(d.warnings),
        grid_mappings=[
            pb.GridMapping(name=m.name, grid_mapping_name=m.grid_mapping_name,
                           parameters=[pb.KeyValue(key=k, value=v) for k, v in m.parameters],
                           wkt=m.wkt, proj=m.proj, problem=m.problem)
            for m in d.grid_mappings
        ],
    )


def query_response_pb(handle: QueryHandle) -> pb.QueryResponse:
    prepared = handle.prepared
    sampling = prepared.query.sampling
    return pb.QueryResponse(
        query_id=handle.query_id,
        arrow_schema=prepared.schema.serialize().to_pybytes(),
        scan_rows=prepared.scan_rows,
        estimated_rows=prepared.estimated_rows(),
        estimated_bytes=prepared.estimated_bytes(),
        max_rows=prepared.plan.max_rows(),
        offers=[
            pb.ChannelOffer(
                kind=CHANNEL_KIND[o.kind], ticket=o.ticket.token, expires_at_unix_ms=o.ticket.expires_at_unix_ms,
                endpoint=o.endpoint, streams=o.streams, compression=COMPRESSION[o.compression],
                congestion_control=o.congestion_control,
            )
            for o in handle.offers
        ],
        grid=list(prepared.plan.grid),
        hyperslab=[
            pb.HyperslabRange(dimension=d, start=r.start, stop=r.stop, step=r.step)
            for d, r in zip(prepared.plan.hyperslab.dims, prepared.plan.hyperslab.ranges)
        ],
        sample_seed=sampling.seed if sampling else 0,
        sampled=sampling is not None,
    )


class DstpServicer(pb_grpc.DstpServicer):
    """The Dstp gRPC service over a :class:`DstpService`."""

    def __init__(self, service: DstpService) -> None:
        self.service = service

    def ListDatasets(self, request: pb.ListDatasetsRequest, context: grpc.ServicerContext) -> pb.ListDatasetsResponse:
        with grpc_errors(context):
            return pb.ListDatasetsResponse(datasets=[summary_pb(s) for s in self.service.datasets()])
        raise AssertionError("unreachable")

    def Describe(self, request: pb.DescribeRequest, context: grpc.ServicerContext) -> pb.DatasetDescription:
        with grpc_errors(context):
            return details_pb(self.service.describe(request.id))
        raise AssertionError("unreachable")

    def Query(self, request: pb.QueryRequest, context: grpc.ServicerContext) -> pb.QueryResponse:
        with grpc_errors(context):
            channels = []
            for kind in request.channels:
                if kind not in CHANNEL_NAME:
                    raise QueryError(f"unknown channel kind {kind}")
                channels.append(CHANNEL_NAME[kind])
            handle = self.service.query(
                request.sql,
                channels,
                streams=request.streams,
                compression=COMPRESSION_NAME.get(request.compression, "none"),
                congestion_control=request.congestion_control,
            )
            return query_response_pb(handle)
        raise AssertionError("unreachable")

    def Fetch(self, request: pb.FetchRequest, context: grpc.ServicerContext) -> Iterator[pb.FetchResponse]:
        with grpc_errors(context):
            yield from self._stream(request.ticket, context)

    def Run(self, request: pb.QueryRequest, context: grpc.ServicerContext) -> Iterator[pb.FetchResponse]:
        with grpc_errors(context):
            handle = self.service.query(request.sql, ["grpc"],
                                        compression=COMPRESSION_NAME.get(request.compression, "none"))
            plan = query_response_pb(handle)
            yield pb.FetchResponse(plan=plan)
            yield from self._stream(plan.offers[0].ticket, context)

    def _stream(self, ticket: bytes, context: grpc.ServicerContext) -> Iterator[pb.FetchResponse]:
        """Yield a GRPC_STREAM ticket's responses: schema, batches, summary."""
        cancel = threading.Event()
        context.add_callback(cancel.set)  # client gone or deadline: stop reading files
        pending = self.service.redeem(ticket, "grpc")
        execution = self.service.execute(pending, cancel)
        encoder = BatchEncoder(execution.schema, execution.pending.compression)
        yield pb.FetchResponse(ipc_message=encoder.schema_message().to_pybytes())
        for batch in execution.batches():
            yield pb.FetchResponse(ipc_message=encoder.encode(batch).to_pybytes())
        s = execution.summary
        log.info("query %s sent %d rows, %d bytes in %.3f s%s", execution.query_id, s.rows, s.bytes,
                 s.seconds, " (truncated)" if s.truncated else "")
        yield pb.FetchResponse(
            summary=pb.FetchSummary(
                rows=s.rows, bytes=s.bytes, batches=s.batches, truncated=s.truncated,
                truncated_reason=s.truncated_reason, seconds=s.seconds,
                hyperslabs_read=s.stats.hyperslabs, elements_read=s.stats.elements, bytes_read=s.stats.bytes,
            )
        )

    def OpenFile(self, request: pb.OpenFileRequest, context: grpc.ServicerContext) -> pb.OpenFileResponse:
        with grpc_errors(context):
            channels = [CHANNEL_NAME[k] for k in request.channels if k in CHANNEL_NAME]
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
                offers=[
                    pb.ChannelOffer(
                        kind=CHANNEL_KIND[o.kind], ticket=o.ticket.token,
                        expires_at_unix_ms=o.ticket.expires_at_unix_ms, endpoint=o.endpoint, streams=o.streams,
                        compression=pb.NONE, congestion_control=o.congestion_control,
                    )
                    for o in handle.offers
                ],
            )
        raise AssertionError("unreachable")

    def FetchFile(self, request: pb.FetchRequest, context: grpc.ServicerContext) -> Iterator[pb.FileChunk]:
        with grpc_errors(context):
            pending = self.service.redeem(request.ticket, "grpc")
            if pending.file is None:
                raise TicketError("this ticket is for a query; fetch it with Fetch")
            f = pending.file
            self.service.acquire_slot()
            source = FileSource(f.path, f.missing, GRPC_CHUNK, on_close=self.service.release_slot)
            blocks = source.messages()
            try:
                for payload, offset in blocks:
                    if not context.is_active():
                        break
                    yield pb.FileChunk(offset=offset, data=payload.tobytes())
                    payload.release()
            finally:
                blocks.close()
                source.close()

    def Ping(self, request: pb.PingRequest, context: grpc.ServicerContext) -> pb.PingResponse:
        with grpc_errors(context):
            if len(request.payload) > MAX_PING_BYTES:
                raise QueryError(f"ping payload is limited to {MAX_PING_BYTES} bytes")
            return pb.PingResponse(payload=request.payload, server_time_unix_ns=time.time_ns())
        raise AssertionError("unreachable")

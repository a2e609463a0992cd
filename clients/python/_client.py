"""The Python client: ``c = dstp.connect("host:port")``.

Every method raises the typed errors of :mod:`dstp.errors`; a gRPC status
never escapes. Records come back as Arrow: ``query`` collects a
``pyarrow.Table``, ``query_batches`` streams ``RecordBatch`` objects as they
arrive, ``query_pandas`` and :func:`dstp.client.to_xarray` convert.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import grpc
import pyarrow as pa

from dstp.errors import DstpError, IntegrityError, TransportError, TransportUnavailableError, error_from_status
from dstp.metadata import (
    ColumnInfo,
    DatasetDetails,
    DatasetSummary,
    DimensionInfo,
    FileInfo,
    KeyInfo,
)
from dstp.proto import dstp_pb2 as pb
from dstp.proto import dstp_pb2_grpc as pb_grpc
from dstp.transport.ipc import BatchDecoder

__all__ = ["Client", "Progress", "QueryInfo", "QueryStream", "connect"]

TRANSPORTS = ("grpc", "striped", "udt", "auto")
_KIND = {"grpc": pb.GRPC_STREAM, "striped": pb.STRIPED_TCP, "udt": pb.UDT}
_KIND_NAME = {v: k for k, v in _KIND.items()}
_COMPRESSION = {"none": pb.NONE, "lz4": pb.LZ4_FRAME, "zstd": pb.ZSTD}


@dataclass(frozen=True, slots=True)
class Progress:
    """A progress report: records and bytes so far, seconds since the fetch began."""

    rows: int
    bytes: int
    seconds: float
    batches: int
    transport: str
    streams: int = 1
    estimated_rows: int = -1

    @property
    def rate_bytes_per_s(self) -> float:
        return self.bytes / self.seconds if self.seconds > 0 else 0.0


ProgressCallback = Callable[[Progress], None]


@dataclass(frozen=True, slots=True)
class QueryInfo:
    """What the server answered to Query, before any record is fetched."""

    query_id: str
    schema: pa.Schema
    scan_rows: int
    estimated_rows: int
    estimated_bytes: int
    grid: tuple[str, ...]
    hyperslab: dict[str, tuple[int, int, int]]
    offers: tuple[Any, ...]
    sample_seed: int | None

    def offer(self, kind: str) -> Any:
        for o in self.offers:
            if _KIND_NAME.get(o.kind) == kind:
                return o
        raise TransportUnavailableError(f"the server made no {kind} offer for this query")


def _raise(exc: grpc.RpcError, target: str) -> DstpError:
    code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
    details = (exc.details() if hasattr(exc, "details") else None) or str(exc)
    meta = dict(exc.trailing_metadata() or ()) if hasattr(exc, "trailing_metadata") else {}
    if code == grpc.StatusCode.UNAVAILABLE and "dstp-error-code" not in meta:
        return TransportError(f"cannot reach the dstp server at {target}: {details}")
    if code == grpc.StatusCode.DEADLINE_EXCEEDED and "dstp-error-code" not in meta:
        return error_from_status("DEADLINE_EXCEEDED", f"no answer from {target} in time: {details}")
    err = error_from_status(code.name, details, meta.get("dstp-error-code"))
    if "dstp-error-line" in meta:
        err.line = int(meta["dstp-error-line"])  # type: ignore[attr-defined]
        err.column = int(meta["dstp-error-column"])  # type: ignore[attr-defined]
    return err


def summary_from_pb(m: pb.DatasetSummary) -> DatasetSummary:
    return DatasetSummary(
        id=m.id, title=m.title, summary=m.summary, keywords=tuple(m.keywords), attributes=tuple(m.attributes),
        default_grid=tuple(m.default_grid), default_grid_rows=m.default_grid_rows,
        time_start=m.time_start, time_end=m.time_end,
        bbox=(m.lat_min, m.lat_max, m.lon_min, m.lon_max) if m.has_bbox else None,
        size_bytes=m.size_bytes, access_policy=m.access_policy,
    )


def _column_from_pb(c: pb.Column) -> ColumnInfo:
    return ColumnInfo(
        name=c.name, variable=c.variable, dimensions=tuple(c.dimensions), units=c.units,
        description=c.description, arrow_type=c.arrow_type, cf=tuple((kv.key, kv.value) for kv in c.cf),
        packed=c.packed, nullable=c.nullable, coordinate=c.coordinate,
    )


def details_from_pb(m: pb.DatasetDescription) -> DatasetDetails:
    return DatasetDetails(
        summary=summary_from_pb(m.summary),
        dimensions=tuple(
            DimensionInfo(d.name, d.size, d.coordinate, d.min, d.max, d.order, d.units, d.calendar, d.axis)
            for d in m.dimensions
        ),
        coordinates=tuple(_column_from_pb(c) for c in m.coordinates),
        attributes=tuple(_column_from_pb(c) for c in m.attributes),
        files=tuple(FileInfo(f.name, f.size_bytes, f.format, f.start, f.count) for f in m.files),
        correlation_keys=tuple(KeyInfo(k.name, k.column, k.standard_name, k.units) for k in m.correlation_keys),
        aggregate_dimension=m.aggregate_dimension,
        global_attributes=tuple((kv.key, kv.value) for kv in m.global_attributes),
        license=m.license, source=m.source, descriptor_xml=m.descriptor_xml,
    )


class QueryStream:
    """The records of one query as they arrive: iterate it for RecordBatches.

    ``schema`` is known before the first batch; ``summary`` (rows, bytes,
    truncated, what the server read) once iteration has finished.
    """

    def __init__(self, info: QueryInfo, batches: Iterator[pa.RecordBatch], transport: str) -> None:
        self.info = info
        self.schema = info.schema
        self.transport = transport
        self.summary: dict[str, Any] | None = None
        self._batches = batches

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        return self._batches

    def read_all(self) -> pa.Table:
        """Return every remaining batch as one table."""
        return pa.Table.from_batches(list(self), schema=self.schema)

    def close(self) -> None:
        close = getattr(self._batches, "close", None)
        if close is not None:
            close()


class Client:
    """A connection to one dstp server."""

    def __init__(self, target: str, *, timeout: float = 30.0, max_message_bytes: int = 64 * 2**20) -> None:
        self.target = target
        self.timeout = timeout
        #: Summary of the last ``query()``: rows, bytes, truncated, what the server read.
        self.last_summary: dict[str, Any] | None = None
        self._channel = grpc.insecure_channel(
            target,
            options=[
                ("grpc.max_receive_message_length", max_message_bytes),
                ("grpc.max_send_message_length", max_message_bytes),
            ],
        )
        self._stub = pb_grpc.DstpStub(self._channel)

    # -- discovery ----------------------------------------------------------------------

    def datasets(self) -> list[DatasetSummary]:
        """Return the published datasets (each has ``.id``, ``.title``, ``.attributes``…)."""
        try:
            reply = self._stub.ListDatasets(pb.ListDatasetsRequest(), timeout=self.timeout)
        except grpc.RpcError as exc:
            raise _raise(exc, self.target) from None
        return [summary_from_pb(m) for m in reply.datasets]

    def describe(self, dataset_id: str) -> DatasetDetails:
        """Return dimensions, coordinates, attributes, files and keys of one dataset."""
        try:
            reply = self._stub.Describe(pb.DescribeRequest(id=dataset_id), timeout=self.timeout)
        except grpc.RpcError as exc:
            raise _raise(exc, self.target) from None
        return details_from_pb(reply)

    def ping(self, payload: bytes = b"") -> float:
        """Return the round-trip time of one Ping, in seconds."""
        started = time.perf_counter()
        try:
            self._stub.Ping(pb.PingRequest(payload=payload), timeout=self.timeout)
        except grpc.RpcError as exc:
            raise _raise(exc, self.target) from None
        return time.perf_counter() - started

    # -- queries ------------------------------------------------------------------------

    def plan(
        self,
        sql: str,
        *,
        transport: str = "grpc",
        streams: int = 0,
        compression: str = "none",
        congestion_control: str = "",
    ) -> QueryInfo:
        """Ask the server to validate and plan ``sql``; return its answer without fetching."""
        if transport not in TRANSPORTS:
            raise TransportUnavailableError(f"unknown transport {transport!r}; use one of {', '.join(TRANSPORTS)}")
        if compression not in _COMPRESSION:
            raise TransportUnavailableError(f"unknown compression {compression!r}; use none, lz4 or zstd")
        channels = list(_KIND.values()) if transport == "auto" else [_KIND[transport]]
        request = pb.QueryRequest(
            sql=sql, channels=channels, streams=streams, compression=_COMPRESSION[compression],
            congestion_control=congestion_control,
        )
        try:
            reply = self._stub.Query(request, timeout=self.timeout)
        except grpc.RpcError as exc:
            raise _raise(exc, self.target) from None
        return QueryInfo(
            query_id=reply.query_id,
            schema=pa.ipc.read_schema(pa.py_buffer(reply.arrow_schema)),
            scan_rows=reply.scan_rows,
            estimated_rows=reply.estimated_rows,
            estimated_bytes=reply.estimated_bytes,
            grid=tuple(reply.grid),
            hyperslab={h.dimension: (h.start, h.stop, h.step) for h in reply.hyperslab},
            offers=tuple(reply.offers),
            sample_seed=reply.sample_seed if reply.sampled else None,
        )

    def query_batches(
        self,
        sql: str,
        *,
        transport: str = "grpc",
        compression: str = "none",
        progress: ProgressCallback | None = None,
        streams: int = 0,
    ) -> QueryStream:
        """Run ``sql``; return a stream of RecordBatches as they arrive."""
        if transport != "grpc":
            raise TransportUnavailableError(
                f"transport {transport!r} is not available in this client yet; use transport='grpc'"
            )
        info = self.plan(sql, transport="grpc", compression=compression)
        stream = QueryStream(info, iter(()), "grpc")
        stream._batches = self._fetch_grpc(info, stream, progress)
        return stream

    def _fetch_grpc(self, info: QueryInfo, stream: QueryStream, progress: ProgressCallback | None) -> Iterator[pa.RecordBatch]:
        offer = info.offer("grpc")
        decoder = BatchDecoder(info.schema)
        started = time.perf_counter()
        rows = nbytes = batches = 0
        call = self._stub.Fetch(pb.FetchRequest(ticket=offer.ticket))
        schema_seen = False
        try:
            for msg in call:
                if msg.HasField("summary"):
                    s = msg.summary
                    stream.summary = {
                        "rows": s.rows, "bytes": s.bytes, "batches": s.batches, "truncated": s.truncated,
                        "truncated_reason": s.truncated_reason, "server_seconds": s.seconds,
                        "hyperslabs_read": s.hyperslabs_read, "elements_read": s.elements_read,
                        "bytes_read": s.bytes_read, "transport": "grpc",
                        "seconds": time.perf_counter() - started,
                    }
                    if s.rows != rows:
                        raise IntegrityError(f"the server sent {s.rows} rows but {rows} arrived")
                    return
                if not schema_seen:
                    decoder.decode_schema(msg.ipc_message)
                    if not decoder.schema.equals(info.schema):
                        raise IntegrityError("the fetched schema differs from the planned one")
                    decoder.schema = info.schema  # keep the field metadata of the plan
                    schema_seen = True
                    continue
                batch = decoder.decode(msg.ipc_message)
                rows += batch.num_rows
                nbytes += len(msg.ipc_message)
                batches += 1
                if progress is not None:
                    progress(Progress(rows, nbytes, time.perf_counter() - started, batches, "grpc", 1,
                                      info.estimated_rows))
                yield batch
        except grpc.RpcError as exc:
            raise _raise(exc, self.target) from None
        finally:
            call.cancel()
        raise IntegrityError("the result stream ended without its summary; the transfer is incomplete")

    def query(
        self,
        sql: str,
        *,
        transport: str = "grpc",
        compression: str = "none",
        progress: ProgressCallback | None = None,
        streams: int = 0,
    ) -> pa.Table:
        """Run ``sql`` and return the whole result as a ``pyarrow.Table``."""
        stream = self.query_batches(sql, transport=transport, compression=compression, progress=progress,
                                    streams=streams)
        table = stream.read_all()
        self.last_summary = stream.summary
        return table

    def query_pandas(self, sql: str, **kwargs: Any) -> Any:
        """Run ``sql`` and return a pandas DataFrame (NULL becomes NaN/NaT)."""
        return self.query(sql, **kwargs).to_pandas()

    # -- lifecycle ----------------------------------------------------------------------

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(target: str, *, timeout: float = 30.0) -> Client:
    """Return a client of the dstp server at ``target`` ("host:port")."""
    return Client(target, timeout=timeout)

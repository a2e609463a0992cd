"""The wire codec: protobuf messages ↔ dstp values, written once for the server and the client.

    channel_kind_pb("striped")       -> CHANNEL_KIND_STRIPED_TCP   (channel_kind_name: back)
    compression_pb("lz4")            -> COMPRESSION_LZ4_FRAME      (compression_name: back)
    summary_pb / summary_from_pb     DatasetSummary ↔ pb.DatasetSummary (details_*: Describe)
    offer_pb / offer_from_pb         ChannelOffer ↔ pb.ChannelOffer (the one offer builder)
    query_response_pb / query_info_from_pb     QueryInfo ↔ pb.QueryResponse
    TransferSummary                  what a transfer carried: FetchSummary, END frames, the client
    fetch_response_bytes / parse_fetch_response   Fetch and Run responses, IPC bodies framed
                                                  without the protobuf copies
    file_chunk_bytes / parse_file_chunk           FetchFile responses, likewise
    reachable_address / _endpoint    the one rewrite of a wildcard host (0.0.0.0, ::)

It lives in ``transport`` rather than beside the generated modules in
``proto``: it frames the data channels' own values (an IPC message's buffers,
the END frame's summary), and ``dstp.proto`` stays the specification and its
generated code, with no dependency on the rest of dstp. pyarrow is imported
only where a schema is decoded, so ``dstp get`` never loads it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from dstp.errors import ProtocolError, QueryError, TransportUnavailableError
from dstp.proto import dstp_pb2 as pb

if TYPE_CHECKING:
    import pyarrow as pa

    from dstp.metadata import ColumnInfo, DatasetDetails, DatasetSummary

# dstp.metadata (~10 ms of imports) is loaded by the functions that build its
# classes, not here: `dstp get` and a plain query never need it.

__all__ = [
    "CHANNEL_KINDS",
    "COMPRESSIONS",
    "ChannelOffer",
    "FilePartInfo",
    "OrderKeyInfo",
    "PartitionInfo",
    "QueryInfo",
    "TransferSummary",
    "channel_kind_name",
    "channel_kind_pb",
    "compression_name",
    "compression_pb",
    "details_from_pb",
    "details_pb",
    "fetch_response_bytes",
    "fetch_summary_pb",
    "file_chunk_bytes",
    "file_part_from_pb",
    "file_part_pb",
    "offer_from_pb",
    "offer_pb",
    "parse_fetch_response",
    "parse_file_chunk",
    "partition_from_pb",
    "partition_pb",
    "query_info_from_pb",
    "query_response_pb",
    "query_transfer_summary",
    "reachable_address",
    "reachable_endpoint",
    "summary_from_pb",
    "summary_pb",
    "transfer_summary_from_pb",
]

# -------------------------------------------------------------------------------- enums

#: Channel names (as the service, the client and the CLI say them) and their wire values.
CHANNEL_KINDS: Mapping[str, int] = {
    "grpc": pb.CHANNEL_KIND_GRPC_STREAM,
    "striped": pb.CHANNEL_KIND_STRIPED_TCP,
    "udt": pb.CHANNEL_KIND_UDT,
}
_CHANNEL_NAMES = {v: k for k, v in CHANNEL_KINDS.items()}

#: Compression names and their wire values (what each means to Arrow: dstp.transport.wire.ipc).
COMPRESSIONS: Mapping[str, int] = {
    "none": pb.COMPRESSION_NONE,
    "lz4": pb.COMPRESSION_LZ4_FRAME,
    "zstd": pb.COMPRESSION_ZSTD,
}
_COMPRESSION_NAMES = {v: k for k, v in COMPRESSIONS.items()} | {pb.COMPRESSION_UNSPECIFIED: "none"}


def channel_kind_pb(name: str) -> int:
    """Return the wire value of channel ``name``; TransportUnavailableError for a name dstp does not know."""
    try:
        return CHANNEL_KINDS[name]
    except KeyError:
        raise TransportUnavailableError(
            f"unknown channel {name!r}; channels are {', '.join(CHANNEL_KINDS)}") from None


def channel_kind_name(value: int) -> str:
    """Return the name of channel kind ``value``; QueryError for a value this version does not know."""
    try:
        return _CHANNEL_NAMES[value]
    except KeyError:
        raise QueryError(f"unknown channel kind {value}") from None


def compression_pb(name: str) -> int:
    """Return the wire value of compression ``name``; TransportUnavailableError for an unknown one."""
    try:
        return COMPRESSIONS[name]
    except KeyError:
        raise TransportUnavailableError(
            f"unknown compression {name!r}; use {', '.join(COMPRESSIONS)}") from None


def compression_name(value: int) -> str:
    """Return the name of compression ``value`` (unspecified, or one this version does not know: "none")."""
    return _COMPRESSION_NAMES.get(value, "none")


# -------------------------------------------------------------------------------- discovery


def summary_pb(s: DatasetSummary) -> pb.DatasetSummary:
    """Return the wire form of a dataset's listing entry."""
    msg = pb.DatasetSummary(
        id=s.id, title=s.title, summary=s.summary, keywords=list(s.keywords), attributes=list(s.attributes),
        default_grid=list(s.default_grid), default_grid_rows=s.default_grid_rows,
        time_start=s.time_start, time_end=s.time_end, size_bytes=s.size_bytes, access_policy=s.access_policy,
        version=s.version,
    )
    if s.bbox is not None:
        msg.lat_min, msg.lat_max, msg.lon_min, msg.lon_max = s.bbox
    return msg


def summary_from_pb(m: pb.DatasetSummary) -> DatasetSummary:
    """Return the dataset listing entry a DatasetSummary message carries."""
    from dstp.metadata import DatasetSummary

    return DatasetSummary(
        id=m.id, title=m.title, summary=m.summary, keywords=tuple(m.keywords), attributes=tuple(m.attributes),
        default_grid=tuple(m.default_grid), default_grid_rows=m.default_grid_rows,
        time_start=m.time_start, time_end=m.time_end,
        bbox=(m.lat_min, m.lat_max, m.lon_min, m.lon_max) if m.HasField("lat_min") else None,
        size_bytes=m.size_bytes, access_policy=m.access_policy, version=m.version,
    )


def _pairs_pb(pairs: Sequence[tuple[str, str]]) -> list[pb.KeyValue]:
    return [pb.KeyValue(key=k, value=v) for k, v in pairs]


def _pairs(values: Sequence[pb.KeyValue]) -> tuple[tuple[str, str], ...]:
    return tuple((kv.key, kv.value) for kv in values)


def _column_pb(c: ColumnInfo) -> pb.Column:
    return pb.Column(
        name=c.name, variable=c.variable, dimensions=list(c.dimensions), units=c.units,
        description=c.description, arrow_type=c.arrow_type, cf=_pairs_pb(c.cf),
        packed=c.packed, nullable=c.nullable, coordinate=c.coordinate, missing_from=list(c.missing_from),
        role=c.role, note=c.note,
    )


def _column(c: pb.Column) -> ColumnInfo:
    from dstp.metadata import ColumnInfo

    return ColumnInfo(
        name=c.name, variable=c.variable, dimensions=tuple(c.dimensions), units=c.units,
        description=c.description, arrow_type=c.arrow_type, cf=_pairs(c.cf),
        packed=c.packed, nullable=c.nullable, coordinate=c.coordinate, missing_from=tuple(c.missing_from),
        role=c.role, note=c.note,
    )


def details_pb(d: DatasetDetails) -> pb.DatasetDescription:
    """Return the wire form of Describe's answer."""
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
        global_attributes=_pairs_pb(d.global_attributes),
        license=d.license, source=d.source, descriptor_xml=d.descriptor_xml,
        coverage=[pb.CoverageRun(first=r.first, last=r.last, start=r.start, stop=r.stop) for r in d.coverage],
        warnings=list(d.warnings),
        grid_mappings=[
            pb.GridMapping(name=m.name, grid_mapping_name=m.grid_mapping_name, parameters=_pairs_pb(m.parameters),
                           wkt=m.wkt, proj=m.proj, problem=m.problem, value=m.value, dtype=m.dtype)
            for m in d.grid_mappings
        ],
    )


def details_from_pb(m: pb.DatasetDescription) -> DatasetDetails:
    """Return the dataset description a DatasetDescription message carries."""
    from dstp.metadata import CoverageRun, DatasetDetails, DimensionInfo, FileInfo, GridMappingInfo, KeyInfo

    return DatasetDetails(
        summary=summary_from_pb(m.summary),
        dimensions=tuple(
            DimensionInfo(d.name, d.size, d.coordinate, d.min, d.max, d.order, d.units, d.calendar, d.axis)
            for d in m.dimensions
        ),
        coordinates=tuple(_column(c) for c in m.coordinates),
        attributes=tuple(_column(c) for c in m.attributes),
        files=tuple(FileInfo(f.name, f.size_bytes, f.format, f.start, f.count, f.first, f.last) for f in m.files),
        correlation_keys=tuple(KeyInfo(k.name, k.column, k.standard_name, k.units) for k in m.correlation_keys),
        aggregate_dimension=m.aggregate_dimension,
        global_attributes=_pairs(m.global_attributes),
        license=m.license, source=m.source, descriptor_xml=m.descriptor_xml,
        coverage=tuple(CoverageRun(r.first, r.last, r.start, r.stop) for r in m.coverage),
        warnings=tuple(m.warnings),
        grid_mappings=tuple(
            GridMappingInfo(g.name, g.grid_mapping_name, _pairs(g.parameters), g.wkt, g.proj, g.problem, g.value,
                            g.dtype)
            for g in m.grid_mappings
        ),
    )


def axis_values_pb(dimension: str, values: pa.Array) -> pb.AxisValuesResponse:
    """Return the AxisValuesResponse carrying ``values`` (one column named ``dimension``, Arrow IPC)."""
    import pyarrow as pa

    table = pa.table({dimension: values})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return pb.AxisValuesResponse(arrow_ipc=sink.getvalue().to_pybytes())


def axis_values_from_pb(m: pb.AxisValuesResponse) -> pa.Array:
    """Return the values an AxisValuesResponse carries."""
    import pyarrow as pa

    table = pa.ipc.open_stream(m.arrow_ipc).read_all()
    if table.num_columns != 1:
        raise ProtocolError(f"an AxisValues answer holds one column, not {table.num_columns}")
    return table.column(0).combine_chunks()


# -------------------------------------------------------------------------------- offers and plans


@dataclass(frozen=True, slots=True)
class ChannelOffer:
    """How to fetch one result (or file) on one channel, as the wire carries it."""

    kind: str
    ticket: bytes
    expires_at_unix_ms: int
    endpoint: str
    streams: int
    compression: str = "none"
    congestion_control: str = ""
    #: The ticket key (only the client that asked gets it): proves a redeemer is that client.
    key: bytes = field(default=b"", repr=False)
    #: How the data channel seals the transfer's frames ("aes-256-gcm"), or "" for plaintext.
    cipher: str = ""


def offer_pb(o: ChannelOffer) -> pb.ChannelOffer:
    """Return the wire form of an offer (Query, Run and OpenFile answers all build theirs here)."""
    return pb.ChannelOffer(
        kind=channel_kind_pb(o.kind), ticket=o.ticket, expires_at_unix_ms=o.expires_at_unix_ms,
        endpoint=o.endpoint, streams=o.streams, compression=compression_pb(o.compression),
        congestion_control=o.congestion_control, key=o.key, cipher=o.cipher,
    )


def offer_from_pb(m: pb.ChannelOffer) -> ChannelOffer:
    """Return the offer a ChannelOffer message carries (kind "" for a channel this client does not know)."""
    return ChannelOffer(
        kind=_CHANNEL_NAMES.get(m.kind, ""), ticket=m.ticket, expires_at_unix_ms=m.expires_at_unix_ms,
        endpoint=m.endpoint, streams=m.streams, compression=compression_name(m.compression),
        congestion_control=m.congestion_control, key=m.key, cipher=m.cipher,
    )


@dataclass(frozen=True, slots=True)
class QueryInfo:
    """What the server answered to Query (or Run's plan), before any record is fetched.

    Sizes are -1 where unknown: ``estimated_rows``/``estimated_bytes`` are known
    only when every scanned grid point is a result row; ``max_rows`` and
    ``max_bytes`` bound the result (scan capped by LIMIT and sampling).
    """

    query_id: str
    schema: pa.Schema
    scan_rows: int
    estimated_rows: int
    estimated_bytes: int
    grid: tuple[str, ...]
    hyperslab: Mapping[str, tuple[int, int, int]]
    offers: tuple[ChannelOffer, ...]
    sample_seed: int | None
    max_rows: int = -1
    max_bytes: int = -1
    #: Scale-out: the partitions cluster workers hold (then ``offers`` is empty); docs/scale-out.md.
    partitions: tuple["PartitionInfo", ...] = ()
    #: Scale-out: the ORDER BY keys every partition is sorted by (merge by them).
    order: tuple["OrderKeyInfo", ...] = ()

    def offer(self, kind: str) -> ChannelOffer:
        """Return the offer for channel ``kind``; TransportUnavailableError if the server made none."""
        for o in self.offers:
            if o.kind == kind:
                return o
        raise TransportUnavailableError(f"the server made no {kind} offer for this query")

    def size_estimate(self) -> dict[str, Any]:
        """Return the result's size as :func:`size_estimate` says it, from this plan."""
        return size_estimate(self.estimated_rows, self.estimated_bytes, self.max_rows, self.max_bytes,
                             self.scan_rows)


#: A row bound at least this large says nothing (dstp.query.plan.ROW_BOUND: joins whose bound overflows).
UNBOUNDED_ROWS = 2**62


def _size(nbytes: int) -> str:
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def size_estimate(estimated_rows: int, estimated_bytes: int, max_rows: int, max_bytes: int,
                  scan_rows: int = -1) -> dict[str, Any]:
    """Return a query's result size before it runs, from its plan: ``records`` and ``bytes`` (Arrow bytes as the
    server counts them), ``exact`` (True: every scanned point is a record; False: the most there can be, the
    plan's row bound), ``scan_rows`` (grid points read), and ``text`` for a person ("at most 1,024 records,
    96.0 KiB"); records and bytes are -1 when the plan bounds nothing (a cross join)."""
    if estimated_rows >= 0:
        records, nbytes, exact = estimated_rows, estimated_bytes, True
    elif 0 <= max_rows < UNBOUNDED_ROWS:
        records, nbytes, exact = max_rows, max_bytes, False
    else:
        records, nbytes, exact = -1, -1, False
    if records < 0:
        text = "size unknown until it runs"
    else:
        plural = "record" if records == 1 else "records"
        text = f"{'' if exact else 'at most '}{records:,} {plural}" + (f", {_size(nbytes)}" if nbytes >= 0 else "")
    return {"records": records, "bytes": nbytes, "exact": exact, "scan_rows": scan_rows, "text": text}


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition of a partitioned (scale-out) result: which worker holds it and how to fetch it."""

    index: int
    worker: str
    offer: ChannelOffer
    rows: int
    bytes: int
    hyperslab: Mapping[str, tuple[int, int, int]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class OrderKeyInfo:
    """One ORDER BY key of a partitioned result, as an output column."""

    column: str
    descending: bool = False
    nulls_first: bool = False


def partition_pb(p: PartitionInfo) -> pb.Partition:
    """Return the wire form of one partition (Query's answer and Resolve's)."""
    return pb.Partition(index=p.index, worker=p.worker, offer=offer_pb(p.offer), rows=p.rows, bytes=p.bytes,
                        hyperslab=[pb.HyperslabRange(dimension=d, start=r[0], stop=r[1], step=r[2])
                                   for d, r in p.hyperslab.items()])


def partition_from_pb(m: pb.Partition) -> PartitionInfo:
    """Return the partition a Partition message carries."""
    return PartitionInfo(index=m.index, worker=m.worker, offer=offer_from_pb(m.offer), rows=m.rows, bytes=m.bytes,
                         hyperslab={h.dimension: (h.start, h.stop, h.step) for h in m.hyperslab})


@dataclass(frozen=True, slots=True)
class FilePartInfo:
    """One share of a file download (scale-out): the worker that serves it, its byte ranges, its offer."""

    worker: str
    ranges: tuple[tuple[int, int], ...]
    offer: ChannelOffer


def file_part_pb(p: FilePartInfo) -> pb.FilePart:
    """Return the wire form of one share of a file download (OpenFile's answer)."""
    return pb.FilePart(worker=p.worker, ranges=[pb.ByteRange(offset=o, length=n) for o, n in p.ranges],
                       offer=offer_pb(p.offer))


def file_part_from_pb(m: pb.FilePart) -> FilePartInfo:
    """Return the share a FilePart message carries."""
    return FilePartInfo(worker=m.worker, ranges=tuple((r.offset, r.length) for r in m.ranges),
                        offer=offer_from_pb(m.offer))


def _known(value: int) -> int | None:
    return value if value >= 0 else None


def query_response_pb(info: QueryInfo) -> pb.QueryResponse:
    """Return the wire form of a query's plan and offers."""
    return pb.QueryResponse(
        query_id=info.query_id,
        arrow_schema=info.schema.serialize().to_pybytes(),
        scan_rows=info.scan_rows,
        estimated_rows=_known(info.estimated_rows),
        estimated_bytes=_known(info.estimated_bytes),
        max_rows=_known(info.max_rows),
        max_bytes=_known(info.max_bytes),
        offers=[offer_pb(o) for o in info.offers],
        grid=list(info.grid),
        hyperslab=[pb.HyperslabRange(dimension=d, start=r[0], stop=r[1], step=r[2])
                   for d, r in info.hyperslab.items()],
        sample_seed=info.sample_seed,
        partitions=[partition_pb(p) for p in info.partitions],
        order=[pb.OrderKey(column=k.column, descending=k.descending, nulls_first=k.nulls_first)
               for k in info.order],
    )


def query_info_from_pb(m: pb.QueryResponse) -> QueryInfo:
    """Return the plan a QueryResponse carries (absent sizes become -1)."""
    import pyarrow as pa

    def size(name: str) -> int:
        return int(getattr(m, name)) if m.HasField(name) else -1

    return QueryInfo(
        query_id=m.query_id,
        schema=pa.ipc.read_schema(pa.py_buffer(m.arrow_schema)),
        scan_rows=m.scan_rows,
        estimated_rows=size("estimated_rows"),
        estimated_bytes=size("estimated_bytes"),
        grid=tuple(m.grid),
        hyperslab={h.dimension: (h.start, h.stop, h.step) for h in m.hyperslab},
        offers=tuple(offer_from_pb(o) for o in m.offers),
        sample_seed=m.sample_seed if m.HasField("sample_seed") else None,
        max_rows=size("max_rows"),
        max_bytes=size("max_bytes"),
        partitions=tuple(partition_from_pb(p) for p in m.partitions),
        order=tuple(OrderKeyInfo(k.column, k.descending, k.nulls_first) for k in m.order),
    )


# -------------------------------------------------------------------------------- transfer summaries

#: The server's account of a transfer, by what was sent: the keys of an END frame besides
#: "messages" and "paths", and (for queries) the fields of FetchSummary.
_SERVER_KEYS = {
    "query": ("rows", "bytes", "batches", "truncated", "truncated_reason", "server_seconds",
              "hyperslabs_read", "elements_read", "bytes_read"),
    "file": ("bytes", "blocks"),
}


@dataclass(frozen=True, slots=True)
class TransferSummary:
    """What one transfer carried: the server's account, then what the receiving side measured.

    The server builds it when its source is exhausted (a query's rows and
    reads, or a file's bytes and blocks) and sends it as the gRPC stream's
    FetchSummary or a data channel's END frame; the receiver adds what it saw
    on the wire (bytes, resumes, corrupted frames, per stripe), and the client
    the channel, the time and why that channel was chosen. Reading it as the
    dict it used to be (``summary["rows"]``, ``summary.get("rows")``) still works.
    """

    #: "query" (an Arrow result) or "file" (blocks of a published file).
    content: str = "query"
    # -- the server's account
    rows: int = 0
    bytes: int = 0
    batches: int = 0
    truncated: bool = False
    truncated_reason: str = ""
    server_seconds: float = 0.0
    hyperslabs_read: int = 0
    elements_read: int = 0
    bytes_read: int = 0
    blocks: int = 0
    #: Messages of a data-channel transfer (the END frame's sequence).
    messages: int = 0
    #: Per stripe (as text), what the server's socket measured: rtt_ms, retransmits, segments, ...
    paths: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    # -- the receiver's account
    wire_bytes: int = 0
    reconnects: int = 0
    corrupted_frames: int = 0
    streams: int = 1
    per_stripe_bytes: Mapping[int, int] = field(default_factory=dict)
    transfer_seconds: float = 0.0
    # -- the client's
    transport: str = ""
    seconds: float = 0.0
    choice: str = ""

    def replace(self, **changes: Any) -> "TransferSummary":
        """Return a copy with ``changes`` applied."""
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        """Return every field as a plain dict (JSON-ready)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def end_payload(self) -> dict[str, Any]:
        """Return the JSON object of a data channel's END frame."""
        return {"messages": self.messages, **{k: getattr(self, k) for k in _SERVER_KEYS[self.content]},
                "paths": {str(k): dict(v) for k, v in self.paths.items()}}

    @classmethod
    def from_end_payload(cls, payload: Mapping[str, Any]) -> "TransferSummary":
        """Return the summary an END frame carries (unknown keys ignored, missing ones at their defaults)."""
        content = "file" if "blocks" in payload and "rows" not in payload else "query"
        values: dict[str, Any] = {"content": content}
        for key in ("messages", *_SERVER_KEYS[content]):
            if key in payload:
                default = getattr(cls(), key)
                values[key] = type(default)(payload[key])
        paths = payload.get("paths")
        if isinstance(paths, Mapping):
            values["paths"] = {str(k): dict(v) for k, v in paths.items() if isinstance(v, Mapping)}
        return cls(**values)

    # Reading the summary as the dict it replaced.
    def __getitem__(self, key: str) -> Any:
        if key not in _FIELDS:
            raise KeyError(key)
        return getattr(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        """Return field ``key``, or ``default`` if there is no such field."""
        return getattr(self, key) if key in _FIELDS else default


_FIELDS = frozenset(f.name for f in dataclasses.fields(TransferSummary))


def query_transfer_summary(summary: Any) -> TransferSummary:
    """Return the server's account of a query from its execution summary (dstp.query.execute.QuerySummary)."""
    return TransferSummary(
        rows=summary.rows, bytes=summary.bytes, batches=summary.batches, truncated=summary.truncated,
        truncated_reason=summary.truncated_reason, server_seconds=summary.seconds,
        hyperslabs_read=summary.stats.hyperslabs, elements_read=summary.stats.elements,
        bytes_read=summary.stats.bytes,
    )


def fetch_summary_pb(s: TransferSummary) -> pb.FetchSummary:
    """Return the FetchSummary that ends a Fetch (or Run) stream."""
    return pb.FetchSummary(
        rows=s.rows, bytes=s.bytes, batches=s.batches, truncated=s.truncated, truncated_reason=s.truncated_reason,
        seconds=s.server_seconds, hyperslabs_read=s.hyperslabs_read, elements_read=s.elements_read,
        bytes_read=s.bytes_read,
    )


def transfer_summary_from_pb(m: pb.FetchSummary) -> TransferSummary:
    """Return the server's account a FetchSummary carries."""
    return TransferSummary(
        rows=m.rows, bytes=m.bytes, batches=m.batches, truncated=m.truncated, truncated_reason=m.truncated_reason,
        server_seconds=m.seconds, hyperslabs_read=m.hyperslabs_read, elements_read=m.elements_read,
        bytes_read=m.bytes_read,
    )


# -------------------------------------------------------------------------------- streamed responses
#
# A FetchResponse holding an IPC message, and a FileChunk, are framed here rather than by
# protobuf: protobuf would copy the bytes into its message and again into the serialized
# string. Here the field's tag and length go in front of the message's own buffers and
# bytes.join copies them once, into the bytes gRPC sends. The output is ordinary protobuf:
# any client parses it; ours takes the IPC message as a view of the received bytes.

_IPC_MESSAGE_TAG = b"\x0a"  # FetchResponse field 1 (ipc_message), length-delimited
_CHUNK_OFFSET_TAG = 0x08  # FileChunk field 1 (offset), varint
_CHUNK_DATA_TAG = 0x12  # FileChunk field 2 (data), length-delimited


def _varint(value: int) -> bytes:
    out = bytearray()
    value &= (1 << 64) - 1  # int64 on the wire: negative values as ten bytes of two's complement
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_varint(raw: memoryview, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if position >= len(raw) or shift > 63:
            raise ValueError("truncated varint")
        byte = raw[position]
        position += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, position


def _nbytes(part: Any) -> int:
    return memoryview(part).nbytes


def fetch_response_bytes(item: Any) -> bytes:
    """Return a serialized FetchResponse: an IPC message (anything with ``parts``) or a FetchResponse."""
    parts = getattr(item, "parts", None)
    if parts is None:
        return bytes(item.SerializeToString())
    size = sum(_nbytes(p) for p in parts)
    return b"".join((_IPC_MESSAGE_TAG, _varint(size), *parts))


def parse_fetch_response(raw: bytes) -> memoryview | pb.FetchResponse:
    """Return the IPC message of a serialized FetchResponse as a view of ``raw``, or the parsed message."""
    view = memoryview(raw)
    if view[:1] == _IPC_MESSAGE_TAG:
        try:
            size, start = _read_varint(view, 1)
        except ValueError:
            size, start = -1, 0
        if start + size == len(view):
            return view[start:]
    return pb.FetchResponse.FromString(raw)


def file_chunk_bytes(offset: int, data: Any) -> bytes:
    """Return a serialized FileChunk of ``data`` (any buffer) at ``offset``, copying the data once."""
    head = (bytes((_CHUNK_OFFSET_TAG,)) + _varint(offset)) if offset else b""
    return b"".join((head, bytes((_CHUNK_DATA_TAG,)), _varint(_nbytes(data)), data))


def parse_file_chunk(raw: bytes) -> tuple[int, memoryview]:
    """Return (offset, data) of a serialized FileChunk, the data a view of ``raw``."""
    view = memoryview(raw)
    offset, data, position = 0, view[:0], 0
    try:
        while position < len(view):
            tag, position = _read_varint(view, position)
            if tag == _CHUNK_OFFSET_TAG:
                offset, position = _read_varint(view, position)
                offset -= (offset >> 63) << 64  # int64
            elif tag == _CHUNK_DATA_TAG:
                size, position = _read_varint(view, position)
                data, position = view[position:position + size], position + size
            else:
                raise ValueError(f"unexpected field tag {tag}")
        if position != len(view):
            raise ValueError("truncated field")
    except ValueError:
        chunk = pb.FileChunk.FromString(raw)
        return chunk.offset, memoryview(chunk.data)
    return offset, data


# -------------------------------------------------------------------------------- addresses

#: Hosts a server binds to mean "every address of mine".
WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::"})


def reachable_address(endpoint: str, host: str) -> tuple[str, int]:
    """Return (host, port) of a server's ``endpoint`` as a client reaches it.

    A server listening on a wildcard (``0.0.0.0:50052``, ``[::]:50052``) means
    "my address": the host the client reached the server by, ``host``.
    """
    bound, _, port = endpoint.rpartition(":")
    bound = bound.strip("[]")
    return (host.strip("[]") if bound in WILDCARD_HOSTS else bound), int(port)


def reachable_endpoint(endpoint: str, host: str) -> str:
    """Return ``endpoint`` as ``host:port`` a client reaches (see :func:`reachable_address`)."""
    address, port = reachable_address(endpoint, host)
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"

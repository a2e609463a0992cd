"""The client's protobuf codec: dstp values to requests, the server's messages to dstp values.

    channel_kind_pb / compression_pb         names → a request's enum values (proto/tables.py's tables)
    summary_from_pb, details_from_pb, axis_values_from_pb   ListDatasets, Describe, AxisValues answers
    offer_from_pb, partition_from_pb, file_part_from_pb     ChannelOffer, Partition, FilePart
    query_info_from_pb                       QueryResponse → QueryInfo (absent sizes: -1)
    transfer_summary_from_pb                 the FetchSummary that ends a stream → TransferSummary
    parse_fetch_response, parse_file_chunk   Fetch/Run and FetchFile responses, the IPC message or
                                             file block a view of the received bytes
    change_from_pb                           CatalogChange → a catalog change (WatchCatalog)

The server's half, which encodes what is decoded here, is :mod:`dstp.grpc_codec`
beside the gRPC door; the values both map are :mod:`dstp.transport.wire.values`.
pyarrow is imported only where a schema is decoded, and :mod:`dstp.metadata`
(~10 ms of imports) only where its classes are built: ``dstp get`` and a plain
query never need them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Sequence

from dstp.errors import ProtocolError, TransportUnavailableError
from dstp.proto import dstp_pb2 as pb
from dstp.proto.tables import (
    CHANGE_KINDS,
    CHANNEL_KINDS,
    CHUNK_DATA_TAG,
    CHUNK_OFFSET_TAG,
    COMPRESSIONS,
    IPC_MESSAGE_TAG,
)
from dstp.transport.wire.values import (
    ChannelOffer,
    FilePartInfo,
    OrderKeyInfo,
    PartitionInfo,
    QueryInfo,
    TransferSummary,
)

if TYPE_CHECKING:
    import pyarrow as pa

    from dstp.catalog.changes import Change
    from dstp.metadata import ColumnInfo, DatasetDetails, DatasetSummary

__all__ = [
    "axis_values_from_pb",
    "change_from_pb",
    "channel_kind_pb",
    "compression_pb",
    "details_from_pb",
    "file_part_from_pb",
    "offer_from_pb",
    "parse_fetch_response",
    "parse_file_chunk",
    "partition_from_pb",
    "query_info_from_pb",
    "summary_from_pb",
    "transfer_summary_from_pb",
]

_CHANNEL_NAMES = {v: k for k, v in CHANNEL_KINDS.items()}
_COMPRESSION_NAMES = {v: k for k, v in COMPRESSIONS.items()} | {pb.COMPRESSION_UNSPECIFIED: "none"}
_CHANGE_NAMES = {v: k for k, v in CHANGE_KINDS.items()}

# -------------------------------------------------------------------------------- enums


def channel_kind_pb(name: str) -> int:
    """Return the wire value of channel ``name``; TransportUnavailableError for a name dstp does not know."""
    try:
        return CHANNEL_KINDS[name]
    except KeyError:
        raise TransportUnavailableError(
            f"unknown channel {name!r}; channels are {', '.join(CHANNEL_KINDS)}") from None


def compression_pb(name: str) -> int:
    """Return the wire value of compression ``name``; TransportUnavailableError for an unknown one."""
    try:
        return COMPRESSIONS[name]
    except KeyError:
        raise TransportUnavailableError(
            f"unknown compression {name!r}; use {', '.join(COMPRESSIONS)}") from None


# -------------------------------------------------------------------------------- discovery


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


def _pairs(values: Sequence[pb.KeyValue]) -> tuple[tuple[str, str], ...]:
    return tuple((kv.key, kv.value) for kv in values)


def _column(c: pb.Column) -> ColumnInfo:
    from dstp.metadata import ColumnInfo

    return ColumnInfo(
        name=c.name, variable=c.variable, dimensions=tuple(c.dimensions), units=c.units,
        description=c.description, arrow_type=c.arrow_type, cf=_pairs(c.cf),
        packed=c.packed, nullable=c.nullable, coordinate=c.coordinate, missing_from=tuple(c.missing_from),
        role=c.role, note=c.note,
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


def axis_values_from_pb(m: pb.AxisValuesResponse) -> pa.Array:
    """Return the values an AxisValuesResponse carries."""
    import pyarrow as pa

    table = pa.ipc.open_stream(m.arrow_ipc).read_all()
    if table.num_columns != 1:
        raise ProtocolError(f"an AxisValues answer holds one column, not {table.num_columns}")
    return table.column(0).combine_chunks()


# -------------------------------------------------------------------------------- offers and plans


def offer_from_pb(m: pb.ChannelOffer) -> ChannelOffer:
    """Return the offer a ChannelOffer message carries (kind "" for a channel this client does not know)."""
    return ChannelOffer(
        kind=_CHANNEL_NAMES.get(m.kind, ""), ticket=m.ticket, expires_at_unix_ms=m.expires_at_unix_ms,
        endpoint=m.endpoint, streams=m.streams, compression=_COMPRESSION_NAMES.get(m.compression, "none"),
        congestion_control=m.congestion_control, key=m.key, cipher=m.cipher,
    )


def _hyperslab(ranges: Sequence[pb.HyperslabRange]) -> Mapping[str, tuple[int, int, int]]:
    return {h.dimension: (h.start, h.stop, h.step) for h in ranges}


def partition_from_pb(m: pb.Partition) -> PartitionInfo:
    """Return the partition a Partition message carries."""
    return PartitionInfo(index=m.index, worker=m.worker, offer=offer_from_pb(m.offer), rows=m.rows, bytes=m.bytes,
                         hyperslab=_hyperslab(m.hyperslab))


def file_part_from_pb(m: pb.FilePart) -> FilePartInfo:
    """Return the share a FilePart message carries."""
    return FilePartInfo(worker=m.worker, ranges=tuple((r.offset, r.length) for r in m.ranges),
                        offer=offer_from_pb(m.offer))


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
        hyperslab=_hyperslab(m.hyperslab),
        offers=tuple(offer_from_pb(o) for o in m.offers),
        sample_seed=m.sample_seed if m.HasField("sample_seed") else None,
        max_rows=size("max_rows"),
        max_bytes=size("max_bytes"),
        partitions=tuple(partition_from_pb(p) for p in m.partitions),
        order=tuple(OrderKeyInfo(k.column, k.descending, k.nulls_first) for k in m.order),
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
# The server frames a FetchResponse's IPC message and a FileChunk's data itself (dstp.grpc_codec), and
# any protobuf parser reads them; these take the bytes as a view of what was received, with no copy.

_IPC_MESSAGE_HEAD = bytes((IPC_MESSAGE_TAG,))


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


def parse_fetch_response(raw: bytes) -> memoryview | pb.FetchResponse:
    """Return the IPC message of a serialized FetchResponse as a view of ``raw``, or the parsed message."""
    view = memoryview(raw)
    if view[:1] == _IPC_MESSAGE_HEAD:
        try:
            size, start = _read_varint(view, 1)
        except ValueError:
            size, start = -1, 0
        if start + size == len(view):
            return view[start:]
    return pb.FetchResponse.FromString(raw)


def parse_file_chunk(raw: bytes) -> tuple[int, memoryview]:
    """Return (offset, data) of a serialized FileChunk, the data a view of ``raw``."""
    view = memoryview(raw)
    offset, data, position = 0, view[:0], 0
    try:
        while position < len(view):
            tag, position = _read_varint(view, position)
            if tag == CHUNK_OFFSET_TAG:
                offset, position = _read_varint(view, position)
                offset -= (offset >> 63) << 64  # int64
            elif tag == CHUNK_DATA_TAG:
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


# -------------------------------------------------------------------------------- the change feed


def change_from_pb(m: pb.CatalogChange) -> Change:
    """Return the change a CatalogChange message carries (a kind this version does not know: "changed")."""
    from dstp.catalog.changes import Change

    return Change(seq=m.seq, at=m.at_unix_ms / 1000, dataset=m.dataset, version=m.version,
                  kind=_CHANGE_NAMES.get(m.kind, "changed"), files_added=tuple(m.files_added),
                  files_removed=tuple(m.files_removed), files_changed=tuple(m.files_changed),
                  files_renamed=tuple((r.old_path, r.new_path) for r in m.files_renamed), columns=tuple(m.columns),
                  first=m.first, last=m.last, axis=m.axis, descriptor=m.descriptor)

"""The gRPC door's protobuf codec: requests to dstp values, the service's answers to messages.

    channel_kind_name / compression_name     a request's enum values → names (proto/tables.py's tables)
    summary_pb, details_pb, axis_values_pb   ListDatasets, Describe, AxisValues answers
    offer_pb, partition_pb, file_part_pb     ChannelOffer, Partition, FilePart (the one offer builder)
    query_response_pb                        QueryInfo → QueryResponse (Query, Run's plan, Resolve)
    fetch_summary_pb                         TransferSummary → the FetchSummary that ends a stream
    fetch_response_bytes, file_chunk_bytes   Fetch/Run and FetchFile responses, IPC bodies and file
                                             blocks framed without protobuf's copies
    change_pb                                a catalog change → CatalogChange (WatchCatalog)

The values are the service's (:mod:`dstp.transport.wire.values`,
:mod:`dstp.metadata`, :mod:`dstp.catalog.changes`); this module only maps
them, and only the gRPC door (``grpc_app.py``, ``grpc_feed.py``) imports it,
so the service loads no protobuf. The client's half, which decodes what is
encoded here, is ``dstp.client._codec`` (clients/python/_codec.py);
tests/proto/test_codecs.py checks that each value comes back equal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

from dstp.errors import QueryError, TransportUnavailableError
from dstp.proto import dstp_pb2 as pb
from dstp.proto.tables import (
    CHANGE_KINDS,
    CHANNEL_KINDS,
    CHUNK_DATA_TAG,
    CHUNK_OFFSET_TAG,
    COMPRESSIONS,
    IPC_MESSAGE_TAG,
)
from dstp.transport.wire.values import ChannelOffer, FilePartInfo, PartitionInfo, QueryInfo, TransferSummary

if TYPE_CHECKING:
    import pyarrow as pa

    from dstp.catalog.changes import Change
    from dstp.metadata import ColumnInfo, DatasetDetails, DatasetSummary

__all__ = [
    "axis_values_pb",
    "change_pb",
    "channel_kind_name",
    "compression_name",
    "details_pb",
    "fetch_response_bytes",
    "fetch_summary_pb",
    "file_chunk_bytes",
    "file_part_pb",
    "offer_pb",
    "partition_pb",
    "query_response_pb",
    "summary_pb",
]

_CHANNEL_NAMES = {v: k for k, v in CHANNEL_KINDS.items()}
_COMPRESSION_NAMES = {v: k for k, v in COMPRESSIONS.items()} | {pb.COMPRESSION_UNSPECIFIED: "none"}

# -------------------------------------------------------------------------------- enums


def channel_kind_name(value: int) -> str:
    """Return the name of channel kind ``value``; QueryError for a value this version does not know."""
    try:
        return _CHANNEL_NAMES[value]
    except KeyError:
        raise QueryError(f"unknown channel kind {value}") from None


def compression_name(value: int) -> str:
    """Return the name of compression ``value`` (unspecified, or one this version does not know: "none")."""
    return _COMPRESSION_NAMES.get(value, "none")


def _wire(table: Mapping[str, int], name: str, what: str) -> int:
    try:
        return table[name]
    except KeyError:
        raise TransportUnavailableError(f"unknown {what} {name!r}; use {', '.join(table)}") from None


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


def _pairs_pb(pairs: Sequence[tuple[str, str]]) -> list[pb.KeyValue]:
    return [pb.KeyValue(key=k, value=v) for k, v in pairs]


def _column_pb(c: ColumnInfo) -> pb.Column:
    return pb.Column(
        name=c.name, variable=c.variable, dimensions=list(c.dimensions), units=c.units,
        description=c.description, arrow_type=c.arrow_type, cf=_pairs_pb(c.cf),
        packed=c.packed, nullable=c.nullable, coordinate=c.coordinate, missing_from=list(c.missing_from),
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


def axis_values_pb(dimension: str, values: pa.Array) -> pb.AxisValuesResponse:
    """Return the AxisValuesResponse carrying ``values`` (one column named ``dimension``, Arrow IPC)."""
    import pyarrow as pa

    table = pa.table({dimension: values})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return pb.AxisValuesResponse(arrow_ipc=sink.getvalue().to_pybytes())


# -------------------------------------------------------------------------------- offers and plans


def offer_pb(o: ChannelOffer) -> pb.ChannelOffer:
    """Return the wire form of an offer (Query, Run and OpenFile answers all build theirs here)."""
    return pb.ChannelOffer(
        kind=_wire(CHANNEL_KINDS, o.kind, "channel"), ticket=o.ticket, expires_at_unix_ms=o.expires_at_unix_ms,
        endpoint=o.endpoint, streams=o.streams, compression=_wire(COMPRESSIONS, o.compression, "compression"),
        congestion_control=o.congestion_control, key=o.key, cipher=o.cipher,
    )


def _hyperslab_pb(hyperslab: Mapping[str, tuple[int, int, int]]) -> list[pb.HyperslabRange]:
    return [pb.HyperslabRange(dimension=d, start=r[0], stop=r[1], step=r[2]) for d, r in hyperslab.items()]


def partition_pb(p: PartitionInfo) -> pb.Partition:
    """Return the wire form of one partition (Query's answer and Resolve's)."""
    return pb.Partition(index=p.index, worker=p.worker, offer=offer_pb(p.offer), rows=p.rows, bytes=p.bytes,
                        hyperslab=_hyperslab_pb(p.hyperslab))


def file_part_pb(p: FilePartInfo) -> pb.FilePart:
    """Return the wire form of one share of a file download (OpenFile's answer)."""
    return pb.FilePart(worker=p.worker, ranges=[pb.ByteRange(offset=o, length=n) for o, n in p.ranges],
                       offer=offer_pb(p.offer))


def _known(value: int) -> int | None:
    return value if value >= 0 else None


def query_response_pb(info: QueryInfo) -> pb.QueryResponse:
    """Return the wire form of a query's plan and offers (sizes of -1, unknown, are left absent)."""
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
        hyperslab=_hyperslab_pb(info.hyperslab),
        sample_seed=info.sample_seed,
        partitions=[partition_pb(p) for p in info.partitions],
        order=[pb.OrderKey(column=k.column, descending=k.descending, nulls_first=k.nulls_first)
               for k in info.order],
    )


def fetch_summary_pb(s: TransferSummary) -> pb.FetchSummary:
    """Return the FetchSummary that ends a Fetch (or Run) stream."""
    return pb.FetchSummary(
        rows=s.rows, bytes=s.bytes, batches=s.batches, truncated=s.truncated, truncated_reason=s.truncated_reason,
        seconds=s.server_seconds, hyperslabs_read=s.hyperslabs_read, elements_read=s.elements_read,
        bytes_read=s.bytes_read,
    )


# -------------------------------------------------------------------------------- streamed responses
#
# A FetchResponse holding an IPC message, and a FileChunk, are framed here rather than by
# protobuf: protobuf would copy the bytes into its message and again into the serialized
# string. Here the field's tag and length go in front of the message's own buffers and
# bytes.join copies them once, into the bytes gRPC sends. The output is ordinary protobuf:
# any client parses it; ours (dstp.client._codec) takes the IPC message as a view of the
# received bytes.

_IPC_MESSAGE_HEAD = bytes((IPC_MESSAGE_TAG,))
_CHUNK_OFFSET_HEAD = bytes((CHUNK_OFFSET_TAG,))
_CHUNK_DATA_HEAD = bytes((CHUNK_DATA_TAG,))


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


def _nbytes(part: Any) -> int:
    return memoryview(part).nbytes


def fetch_response_bytes(item: Any) -> bytes:
    """Return a serialized FetchResponse: an IPC message (anything with ``parts``) or a FetchResponse."""
    parts = getattr(item, "parts", None)
    if parts is None:
        return bytes(item.SerializeToString())
    size = sum(_nbytes(p) for p in parts)
    return b"".join((_IPC_MESSAGE_HEAD, _varint(size), *parts))


def file_chunk_bytes(offset: int, data: Any) -> bytes:
    """Return a serialized FileChunk of ``data`` (any buffer) at ``offset``, copying the data once."""
    head = (_CHUNK_OFFSET_HEAD + _varint(offset)) if offset else b""
    return b"".join((head, _CHUNK_DATA_HEAD, _varint(_nbytes(data)), data))


# -------------------------------------------------------------------------------- the change feed


def change_pb(c: Change) -> pb.CatalogChange:
    """Return the wire form of one change of the catalog (WatchCatalog)."""
    return pb.CatalogChange(
        seq=c.seq, at_unix_ms=int(round(c.at * 1000)), dataset=c.dataset, version=c.version,
        kind=CHANGE_KINDS[c.kind], files_added=list(c.files_added), files_removed=list(c.files_removed),
        files_changed=list(c.files_changed),
        files_renamed=[pb.FileRename(old_path=a, new_path=b) for a, b in c.files_renamed],
        columns=list(c.columns), axis=c.axis, first=c.first, last=c.last, descriptor=c.descriptor)

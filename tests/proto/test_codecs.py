"""The two halves of the protobuf codec agree: what the gRPC door encodes, the client decodes to an equal value.

The server's half is dstp/grpc_codec.py (beside the door), the client's clients/python/_codec.py; both map
through proto/tables.py. Every value goes through real serialized bytes, and each decoding is also checked
with protobuf's own parser (any client's), so a hand-framed message is ordinary protobuf.
"""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from dstp import grpc_codec as server
from dstp.catalog.changes import Change
from dstp.client import _codec as client
from dstp.proto import dstp_pb2 as pb
from dstp.proto.tables import CHANGE_KINDS, CHANNEL_KINDS, COMPRESSIONS
from dstp.transport.wire.values import ChannelOffer, FilePartInfo, OrderKeyInfo, PartitionInfo, QueryInfo

names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
int64 = st.integers(-(2**63), 2**63 - 1)
sizes = st.integers(-1, 2**62)
hyperslabs = st.dictionaries(names, st.tuples(int64, int64, int64), max_size=3)
offers = st.builds(ChannelOffer, kind=st.sampled_from(sorted(CHANNEL_KINDS)), ticket=st.binary(max_size=27),
                   expires_at_unix_ms=int64, endpoint=names, streams=st.integers(0, 2**31 - 1),
                   compression=st.sampled_from(sorted(COMPRESSIONS)), congestion_control=names,
                   key=st.binary(max_size=32), cipher=st.sampled_from(["", "aes-256-gcm"]))


def _wire(message):  # what gRPC carries
    return type(message).FromString(message.SerializeToString())


@given(offers)
def test_an_offer_comes_back_equal(offer: ChannelOffer) -> None:
    assert client.offer_from_pb(_wire(server.offer_pb(offer))) == offer


@given(offers, names, st.lists(st.tuples(st.integers(0, 2**62), st.integers(0, 2**62)), max_size=4))
def test_a_file_share_comes_back_equal(offer: ChannelOffer, worker: str, ranges: list[tuple[int, int]]) -> None:
    share = FilePartInfo(worker=worker, ranges=tuple(ranges), offer=offer)
    assert client.file_part_from_pb(_wire(server.file_part_pb(share))) == share


@given(query_id=names, scan_rows=st.integers(0, 2**62), estimated=st.tuples(sizes, sizes, sizes, sizes),
       grid=st.lists(names, max_size=3), hyperslab=hyperslabs, offered=st.lists(offers, max_size=3),
       seed=st.none() | st.integers(0, 2**63 - 1), partitions=st.lists(st.tuples(offers, hyperslabs), max_size=2),
       order=st.lists(st.builds(OrderKeyInfo, names, st.booleans(), st.booleans()), max_size=2))
def test_a_query_plan_comes_back_equal(query_id, scan_rows, estimated, grid, hyperslab, offered, seed, partitions,
                                       order) -> None:
    info = QueryInfo(
        query_id=query_id, schema=pa.schema([("time", pa.timestamp("us")), ("t", pa.float32())]),
        scan_rows=scan_rows, estimated_rows=estimated[0], estimated_bytes=estimated[1], grid=tuple(grid),
        hyperslab=hyperslab, offers=tuple(offered), sample_seed=seed, max_rows=estimated[2], max_bytes=estimated[3],
        partitions=tuple(PartitionInfo(i, f"w{i}", o, i, 2 * i, h) for i, (o, h) in enumerate(partitions)),
        order=tuple(order))
    back = client.query_info_from_pb(_wire(server.query_response_pb(info)))
    assert back.schema.equals(info.schema)
    assert back == info


@given(st.integers(0, 2**31), st.integers(0, 2**40), st.text(max_size=8), st.sampled_from(sorted(CHANGE_KINDS)),
       st.lists(names, max_size=3), st.lists(st.tuples(names, names), max_size=2))
def test_a_change_comes_back_equal(seq, at_ms, dataset, kind, files, renamed) -> None:
    change = Change(seq=seq, at=at_ms / 1000, dataset=dataset, version=seq, kind=kind, files_added=tuple(files),
                    files_renamed=tuple(renamed), columns=tuple(files[:1]), first="a", last="b", axis="time")
    assert client.change_from_pb(_wire(server.change_pb(change))) == change


class _Message:
    """An IPC message as the sources yield it: a list of buffers."""

    def __init__(self, parts: list[bytes]) -> None:
        self.parts = parts


@given(st.lists(st.binary(max_size=300), max_size=4))
def test_an_ipc_message_framed_by_hand_is_a_fetch_response(parts: list[bytes]) -> None:
    raw = server.fetch_response_bytes(_Message(parts))
    assert pb.FetchResponse.FromString(raw).ipc_message == b"".join(parts)  # any client's parser
    parsed = client.parse_fetch_response(raw)
    assert isinstance(parsed, memoryview) and parsed.tobytes() == b"".join(parts)


@given(int64, st.binary(max_size=300))
def test_a_file_block_framed_by_hand_is_a_file_chunk(offset: int, data: bytes) -> None:
    raw = server.file_chunk_bytes(offset, data)
    chunk = pb.FileChunk.FromString(raw)
    assert (chunk.offset, chunk.data) == (offset, data)
    at, view = client.parse_file_chunk(raw)
    assert (at, view.tobytes()) == (offset, data)


def test_a_request_enum_comes_back_as_the_name() -> None:
    for name in CHANNEL_KINDS:
        assert server.channel_kind_name(client.channel_kind_pb(name)) == name
    for name in COMPRESSIONS:
        assert server.compression_name(client.compression_pb(name)) == name

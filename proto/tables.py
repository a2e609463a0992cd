"""The tables both protobuf codecs read: enum values by the names dstp gives them, and the tags of the
fields framed by hand.

The server's codec (``dstp/grpc_codec.py``, beside the gRPC door) and the
client's (``clients/python/_codec.py``) map through these same tables, so a
channel, a compression or a change kind has one wire value, and the field
tags written in front of an IPC message or a file block are read from the
generated descriptors, not typed twice. Like the generated modules, this
depends on nothing else of dstp.
"""

from __future__ import annotations

from typing import Any, Mapping

from dstp.proto import dstp_pb2 as pb

__all__ = ["CHANGE_KINDS", "CHANNEL_KINDS", "CHUNK_DATA_TAG", "CHUNK_OFFSET_TAG", "COMPRESSIONS", "IPC_MESSAGE_TAG"]

#: Channel names (as the service, the client and the CLI say them) and their wire values.
CHANNEL_KINDS: Mapping[str, int] = {
    "grpc": pb.CHANNEL_KIND_GRPC_STREAM,
    "striped": pb.CHANNEL_KIND_STRIPED_TCP,
    "udt": pb.CHANNEL_KIND_UDT,
}

#: Compression names and their wire values (what each means to Arrow: dstp.transport.wire.ipc).
COMPRESSIONS: Mapping[str, int] = {
    "none": pb.COMPRESSION_NONE,
    "lz4": pb.COMPRESSION_LZ4_FRAME,
    "zstd": pb.COMPRESSION_ZSTD,
}

#: The change kinds of the catalog's feed (``dstp.catalog.changes``) and their wire values.
CHANGE_KINDS: Mapping[str, int] = {
    "added": pb.CHANGE_KIND_ADDED,
    "changed": pb.CHANGE_KIND_CHANGED,
    "removed": pb.CHANGE_KIND_REMOVED,
}


_VARINT, _LENGTH_DELIMITED = 0, 2  # protobuf wire types


def _tag(message: Any, name: str, wire_type: int) -> int:
    return int(message.DESCRIPTOR.fields_by_name[name].number) << 3 | wire_type


#: FetchResponse.ipc_message (0x0a): an IPC message's buffers follow its tag and length.
IPC_MESSAGE_TAG = _tag(pb.FetchResponse, "ipc_message", _LENGTH_DELIMITED)
#: FileChunk.offset (0x08) and FileChunk.data (0x12).
CHUNK_OFFSET_TAG = _tag(pb.FileChunk, "offset", _VARINT)
CHUNK_DATA_TAG = _tag(pb.FileChunk, "data", _LENGTH_DELIMITED)

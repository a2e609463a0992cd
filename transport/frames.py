"""The data-channel frame, defined once for striped TCP and UDT.

Every byte on a data connection belongs to a frame: a 32-byte header, then
``length`` bytes of payload.

| offset | size | field    | meaning |
|-------:|-----:|----------|---------|
| 0      | 4    | magic    | ``b"DSTP"`` |
| 4      | 1    | version  | 1 |
| 5      | 1    | kind     | HELLO, DATA, END, ACK, ERROR, BYE (below) |
| 6      | 2    | stripe   | index of the connection within the transfer |
| 8      | 8    | sequence | message number (DATA, END); highest in-order number received (ACK) |
| 16     | 8    | offset   | byte offset in the target file (file transfers); 0 for query results |
| 24     | 4    | length   | payload bytes following the header (≤ ``MAX_PAYLOAD``) |
| 28     | 4    | checksum | CRC-32C of the payload followed by the header (with this field 0) |

All integers are big-endian. A transfer is a sequence of *messages* numbered
from 0; each DATA frame carries one whole message (for a query: message 0 is
the Arrow IPC schema, then one IPC record batch per message; for a file: one
block). The END frame is the last message: its sequence is the message count,
its payload a JSON summary. The receiver delivers messages in order and
rejects gaps at the end, duplicates, oversized frames, bad checksums and any
data after END.

Kinds:

* HELLO (client → server, first frame of every connection): JSON payload with
  the ticket, the stripe index and, when resuming, the messages already held.
* DATA (server → client): one message.
* END (server → client): the summary; sequence = number of messages.
* ACK (client → server): sequence = every message below it has been delivered.
* ERROR (either way): JSON ``{"code", "message"}``; the connection then closes.
* BYE (client → server): the client has everything; the server may release it.
"""

from __future__ import annotations

import enum
import json
import struct
from dataclasses import dataclass
from typing import Any, Protocol

import crc32c

from dstp.errors import IntegrityError, ProtocolError, TransportError

__all__ = [
    "Conn",
    "HEADER",
    "MAGIC",
    "MAX_CONTROL_PAYLOAD",
    "MAX_PAYLOAD",
    "VERSION",
    "Frame",
    "Header",
    "Kind",
    "encode_header",
    "payload_views",
    "recv_checked",
    "recv_frame",
    "recv_header",
    "recv_payload",
    "send_frame",
    "control_payload",
]

MAGIC = b"DSTP"
VERSION = 1
HEADER = struct.Struct(">4sBBHQQII")
MAX_PAYLOAD = 64 * 2**20
MAX_CONTROL_PAYLOAD = 1 * 2**20  # HELLO, ACK, ERROR, END and BYE payloads


class Kind(enum.IntEnum):
    HELLO = 1
    DATA = 2
    END = 3
    ACK = 4
    ERROR = 5
    BYE = 6


@dataclass(frozen=True, slots=True)
class Frame:
    """A received frame: header fields and the payload (a memoryview over a fresh buffer)."""

    kind: Kind
    stripe: int
    sequence: int
    offset: int
    payload: memoryview

    def json(self) -> Any:
        """Return the payload decoded as JSON (control frames)."""
        try:
            return json.loads(bytes(self.payload))
        except (ValueError, UnicodeDecodeError) as exc:
            raise ProtocolError(f"{self.kind.name} frame payload is not JSON") from exc


def payload_views(payload: Any) -> list[memoryview]:
    """Return a payload's bytes as views, without copying: one buffer, or a message held in ``parts``.

    A query's record batch arrives as an IPC message in parts (its metadata,
    then the batch's own body buffers: dstp.transport.ipc.IpcMessage); a file
    block, a schema or a control payload as one buffer.
    """
    parts = getattr(payload, "parts", None)
    views = []
    for part in (payload,) if parts is None else parts:
        view = memoryview(part)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        if view.nbytes:
            views.append(view)
    return views


def _checksum(header: bytes, views: list[memoryview]) -> tuple[int, int]:
    """Return (frame checksum, CRC-32C of the payload alone).

    The payload comes first so that its own CRC falls out of the same pass: a
    download combines the blocks' CRCs into the whole file's (transport/crc.py).
    """
    body = 0
    for view in views:
        body = crc32c.crc32c(view, body)
    return crc32c.crc32c(header, body), body


def encode_header(kind: Kind, stripe: int, sequence: int, offset: int, payload: Any) -> bytes:
    """Return the 32-byte header of a frame carrying ``payload`` (bytes-like, or a message in ``parts``)."""
    return _header(kind, stripe, sequence, offset, payload_views(payload))


def _header(kind: Kind, stripe: int, sequence: int, offset: int, views: list[memoryview]) -> bytes:
    length = sum(v.nbytes for v in views)
    if length > MAX_PAYLOAD:
        raise ProtocolError(f"frame payload of {length} bytes exceeds {MAX_PAYLOAD}")
    blank = HEADER.pack(MAGIC, VERSION, int(kind), stripe, sequence, offset, length, 0)
    return HEADER.pack(MAGIC, VERSION, int(kind), stripe, sequence, offset, length, _checksum(blank, views)[0])


def control_payload(obj: Any) -> bytes:
    """Return a control frame's JSON payload."""
    data = json.dumps(obj, separators=(",", ":")).encode()
    if len(data) > MAX_CONTROL_PAYLOAD:
        raise ProtocolError("control frame payload too large")
    return data


class Conn(Protocol):
    """A reliable byte stream a channel frames: a TCP socket or a UDT socket."""

    def send_parts(self, parts: list[memoryview | bytes]) -> None:
        """Send every byte of ``parts`` in order, without copying them (any number of parts)."""

    def recv_into(self, view: memoryview) -> int:
        """Receive up to ``len(view)`` bytes into ``view``; return 0 at end of stream."""

    def close(self) -> None:
        """Close the connection (idempotent)."""


def send_frame(conn: Conn, kind: Kind, stripe: int, sequence: int, offset: int, payload: Any = b"") -> int:
    """Send one frame without copying ``payload`` (bytes-like, or a message in ``parts``); return the bytes sent."""
    views = payload_views(payload)
    header = _header(kind, stripe, sequence, offset, views)
    conn.send_parts([header, *views])
    return len(header) + sum(v.nbytes for v in views)


def _recv_exact(conn: Conn, view: memoryview) -> None:
    got = 0
    while got < view.nbytes:
        n = conn.recv_into(view[got:])
        if n == 0:
            raise TransportError("the data connection closed in the middle of a frame")
        got += n


@dataclass(frozen=True, slots=True)
class Header:
    """A received, checked frame header (the payload not yet read)."""

    kind: Kind
    stripe: int
    sequence: int
    offset: int
    length: int
    checksum: int
    blank: bytes


def recv_header(conn: Conn, *, max_payload: int = MAX_PAYLOAD) -> Header | None:
    """Return the next frame header, or None on a clean end of stream between frames.

    Raises ProtocolError for anything that is not a valid dstp frame header.
    """
    raw = bytearray(HEADER.size)
    view = memoryview(raw)
    first = conn.recv_into(view)
    if first == 0:
        return None
    if first < HEADER.size:
        _recv_exact(conn, view[first:])
    magic, version, kind, stripe, sequence, offset, length, checksum = HEADER.unpack(raw)
    if magic != MAGIC:
        raise ProtocolError("not a dstp data connection (bad magic)")
    if version != VERSION:
        raise ProtocolError(f"data frame version {version}; this side speaks version {VERSION}")
    try:
        kind = Kind(kind)
    except ValueError:
        raise ProtocolError(f"unknown frame kind {kind}") from None
    limit = max_payload if kind == Kind.DATA else min(max_payload, MAX_CONTROL_PAYLOAD)
    if length > limit:
        raise ProtocolError(f"{kind.name} frame of {length} bytes exceeds the limit of {limit}")
    blank = HEADER.pack(magic, version, int(kind), stripe, sequence, offset, length, 0)
    return Header(kind, stripe, sequence, offset, length, checksum, blank)


def recv_payload(conn: Conn, header: Header, into: memoryview | None = None) -> memoryview:
    """Return the payload of ``header``, received into ``into`` (exact size) or a fresh buffer.

    Raises IntegrityError when the checksum does not match.
    """
    return recv_checked(conn, header, into)[0]


def recv_checked(conn: Conn, header: Header, into: memoryview | None = None) -> tuple[memoryview, int]:
    """Return (payload, CRC-32C of the payload) of ``header``; IntegrityError if the frame is corrupt."""
    payload = into if into is not None else memoryview(bytearray(header.length))
    if payload.nbytes != header.length:
        raise ProtocolError("payload buffer of the wrong size")
    if header.length:
        _recv_exact(conn, payload)
    frame_crc, body_crc = _checksum(header.blank, [payload])
    if frame_crc != header.checksum:
        raise IntegrityError(
            f"checksum mismatch in {header.kind.name} frame {header.sequence} on stripe {header.stripe}: "
            "the data was corrupted in transit"
        )
    return payload, body_crc


def recv_frame(conn: Conn, *, max_payload: int = MAX_PAYLOAD) -> Frame | None:
    """Return the next whole frame, or None on a clean end of stream between frames."""
    header = recv_header(conn, max_payload=max_payload)
    if header is None:
        return None
    payload = recv_payload(conn, header)
    return Frame(header.kind, header.stripe, header.sequence, header.offset, payload)

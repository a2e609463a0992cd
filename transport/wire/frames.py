"""The data-channel frame, defined once for striped TCP and UDT.

Every byte on a data connection belongs to a frame: a 32-byte header, then
``length`` bytes of payload.

| offset | size | field    | meaning |
|-------:|-----:|----------|---------|
| 0      | 4    | magic    | ``b"DSTP"`` |
| 4      | 1    | version  | 1 |
| 5      | 1    | kind     | HELLO, DATA, END, ACK, ERROR, BYE (below); + 0x80 when sealed |
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
  (server → client, only on a connection whose HELLO said ``"keep": true``): the
  server kept the connection; its next frame from the client is a new HELLO.

Sealed transfers (the offer's ``cipher`` is ``aes-256-gcm``: the server runs
TLS on its control plane). Every DATA, END, ACK and BYE frame of the transfer
is *sealed*: its kind byte has 0x80 added, and its payload is

    nonce (12 random bytes) ‖ AES-256-GCM ciphertext of the plaintext payload ‖ tag (16 bytes)

with the 32-byte header (checksum field 0) as associated data, so the header
cannot be edited either; ``length`` counts the sealed payload (plaintext + 28)
and the checksum covers it as sent, so corruption in transit is still told
apart (``integrity_error``, resume) from a forgery (a tag that does not
verify: also ``integrity_error``). The key is HKDF-SHA256 of the ticket key
(transport/server/tickets.py ``seal_key``), which only the client that asked
received, over TLS. HELLO and ERROR frames are never sealed: HELLO carries
what finds the transfer and proves the client (its ``proof``), and an ERROR
may come from a server that never learnt which transfer a connection wanted.
"""

from __future__ import annotations

import enum
import json
import mmap
import os
import struct
import sys
import threading
from dataclasses import dataclass
from typing import Any, Protocol

from dstp.errors import IntegrityError, ProtocolError, TransportError
from dstp.transport import native
from dstp.transport.wire.crc import crc32c

__all__ = [
    "Conn",
    "HEADER",
    "MAGIC",
    "MAX_CONTROL_PAYLOAD",
    "MAX_PAYLOAD",
    "VERSION",
    "CIPHERS",
    "Frame",
    "Header",
    "Kind",
    "SEALED",
    "SEAL_OVERHEAD",
    "Seal",
    "encode_header",
    "fresh_buffer",
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
#: Added to the kind byte of a sealed frame.
SEALED = 0x80
NONCE_BYTES = 12
TAG_BYTES = 16
#: Bytes a sealed payload has beyond its plaintext: the nonce and the tag.
SEAL_OVERHEAD = NONCE_BYTES + TAG_BYTES
#: The ciphers a transfer may be sealed with (``ChannelOffer.cipher``).
CIPHERS = ("aes-256-gcm",)


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


class Seal:
    """AES-256-GCM over the frames of one transfer (``key``: transport/server/tickets.py ``seal_key``)."""

    cipher = "aes-256-gcm"

    def __init__(self, key: bytes) -> None:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self._aead = AESGCM(key)

    def seal(self, blank_header: bytes, views: list[memoryview]) -> bytearray:
        """Return nonce ‖ ciphertext ‖ tag of the payload ``views``, authenticating ``blank_header`` too."""
        data: Any = views[0] if len(views) == 1 else b"".join(views)
        size = sum(v.nbytes for v in views)
        out = bytearray(NONCE_BYTES + size + TAG_BYTES)
        nonce = os.urandom(NONCE_BYTES)
        out[:NONCE_BYTES] = nonce
        self._aead.encrypt_into(nonce, data, blank_header, memoryview(out)[NONCE_BYTES:])
        return out

    def open_into(self, blank_header: bytes, sealed: memoryview, into: memoryview) -> None:
        """Decrypt a sealed payload into ``into`` (its plaintext size); IntegrityError if it does not verify."""
        from cryptography.exceptions import InvalidTag

        try:
            self._aead.decrypt_into(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], blank_header, into)
        except InvalidTag as exc:
            raise IntegrityError("a sealed frame failed authentication: it was altered in transit, or not sent "
                                 "by the server of this transfer") from exc


def _sealable(kind: Kind) -> bool:
    """HELLO and ERROR frames are never sealed (see the module docstring)."""
    return kind not in (Kind.HELLO, Kind.ERROR)


def payload_views(payload: Any) -> list[memoryview]:
    """Return a payload's bytes as views, without copying: one buffer, or a message held in ``parts``.

    A query's record batch arrives as an IPC message in parts (its metadata,
    then the batch's own body buffers: dstp.transport.wire.ipc.IpcMessage); a file
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


def _checksum(header: bytes, views: list[memoryview], body: int | None = None) -> tuple[int, int]:
    """Return (frame checksum, CRC-32C of the payload alone); ``body``: the payload's, when known.

    The payload comes first so that its own CRC falls out of the same pass: a
    download combines the blocks' CRCs into the whole file's (transport/wire/crc.py).
    """
    if body is None:
        body = 0
        for view in views:
            body = crc32c(view, body)
    return crc32c(header, body), body


def encode_header(kind: Kind, stripe: int, sequence: int, offset: int, payload: Any) -> bytes:
    """Return the 32-byte header of a frame carrying ``payload`` (bytes-like, or a message in ``parts``)."""
    return _header(kind, stripe, sequence, offset, payload_views(payload))


def _header(kind: Kind, stripe: int, sequence: int, offset: int, views: list[memoryview],
            body: int | None = None) -> bytes:
    length = sum(v.nbytes for v in views)
    if length > MAX_PAYLOAD:
        raise ProtocolError(f"frame payload of {length} bytes exceeds {MAX_PAYLOAD}")
    blank = HEADER.pack(MAGIC, VERSION, int(kind), stripe, sequence, offset, length, 0)
    return HEADER.pack(MAGIC, VERSION, int(kind), stripe, sequence, offset, length,
                       _checksum(blank, views, body)[0])


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


def send_frame(conn: Conn, kind: Kind, stripe: int, sequence: int, offset: int, payload: Any = b"",
               seal: Seal | None = None, *, file: Any = None, body_crc: int | None = None) -> int:
    """Send one frame without copying ``payload`` (bytes-like, or a message in ``parts``); return the bytes sent.

    With ``seal`` a DATA, END, ACK or BYE frame is sealed (one copy: the ciphertext). ``file``: the
    payload is the bytes at ``offset`` of the file this handle holds (transport/native.py
    ``file_handle``), which the native path sends with ``sendfile``.
    """
    views = payload_views(payload)
    fd = native.fd_of(conn) if seal is None or not _sealable(kind) else -1
    if fd >= 0:
        size = sum(v.nbytes for v in views)
        if size > MAX_PAYLOAD:
            raise ProtocolError(f"frame payload of {size} bytes exceeds {MAX_PAYLOAD}")
        return native.send_frame(fd, int(kind), stripe, sequence, offset, views, MAX_PAYLOAD, file, body_crc)
    if seal is not None and _sealable(kind):
        size = sum(v.nbytes for v in views)
        if size > MAX_PAYLOAD:
            raise ProtocolError(f"frame payload of {size} bytes exceeds {MAX_PAYLOAD}")
        code = int(kind) | SEALED
        blank = HEADER.pack(MAGIC, VERSION, code, stripe, sequence, offset, size + SEAL_OVERHEAD, 0)
        sealed = seal.seal(blank, views)
        body = [memoryview(sealed)]
        header = HEADER.pack(MAGIC, VERSION, code, stripe, sequence, offset, len(sealed), _checksum(blank, body)[0])
        conn.send_parts([header, *body])
        return len(header) + len(sealed)
    header = _header(kind, stripe, sequence, offset, views, body_crc)
    conn.send_parts([header, *views])
    return len(header) + sum(v.nbytes for v in views)


#: Payloads up to this size are received into an ordinary buffer; larger ones into pages taken as bytes arrive.
LAZY_BUFFER_BYTES = 256 * 2**10
#: Large receive buffers are anonymous mappings rounded up to this size, so that they can be reused.
MAPPING_GRAIN = 2**20
#: At most this many bytes of mappings are kept for reuse per process (idle ones stay committed).
RECEIVE_POOL_BYTES = 128 * 2**20


class ReceivePool:
    """Anonymous mappings for large payloads, handed out again once nothing refers to them.

    A fresh mapping costs a page fault per 4 KiB the payload fills: 279,000 of them, 1.4 s of system
    time on this VM, for a 1.1 GB result. A mapping here is reused only when the pool holds the sole
    reference to it: every memoryview, slice, Arrow buffer or record batch over its memory keeps a
    reference to the mmap object (a buffer export does), so a mapping still in use — a batch the
    user kept, a slice held for reassembly — is never written into again. Up to ``max_bytes`` of
    mappings are pooled; beyond that, payloads get unpooled mappings as before.
    """

    def __init__(self, max_bytes: int = RECEIVE_POOL_BYTES, grain: int = MAPPING_GRAIN) -> None:
        self.max_bytes = max_bytes
        self.grain = grain
        self._maps: dict[int, list[mmap.mmap]] = {}
        self._bytes = 0
        self._lock = threading.Lock()
        #: Mappings created and handed out again (the tests and benchmarks read these).
        self.created = 0
        self.reused = 0

    def take(self, length: int) -> memoryview:
        """Return a writable buffer of ``length`` bytes over a mapping nothing else refers to."""
        size = -(-length // self.grain) * self.grain
        with self._lock:
            maps = self._maps.setdefault(size, [])
            for i in range(len(maps)):
                # References: the list's, and getrefcount's argument. Anything more is a user of its memory.
                if sys.getrefcount(maps[i]) == 2:
                    self.reused += 1
                    return memoryview(maps[i])[:length]
            mapping = mmap.mmap(-1, size)
            self.created += 1
            if self._bytes + size <= self.max_bytes:
                maps.append(mapping)
                self._bytes += size
        return memoryview(mapping)[:length]


_RECEIVE_POOL = ReceivePool()


def fresh_buffer(length: int) -> memoryview:
    """Return a writable buffer of ``length`` bytes whose memory is committed only as it is written.

    A header may claim up to 64 MiB before a byte of its payload arrives; an anonymous mapping costs
    address space, not memory, until the payload fills it (a bytearray would be zeroed, every page of it,
    at once: sixteen such headers held a gigabyte). Mappings are reused once free (:class:`ReceivePool`).
    """
    if length <= LAZY_BUFFER_BYTES:
        return memoryview(bytearray(length))
    return _RECEIVE_POOL.take(length)


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
    #: Whether the payload is sealed (kind byte + 0x80).
    sealed: bool = False

    @property
    def payload_length(self) -> int:
        """Bytes of the payload once opened (``length`` less the nonce and tag of a sealed frame)."""
        return self.length - SEAL_OVERHEAD if self.sealed else self.length


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
    code, sealed = kind, bool(kind & SEALED)
    try:
        kind = Kind(code & ~SEALED)
    except ValueError as exc:
        raise ProtocolError(f"unknown frame kind {code}") from exc
    if sealed and not _sealable(kind):
        raise ProtocolError(f"{kind.name} frames are never sealed")
    limit = max_payload if kind == Kind.DATA else min(max_payload, MAX_CONTROL_PAYLOAD)
    if sealed:
        limit += SEAL_OVERHEAD
        if length < SEAL_OVERHEAD:
            raise ProtocolError(f"sealed {kind.name} frame of {length} bytes is shorter than its nonce and tag")
    if length > limit:
        raise ProtocolError(f"{kind.name} frame of {length} bytes exceeds the limit of {limit}")
    blank = HEADER.pack(magic, version, code, stripe, sequence, offset, length, 0)
    return Header(kind, stripe, sequence, offset, length, checksum, blank, sealed)


def recv_payload(conn: Conn, header: Header, into: memoryview | None = None, seal: Seal | None = None) -> memoryview:
    """Return the payload of ``header``, received into ``into`` (exact size) or a fresh buffer.

    Raises IntegrityError when the checksum does not match (or a sealed payload does not verify).
    """
    return recv_checked(conn, header, into, seal)[0]


def recv_checked(conn: Conn, header: Header, into: memoryview | None = None,
                 seal: Seal | None = None) -> tuple[memoryview, int]:
    """Return (payload, CRC-32C of the payload) of ``header``; IntegrityError if the frame is corrupt.

    ``seal``: the transfer is sealed, so DATA, END, ACK and BYE frames must be, and are opened here
    (into ``into``, of the plaintext's size); without it a sealed frame is refused.
    """
    if header.sealed != (seal is not None and _sealable(header.kind)):
        what = "a plaintext" if seal is not None else "a sealed"
        raise ProtocolError(f"{what} {header.kind.name} frame in a transfer that is "
                            f"{'sealed' if seal is not None else 'not sealed'}")
    if header.sealed:
        assert seal is not None
        raw = fresh_buffer(header.length)
        _recv_exact(conn, raw)
        _verify(header, raw)
        payload = into if into is not None else fresh_buffer(header.payload_length)
        if payload.nbytes != header.payload_length:
            raise ProtocolError("payload buffer of the wrong size")
        seal.open_into(header.blank, raw, payload)
        return payload, crc32c(payload)
    payload = into if into is not None else fresh_buffer(header.length)
    if payload.nbytes != header.length:
        raise ProtocolError("payload buffer of the wrong size")
    fd = native.fd_of(conn) if header.length else -1
    if fd >= 0:  # received and checksummed in one pass, GIL released
        return payload, native.recv_checked(fd, header, payload)
    if header.length:
        _recv_exact(conn, payload)
    return payload, _verify(header, payload)


def _verify(header: Header, payload: memoryview) -> int:
    """Check the frame's checksum over ``payload`` as received; return the payload's own CRC-32C."""
    frame_crc, body_crc = _checksum(header.blank, [payload])
    if frame_crc != header.checksum:
        raise IntegrityError(
            f"checksum mismatch in {header.kind.name} frame {header.sequence} on stripe {header.stripe}: "
            "the data was corrupted in transit"
        )
    return body_crc


def recv_frame(conn: Conn, *, max_payload: int = MAX_PAYLOAD, seal: Seal | None = None) -> Frame | None:
    """Return the next whole frame, or None on a clean end of stream between frames (``seal``: sealed transfer)."""
    header = recv_header(conn, max_payload=max_payload)
    if header is None:
        return None
    payload = recv_payload(conn, header, seal=seal)
    return Frame(header.kind, header.stripe, header.sequence, header.offset, payload)

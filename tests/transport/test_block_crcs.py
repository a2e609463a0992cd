"""A file block's CRC-32C, computed once with the whole range's and carried by the frame that sends it.

The service checksums a requested range when the file is opened; the same pass now yields each block's
CRC-32C, and the server's frames carry those values instead of reading every block a second time. The
receiver still checks every frame against its bytes, so a value that no longer fits them is caught.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dstp.catalog.registry import Catalog
from dstp.errors import IntegrityError
from dstp.service import DstpService
from dstp.settings import Settings
from dstp.transport import native
from dstp.transport.server.sources import FileSource
from dstp.transport.wire.crc import block_crcs_of_file
from dstp.transport.wire.frames import Kind, recv_frame, send_frame
from dstp.transport.wire.tcp import TcpConn

FILE = "ccm3_1990-01.nc"
BLOCK = 256 * 1024


@settings(max_examples=60, deadline=None)
@given(data=st.binary(min_size=0, max_size=5000), offset=st.integers(0, 5000), length=st.integers(0, 5000),
       block=st.integers(1, 1500))
def test_block_crcs_of_file_are_the_library_s(tmp_path_factory, data, offset, length, block) -> None:
    path = tmp_path_factory.mktemp("crc") / "f.bin"
    path.write_bytes(data)
    offset = min(offset, len(data))
    length = min(length, len(data) - offset)
    whole, blocks = block_crcs_of_file(path, offset, length, block)
    piece = data[offset:offset + length]
    assert whole == crc32c.crc32c(piece)
    assert blocks == tuple(crc32c.crc32c(piece[i:i + block]) for i in range(0, length, block))


def _exchange(payload: bytes, **kwargs) -> bytes:
    """Send one DATA frame from one end of a socket pair (``kwargs`` to send_frame); return what arrives."""
    a, b = socket.socketpair()
    try:
        sender = threading.Thread(target=send_frame, args=(TcpConn(a), Kind.DATA, 0, 1, 0, memoryview(payload)),
                                  kwargs=kwargs)
        sender.start()
        try:
            frame = recv_frame(TcpConn(b))
        finally:
            sender.join()
        assert frame is not None
        return bytes(frame.payload)
    finally:
        a.close()
        b.close()


PAYLOAD = bytes(range(256)) * 700


def test_a_frame_carries_a_known_crc_and_arrives_intact() -> None:
    assert _exchange(PAYLOAD, body_crc=crc32c.crc32c(PAYLOAD)) == PAYLOAD


def test_a_known_crc_that_does_not_fit_the_bytes_is_caught_by_the_receiver() -> None:
    # what a block changed on disk after the service checksummed it would send
    with pytest.raises(IntegrityError, match="checksum mismatch in DATA frame 1"):
        _exchange(PAYLOAD, body_crc=crc32c.crc32c(PAYLOAD) ^ 1)


@pytest.mark.skipif(not native.available(), reason="the native extension was not built (no C++ compiler)")
def test_the_native_sender_takes_a_known_crc_without_reading_the_payload(tmp_path: Path) -> None:
    # The frame's bytes leave by sendfile from the file; the views handed beside it hold zeros. The
    # receiver's check passes only if the frame's checksum came from body_crc, not from the views.
    path = tmp_path / "block.bin"
    path.write_bytes(PAYLOAD)
    zeros = memoryview(bytes(len(PAYLOAD)))
    a, b = socket.socketpair()
    with open(path, "rb") as f:
        handle = native.file_handle(f.fileno())
    try:
        sender = threading.Thread(target=native.send_frame, args=(a.fileno(), int(Kind.DATA), 0, 1, 0, [zeros],
                                                                  len(PAYLOAD), handle, crc32c.crc32c(PAYLOAD)))
        sender.start()
        try:
            frame = recv_frame(TcpConn(b))
        finally:
            sender.join()
        assert frame is not None and bytes(frame.payload) == PAYLOAD
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("offset, length", [(0, -1), (1000, 550_000), (12345, 1)])
def test_the_service_gives_each_block_s_crc_with_the_range_s(catalog: Catalog, catalog_root: Path, offset: int,
                                                            length: int) -> None:
    service = DstpService(catalog, Settings(catalog_root=catalog.root, block_bytes=BLOCK))
    request = service.files.open("ccm3", FILE, offset=offset, length=length).request
    data = (catalog_root / "ccm3" / FILE).read_bytes()
    piece = data[offset:] if length < 0 else data[offset:offset + length]
    block = BLOCK
    assert request.crc32c == crc32c.crc32c(piece)
    assert request.block_bytes == block
    assert request.block_crcs == tuple(crc32c.crc32c(piece[i:i + block]) for i in range(0, len(piece), block))


def test_a_file_source_offers_a_known_crc_only_for_the_block_it_was_computed_for(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(PAYLOAD)
    source = FileSource(path, [(0, len(PAYLOAD))], 4096, block_crcs={0: (4096, 7), 4096: (4096, 9)})
    assert source.known_crc(0, 4096) == 7 and source.known_crc(4096, 4096) == 9
    assert source.known_crc(0, 100) is None  # a resumed range that ends inside the block
    assert source.known_crc(8192, 4096) is None

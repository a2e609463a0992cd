"""The native data path (dstp.transport._native): the same CRC, the same frames, the same resume, clear failures.

Every check compares the native functions with an independent oracle: the ``crc32c``
package, the Python frame encoder of transport/wire/frames.py, the source bytes.
"""

from __future__ import annotations

import os
import random
import socket
import threading
from pathlib import Path
from typing import Any

import crc32c as crc32c_package
import pytest

from dstp.errors import IntegrityError, TransportError
from dstp.transport import native
from dstp.transport.client.files import FileSink, RemoteFile, STATE_SUFFIX, partial_path
from dstp.transport.wire.frames import Kind, encode_header, payload_views, recv_header, send_frame
from dstp.transport.wire.tcp import TcpConn

pytestmark = pytest.mark.skipif(not native.available(), reason=f"native data path {native.reason()}")


@pytest.fixture(autouse=True)
def native_on(monkeypatch) -> None:
    """Switch the opt-in native path on in this process (both ends of the in-process server too)."""
    monkeypatch.setattr(native, "_ENABLED", True)

NAME = "ccm3_1990-01.nc"


@pytest.fixture()
def pair() -> Any:
    a, b = socket.socketpair()
    yield TcpConn(a), TcpConn(b)
    for s in (a, b):
        s.close()


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    got = bytearray()
    while len(got) < n:
        chunk = sock.recv(n - len(got))
        if not chunk:
            break
        got += chunk
    return bytes(got)


# -- CRC-32C ----------------------------------------------------------------------------


@pytest.mark.parametrize("hardware", [True, False])
def test_crc32c_equals_the_package_on_random_data(hardware: bool) -> None:
    from dstp.transport import _native

    rng = random.Random(7)
    data = rng.randbytes(200_000)
    # lengths around the 8-byte words and the 3 x 256 / 3 x 8192 interleaved blocks, odd alignments
    for length in (0, 1, 7, 8, 9, 767, 768, 769, 24575, 24576, 24577, 100_003):
        for start in (0, 1, 5):
            piece = memoryview(data)[start:start + length]
            seed = rng.getrandbits(32)
            assert _native.crc32c(piece, 0, hardware) == crc32c_package.crc32c(piece)
            assert _native.crc32c(piece, seed, hardware) == crc32c_package.crc32c(piece, seed)


# -- frames -----------------------------------------------------------------------------


@pytest.mark.parametrize("parts", [[b""], [b"x" * 5], [os.urandom(100_000)], [b"meta", os.urandom(70_001), b"tail"]])
def test_frame_bytes_equal_the_python_encoder(pair, parts) -> None:
    sender, receiver = pair
    assert native.fd_of(sender) >= 0
    message = type("Message", (), {"parts": parts})()  # an IPC message's shape: a payload in parts
    payload: Any = message if len(parts) > 1 else parts[0]
    expected = encode_header(Kind.DATA, 3, 41, 1 << 33, payload) + b"".join(bytes(v) for v in payload_views(payload))
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(_read_exactly(receiver.sock, len(expected))))
    reader.start()
    sent = send_frame(sender, Kind.DATA, 3, 41, 1 << 33, payload)
    reader.join()
    assert sent == len(expected)
    assert got == [expected]


def test_file_block_by_sendfile_equals_the_python_encoder(pair, tmp_path) -> None:
    sender, receiver = pair
    data = os.urandom(300_000)
    path = tmp_path / "blocks.bin"
    path.write_bytes(data)
    with open(path, "rb") as f:
        handle = native.file_handle(f.fileno())
    # the handle keeps a descriptor of its own: the file object above is closed already
    block = memoryview(data)[123_456:223_456]
    expected = encode_header(Kind.DATA, 0, 7, 123_456, block) + bytes(block)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(_read_exactly(receiver.sock, len(expected))))
    reader.start()
    sent = send_frame(sender, Kind.DATA, 0, 7, 123_456, block, file=handle)
    reader.join()
    assert sent == len(expected)
    assert got == [expected]


def test_received_payload_and_crc_match(pair) -> None:
    sender, receiver = pair
    payload = os.urandom(1_000_003)
    threading.Thread(target=sender.sock.sendall, args=(encode_header(Kind.DATA, 0, 0, 0, payload) + payload,)).start()
    header = recv_header(receiver)
    assert header is not None
    into = memoryview(bytearray(header.length))
    assert native.recv_checked(native.fd_of(receiver), header, into) == crc32c_package.crc32c(payload)
    assert bytes(into) == payload


def test_a_corrupted_payload_is_an_integrity_error(pair) -> None:
    sender, receiver = pair
    payload = bytearray(os.urandom(50_000))
    header_bytes = encode_header(Kind.DATA, 0, 9, 0, payload)
    payload[25_000] ^= 0x01
    threading.Thread(target=sender.sock.sendall, args=(header_bytes + payload,)).start()
    header = recv_header(receiver)
    assert header is not None
    with pytest.raises(IntegrityError, match="checksum mismatch in DATA frame 9"):
        native.recv_checked(native.fd_of(receiver), header, memoryview(bytearray(header.length)))


def test_a_short_connection_is_a_transport_error(pair) -> None:
    sender, receiver = pair
    payload = os.urandom(80_000)
    sender.sock.sendall(encode_header(Kind.DATA, 0, 0, 0, payload) + payload[:30_000])
    sender.sock.shutdown(socket.SHUT_WR)
    header = recv_header(receiver)
    assert header is not None
    with pytest.raises(TransportError, match="closed in the middle of a frame"):
        native.recv_checked(native.fd_of(receiver), header, memoryview(bytearray(header.length)))


def test_a_wrapped_connection_keeps_the_python_path(pair) -> None:
    """A wrapper that forwards attributes (a fault injector, a byte counter) must see every byte itself."""

    class Counting:
        def __init__(self, inner: TcpConn) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

    sender, _ = pair
    assert native.fd_of(Counting(sender)) == -1
    sender.sock.settimeout(5.0)  # a socket with a timeout (the handshake) stays with Python too
    assert native.fd_of(sender) == -1


# -- blocks into place: resume, broken connections ----------------------------------------


def _remote(data: bytes, offset: int, length: int) -> RemoteFile:
    return RemoteFile("ds", "f.nc", len(data), 1, offset, length, crc32c_package.crc32c(data[offset:offset + length]))


def _send_block(conn: TcpConn, data: bytes, seq: int, offset: int, size: int) -> threading.Thread:
    """Send a block from a thread of its own (a socket pair buffers less than a block)."""
    sender = threading.Thread(target=send_frame, args=(conn, Kind.DATA, 0, seq, offset,
                                                      memoryview(data)[offset:offset + size]))
    sender.start()
    return sender


def _open_sink(out: Path, data: bytes) -> FileSink:
    """A sink for the whole of ``data``, its partial file open."""
    sink = FileSink(out, _remote(data, 0, len(data)))
    sink.open()
    return sink


def _receive_block(sink: FileSink, conn: TcpConn, seq: int) -> None:
    header = recv_header(conn)
    assert header is not None
    sink.block_done(sink.receive_in_place(native.fd_of(conn), seq, header))


def test_blocks_land_in_place_and_a_resume_fetches_only_the_rest(pair, tmp_path) -> None:
    sender, receiver = pair
    data = os.urandom(1_100_000)
    offset, block = 1000, 250_000  # a byte range of the file, in four blocks
    remote = _remote(data, offset, 4 * block)
    out = tmp_path / "range.bin"

    first = FileSink(out, remote)
    first.open()
    for seq in (0, 2):  # the first session gets two blocks, then dies
        sending = _send_block(sender, data, seq, offset + seq * block, block)
        _receive_block(first, receiver, seq)
        sending.join()
    first.save_state(force=True)
    first.close()
    assert not out.exists()

    second = FileSink(out, remote)
    assert second.load_state() == [(offset, offset + block), (offset + 2 * block, offset + 3 * block)]
    assert second.missing() == [(offset + block, block), (offset + 3 * block, block)]
    second.open()
    for seq, (start, size) in enumerate(second.missing()):
        sending = _send_block(sender, data, seq, start, size)
        _receive_block(second, receiver, seq)
        sending.join()
    second.finish()
    assert out.read_bytes() == data[offset:offset + 4 * block]


def test_a_broken_connection_leaves_no_complete_looking_output(pair, tmp_path) -> None:
    sender, receiver = pair
    data = os.urandom(600_000)
    out = tmp_path / "broken.bin"
    sink = _open_sink(out, data)
    sending = _send_block(sender, data, 0, 0, 300_000)
    _receive_block(sink, receiver, 0)
    sending.join()
    whole = memoryview(data)[300_000:]
    sender.sock.sendall(encode_header(Kind.DATA, 0, 1, 300_000, whole) + bytes(whole[:100_000]))
    sender.sock.shutdown(socket.SHUT_WR)  # the server goes away mid-block
    header = recv_header(receiver)
    assert header is not None
    with pytest.raises(TransportError, match="closed in the middle of a frame"):
        sink.receive_in_place(native.fd_of(receiver), 1, header)
    sink.save_state(force=True)
    sink.close()
    with pytest.raises(IntegrityError, match="incomplete"):
        sink.finish()
    assert not out.exists()
    assert sink.done == [(0, 300_000)]  # the broken block is not claimed: a resume fetches it again
    assert partial_path(out).exists() and (tmp_path / ("broken.bin" + STATE_SUFFIX)).exists()


def test_a_corrupted_block_is_neither_written_nor_claimed(pair, tmp_path) -> None:
    sender, receiver = pair
    data = os.urandom(300_000)
    out = tmp_path / "corrupt.bin"
    sink = _open_sink(out, data)
    damaged = bytearray(data)
    damaged[123_456] ^= 0x40  # one bit flipped in transit, after the server's checksum
    sending = threading.Thread(target=sender.sock.sendall,
                               args=(encode_header(Kind.DATA, 0, 0, 0, memoryview(data)) + bytes(damaged),))
    sending.start()
    header = recv_header(receiver)
    assert header is not None
    with pytest.raises(IntegrityError, match="corrupted in transit"):
        sink.receive_in_place(native.fd_of(receiver), 0, header)
    sending.join()
    sink.close()
    assert sink.done == []
    assert partial_path(out).read_bytes() == bytes(len(data))  # the partial file still holds only its holes


def test_a_striped_download_runs_natively_end_to_end(data_client, catalog_root, tmp_path) -> None:
    out = tmp_path / "copy.nc"
    summary = data_client.get("ccm3", NAME, out, transport="striped", streams=3)
    assert out.read_bytes() == (catalog_root / "ccm3" / NAME).read_bytes()
    assert summary["data_path"].startswith("native"), summary["data_path"]


DAEMON_AT_EXIT = """
import sys, threading
from dstp.transport import native
data = bytearray(48 << 20)
busy = threading.Event()
def spin():
    while True:
        busy.set()
        native.crc32c(data)  # ~10 ms with the GIL released
threading.Thread(target=spin, daemon=True).start()
busy.wait()
print("main done", flush=True)
"""


def test_a_daemon_thread_inside_a_native_call_does_not_abort_the_exit() -> None:
    # CPython <= 3.13 ends such a thread with pthread_exit when it wants the GIL back during
    # finalization; unwinding through pybind11's frames called std::terminate and the process
    # died with status 134 after its work was done (a finished `dstp get` and a user script did).
    import subprocess
    import sys

    for _ in range(5):
        done = subprocess.run([sys.executable, "-c", DAEMON_AT_EXIT], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr[-500:]
        assert done.stdout == "main done\n" and "terminate" not in done.stderr

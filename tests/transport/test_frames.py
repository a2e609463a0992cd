"""The frame: one header layout, checked on every read."""

from __future__ import annotations

import socket
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dstp.errors import IntegrityError, ProtocolError, TransportError
from dstp.transport.wire.frames import HEADER, MAX_PAYLOAD, Kind, encode_header, recv_frame, send_frame
from dstp.transport.wire.tcp import TcpConn


@pytest.fixture()
def pair():
    a, b = socket.socketpair()
    yield TcpConn(a), TcpConn(b)
    a.close()
    b.close()


def test_round_trip(pair) -> None:
    a, b = pair
    payload = bytes(range(256)) * 1000  # larger than a socket buffer: sent from another thread
    sender = threading.Thread(target=send_frame, args=(a, Kind.DATA, 3, 17, 4096, memoryview(payload)))
    sender.start()
    frame = recv_frame(b)
    sender.join()
    assert (frame.kind, frame.stripe, frame.sequence, frame.offset) == (Kind.DATA, 3, 17, 4096)
    assert bytes(frame.payload) == payload
    assert HEADER.size == 32


@settings(max_examples=200, deadline=None)
@given(data=st.binary(min_size=1, max_size=2000), position=st.integers(0, 10_000), bit=st.integers(0, 7))
def test_any_flipped_bit_is_detected(data, position, bit) -> None:
    header = encode_header(Kind.DATA, 1, 2, 3, data)
    wire = bytearray(header + data)
    position %= len(wire)
    wire[position] ^= 1 << bit
    a, b = socket.socketpair()
    try:
        a.sendall(wire)
        a.shutdown(socket.SHUT_WR)
        with pytest.raises((IntegrityError, ProtocolError, TransportError)):
            frame = recv_frame(TcpConn(b))
            # a flipped length may still parse; then the stream ends early or the checksum fails
            if frame is not None:
                recv_frame(TcpConn(b))
                raise IntegrityError("undetected")
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize(
    "mutate, error, words",
    [
        (lambda h: b"XXXX" + h[4:], ProtocolError, "magic"),
        (lambda h: h[:4] + b"\x09" + h[5:], ProtocolError, "version"),
        (lambda h: h[:5] + b"\x63" + h[6:], ProtocolError, "kind"),
        (lambda h: HEADER.pack(b"DSTP", 1, 2, 0, 0, 0, MAX_PAYLOAD + 1, 0), ProtocolError, "exceeds"),
        (lambda h: HEADER.pack(b"DSTP", 1, 1, 0, 0, 0, 2 * 2**20, 0), ProtocolError, "exceeds"),
    ],
)
def test_bad_headers_are_refused(pair, mutate, error, words) -> None:
    a, b = pair
    header = encode_header(Kind.DATA, 0, 0, 0, b"x")
    a.sock.sendall(mutate(header) + b"x")
    with pytest.raises(error, match=words):
        recv_frame(b)


def test_truncated_frame_is_an_error(pair) -> None:
    a, b = pair
    header = encode_header(Kind.DATA, 0, 0, 0, b"0123456789")
    a.sock.sendall(header + b"01234")
    a.sock.shutdown(socket.SHUT_WR)
    with pytest.raises(TransportError, match="middle of a frame"):
        recv_frame(b)


def test_clean_end_between_frames(pair) -> None:
    a, b = pair
    a.sock.shutdown(socket.SHUT_WR)
    assert recv_frame(b) is None

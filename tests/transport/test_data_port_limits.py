"""The data port's limits (issue 13): one deadline for a whole HELLO, a cap per source address, memory
reserved only as bytes arrive.

Findings reproduced with raw sockets against a real server: 520 connections trickling a HELLO one byte
every 5 s locked out every striped transfer (the hello timeout was per ``recv``); DATA headers claiming
64 MiB reserved 64 MiB each until close (+1 GiB RSS with 16 stripes). Attackers connect from
127.0.0.2 (loopback is a /8 on Linux), the legitimate client from 127.0.0.1.
"""

from __future__ import annotations

import json
import shutil
import socket
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest

import dstp
from attacks import TricklingHellos, hello_frame, host_port
from clock import Clock
from dstp.server import DstpServer
from dstp.settings import Settings
from dstp.transport.wire.frames import HEADER, Kind, MAGIC, MAX_PAYLOAD, VERSION, fresh_buffer, recv_frame, send_frame
from dstp.transport.wire.tcp import TcpConn
from dstp.transport.wire.proofs import hello_proof

TINY = "select temperature from ccm3 where lat > 80 limit 3"


def eventually(condition: Callable[[], bool], what: str, seconds: float = 15.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


@pytest.fixture()
def data_server(tmp_path: Path, catalog_root: Path) -> Iterator[tuple[DstpServer, Clock]]:
    root = tmp_path / "catalog"
    shutil.copytree(catalog_root / "ccm3", root / "ccm3")
    clock = Clock()
    srv = DstpServer(Settings(catalog_root=root, port=0, http_port=-1, data_port=0, udt_port=-1,
                              hello_timeout_s=5, max_pending_per_address=4, window_bytes=2 * 2**20), timer=clock)
    srv.start()
    yield srv, clock
    srv.stop()
    shutil.rmtree(tmp_path, ignore_errors=True)


def _connect(srv: DstpServer, source: str = "127.0.0.2") -> socket.socket:
    assert srv.endpoints is not None
    sock = socket.socket()
    sock.bind((source, 0))
    sock.connect(host_port(srv.endpoints.data))
    sock.settimeout(10)
    return sock


def _error_of(sock: socket.socket) -> dict | None:
    """Return the ERROR frame's JSON the server sent on ``sock`` (None if it just closed)."""
    frame = recv_frame(TcpConn(sock))
    return None if frame is None else {"kind": frame.kind, **frame.json()}


def _closed(sock: socket.socket) -> bool:
    """Return whether the server closed ``sock`` (after whatever it sent)."""
    sock.setblocking(False)
    try:
        while True:
            if not sock.recv(65536):
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        sock.setblocking(True)


def test_a_trickled_hello_has_one_deadline_for_all_its_bytes(data_server) -> None:
    srv, clock = data_server
    sock = _connect(srv)
    frame = hello_frame({"ticket": "00" * 27, "stripe": 0, "acked": 0, "have": []})
    try:
        for byte in frame[:10]:  # a byte at a time, each well inside any per-read timeout
            sock.sendall(bytes([byte]))
            time.sleep(0.05)
        clock.advance(6)  # the whole HELLO is now late, however recently its last byte came
        sock.sendall(frame[10:11])
        answer = _error_of(sock)
    finally:
        sock.close()
    assert answer is not None and answer["kind"] == Kind.ERROR
    assert answer["code"] == "protocol_error" and "no whole HELLO within 5 s" in answer["message"]


def test_a_silent_connection_is_woken_at_its_deadline(data_server) -> None:
    srv, clock = data_server
    sock = _connect(srv)
    try:
        sock.sendall(b"DST")  # three bytes of a header, then silence
        eventually(lambda: srv._extras[-1].pending() == 1, "the server did not take the connection")
        clock.advance(6)
        answer = _error_of(sock)  # the janitor wakes the handshake, which still sends its ERROR
    finally:
        sock.close()
    assert answer is not None and "no whole HELLO" in answer["message"]


def test_one_address_holds_few_connections_in_their_hello_and_others_are_served(data_server) -> None:
    srv, _ = data_server
    channel = srv._extras[-1]
    socks = [_connect(srv) for _ in range(6)]
    try:
        eventually(lambda: channel.evicted >= 2, "the address's oldest connections were not dropped")
        assert [_closed(s) for s in socks] == [True, True, False, False, False, False]
        with dstp.connect(srv.endpoints.grpc) as c:
            for _ in range(3):  # a client at another address is not held up
                assert c.query(TINY, transport="striped").num_rows == 3
    finally:
        for s in socks:
            s.close()


def test_striped_transfers_go_on_while_helloes_trickle_in(data_server) -> None:
    srv, clock = data_server
    with TricklingHellos(srv.endpoints.data, connections=12, every_s=0.1) as trickle:
        eventually(lambda: trickle.opened >= 12, "the trickling connections did not open")
        with dstp.connect(srv.endpoints.grpc) as c:
            for _ in range(3):
                assert c.query(TINY, transport="striped", streams=4).num_rows == 3
                clock.advance(6)  # and every trickled HELLO runs out of time
        eventually(lambda: trickle.cut >= 12, "trickled HELLOs were not cut")
        assert trickle.running()


def test_data_headers_from_a_client_reserve_nothing(data_server) -> None:
    srv, _ = data_server
    with dstp.connect(srv.endpoints.grpc) as c:
        info = c.plan("select * from ccm3", transport="striped", streams=16)
    offer = next(o for o in info.offers if o.kind == "striped")
    base = _rss()
    socks, answers = [], []
    try:
        for stripe in range(16):
            sock = _connect(srv, "127.0.0.1")
            conn = TcpConn(sock)
            hello = {"ticket": offer.ticket.hex(), "stripe": stripe, "acked": 0, "have": [], "attempt": 0,
                     "proof": hello_proof(offer.key, offer.ticket, stripe, 0, 0).hex()}
            send_frame(conn, Kind.HELLO, stripe, 0, 0, json.dumps(hello).encode())
            # A DATA header claiming the largest payload there is, and ten bytes of it.
            sock.sendall(HEADER.pack(MAGIC, VERSION, int(Kind.DATA), stripe, 0, 0, MAX_PAYLOAD, 0) + bytes(10))
            socks.append(sock)
        for sock in socks:  # each stripe is dropped at once, not held open with 64 MiB behind it
            sock.settimeout(10)
            try:
                while sock.recv(2**20):
                    pass
                answers.append("closed")
            except OSError:
                answers.append("reset")
        assert _rss() - base < 256 * 2**20  # before: +1 GiB
    finally:
        for sock in socks:
            sock.close()
    assert len(answers) == 16
    # The transfer itself waits for its stripes to come back (resume), as for any broken connection.
    assert srv._extras[-1].active_transfers() == 1


def test_a_fresh_buffer_takes_memory_only_as_it_is_written() -> None:
    base = _rss()
    buffers = [fresh_buffer(64 * 2**20) for _ in range(16)]  # what 16 claimed payloads would reserve
    for b in buffers:
        b[:4096] = bytes(4096)
    assert _rss() - base < 128 * 2**20
    small = fresh_buffer(100)
    assert small.nbytes == 100 and bytes(small) == bytes(100)
    del buffers


def test_a_hello_flood_from_many_addresses_costs_no_threads_and_starves_no_transfer(tmp_path: Path,
                                                                                    catalog_root: Path) -> None:
    # Before (issue 33): a thread per pending connection and one cap of 512 for all connections: 32 addresses x 16
    # pending HELLOs took the server from 55 to 482 threads and 30 of 80 striped transfers failed with "too many
    # data connections". Here 40 addresses x 16, the defaults otherwise.
    import threading

    from attacks import PendingHelloFlood

    root = tmp_path / "catalog"
    shutil.copytree(catalog_root / "ccm3", root / "ccm3")
    srv = DstpServer(Settings(catalog_root=root, port=0, http_port=-1, data_port=0, udt_port=-1))
    srv.start()
    assert srv.endpoints is not None
    channel = srv._extras[-1]
    threads_before = threading.active_count()
    sources = [f"127.0.{1 + i // 200}.{2 + i % 200}" for i in range(40)]
    try:
        with PendingHelloFlood(srv.endpoints.data, sources, per_source=16, max_opens=4000) as flood:
            eventually(lambda: flood.opened >= 640, "the flood did not open its connections")
            eventually(lambda: channel.pending() >= 200, "the server did not take the flood's connections")
            # 40 threads of the flood itself, and none more of the server's
            assert threading.active_count() - threads_before <= 40 + 8
            with dstp.connect(srv.endpoints.grpc) as c:
                for _ in range(10):
                    assert c.query(TINY, transport="striped", streams=4).num_rows == 3
            assert flood.running() and channel.pending() <= 256
            assert channel.evicted > 0  # the flood evicted itself, the transfers went through
    finally:
        srv.stop()

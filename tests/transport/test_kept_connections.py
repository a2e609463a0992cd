"""Warm data connections: stripes kept between transfers, each transfer still proved by its own ticket.

The service runs in process with a channel server on a real TCP port (or
in-process pipes), as in test_channels.py; the client end is a channel with a
:class:`~dstp.transport.client.pool.ConnectionPool`. Time on the server moves only by
the test's clock, and idle expiry is run by calling the server's
``expire_idle`` (what its janitor calls every tick), so no test waits out a
timer.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Iterator

import pyarrow as pa
import pytest

import dstp
from clock import Clock
from dstp.catalog.registry import Catalog
from dstp.service import ChannelInfo, DstpService
from dstp.settings import Settings
from dstp.transport.server.channel_server import DataChannelServer
from dstp.transport.wire.values import TransferSummary
from dstp.transport.wire.frames import Kind, control_payload, recv_frame, send_frame
from dstp.transport.wire.ipc import BatchDecoder
from dstp.transport.client.channels import MemoryChannel
from dstp.transport.server.listeners import MemoryListener
from dstp.transport.wire.memory import pipe
from dstp.transport.client.pool import ConnectionPool
from dstp.transport.client.receiver import StripedReceiver
from dstp.transport.client.channels import TcpChannel
from dstp.transport.server.listeners import TcpListener
from dstp.transport.wire.tcp import TcpConn
from dstp.transport.wire.proofs import hello_proof

BIG = "select time, lev, lat, lon, temperature, humidity, cloud from ccm3"
SMALL = "select temperature from ccm3 limit 10"
SETTINGS = dict(batch_rows=2048, window_bytes=2 * 2**20, block_bytes=256 * 1024)
IDLE_TIMEOUT_S = 30.0


class Warm:
    """The service in process, a channel server keeping idle connections, and a pooled client channel."""

    def __init__(self, catalog: Catalog, *, sealed: bool = False, memory: bool = False, udt: bool = False,
                 **server_options: Any) -> None:
        self.clock, self.timer = Clock(), Clock()
        self.service = DstpService(catalog, Settings(catalog_root=catalog.root, **SETTINGS), clock=self.clock)
        self.kind = "udt" if udt else "striped"
        self.listener: Any
        if udt:
            from dstp.transport.client.udt_channel import UdtChannel
            from dstp.transport.server.udt_listener import UdtChannelListener
            from dstp.transport.wire import udt

            assert udt.available(), f"the UDT channel is {udt.unavailable_reason()}"
            self.listener = UdtChannelListener("127.0.0.1", 0)
        else:
            self.listener = MemoryListener() if memory else TcpListener("127.0.0.1", 0)
        self.server = DataChannelServer(self.kind, self.listener, self.service.open_source, window_bytes=2 * 2**20,
                                        clock=self.clock, timer=self.timer, sealed=sealed, idle_timeout=IDLE_TIMEOUT_S,
                                        **server_options)
        self.service.register_channel(ChannelInfo(self.kind, self.server.endpoint, max_streams=64,
                                                  cipher="aes-256-gcm" if sealed else ""))
        self.pool = ConnectionPool()
        self.channel: Any
        host, _, port = self.server.endpoint.rpartition(":")
        if memory:
            self.channel = MemoryChannel(self.listener, pool=self.pool)
        elif udt:
            self.channel = UdtChannel(host, int(port), rtt_s=0.001, pool=self.pool)
        else:
            self.channel = TcpChannel(host, int(port), pool=self.pool)
        self.server.start()

    def offer(self, sql: str, streams: int) -> Any:
        return self.service.queries.plan(sql, [self.kind], streams=streams).offers[0]

    def fetch(self, sql: str, streams: int, offer: Any = None) -> tuple[pa.Table, TransferSummary, StripedReceiver]:
        """Return the records of ``sql`` (or of ``offer``) over the pooled channel, the summary and the receiver."""
        offer = offer or self.offer(sql, streams)
        transfer = self.channel.open(offer.ticket.token, offer.streams, key=offer.ticket.key, cipher=offer.cipher)
        decoder, batches = BatchDecoder(), []
        for sequence, _, payload in transfer.messages():
            if sequence == 0:
                decoder.decode_schema(payload)
            else:
                batches.append(decoder.decode(payload))
        assert self.pool.settle(10.0), "the stripes were not handed back"
        return pa.Table.from_batches(batches, schema=decoder.schema), transfer.summary(), transfer

    def reference(self, sql: str) -> pa.Table:
        execution = self.service.queries.run(sql)
        return pa.Table.from_batches(list(execution.batches()), schema=execution.schema)

    def stop(self) -> None:
        self.pool.close()
        self.server.stop()


@pytest.fixture()
def warm(catalog: Catalog, request: pytest.FixtureRequest) -> Iterator[Warm]:
    harness = Warm(catalog, **getattr(request, "param", {}))
    yield harness
    harness.stop()


def _local_ports(pool: ConnectionPool, key: Any) -> set[int]:
    """Return the local ports of the pool's idle connections under ``key`` (taken out and given back)."""
    taken = []
    while (item := pool.take(key, wait_s=0)) is not None:
        taken.append(item[0])
    for conn in taken:
        pool.give(key, conn, announced=False)
    return {conn.sock.getsockname()[1] for conn in taken if isinstance(conn, TcpConn)}


@pytest.mark.parametrize("warm", [{}, {"sealed": True}], indirect=True, ids=["plaintext", "sealed"])
def test_two_transfers_in_a_row_ride_the_same_connections(warm: Warm) -> None:
    first, _, receiver = warm.fetch(BIG, 4)
    assert warm.server.accepted == 4 and warm.server.idle_connections() == 4
    ports = _local_ports(warm.pool, warm.channel.pool_key(receiver.seal.cipher if receiver.seal else ""))
    assert len(ports) == 4
    second, summary, receiver = warm.fetch(BIG, 4)
    assert warm.server.accepted == 4 and warm.server.reused == 4  # no new connection: four HELLOs on kept ones
    assert receiver.stats.reused == 4 and summary.reconnects == 0
    assert _local_ports(warm.pool, warm.channel.pool_key(receiver.seal.cipher if receiver.seal else "")) == ports
    reference = warm.reference(BIG)
    assert first.equals(reference) and second.equals(reference)
    assert len([b for b in summary.per_stripe_bytes.values() if b]) == 4


def test_a_plaintext_connection_never_carries_a_sealed_transfer(catalog: Catalog) -> None:
    plain, sealed = Warm(catalog), Warm(catalog, sealed=True)
    try:
        plain.fetch(SMALL, 2)
        assert plain.channel.pool_key("") != plain.channel.pool_key("aes-256-gcm")
        assert plain.pool.take(plain.channel.pool_key("aes-256-gcm"), wait_s=0) is None
        assert plain.pool.idle(plain.channel.pool_key("")) == 2
    finally:
        plain.stop()
        sealed.stop()


def test_a_connection_the_server_expired_is_replaced_by_a_fresh_dial(warm: Warm) -> None:
    first, _, _ = warm.fetch(BIG, 4)
    warm.timer.advance(IDLE_TIMEOUT_S / 2)
    assert warm.server.expire_idle() == 0  # not idle long enough yet
    warm.timer.advance(IDLE_TIMEOUT_S)
    assert warm.server.expire_idle() == 4 and warm.server.idle_connections() == 0
    second, summary, receiver = warm.fetch(BIG, 4)
    assert warm.server.accepted == 8 and warm.server.reused == 0  # four fresh dials
    assert receiver.stats.reused == 0 and summary.reconnects == 0
    assert second.equals(first) and second.equals(warm.reference(BIG))


def test_a_step_of_the_wall_clock_expires_no_kept_connection(warm: Warm) -> None:
    """Idle expiry runs on the monotonic timer: an NTP step of a year leaves the warm stripes warm."""
    first, _, _ = warm.fetch(BIG, 4)
    warm.clock.advance(365 * 86400)
    assert warm.server.expire_idle() == 0 and warm.server.idle_connections() == 4
    second, _, receiver = warm.fetch(BIG, 4)
    assert warm.server.accepted == 4 and warm.server.reused == 4 and receiver.stats.reused == 4
    assert second.equals(first)


@pytest.mark.parametrize("warm", [{"memory": True}], indirect=True, ids=["memory"])
def test_a_kept_connection_that_died_unnoticed_costs_no_failure(warm: Warm) -> None:
    # In-process pipes cannot be probed before use (no peek), so the dead connections are only found when
    # the HELLO goes out on them: each stripe dials again at once, with no failure counted.
    warm.fetch(SMALL, 2)
    warm.timer.advance(IDLE_TIMEOUT_S + 1)
    assert warm.server.expire_idle() == 2
    table, summary, receiver = warm.fetch(BIG, 2)
    assert receiver.stats.stale == 2 and summary.reconnects == 0
    assert table.equals(warm.reference(BIG))


def test_a_kept_connection_closed_after_its_hello_went_out_is_dialed_again() -> None:
    # The server closes a kept connection just as the client reuses it: the HELLO is sent, then the
    # connection ends before a frame. With max_reconnects=0 a counted failure would fail the transfer.
    key = ("pipe",)
    pool = ConnectionPool()
    kept, server_end = pipe()
    pool.give(key, kept, announced=False)
    hellos: list[dict[str, Any]] = []

    def swallow_and_close() -> None:
        frame = recv_frame(server_end)
        assert frame is not None
        hellos.append(frame.json())
        server_end.close()

    threading.Thread(target=swallow_and_close, daemon=True).start()

    def dial(stripe: int) -> Any:
        client, server = pipe()

        def serve() -> None:
            frame = recv_frame(server)
            assert frame is not None
            hellos.append(frame.json())
            send_frame(server, Kind.DATA, 0, 0, 0, b"schema")
            send_frame(server, Kind.END, 0, 1, 0, control_payload({}))

        threading.Thread(target=serve, daemon=True).start()
        return client

    receiver = StripedReceiver(b"DT1" + bytes(24), 1, dial, max_reconnects=0, stall_timeout=10,
                               pool=pool, pool_key=key)
    receiver.start()
    messages = [(seq, bytes(payload)) for seq, _, payload in receiver.messages()]
    assert messages == [(0, b"schema")]
    assert receiver.stats.stale == 1 and receiver.stats.reconnects == 0
    assert [h["attempt"] for h in hellos] == [0, 1] and all(h["keep"] for h in hellos)


def test_a_stranger_cannot_ride_a_kept_connection(warm: Warm) -> None:
    # The stranger holds a kept connection of the owner's (the worst case: it took over the socket) and the
    # owner's next ticket, but not the key that came with it.
    warm.fetch(SMALL, 1)
    key = warm.channel.pool_key("")

    def hello_on_kept(token: bytes, proof_key: bytes) -> Any:
        taken = warm.pool.take(key, wait_s=0)
        assert taken is not None, "no kept connection to try"
        conn = taken[0]
        try:
            send_frame(conn, Kind.HELLO, 0, 0, 0, control_payload(
                {"ticket": token.hex(), "stripe": 0, "stripes": 1, "acked": 0, "have": [], "attempt": 0,
                 "keep": True, "proof": hello_proof(proof_key, token, 0, 0, 0).hex()}))
            return recv_frame(conn)
        finally:
            conn.close()

    offer = warm.offer(SMALL, 1)
    frame = hello_on_kept(offer.ticket.token, os.urandom(32))  # the owner's next ticket, with a key of its own
    assert frame is not None and frame.kind == Kind.ERROR and frame.json()["code"] == "bad_ticket"
    assert "proof" in frame.json()["message"]
    assert warm.server.reused == 1  # it was served as a kept connection's HELLO, and refused

    # Nothing of a finished transfer stays on its connection: its own HELLO, replayed there, is refused.
    finished = warm.offer(SMALL, 1)
    table, _, _ = warm.fetch(SMALL, 1, offer=finished)
    assert table.equals(warm.reference(SMALL))
    frame = hello_on_kept(finished.ticket.token, finished.ticket.key)
    assert frame is not None and frame.kind == Kind.ERROR and frame.json()["code"] == "bad_ticket"
    assert "already used" in frame.json()["message"]

    # And the owner's next ticket is still the owner's, intact.
    table, summary, _ = warm.fetch(SMALL, 1, offer=offer)
    assert table.equals(warm.reference(SMALL)) and summary.reconnects == 0


@pytest.mark.parametrize("warm", [{}, {"memory": True}], indirect=True, ids=["tcp", "memory"])
def test_a_stripe_whose_hello_is_read_after_the_transfer_finished_is_kept(warm: Warm) -> None:
    # Under load the server may read one stripe's HELLO only after the other stripe carried the whole
    # transfer and the client said BYE (a CI run lost a kept connection so). That stripe is sent nothing
    # and kept, as the other one was, once its client says BYE on it.
    offer = warm.offer(SMALL, 2)
    token, key = offer.ticket.token, offer.ticket.key

    def hello(conn: Any, stripe: int, attempt: int = 0) -> None:
        send_frame(conn, Kind.HELLO, stripe, 0, 0, control_payload(
            {"ticket": token.hex(), "stripe": stripe, "stripes": 2, "acked": 0, "have": [], "attempt": attempt,
             "keep": True, "proof": hello_proof(key, token, stripe, attempt, 0).hex()}))

    first = warm.channel.connect(0)
    hello(first, 0)
    kinds = []
    while not kinds or kinds[-1] != Kind.END:  # the only stripe attached is dealt every message
        frame = recv_frame(first)
        assert frame is not None, "stripe 0 closed before END"
        kinds.append(frame.kind)
    end = frame.sequence
    send_frame(first, Kind.ACK, 0, end + 1, 0)
    send_frame(first, Kind.BYE, 0, 0, 0)
    answer = recv_frame(first)
    assert answer is not None and answer.kind == Kind.BYE  # kept; the transfer has finished

    late = warm.channel.connect(1)
    hello(late, 1)
    send_frame(late, Kind.ACK, 1, end + 1, 0)
    send_frame(late, Kind.BYE, 1, 0, 0)
    answer = recv_frame(late)
    assert answer is not None and answer.kind == Kind.BYE, answer  # not an ERROR "already used"
    assert warm.server.idle_connections() == 2

    # The late stripe's HELLO is good once: replayed on a fresh connection, it is refused.
    again = warm.channel.connect(1)
    try:
        hello(again, 1)
        refused = recv_frame(again)
        assert refused is not None and refused.kind == Kind.ERROR and "already used" in refused.json()["message"]
    finally:
        for conn in (first, late, again):
            conn.close()


def test_a_frame_other_than_hello_on_a_kept_connection_is_refused(warm: Warm) -> None:
    warm.fetch(SMALL, 1)
    taken = warm.pool.take(warm.channel.pool_key(""), wait_s=0)
    assert taken is not None
    conn = taken[0]
    try:
        send_frame(conn, Kind.ACK, 0, 5, 0)  # as if the finished transfer went on
        frame = recv_frame(conn)
    finally:
        conn.close()
    assert frame is not None and frame.kind == Kind.ERROR and frame.json()["code"] == "protocol_error"
    assert "expected HELLO" in frame.json()["message"]


@pytest.mark.parametrize("warm", [{"max_idle_per_address": 2}], indirect=True, ids=["per-address-cap"])
def test_the_server_keeps_at_most_its_cap_and_the_rest_are_dialed_again(warm: Warm) -> None:
    first, _, _ = warm.fetch(BIG, 4)
    assert warm.server.idle_connections() == 2 and warm.server.idle_evicted == 2
    second, summary, receiver = warm.fetch(BIG, 4)
    assert warm.server.reused == 2 and warm.server.accepted == 6 and summary.reconnects == 0
    assert second.equals(first)


@pytest.mark.parametrize("warm", [{"max_idle_connections": 0}], indirect=True, ids=["keeping-off"])
def test_a_server_that_keeps_nothing_closes_as_before(warm: Warm) -> None:
    first, _, _ = warm.fetch(SMALL, 2)
    assert warm.server.idle_connections() == 0 and warm.pool.idle(warm.channel.pool_key("")) == 0
    second, summary, _ = warm.fetch(SMALL, 2)
    assert warm.server.accepted == 4 and warm.server.reused == 0 and summary.reconnects == 0
    assert second.equals(first)


def test_a_failed_transfer_keeps_nothing(warm: Warm) -> None:
    offer = warm.offer(SMALL, 2)
    transfer = warm.channel.open(offer.ticket.token[:-4] + os.urandom(4), 2, key=offer.ticket.key)
    with pytest.raises(dstp.TicketError):
        for _ in transfer.messages():
            pass
    assert warm.pool.idle(warm.channel.pool_key("")) == 0 and warm.server.idle_connections() == 0


@pytest.mark.parametrize("warm", [{"udt": True}, {"udt": True, "sealed": True}], indirect=True,
                         ids=["plaintext", "sealed"])
def test_a_udt_connection_is_kept_and_carries_the_next_transfer(warm: Warm) -> None:
    first, _, _ = warm.fetch(BIG, 1)
    assert warm.server.accepted == 1 and warm.server.idle_connections() == 1
    second, summary, receiver = warm.fetch(SMALL, 1)
    third, _, _ = warm.fetch(BIG, 1)
    assert warm.server.accepted == 1 and warm.server.reused == 2  # one UDT handshake for three transfers
    assert receiver.stats.reused == 1 and summary.reconnects == 0
    assert first.equals(warm.reference(BIG)) and third.equals(first) and second.equals(warm.reference(SMALL))


@pytest.mark.parametrize("warm", [{"udt": True}], indirect=True, ids=["udt"])
def test_a_udt_connection_the_server_expired_is_replaced_by_a_fresh_dial(warm: Warm) -> None:
    first, _, _ = warm.fetch(SMALL, 1)
    warm.timer.advance(IDLE_TIMEOUT_S * 2)
    assert warm.server.expire_idle() == 1 and warm.server.idle_connections() == 0
    second, summary, _ = warm.fetch(SMALL, 1)
    # A fresh dial (the kept one is found closed when taken, or when its HELLO fails), never a failure.
    assert warm.server.accepted == 2 and warm.server.reused == 0
    assert summary.reconnects == 0 and second.equals(first)

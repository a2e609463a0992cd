"""Hold under attack, round 2 (issue 33): connection caps on every door, fair shares by default, no token guessing.

Each attack of the issue's run is reproduced by a real client (tests/attacks.py) against a real server on
loopback, and the probe of a bystander — another address, another token — must be answered while it runs.
The attacking sockets bind 127.0.0.2, 127.0.0.3, …: loopback has many addresses, and the caps count by
address. Timeouts are driven by the server's clock, never slept out; waits are for conditions, bounded.
"""

from __future__ import annotations

import collections
import logging
import shutil
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import grpc
import httpx
import pyarrow.flight as fl
import pytest

import dstp
from dstp.errors import ServerUnreachableError
from attacks import IdleHttp2Flood, StalledGrpcReaders, TokenGuessing, answered_within, eventually
from clock import Clock
from dstp.auth import TokenStore
from dstp.connections import door_connections
from dstp.proto import dstp_pb2 as pb
from dstp.proto import dstp_pb2_grpc as pb_grpc
from dstp.server import DstpServer
from dstp.settings import Settings

PROBE_DEADLINE_S = 20.0
TINY = "select temperature from ccm3 where lat > 80 limit 3"


@pytest.fixture()
def ccm3_only(tmp_path: Path, catalog_root: Path) -> Iterator[Path]:
    root = tmp_path / "catalog"
    shutil.copytree(catalog_root / "ccm3", root / "ccm3")
    yield root
    shutil.rmtree(tmp_path, ignore_errors=True)


def start(root: Path, clock: Clock, tmp: Path, users: tuple[str, ...] = ("alice",), **changes: Any
          ) -> tuple[DstpServer, dict[str, str]]:
    """Return a started server with small limits, and a token for each of ``users``."""
    tokens = tmp / "tokens.json"
    store = TokenStore(tokens)
    secrets = {user: store.create(user).secret for user in users}
    settings = Settings(catalog_root=root, port=0, http_port=0, data_port=0, udt_port=-1, batch_rows=2048,
                        window_bytes=2 * 2**20, max_concurrent_queries=4, admission_wait_s=0.5,
                        stall_timeout_s=30, token_store=tokens, allow_anonymous="true").replace(**changes)
    server = DstpServer(settings, clock=clock, timer=clock)  # HTTP deadlines too: by the test's clock
    server.start()
    return server, secrets


def per_address(port: int) -> collections.Counter[str]:
    """Return how many connections each address holds on the server's ``port``."""
    return collections.Counter(address for address, _ in door_connections(port))


def port_of(endpoint: str) -> int:
    return int(endpoint.rsplit(":", 1)[1])


# -- connection caps ---------------------------------------------------------------------------------

def test_an_idle_http2_flood_is_held_to_the_grpc_doors_caps(ccm3_only: Path, tmp_path: Path) -> None:
    # Before: 2 x 10,000 connections sending only the preface and SETTINGS were all kept (no cap, no idle
    # timeout on gRPC): 19,999 of 20,000 descriptors, new connections refused, HTTP and transfers failing.
    srv, _ = start(ccm3_only, Clock(), tmp_path, max_connections=48, max_connections_per_address=8)
    assert srv.endpoints is not None
    port = port_of(srv.endpoints.grpc)
    try:
        with IdleHttp2Flood(srv.endpoints.grpc, ["127.0.0.2", "127.0.0.3"], per_source=120, max_opens=3000) as flood:
            eventually(lambda: flood.opened >= 240, "the flood did not open its connections")
            eventually(lambda: flood.cut > 0, "the server kept every connection of the flood")
            for _ in range(3):  # held while the flood goes on reopening what was cut
                # The caps are enforced as connections arrive (gRPC accepts, then the warden closes): a sample
                # taken between the two sees a few over, more on a busy machine (53 seen with two test runs on
                # 2 cores). What must hold is that the server comes back under them while the flood goes on.
                eventually(lambda: sum(per_address(port).values()) <= 48 + 2,  # one over lives while gRPC closes it
                           f"the flood holds more than the door's 48 connections: {per_address(port)}")
                eventually(lambda: max(per_address(port).values(), default=0) <= 8,
                           f"an address holds more than its 8 connections: {per_address(port)}")
            with dstp.connect(srv.endpoints.grpc) as c:  # the bystander, from 127.0.0.1
                # A fresh connection may meet the door at its cap before the warden cuts a flood connection
                # (issue 33: 7 of 60 fresh gRPC probes refused under the flood): it tries again, as a client would.
                assert bystander(lambda: c.query(TINY)).num_rows == 3
                assert bystander(lambda: c.query(TINY, transport="striped")).num_rows == 3
            with httpx.Client(base_url=f"http://{srv.endpoints.http}", timeout=PROBE_DEADLINE_S) as http:
                r = answered_within(PROBE_DEADLINE_S, lambda: http.get("/query", params={"sql": TINY}))
                assert r.status_code == 200 and r.text.count("\n") == 4
            assert flood.running()
    finally:
        srv.stop()


def bystander(probe: Any, attempts: int = 5) -> Any:
    """Return ``probe()`` answered within the deadline, trying again (at most ``attempts`` times) when its fresh
    connection was refused at the door's cap; any other error, or a refusal every time, fails the test."""
    for attempt in range(attempts):
        try:
            return answered_within(PROBE_DEADLINE_S, probe)
        except ServerUnreachableError:
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


def test_an_idle_http2_flood_is_held_to_the_flight_doors_caps(ccm3_only: Path, tmp_path: Path) -> None:
    # Before: the Flight server had no cap, no per-address cap and no idle timeout at all.
    clock = Clock()
    srv, _ = start(ccm3_only, clock, tmp_path, flight_port=0, max_connections=48, max_connections_per_address=8)
    assert srv.endpoints is not None
    port = port_of(srv.endpoints.flight)
    try:
        with IdleHttp2Flood(srv.endpoints.flight, ["127.0.0.2", "127.0.0.3"], per_source=60, max_opens=2000) as flood:
            eventually(lambda: flood.opened >= 120, "the flood did not open its connections")
            eventually(lambda: flood.cut > 0, "the server kept every connection of the flood")
            eventually(lambda: max(per_address(port).values(), default=0) <= 8,
                       f"an address holds more than its 8 connections: {per_address(port)}")
            client = fl.connect(f"grpc+tcp://{srv.endpoints.flight}")
            try:
                info = answered_within(PROBE_DEADLINE_S, lambda: client.get_flight_info(
                    fl.FlightDescriptor.for_command(TINY)))
                table = answered_within(PROBE_DEADLINE_S, lambda: client.do_get(info.endpoints[0].ticket).read_all())
                assert table.num_rows == 3
            finally:
                client.close()
            assert flood.running()
    finally:
        srv.stop()


def test_one_address_holds_at_most_its_share_of_http_connections(ccm3_only: Path, tmp_path: Path) -> None:
    # Before: HTTP had a total cap (256) and none per address: one host's idle connections took them all.
    srv, _ = start(ccm3_only, Clock(), tmp_path, http_max_connections=16, max_connections_per_address=4)
    assert srv.endpoints is not None
    host, port = srv.endpoints.http.rsplit(":", 1)
    held = []
    try:
        for _ in range(12):
            sock = socket.socket()
            sock.bind(("127.0.0.2", 0))
            sock.connect((host, int(port)))
            held.append(sock)
        eventually(lambda: per_address(int(port))["127.0.0.2"] <= 4,
                   f"127.0.0.2 holds more than its 4 connections: {per_address(int(port))}")
        with httpx.Client(base_url=f"http://{srv.endpoints.http}", timeout=PROBE_DEADLINE_S) as http:
            assert http.get("/query", params={"sql": TINY}).text.count("\n") == 4
    finally:
        for sock in held:
            sock.close()
        srv.stop()


def test_the_descriptor_limit_is_raised_and_caps_are_sized_from_it(ccm3_only: Path, tmp_path: Path) -> None:
    import resource

    srv, _ = start(ccm3_only, Clock(), tmp_path)
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        assert soft == hard or hard == resource.RLIM_INFINITY
        assert srv.descriptor_limit == soft
        assert srv.door_cap == min(4096, soft // 8)
    finally:
        srv.stop()


# -- token guessing -----------------------------------------------------------------------------------

def test_token_guessing_is_limited_per_address_and_logged(ccm3_only: Path, tmp_path: Path,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    # Before: ~1,460 guesses a second on one connection, no limit, no lockout, no log line.
    clock = Clock()
    srv, secrets = start(ccm3_only, clock, tmp_path, auth_failures_per_minute=10)
    assert srv.endpoints is not None
    caplog.set_level(logging.WARNING, logger="dstp.auth")
    try:
        with TokenGuessing(srv.endpoints.grpc, attempts=25) as guesses:
            pass
        assert guesses.codes[:10] == [grpc.StatusCode.UNAUTHENTICATED] * 10
        assert guesses.codes[10:] == [grpc.StatusCode.RESOURCE_EXHAUSTED] * 15
        assert "too many failed authentications from 127.0.0.1" in guesses.details[-1]
        assert any("failed authentication from 127.0.0.1" in r.getMessage() for r in caplog.records)
        # Even the right token is refused unread from that address until the minute ends ...
        with dstp.connect(srv.endpoints.grpc, token=secrets["alice"]) as c, pytest.raises(dstp.LimitExceededError):
            c.query(TINY)
        # ... but not from another address,
        transport = httpx.HTTPTransport(local_address="127.0.0.2")
        with httpx.Client(base_url=f"http://{srv.endpoints.http}", transport=transport, timeout=PROBE_DEADLINE_S,
                          headers={"Authorization": f"Bearer {secrets['alice']}"}) as http:
            assert http.get("/query", params={"sql": TINY}).status_code == 200
        clock.advance(61)  # and once the minute is over, it is checked again
        with dstp.connect(srv.endpoints.grpc, token=secrets["alice"]) as c:
            assert c.query(TINY).num_rows == 3
    finally:
        srv.stop()


# -- fair shares ------------------------------------------------------------------------------------------

def test_one_token_cannot_hold_every_slot_by_default(ccm3_only: Path, tmp_path: Path) -> None:
    # Before: quota_concurrent_queries defaulted to 0 (no cap): one token's stalled readers held all the slots
    # and every other token got LimitExceeded until the stall timeout (60 s).
    srv, secrets = start(ccm3_only, Clock(), tmp_path, users=("mallory", "alice"))
    assert srv.endpoints is not None and srv.service is not None
    try:
        with StalledGrpcReaders(srv.endpoints.grpc, clients=4, token=secrets["mallory"]) as readers:
            for _ in range(4):
                assert readers.started.acquire(timeout=30)
            assert sorted(readers.outcomes) == ["RESOURCE_EXHAUSTED"] * 2 + ["started"] * 2
            assert srv.service.admission.held() == 2  # half of max_concurrent_queries=4
            with dstp.connect(srv.endpoints.grpc, token=secrets["alice"]) as c:
                assert answered_within(PROBE_DEADLINE_S, lambda: c.query(TINY)).num_rows == 3
    finally:
        srv.stop()


def _stalled_http_reader(endpoint: str, source: str) -> socket.socket:
    """Return a connection from ``source`` that asked for a large CSV result and reads none of it."""
    host, port = endpoint.rsplit(":", 1)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.bind((source, 0))
    sock.connect((host, int(port)))
    sock.sendall(b"GET /query?sql=select+*+from+ccm3&format=csv HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    return sock


def test_anonymous_callers_share_by_address(ccm3_only: Path, tmp_path: Path) -> None:
    # Before: every anonymous request was the one principal "anonymous": one host's stalled readers used the
    # anonymous share of every other host.
    srv, _ = start(ccm3_only, Clock(), tmp_path, quota_concurrent_queries=1)
    assert srv.endpoints is not None and srv.service is not None
    held = []
    try:
        for _ in range(3):
            held.append(_stalled_http_reader(srv.endpoints.http, "127.0.0.2"))
        eventually(lambda: srv.service.admission.held() == 1, "the stalled readers hold no slot")
        with dstp.connect(srv.endpoints.grpc) as c:  # anonymous too, from 127.0.0.1
            assert answered_within(PROBE_DEADLINE_S, lambda: c.query(TINY)).num_rows == 3
    finally:
        for sock in held:
            sock.close()
        srv.stop()


def test_many_concurrent_clients_are_queued_not_refused(ccm3_only: Path, tmp_path: Path) -> None:
    # Before: maximum_concurrent_rpcs = grpc_workers x 4 refused calls ("Concurrent RPC limit exceeded!")
    # before the admission queue (max_waiting) was reached: 37 % of 64 clients' calls failed.
    srv, _ = start(ccm3_only, Clock(), tmp_path, grpc_workers=4, max_concurrent_queries=2, max_waiting=64,
                   admission_wait_s=60, quota_concurrent_queries=0)
    assert srv.endpoints is not None
    codes: list[grpc.StatusCode] = []
    lock = threading.Lock()
    go = threading.Barrier(40)

    def client() -> None:
        with grpc.insecure_channel(srv.endpoints.grpc) as channel:  # type: ignore[union-attr]
            stub = pb_grpc.DstpStub(channel)
            go.wait()
            for _ in range(2):
                try:
                    stub.Query(pb.QueryRequest(sql=TINY), timeout=120)
                    code = grpc.StatusCode.OK
                except grpc.RpcError as exc:
                    code = exc.code()
                with lock:
                    codes.append(code)

    try:
        threads = [threading.Thread(target=client) for _ in range(40)]  # 40 at once: under 2 slots + 64 waiting
        for t in threads:
            t.start()
        for t in threads:
            t.join(180)
        assert collections.Counter(codes) == {grpc.StatusCode.OK: 80}
    finally:
        srv.stop()


# -- the audit log ------------------------------------------------------------------------------------------

def test_the_audit_log_counts_what_a_stalled_reader_took_not_what_was_made(ccm3_only: Path, tmp_path: Path) -> None:
    # Before: the audit line of a stalled reader counted every row the query had produced, the batch stuck in
    # front of the reader included.
    import json

    clock = Clock()
    audit = tmp_path / "audit.jsonl"
    srv, _ = start(ccm3_only, clock, tmp_path, audit_log=str(audit))
    assert srv.endpoints is not None and srv.service is not None
    admission = srv.service.admission
    try:
        with httpx.Client(base_url=f"http://{srv.endpoints.http}", timeout=PROBE_DEADLINE_S) as http:
            assert http.get("/query", params={"sql": TINY}).text.count("\n") == 4
        sock = _stalled_http_reader(srv.endpoints.http, "127.0.0.1")
        try:
            eventually(lambda: admission.held() == 1, "the stalled reader holds no slot")

            def stuck() -> bool:
                first = admission.waiting_on_readers()
                time.sleep(0.3)  # real time for the socket buffers to fill; no timer of the server is waited out
                return len(first) == 1 and admission.waiting_on_readers() == first

            eventually(stuck, "the reader never stalled")
            (query_id,) = admission.running()
            execution = admission.get(query_id)
            produced = execution.summary.rows  # type: ignore[union-attr]
            clock.advance(31)
            eventually(lambda: admission.held() == 0, "the stalled reader kept its slot")
        finally:
            sock.close()
    finally:
        srv.stop()
    lines = {r["id"]: r for r in map(json.loads, audit.read_text().splitlines())}
    stalled = lines[query_id]
    assert stalled["outcome"] == "stalled"
    assert 0 < stalled["rows"] < produced  # the batch that never left the server is not counted
    (whole,) = [r for r in lines.values() if r["sql"] == TINY]
    assert whole["outcome"] == "ok" and whole["rows"] == 3


# -- stopping -------------------------------------------------------------------------------------------------

def test_stop_closes_every_door_while_a_flight_call_drains(ccm3_only: Path, tmp_path: Path) -> None:
    # Before: doors stopped one after another, Flight first; pyarrow's shutdown waits for every call in flight,
    # so a DoGet whose reader stopped reading held the stop, and HTTP kept answering (80 s after a SIGTERM).
    srv, _ = start(ccm3_only, Clock(), tmp_path, flight_port=0)
    assert srv.endpoints is not None
    host, port = srv.endpoints.http.rsplit(":", 1)
    # A 64 KiB receive window (no BDP probing): the server's writes back up after a few batches.
    client = fl.connect(f"grpc+tcp://{srv.endpoints.flight}", generic_options=[("grpc.http2.bdp_probe", 0)])
    stopping = threading.Thread(target=srv.stop, daemon=True)
    try:
        info = client.get_flight_info(fl.FlightDescriptor.for_command("select * from ccm3"))
        reader = client.do_get(info.endpoints[0].ticket)
        reader.read_chunk()  # one batch, then nothing: the server's writes back up

        def http_closed() -> bool:
            try:
                socket.create_connection((host, int(port)), timeout=1).close()
                return False
            except OSError:
                return True

        stopping.start()
        eventually(http_closed, "HTTP still accepts connections while the server stops", seconds=10)
        stopping.join(30)
        assert not stopping.is_alive(), "the stop waited on a Flight call that nobody reads"
    finally:
        client.close()
        stopping.join(30)

"""Limits that cannot be walked around (issue 13, item 5), against real servers with real clients.

Each finding of the attack run is reproduced by an attack client (tests/attacks.py) and shown fixed.
Timeouts are driven by the server's clock (``Clock``, advanced by hand), never slept out; a liveness
check asks that a probe is answered *while* the attack still runs, with a generous deadline.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import grpc
import httpx
import pytest

import dstp
from attacks import (HalfSentHttpRequests, PlanningBomb, StalledGrpcReaders, TricklingHellos, answered_within,
                     eventually, planning_bomb)
from clock import Clock
from dstp.auth import Principal, TokenStore
from dstp.proto import dstp_pb2 as pb
from dstp.proto import dstp_pb2_grpc as pb_grpc
from dstp.server import DstpServer
from dstp.settings import Settings

#: A probe has this long to be answered; it is a liveness check (the issue asks for 1 s), not a timing.
PROBE_DEADLINE_S = 20.0
TINY = "select temperature from ccm3 where lat > 80 limit 3"


@pytest.fixture()
def ccm3_only(tmp_path: Path, catalog_root: Path) -> Iterator[Path]:
    root = tmp_path / "catalog"
    shutil.copytree(catalog_root / "ccm3", root / "ccm3")
    yield root
    shutil.rmtree(tmp_path, ignore_errors=True)


def limits_server(root: Path, clock: Clock, tmp: Path, **changes: Any) -> tuple[DstpServer, str]:
    """Return a started server with small limits (and a token for alice, the probing client)."""
    tokens = tmp / "tokens.json"
    secret = TokenStore(tokens).create("alice").secret
    settings = Settings(catalog_root=root, port=0, http_port=0, data_port=0, udt_port=-1, batch_rows=2048,
                        window_bytes=2 * 2**20, max_concurrent_queries=4, quota_concurrent_queries=2,
                        admission_wait_s=0.5, stall_timeout_s=30, hello_timeout_s=5, max_pending_per_address=4,
                        http_header_timeout_s=5, http_max_connections=12, token_store=tokens,
                        allow_anonymous="true").replace(**changes)
    server = DstpServer(settings, clock=clock)
    server.start()
    return server, secret


def readers_stalled(srv: DstpServer, count: int) -> None:
    """Wait until ``count`` slots wait on readers that take nothing more (the same wait, twice in a row)."""
    assert srv.service is not None
    admission = srv.service.admission

    def stuck() -> bool:
        first = admission.waiting_on_readers()
        time.sleep(0.3)  # real time for the transport's buffers to fill; no timer of the server is waited out
        return len(first) >= count and admission.waiting_on_readers() == first

    eventually(stuck, f"{count} readers never stalled")


# -- planning ---------------------------------------------------------------------------------------

def test_the_planning_bomb_is_refused_before_duckdb_sees_it(server) -> None:
    # 16 clients x the 2 KB expression of 990 terms: each took 106-111 s of planning, outside every limit.
    with PlanningBomb(server.endpoints.grpc, clients=16) as bomb:
        eventually(lambda: len(bomb.codes) >= 48, "the bomb's queries were not answered")
        with dstp.connect(server.endpoints.grpc) as c:
            assert answered_within(PROBE_DEADLINE_S, lambda: c.query(TINY)).num_rows == 3
        assert bomb.running()
        codes, seconds = list(bomb.codes), list(bomb.seconds)
    assert set(codes) == {grpc.StatusCode.INVALID_ARGUMENT}
    assert max(seconds) < 10  # refused before planning, not after minutes of DuckDB
    with grpc.insecure_channel(server.endpoints.grpc) as channel, pytest.raises(grpc.RpcError) as info:
        pb_grpc.DstpStub(channel).Query(pb.QueryRequest(sql=planning_bomb()))
    assert "more than 500 arithmetic operators" in info.value.details()


def test_the_time_limit_covers_planning(catalog_root: Path) -> None:
    # Before: Query (planning only) ran outside the time limit; a 5 s limit answered after 19.8 s.
    settings = Settings(catalog_root=catalog_root, port=0, http_port=-1, data_port=-1, udt_port=-1,
                        query_time_limit_s=0.001)
    with DstpServer(settings) as srv, grpc.insecure_channel(srv.endpoints.grpc) as channel:
        with pytest.raises(grpc.RpcError) as info:
            pb_grpc.DstpStub(channel).Query(pb.QueryRequest(sql=planning_bomb(400)))
        assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert "to plan" in info.value.details()
        assert dict(info.value.trailing_metadata())["dstp-error-code"] == "timeout"


def test_refusals_come_before_planning_with_a_retry_after(ccm3_only: Path, tmp_path: Path) -> None:
    clock = Clock()
    audit = tmp_path / "audit.jsonl"
    srv, _ = limits_server(ccm3_only, clock, tmp_path, max_concurrent_queries=1, quota_concurrent_queries=0,
                           admission_wait_s=0, audit_log=str(audit))
    try:
        with StalledGrpcReaders(srv.endpoints.grpc, clients=1) as readers:
            readers.started.acquire(timeout=30)
            eventually(lambda: srv.service is not None and srv.service.admission.held() == 1, "no slot held")
            heavy = planning_bomb(450)  # allowed, and costly to plan
            with grpc.insecure_channel(srv.endpoints.grpc) as channel:
                stub = pb_grpc.DstpStub(channel)
                for _ in range(20):
                    with pytest.raises(grpc.RpcError) as info:
                        stub.Query(pb.QueryRequest(sql=heavy))
                    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                    metadata = dict(info.value.trailing_metadata())
                    assert metadata["dstp-error-code"] == "limit_exceeded" and int(metadata["retry-after"]) >= 1
            with httpx.Client(base_url=f"http://{srv.endpoints.http}") as http:
                busy = http.get("/query", params={"sql": heavy})
                assert busy.status_code == 429 and int(busy.headers["retry-after"]) >= 1
    finally:
        srv.stop()
    refused = [json.loads(line) for line in audit.read_text().splitlines() if "limit_exceeded" in line]
    assert len(refused) == 21
    # Nothing of them was parsed, planned or read: no dataset, no time.
    assert all(r["datasets"] == [] and r["seconds"] == 0 and r["bytes"] == 0 for r in refused)


# -- stalled readers --------------------------------------------------------------------------------

def test_stalled_grpc_readers_give_their_slots_back_after_stall_timeout(ccm3_only: Path, tmp_path: Path) -> None:
    # Before: 8 clients that started `select * from ccm3` and stopped reading held all 8 slots for as long
    # as they kept their connections.
    clock = Clock()
    srv, _ = limits_server(ccm3_only, clock, tmp_path, quota_concurrent_queries=0)
    assert srv.service is not None
    try:
        with StalledGrpcReaders(srv.endpoints.grpc, clients=4) as readers:
            for _ in range(4):
                assert readers.started.acquire(timeout=30)
            assert readers.outcomes == ["started"] * 4
            eventually(lambda: srv.service.admission.held() == 4, "the readers hold no slots")
            readers_stalled(srv, 4)
            with dstp.connect(srv.endpoints.grpc) as c, pytest.raises(dstp.LimitExceededError):
                c.query(TINY)  # every slot is held by a reader that reads nothing
            clock.advance(31)
            eventually(lambda: srv.service.admission.held() == 0, "the stalled readers kept their slots")
            with dstp.connect(srv.endpoints.grpc) as c:
                assert answered_within(PROBE_DEADLINE_S, lambda: c.query(TINY)).num_rows == 3
            assert readers.running()  # the readers still hold their connections
            assert set(readers.read_rest()) == {"CANCELLED"}
    finally:
        srv.stop()


def test_a_stalled_striped_reader_gives_its_slot_back(ccm3_only: Path, tmp_path: Path) -> None:
    clock = Clock()
    srv, _ = limits_server(ccm3_only, clock, tmp_path)
    assert srv.service is not None
    try:
        with dstp.connect(srv.endpoints.grpc) as c:
            stream = c.query_batches("select * from ccm3", transport="striped", streams=2)
            next(iter(stream))  # one batch, then nothing: the window (2 MiB) fills and the server waits
            eventually(lambda: srv.service.admission.held() == 1, "the transfer holds no slot")
            readers_stalled(srv, 1)
            held = srv.service.admission.held
            clock.advance(31)
            eventually(lambda: held() == 0, "the stalled striped transfer kept its slot")
            eventually(lambda: srv._extras[-1].active_transfers() == 0, "the transfer was not ended")
            with pytest.raises(dstp.DstpError):
                for _ in stream:  # its connections were closed: the stream ends in an error, never silently
                    pass
            stream.close()
            assert c.query(TINY, transport="striped").num_rows == 3
    finally:
        srv.stop()


def test_a_stalled_http_reader_gives_its_slot_back(ccm3_only: Path, tmp_path: Path) -> None:
    clock = Clock()
    srv, _ = limits_server(ccm3_only, clock, tmp_path)
    assert srv.service is not None
    try:
        with httpx.Client(base_url=f"http://{srv.endpoints.http}", timeout=30) as http, \
                http.stream("GET", "/query", params={"sql": "select * from ccm3", "format": "csv"}) as r:
            chunks = r.iter_raw()
            next(chunks)  # and nothing more: the server's buffers fill and its send waits
            eventually(lambda: srv.service.admission.held() == 1, "the stream holds no slot")
            readers_stalled(srv, 1)
            clock.advance(31)
            eventually(lambda: srv.service.admission.held() == 0, "the stalled HTTP reader kept its slot")
            with pytest.raises(httpx.HTTPError):  # the body was dropped: incomplete, never mistaken for whole
                for _ in chunks:
                    pass
    finally:
        srv.stop()


# -- everything at once ------------------------------------------------------------------------------

def test_a_second_clients_tiny_query_is_answered_while_every_attack_runs(ccm3_only: Path, tmp_path: Path) -> None:
    """The done-when of issue 13: the planning bomb, stalled readers, trickling HELLOs and half-sent HTTP
    requests all run; alice's tiny queries (gRPC, striped, HTTP) are answered meanwhile."""
    clock = Clock()
    srv, alice = limits_server(ccm3_only, clock, tmp_path)
    assert srv.service is not None and srv.endpoints is not None
    attacks = []
    try:
        readers = StalledGrpcReaders(srv.endpoints.grpc, clients=4)  # anonymous: at most 2 slots (quota)
        attacks.append(readers)
        for _ in range(4):
            assert readers.started.acquire(timeout=30)
        attacks += [PlanningBomb(srv.endpoints.grpc, clients=8),
                    TricklingHellos(srv.endpoints.data, connections=12),
                    HalfSentHttpRequests(srv.endpoints.http, connections=16)]
        eventually(lambda: srv.service.admission.held() >= 2, "the stalled readers hold no slot")
        time.sleep(1.0)  # the attacks are all under way (real seconds; no timer is waited out)
        with dstp.connect(srv.endpoints.grpc, token=alice) as c, \
                httpx.Client(base_url=f"http://{srv.endpoints.http}", timeout=PROBE_DEADLINE_S,
                             headers={"Authorization": f"Bearer {alice}"},
                             # a new connection per probe: alice shares 127.0.0.1 with the half-sent requests,
                             # and the door may close her idle kept one as the address's oldest (a race httpx
                             # reports as 'Server disconnected' on reuse, seen once in a fresh-clone run)
                             limits=httpx.Limits(max_keepalive_connections=0)) as http:
            for _ in range(3):
                assert answered_within(PROBE_DEADLINE_S, lambda: c.query(TINY)).num_rows == 3
                assert answered_within(PROBE_DEADLINE_S, lambda: c.query(TINY, transport="striped")).num_rows == 3
                r = answered_within(PROBE_DEADLINE_S, lambda: http.get("/query", params={"sql": TINY}))
                assert r.status_code == 200 and r.text.count("\n") == 4
        assert all(a.running() for a in attacks), "an attack ended before the probes did"
        usage = srv.service.usage(Principal("anonymous", source="127.0.0.1"))
        assert usage.running <= 2  # anonymous (from this address) never held more than its quota
    finally:
        for attack in attacks:
            attack.stop()
        srv.stop()
    trickle = attacks[2]
    assert isinstance(trickle, TricklingHellos) and trickle.cut > 0  # its connections were dropped, not kept

"""HTTP limits that hold (issue 13): request deadlines, a connection cap, body size, Host, headers, netCDF size.

Findings reproduced with raw sockets and httpx against a real server: 1,000 half-sent requests held
1,000 descriptors for 60 s; a 100 MB POST body was read whole before its length was checked; any Host
was answered (DNS rebinding); no security headers; ``format=nc`` took ~550 MB per 64 MB result. The
deadlines are driven by the server's clock (advanced by hand), never slept out.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Callable, Iterator

import httpx
import pytest

from clock import Clock
from dstp.server import DstpServer
from dstp.settings import Settings

HEADER_NAMES = ("content-security-policy", "x-frame-options", "x-content-type-options", "referrer-policy")


def web_settings(root: Path, **changes: object) -> Settings:
    return Settings(catalog_root=root, port=0, http_port=0, data_port=-1, udt_port=-1).replace(**changes)


def eventually(condition: Callable[[], bool], what: str, seconds: float = 15.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


@pytest.fixture()
def clocked_both(private_catalog: Path) -> Iterator[tuple[DstpServer, Clock, Clock]]:
    """A server of its own whose HTTP deadlines (timer) and wall clock both move only when the test moves them."""
    timer, wall = Clock(), Clock()
    srv = DstpServer(web_settings(private_catalog, http_header_timeout_s=5, http_body_timeout_s=10,
                                  http_max_connections=8, nc_max_result_bytes=200_000), timer=timer, clock=wall)
    srv.start()
    yield srv, timer, wall
    srv.stop()


@pytest.fixture()
def clocked(clocked_both: tuple[DstpServer, Clock, Clock]) -> tuple[DstpServer, Clock]:
    """A server of its own whose HTTP deadlines run on a clock the test moves."""
    return clocked_both[0], clocked_both[1]


def two_sweeps(srv: DstpServer) -> None:
    """Wait until the deadline checker has run twice more (whatever was due by then has been closed)."""
    sweeper = srv._extras[0].connections
    target = sweeper.sweeps + 2
    eventually(lambda: sweeper.sweeps >= target, "the deadline checker stopped sweeping")


def _address(srv: DstpServer) -> tuple[str, int]:
    assert srv.endpoints is not None
    host, port = srv.endpoints.http.rsplit(":", 1)
    return host, int(port)


def _half_sent(srv: DstpServer, count: int, text: bytes = b"GET /datasets.json HTTP/1.1\r\nHost: 127.0.0.1\r\n"
               ) -> list[socket.socket]:
    socks = []
    for _ in range(count):
        sock = socket.create_connection(_address(srv), timeout=10)
        sock.sendall(text)
        socks.append(sock)
        time.sleep(0.01)  # in order: the oldest is the first
    return socks


def _closed(sock: socket.socket) -> bool:
    """Return whether the server closed ``sock`` (whatever it sent before)."""
    sock.setblocking(False)
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        sock.setblocking(True)


def _connections(srv: DstpServer) -> int:
    return len(srv._extras[0].connections.connections)


def test_half_sent_requests_are_closed_at_the_header_deadline(clocked) -> None:
    srv, clock = clocked
    socks = _half_sent(srv, 6)
    try:
        eventually(lambda: _connections(srv) == 6, "the connections were not accepted")
        two_sweeps(srv)  # nothing is due yet
        assert not any(_closed(s) for s in socks)
        clock.advance(6)
        eventually(lambda: all(_closed(s) for s in socks), "half-sent requests are still held")
        eventually(lambda: _connections(srv) == 0, "their descriptors were not given back")
        with httpx.Client(base_url=f"http://{srv.endpoints.http}") as http:
            assert http.get("/datasets.json").status_code == 200
    finally:
        for s in socks:
            s.close()


def test_a_step_of_the_wall_clock_cuts_no_connection(clocked_both) -> None:
    """Deadlines run on the monotonic timer: an NTP step (here a year) leaves waiting and kept-alive connections be."""
    srv, timer, wall = clocked_both
    [sock] = _half_sent(srv, 1)
    with httpx.Client(base_url=f"http://{srv.endpoints.http}") as http:
        try:
            assert http.get("/datasets.json").status_code == 200  # a kept-alive connection
            eventually(lambda: _connections(srv) == 2, "the connections were not accepted")
            wall.advance(365 * 86400)
            two_sweeps(srv)
            assert not _closed(sock) and _connections(srv) == 2
            assert http.get("/datasets.json").status_code == 200
            timer.advance(6)
            eventually(lambda: _closed(sock), "the header deadline no longer closes a half-sent request")
        finally:
            sock.close()


def test_a_body_that_never_arrives_is_cut_at_the_body_deadline(clocked) -> None:
    srv, clock = clocked
    [sock] = _half_sent(srv, 1, b"POST /query HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n"
                                b"content-length: 500\r\n\r\n{\"sql\": \"select")
    try:
        clock.advance(6)  # past the header deadline: the headers are in, the body's own deadline counts
        two_sweeps(srv)
        assert not _closed(sock)
        clock.advance(5)
        eventually(lambda: _closed(sock), "a body that never arrives held its connection")
    finally:
        sock.close()


def test_at_the_connection_cap_the_oldest_waiting_connection_makes_room(clocked) -> None:
    srv, _ = clocked
    socks = _half_sent(srv, 8)
    try:
        eventually(lambda: _connections(srv) == 8, "the connections were not accepted")
        with httpx.Client(base_url=f"http://{srv.endpoints.http}", timeout=10) as first, \
                httpx.Client(base_url=f"http://{srv.endpoints.http}", timeout=10) as second:
            # each new connection over the cap closes the oldest one still sending its request
            assert first.get("/datasets.json").status_code == 200
            assert second.get("/datasets.json").status_code == 200
            assert [_closed(s) for s in socks[:2]] == [True, True]
            assert not any(_closed(s) for s in socks[2:])
            assert _connections(srv) == 8
    finally:
        for s in socks:
            s.close()


def test_a_large_body_is_refused_from_its_length_before_it_is_read(web_server) -> None:
    host, port = _address(web_server)
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(b"POST /query HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n"
                     b"content-length: 100000000\r\n\r\n")  # 100 MB announced, not a byte of it sent
        reply = b""
        while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 400"), reply[:200]
    assert b"100,000,000 bytes" in reply and b"http_max_body_bytes" in reply


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8080", "127.0.0.1.evil.example"])
def test_a_foreign_host_header_is_refused(http, host: str) -> None:
    r = http.get("/datasets.json", headers={"Host": host})
    assert r.status_code == 400 and "allowed_hosts" in r.json()["error"]["message"]
    assert http.get("/datasets.json").status_code == 200  # the server's own address


def test_allowed_hosts_name_the_proxy_names(private_catalog: Path) -> None:
    with DstpServer(web_settings(private_catalog, allowed_hosts=("data.example.org",))) as srv, \
            httpx.Client(base_url=f"http://{srv.endpoints.http}") as http:
        assert http.get("/datasets.json", headers={"Host": "data.example.org"}).status_code == 200
        assert http.get("/datasets.json", headers={"Host": "data.example.org:443"}).status_code == 200
        assert http.get("/datasets.json").status_code == 400  # 127.0.0.1 is not listed


@pytest.mark.parametrize("path", ["/", "/index.json", "/datasets/ccm3", "/static/dstp.css", "/nosuch",
                                  "/query?sql=select+nosuch+from+ccm3", "/query?sql=select+lat+from+ccm3",
                                  "/api", "/usage.json"])
def test_every_response_carries_the_security_headers(http, path: str) -> None:
    r = http.get(path)
    for name in HEADER_NAMES:
        assert name in r.headers, (path, r.status_code, name)
    assert r.headers["x-frame-options"] == "DENY" and r.headers["x-content-type-options"] == "nosniff"
    assert "frame-ancestors 'none'" in r.headers["content-security-policy"]


def test_netcdf_results_are_bounded_with_a_clear_error(clocked) -> None:
    srv, _ = clocked
    with httpx.Client(base_url=f"http://{srv.endpoints.http}", timeout=60) as http:
        small = http.get("/query", params={"sql": "select * from ccm3 where lat > 80 and lev = 850", "format": "nc"})
        assert small.status_code == 200 and small.content.startswith(b"\x89HDF")
        big = http.get("/query", params={"sql": "select * from ccm3", "format": "nc"})
        assert big.status_code == 429 and big.json()["error"]["code"] == "limit_exceeded"
        assert "nc_max_result_bytes=200,000" in big.json()["error"]["message"]
        assert "format=parquet" in big.json()["error"]["message"]
        assert http.get("/query", params={"sql": "select * from ccm3", "format": "parquet"}).status_code == 200
    assert srv.service is not None and srv.service.wait_idle(10)


def test_usage_is_visible_to_the_user(http) -> None:
    body = http.get("/usage.json").json()
    assert body["principal"] == "anonymous"
    assert set(body["queries"]) == {"running", "waiting", "limit"} and body["queries"]["limit"] >= 1
    assert body["bytes_today"]["used"] >= 0 and "resets_at_unix" in body["bytes_today"]

"""How the client measures a path's round trip: one Ping to set the connection up, then the rest at once.

The Pings go through the policy's ``ping`` seam (the client passes its gRPC Ping); here a function
that records what it was asked, so that the count and the overlap are what is checked.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from dstp.client._policy import LOOPBACK_RTT_S, RTT_CHECK_BELOW_S, RTT_SAMPLES, ChannelPolicy
from dstp.errors import DstpError
from dstp.transport.client.tuning import AutoTuner


class Pings:
    """A ping function: the first call answers ``setup``; the next ``together`` meet at a barrier; all answer
    ``later`` in turn."""

    def __init__(self, setup: float, later: list[float], together: int) -> None:
        self.setup, self.later = setup, list(later)
        self.calls = 0
        self.lock = threading.Lock()
        self.together = together
        self.barrier = threading.Barrier(together, timeout=10) if together > 1 else None
        self.fail_with: BaseException | None = None

    def __call__(self) -> float:
        with self.lock:
            self.calls += 1
            first = self.calls == 1 and self.setup > 0
            grouped = not first and self.calls - (self.setup > 0) <= self.together
            answer = self.setup if first else self.later.pop(0)
        if grouped and self.barrier is not None:
            self.barrier.wait()  # breaks (BrokenBarrierError) unless the Pings are in flight together
        if self.fail_with is not None and not first:
            raise self.fail_with
        return answer


def _policy(tmp_path: Path, ping: Pings) -> ChannelPolicy:
    return ChannelPolicy("grpc://far:50051", ping, AutoTuner(tmp_path / "tuning.json"), keep_connections=False)


def test_a_new_client_pings_once_then_the_rest_together(tmp_path: Path) -> None:
    ping = Pings(setup=0.350, later=[0.112, 0.110], together=RTT_SAMPLES - 1)
    policy = _policy(tmp_path, ping)
    assert policy.rtt() == pytest.approx(0.110)  # the least sample; the set-up one is not it
    assert ping.calls == RTT_SAMPLES
    assert policy.rtt() == pytest.approx(0.110) and ping.calls == RTT_SAMPLES  # remembered: no more Pings


def test_only_the_missing_samples_are_taken(tmp_path: Path) -> None:
    ping = Pings(setup=0.0, later=[0.121, 0.119], together=2)
    policy = _policy(tmp_path, ping)
    policy.observe_rtt(0.130)  # e.g. a Ping the user asked for
    assert policy.rtt() == pytest.approx(0.119)
    assert ping.calls == 2

    one_more = Pings(setup=0.0, later=[0.125], together=1)
    policy = _policy(tmp_path, one_more)
    policy.observe_rtt(0.2)
    policy.observe_rtt(0.118)
    assert policy.rtt() == pytest.approx(0.118) and one_more.calls == 1


def test_a_ping_that_fails_fails_the_estimate(tmp_path: Path) -> None:
    ping = Pings(setup=0.05, later=[0.01, 0.01], together=2)
    ping.fail_with = DstpError("server went away")
    policy = _policy(tmp_path, ping)
    with pytest.raises(DstpError, match="server went away"):
        policy.rtt()


def test_on_a_fast_path_one_more_ping_is_taken_alone(tmp_path: Path) -> None:
    # Two Pings at once on a busy loopback read several ms; one alone reads what the path takes.
    fast = RTT_CHECK_BELOW_S / 4
    ping = Pings(setup=0.012, later=[fast, fast * 1.1, 0.0009], together=RTT_SAMPLES - 1)
    policy = _policy(tmp_path, ping)
    assert policy.rtt() == pytest.approx(0.0009)
    assert ping.calls == RTT_SAMPLES + 1


def test_on_a_long_path_no_ping_is_added(tmp_path: Path) -> None:
    ping = Pings(setup=0.350, later=[RTT_CHECK_BELOW_S * 5, RTT_CHECK_BELOW_S * 6], together=RTT_SAMPLES - 1)
    assert _policy(tmp_path, ping).rtt() == pytest.approx(RTT_CHECK_BELOW_S * 5)
    assert ping.calls == RTT_SAMPLES


@pytest.mark.parametrize("target", ["127.0.0.1:50051", "localhost:50051", "[::1]:50051", "127.0.0.2:1"])
def test_a_server_on_this_host_is_never_pinged_for_auto(tmp_path: Path, target: str) -> None:
    calls: list[int] = []

    def ping() -> float:
        calls.append(1)
        return 0.0003

    policy = ChannelPolicy(target, ping, AutoTuner(tmp_path / "tuning.json"), keep_connections=False)
    assert policy.rtt() == LOOPBACK_RTT_S and calls == []
    choice = policy.choose("auto", compression="auto")
    assert calls == []  # neither the stripe plan nor the codec asked for a round trip
    assert choice.compression == "none" and choice.rtt_s == LOOPBACK_RTT_S
    policy.observe_rtt(0.0004)  # a Ping the user took is used
    assert policy.rtt() == pytest.approx(0.0004) and calls == []


@pytest.mark.parametrize("target", ["10.1.2.3:50051", "far.example.org:50051", "localhostx:1"])
def test_a_server_elsewhere_is_still_pinged(tmp_path: Path, target: str) -> None:
    calls: list[int] = []

    def ping() -> float:
        calls.append(1)
        return 0.030

    policy = ChannelPolicy(target, ping, AutoTuner(tmp_path / "tuning.json"), keep_connections=False)
    assert policy.rtt() == pytest.approx(0.030) and len(calls) == RTT_SAMPLES


def test_a_new_client_measures_with_handshakes_while_it_connects_and_pings_not(tmp_path: Path) -> None:
    calls: list[str] = []
    lock = threading.Lock()

    def handshake() -> float:
        with lock:
            calls.append("handshake")
        return 0.111 + 0.001 * len(calls)

    def ping() -> float:
        calls.append("ping")
        return 0.2

    policy = ChannelPolicy("10.1.2.3:50051", ping, AutoTuner(tmp_path / "t.json"), keep_connections=False,
                           handshake=handshake, connect=lambda: calls.append("connect"))
    assert policy.rtt() == pytest.approx(0.112)
    assert sorted(calls) == ["connect"] + ["handshake"] * RTT_SAMPLES  # no Ping before the first request
    policy.choose("auto", compression="auto")
    assert "ping" not in calls and len(calls) == RTT_SAMPLES + 1  # the samples serve the choices after


def test_handshakes_that_fail_leave_it_to_pings(tmp_path: Path) -> None:
    pings: list[int] = []

    def refused() -> float:
        raise ConnectionRefusedError(111, "Connection refused")

    def ping() -> float:
        pings.append(1)
        return 0.05

    policy = ChannelPolicy("10.1.2.3:50051", ping, AutoTuner(tmp_path / "t.json"), keep_connections=False,
                           handshake=refused)
    assert policy.rtt() == pytest.approx(0.05) and len(pings) == RTT_SAMPLES


def test_a_handshake_with_a_real_server_is_timed_and_a_closed_port_refuses(server) -> None:
    from dstp.client._policy import handshake_seconds

    assert 0 < handshake_seconds(server.endpoints.grpc, 5.0) < 5.0
    with pytest.raises(OSError):
        handshake_seconds("127.0.0.1:1", 5.0)
    with pytest.raises(OSError):
        handshake_seconds("unix:/tmp/nothing", 5.0)

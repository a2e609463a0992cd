"""Userspace WAN path emulator: two network namespaces joined by a delay/loss/rate-limiting relay.

Typical use in a benchmark::

    from bench.wan import WanPath, iperf3

    with WanPath.up(rtt_ms=100, rate_bps=1e9, loss=1e-4, mtu=9000) as path:
        print(iperf3(path, streams=8, seconds=10, congestion="bbr"))
        proc = path.run_in(path.server_ns, ["python3", "-m", "dstp.cli", "serve", ...])

See docs/wan-emulator.md; the command line is ``python -m bench.wan up|down|check|stats``.
"""

from bench.wan.checks import iperf3, loss_verdict, ping_rtt, self_check
from bench.wan.netns import CLIENT_ADDR, SERVER_ADDR, STOCK_TCP_RMEM, STOCK_TCP_WMEM, leftovers
from bench.wan.path import WanPath, teardown
from bench.wan.units import parse_queue, parse_rate, parse_size, parse_time

__all__ = [
    "CLIENT_ADDR", "SERVER_ADDR", "STOCK_TCP_RMEM", "STOCK_TCP_WMEM", "WanPath", "iperf3", "leftovers",
    "loss_verdict", "parse_queue", "parse_rate", "parse_size", "parse_time", "ping_rtt", "self_check",
    "teardown",
]

"""Measurements on a WAN path: ping RTT, iperf3 throughput, observed loss, and the self-check.

Functions take any object with ``server_ns``, ``client_ns``, ``server_addr``, ``client_addr`` and
``stats()`` (a :class:`bench.wan.path.WanPath`).
"""

from __future__ import annotations

import json
import math
import random
import re
import shutil
import statistics
import subprocess
import sys
import time
from typing import Any, Callable, Protocol

from bench.wan.netns import ns_exec, pid_alive, sh
from bench.wan.relay import REPO_ROOT

RTT_TOLERANCE = 0.05  # relative; plus RTT_SLACK_MS absolute (scheduling jitter of the relay)
RTT_SLACK_MS = 0.3
RATE_TOLERANCE = 0.10
LOSS_SIGMAS = 4.0


class WanLike(Protocol):
    """What the measurements need from a path."""

    server_ns: str
    client_ns: str
    server_addr: str
    client_addr: str

    def stats(self) -> dict[str, Any]:
        """Return the relay counters."""
        ...


def ping_rtt(path: WanLike, count: int = 20, interval_s: float = 0.05) -> dict[str, Any]:
    """Return RTT statistics (ms) of ``count`` pings from the client to the server namespace."""
    if shutil.which("ping"):
        argv = ["ping", "-n", "-c", str(count), "-i", str(interval_s), "-W", "3", path.server_addr]
        out = sh(ns_exec(path.client_ns, argv), check=False, timeout=count * interval_s + 30).stdout
        rtts = [float(m) for m in re.findall(r"time=([0-9.]+) ms", out)]
        tool = "ping"  # per-packet times have 3 significant digits (1 ms steps from 100 ms on)
        summary = re.search(r"= ([0-9.]+)/([0-9.]+)/([0-9.]+)/([0-9.]+) ms", out)
    else:
        argv = [sys.executable, "-m", "bench.wan.pingprobe", path.server_addr, str(count), str(interval_s)]
        proc = subprocess.run(ns_exec(path.client_ns, argv), capture_output=True, text=True, cwd=REPO_ROOT,
                              timeout=count * interval_s + 30, stdin=subprocess.DEVNULL)
        rtts = json.loads(proc.stdout)["rtts_ms"] if proc.returncode == 0 else []
        tool = "pingprobe"
        summary = None
    if not rtts:
        return {"tool": tool, "sent": count, "received": 0}
    out_doc = {"tool": tool, "sent": count, "received": len(rtts), "median_ms": statistics.median(rtts),
               "avg_ms": statistics.fmean(rtts), "min_ms": min(rtts), "max_ms": max(rtts),
               # the least per-packet time, at the median's own resolution (the summary's min is finer)
               "packet_min_ms": min(rtts)}
    if summary:  # ping's summary line has microsecond resolution
        out_doc.update(min_ms=float(summary[1]), avg_ms=float(summary[2]), max_ms=float(summary[3]))
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in out_doc.items()}


def rtt_verdict(ping: dict[str, Any], target_ms: float) -> dict[str, Any]:
    """Judge one ping run against the RTT the path should have.

    The relay holds every packet until its time is due; the host's scheduler can only make it later.
    So the *minimum* RTT measures the delay the emulator imposes, and median − minimum (``jitter_ms``, both
    per-packet times of one resolution: ping prints 3 significant digits per packet and microseconds in its
    summary, so the summary's minimum can exceed a median of rounded times) measures what the load added. The verdict is on the minimum; the jitter is
    reported beside it (a loaded machine shows a large jitter, not a wrong path).
    """
    tol_ms = target_ms * RTT_TOLERANCE + RTT_SLACK_MS
    low, median = ping.get("min_ms"), ping.get("median_ms")
    packet_low = ping.get("packet_min_ms", low)
    return {"measured_ms": low, "target_ms": target_ms, "tolerance_ms": round(tol_ms, 3), "statistic": "min",
            **{k: v for k, v in ping.items() if k != "min_ms"},
            "jitter_ms": round(median - packet_low, 3) if packet_low is not None and median is not None else None,
            "pass": low is not None and abs(low - target_ms) <= tol_ms}


def rtt_check(
    path: WanLike, target_ms: float, count: int = 20, ping: Callable[..., dict[str, Any]] | None = None
) -> dict[str, Any]:
    """Return the RTT verdict; ping a second time (once) when every packet of the first run was late.

    A first run whose minimum is too *high* can be the machine's load (every ping delayed); the second
    run decides and the first is kept under ``first_attempt``. A minimum too *low* means the emulator
    does not delay as asked: that fails at once. ``ping`` is the probe (default :func:`ping_rtt`).
    """
    probe = ping or ping_rtt
    first = rtt_verdict(probe(path, count=count), target_ms)
    low = first["measured_ms"]
    if first["pass"] or low is None or low < target_ms:
        return {**first, "attempts": 1}
    second = rtt_verdict(probe(path, count=count), target_ms)
    return {**second, "attempts": 2, "first_attempt": {k: first[k] for k in ("measured_ms", "median_ms", "jitter_ms")
                                                        if k in first}}


def _wait_listening(ns: str, port: int, timeout_s: float = 5.0) -> bool:
    """Return True once a TCP socket listens on ``port`` in ``ns`` (False after ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        out = sh(ns_exec(ns, ["ss", "-Hltn", f"sport = :{port}"]), check=False).stdout
        if out.strip():
            return True
        time.sleep(0.05)
    return False


def _relay_delta(before: dict[str, Any], after: dict[str, Any], wall_s: float) -> dict[str, Any]:
    """Return the relay's CPU % and counter increments (both directions) between two snapshots."""
    cpu = (after["cpu_user_s"] + after["cpu_sys_s"]) - (before["cpu_user_s"] + before["cpu_sys_s"])
    out: dict[str, Any] = {"cpu_pct": round(100 * cpu / wall_s, 1) if wall_s > 0 else None}
    for key in ("rx_packets", "tx_packets", "drop_loss", "drop_queue", "drop_ring", "write_errors"):
        out[key] = sum(after["dirs"][d][key] - before["dirs"][d][key] for d in after["dirs"])
    out["max_backlog_bytes"] = max(d["max_backlog_bytes"] for d in after["dirs"].values())
    return out


def iperf3(
    path: WanLike,
    streams: int = 8,
    seconds: float = 10,
    congestion: str | None = None,
    reverse: bool = False,
    omit: float | None = None,
    extra: list[str] | None = None,
) -> dict[str, Any]:
    """Return throughput (Mb/s), retransmits, CPU and relay counters of one iperf3 run over ``path``.

    The server runs in the server namespace, the client in the client namespace; by default data
    flows client -> server (``reverse=True``: server -> client). ``congestion`` sets the per-socket
    TCP_CONGESTION (``iperf3 -C``), which works in a namespace for any *available* algorithm even
    when it is not in tcp_allowed_congestion_control (we are root). ``omit`` drops the first seconds
    (slow start) from the averages; default: 2 s for runs of 8 s or longer, else 0.
    """
    if shutil.which("iperf3") is None:
        raise RuntimeError("iperf3 is not installed (apt-get install -y iperf3)")
    if omit is None:
        omit = 2 if seconds >= 8 else 0
    port = random.randint(20000, 60000)
    server = ns_exec(path.server_ns, ["iperf3", "-s", "-1", "-B", path.server_addr, "-p", str(port)])
    client = ["iperf3", "-c", path.server_addr, "-B", path.client_addr, "-p", str(port), "-P", str(streams),
              "-t", str(seconds), "-O", str(omit), "-J", *(["-C", congestion] if congestion else []),
              *(["-R"] if reverse else []), *(extra or [])]
    with subprocess.Popen(server, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL) as srv:
        try:
            if not _wait_listening(path.server_ns, port):
                raise RuntimeError("iperf3 server did not start listening")
            before, t0 = path.stats(), time.monotonic()
            proc = sh(ns_exec(path.client_ns, client), check=False, timeout=seconds + omit + 60)
            wall = time.monotonic() - t0
            after = path.stats()
        finally:
            if srv.poll() is None:
                srv.terminate()
            try:
                srv.wait(timeout=5)
            except subprocess.TimeoutExpired:
                srv.kill()
                srv.wait(timeout=5)
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise RuntimeError(f"iperf3 failed: {proc.stderr.strip() or proc.stdout[-500:]}") from None
    if "error" in doc:
        raise RuntimeError(f"iperf3 failed: {doc['error']}")
    end = doc["end"]
    cpu = end.get("cpu_utilization_percent", {})
    return {
        "mbps": round(end["sum_received"]["bits_per_second"] / 1e6, 1),
        "sent_mbps": round(end["sum_sent"]["bits_per_second"] / 1e6, 1),
        "retransmits": end["sum_sent"].get("retransmits"),
        "streams": streams, "seconds": seconds, "omit": omit, "reverse": reverse,
        "congestion": end.get("sender_tcp_congestion") or congestion,
        "cpu_host_pct": round(cpu.get("host_total", 0.0), 1),
        "cpu_remote_pct": round(cpu.get("remote_total", 0.0), 1),
        "relay": _relay_delta(before, after, wall),
    }


def loss_verdict(seen: int, dropped: int, loss: float, burst_len: float = 0.0) -> dict[str, Any]:
    """Return observed vs configured loss with a pass flag (binomial/Markov tolerance, 4 sigma).

    "Observed loss" = packets the relay dropped on purpose (random loss) / packets it read from the
    TUN devices, over both directions. Queue-overflow drops are not counted: they are congestion.
    With Gilbert-Elliott bursts the variance grows by (1+rho)/(1-rho), rho = 1 - p - r.
    """
    expected = seen * loss
    factor = 1.0
    if burst_len > 0 and loss > 0:
        r = 1.0 / burst_len
        p = loss * r / (1.0 - loss)
        rho = 1.0 - p - r
        factor = (1 + rho) / (1 - rho) if rho < 1 else 1.0
    tolerance = LOSS_SIGMAS * math.sqrt(expected * (1 - loss) * factor) + 2 * max(1.0, burst_len)
    if loss == 0:
        tolerance = 0.0
    return {"observed": dropped / seen if seen else None, "target": loss, "packets": seen, "dropped": dropped,
            "expected_drops": round(expected, 1), "tolerance_drops": round(tolerance, 1),
            "pass": abs(dropped - expected) <= tolerance if seen else None}


def self_check(
    path: Any, seconds: float = 12, streams: int = 8, ping_count: int = 20, congestion: str | None = "auto"
) -> dict[str, Any]:
    """Return the RTT, rate and loss checks ({measured, target, pass}) and an overall ``ok``.

    ``path`` is a WanPath. The rate check uses BBR (per socket) when available, so that it tests
    the emulator's capacity rather than a loss-based congestion control's reaction to random loss.
    ``seconds=0`` skips iperf3 (the loss check then only sees the ping packets).
    """
    before = path.stats()
    out: dict[str, Any] = {"rtt": rtt_check(path, path.rtt_s * 1000, ping_count)}
    if seconds <= 0:
        out["rate"] = {"pass": None, "skipped": "seconds=0"}
    elif shutil.which("iperf3") is None:
        out["rate"] = {"pass": None, "skipped": "iperf3 not installed"}
    elif path.rate_bps <= 0:
        out["rate"] = {"pass": None, "skipped": "rate unlimited"}
    else:
        if congestion == "auto":
            avail = sh(ns_exec(path.client_ns, ["sysctl", "-n", "net.ipv4.tcp_available_congestion_control"]),
                       check=False).stdout.split()
            congestion = "bbr" if "bbr" in avail else None
        run = iperf3(path, streams=streams, seconds=seconds, congestion=congestion)
        target = path.rate_bps / 1e6
        out["rate"] = {"measured_mbps": run["mbps"], "target_mbps": target, "tolerance": RATE_TOLERANCE,
                       "pass": abs(run["mbps"] - target) <= RATE_TOLERANCE * target, "iperf3": run}
    after = path.stats()
    seen = sum(after["dirs"][d]["rx_packets"] - before["dirs"][d]["rx_packets"] for d in after["dirs"])
    dropped = sum(after["dirs"][d]["drop_loss"] - before["dirs"][d]["drop_loss"] for d in after["dirs"])
    out["loss"] = loss_verdict(seen, dropped, path.loss, path.burst_len)
    out["relay_alive"] = pid_alive(path.pid)
    out["ok"] = all(c.get("pass") is not False for c in (out["rtt"], out["rate"], out["loss"])) and out["relay_alive"]
    return out

"""Pure-Python fallback of the WAN relay (same model, options and stats file as relay.c).

Run as ``python -m bench.wan.pyrelay --srv-ns /run/netns/A --cli-ns /run/netns/B ...``;
normally started by :mod:`bench.wan.relay` when no C compiler is available. It keeps up
with ~1 Gb/s at MTU 9000 but not at MTU 1500 (see docs/wan-emulator.md).
"""

from __future__ import annotations

import argparse
import bisect
import ctypes
import errno
import fcntl
import json
import os
import random
import resource
import select
import signal
import struct
import sys
import time
from collections import deque

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
CLONE_NEWNET = 0x40000000
READ_BATCH = 128
STATS_PERIOD_S = 0.25
LATE_BOUNDS = (1e-4, 1e-3, 1e-2, 1e-1)  # late_hist_ms buckets: <0.1, <1, <10, <100, >=100 ms
# epoll rounds timeouts up to whole milliseconds: ask to wake this much early (EWMA of the measured
# oversleep) and deliver every packet due within the lead, so the mean delivery error is ~0 (packets
# leave up to the lead early, about 1 ms for this relay; relay.c's lead is tens of microseconds).
MAX_LEAD_S = 0.002


def open_tun_in(ns_path: str, dev: str) -> int:
    """Return a non-blocking TUN fd attached to ``dev`` inside the namespace at ``ns_path``."""
    libc = ctypes.CDLL(None, use_errno=True)
    nsfd = os.open(ns_path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(nsfd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({ns_path}): {os.strerror(err)}")
    finally:
        os.close(nsfd)
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_CLOEXEC | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", dev.encode(), IFF_TUN | IFF_NO_PI))
    return fd


class Direction:
    """One direction of the path: loss, drop-tail rate limiter and delay line."""

    def __init__(self, name: str, in_fd: int, out_fd: int, args: argparse.Namespace, seed: int) -> None:
        self.name, self.in_fd, self.out_fd = name, in_fd, out_fd
        self.delay = args.delay
        self.rate = args.rate
        self.queue_bytes = args.queue
        self.mtu = args.mtu
        self.loss = args.loss
        self.burst_len = args.burst_len
        self.ge_r = 1.0 / args.burst_len if args.burst_len > 0 else 0.0
        self.ge_p = args.loss * self.ge_r / (1.0 - args.loss) if args.burst_len > 0 else 0.0
        self.ge_bad = False
        self.rng = random.Random(seed)
        self.link_free = 0.0
        self.line: deque[tuple[float, bytes]] = deque()
        self.c = dict.fromkeys(
            ("rx_packets", "rx_bytes", "tx_packets", "tx_bytes", "drop_loss", "drop_queue", "drop_ring",
             "drop_oversize", "write_errors", "queued_packets", "max_backlog_bytes"), 0)
        self.late_sum = 0.0
        self.late_max = 0.0
        self.late_hist = [0] * 5  # late by <0.1, <1, <10, <100, >=100 ms

    def lose(self) -> bool:
        """Return True when the emulated link loses the next packet."""
        if self.loss <= 0:
            return False
        if self.burst_len <= 0:
            return self.rng.random() < self.loss
        if self.ge_bad:
            if self.rng.random() < self.ge_r:
                self.ge_bad = False
        elif self.rng.random() < self.ge_p:
            self.ge_bad = True
        return self.ge_bad

    def read_batch(self) -> None:
        """Return after reading up to READ_BATCH packets from the input TUN."""
        c = self.c
        for _ in range(READ_BATCH):
            try:
                pkt = os.read(self.in_fd, 65536)
            except BlockingIOError:
                return
            now = time.monotonic()
            n = len(pkt)
            c["rx_packets"] += 1
            c["rx_bytes"] += n
            if n > self.mtu:
                c["drop_oversize"] += 1
                continue
            if self.loss > 0 and self.lose():
                c["drop_loss"] += 1
                continue
            start = self.link_free if self.link_free > now else now
            if self.rate > 0:
                backlog = (start - now) * self.rate / 8
                if backlog + n > self.queue_bytes:
                    c["drop_queue"] += 1
                    continue
                done = start + n * 8 / self.rate
                if backlog + n > c["max_backlog_bytes"]:
                    c["max_backlog_bytes"] = int(backlog + n)
            else:
                done = start
            self.link_free = done
            self.line.append((done + self.delay, pkt))

    def deliver_due(self, now: float, lead: float) -> float:
        """Return the deliver time of the next waiting packet (inf if none) after writing due ones."""
        line, c = self.line, self.c
        while line:
            t, pkt = line[0]
            if t > now + lead:
                return t
            line.popleft()
            try:
                os.write(self.out_fd, pkt)
                c["tx_packets"] += 1
                c["tx_bytes"] += len(pkt)
                late = now - t
                self.late_sum += late
                if late > self.late_max:
                    self.late_max = late
                self.late_hist[bisect.bisect_right(LATE_BOUNDS, late)] += 1
            except OSError:
                c["write_errors"] += 1
        return float("inf")


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Return the relay options (the same long options relay.c takes)."""
    p = argparse.ArgumentParser(prog="bench.wan.pyrelay")
    p.add_argument("--srv-ns", required=True)
    p.add_argument("--cli-ns", required=True)
    p.add_argument("--dev", default="dstpwan0")
    p.add_argument("--delay", type=float, default=0.0)
    p.add_argument("--rate", type=float, default=0.0)
    p.add_argument("--queue", type=int, default=-1)
    p.add_argument("--loss", type=float, default=0.0)
    p.add_argument("--burst-len", type=float, default=0.0)
    p.add_argument("--mtu", type=int, default=1500)
    p.add_argument("--seed", type=lambda s: int(s, 0), default=0)
    p.add_argument("--stats", required=True)
    p.add_argument("--pid-file")
    a = p.parse_args(argv)
    problems = []
    if not 68 <= a.mtu <= 65536:
        problems.append("--mtu must be in [68, 65536]")
    if not 0 <= a.delay <= 10:
        problems.append("--delay must be in [0, 10] seconds")
    if not 0 <= a.loss < 1:
        problems.append("--loss must be in [0, 1)")
    if a.burst_len != 0 and a.burst_len < 1:
        problems.append("--burst-len must be >= 1 (or 0: Bernoulli)")
    if a.rate < 0:
        problems.append("--rate must be >= 0 (0: unlimited)")
    if a.rate > 0 and a.queue < a.mtu:
        problems.append("--queue must hold at least one MTU-sized packet")
    if problems:
        print("relay: invalid configuration: " + "; ".join(problems), file=sys.stderr)
        sys.exit(2)
    return a


class Relay:
    """The relay loop over both directions, with its stats file."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        srv = open_tun_in(args.srv_ns, args.dev)
        cli = open_tun_in(args.cli_ns, args.dev)
        seed = args.seed or (time.monotonic_ns() ^ (os.getpid() << 32))
        self.dirs = [Direction("srv_to_cli", srv, cli, args, seed + 1),
                     Direction("cli_to_srv", cli, srv, args, seed + 2)]
        self.by_fd = {srv: self.dirs[0], cli: self.dirs[1]}
        self.start = time.monotonic()
        self.seq = 0
        self.stop = False
        self.dump = False
        self.lead = 0.0  # EWMA of how late epoll wakes us (see MAX_LEAD_S)

    def write_stats(self, state: str) -> None:
        """Return after atomically rewriting the stats file."""
        self.seq += 1
        ru = resource.getrusage(resource.RUSAGE_SELF)
        dirs = {}
        for d in self.dirs:
            d.c["queued_packets"] = len(d.line)
            sent = d.c["tx_packets"]
            dirs[d.name] = {**d.c, "late_mean_us": round(d.late_sum * 1e6 / sent, 1) if sent else 0.0,
                            "late_max_us": round(d.late_max * 1e6, 1),
                            "late_hist_ms": dict(zip(("<0.1", "<1", "<10", "<100", ">=100"), d.late_hist))}
        doc = {"kind": "python", "pid": os.getpid(), "state": state, "seq": self.seq,
               "uptime_s": time.monotonic() - self.start, "cpu_user_s": ru.ru_utime, "cpu_sys_s": ru.ru_stime,
               "ring_bytes": 0, "queue_bytes": self.args.queue, "wake_lead_us": round(self.lead * 1e6, 1),
               "dirs": dirs}
        tmp = self.args.stats + ".tmp"
        with open(tmp, "w") as f:
            f.write(json.dumps(doc) + "\n")
        os.replace(tmp, self.args.stats)

    def run(self) -> None:
        """Return when SIGTERM/SIGINT arrives or a TUN device disappears."""
        signal.signal(signal.SIGTERM, lambda *_: setattr(self, "stop", True))
        signal.signal(signal.SIGINT, lambda *_: setattr(self, "stop", True))
        signal.signal(signal.SIGHUP, lambda *_: setattr(self, "stop", True))
        signal.signal(signal.SIGUSR1, lambda *_: setattr(self, "dump", True))
        poller = select.epoll()
        for fd in self.by_fd:
            poller.register(fd, select.EPOLLIN)
        self.write_stats("running")
        next_stats = time.monotonic() + STATS_PERIOD_S
        try:
            while not self.stop:
                now = time.monotonic()
                nxt = min(d.deliver_due(now, self.lead) for d in self.dirs) - self.lead
                if self.dump or now >= next_stats:
                    self.write_stats("running")
                    self.dump = False
                    next_stats = now + STATS_PERIOD_S
                wake = min(nxt, next_stats)
                timeout = max(0.0, wake - now)
                try:
                    events = poller.poll(timeout)
                except InterruptedError:
                    continue
                if not events and wake == nxt and timeout > 0:
                    over = max(0.0, time.monotonic() - wake)
                    self.lead = min(MAX_LEAD_S, self.lead + (over - self.lead) / 8)
                for fd, ev in events:
                    if ev & (select.EPOLLERR | select.EPOLLHUP):
                        print("relay: TUN device gone", file=sys.stderr)
                        self.stop = True
                    elif ev & select.EPOLLIN:
                        self.by_fd[fd].read_batch()
        except OSError as exc:
            if exc.errno not in (errno.EBADFD, errno.EIO):
                raise
            print(f"relay: TUN device gone: {exc}", file=sys.stderr)
        finally:
            poller.close()
            self.write_stats("stopped")


def main(argv: list[str] | None = None) -> int:
    """Return the relay's exit status after it has been stopped."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.pid_file:
        with open(args.pid_file, "w") as f:
            f.write(f"{os.getpid()}\n")
    Relay(args).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())

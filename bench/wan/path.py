"""WanPath: bring an emulated WAN path up and down, and run things across it.

A path named ``NAME`` (must start with ``dstpwan``) is two namespaces ``NAME-srv`` and
``NAME-cli``, one TUN device ``dstpwan0`` in each, a relay process between them, and a state
directory ``/run/dstp-wan/NAME/`` (``~/.cache/dstp/wan/run/NAME/`` when not root) holding
``state.json``, ``stats.json``, ``relay.pid`` and ``relay.log``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator

from bench.wan import checks, netns, relay
from bench.wan.units import parse_queue

STATE_ROOT = Path("/run/dstp-wan") if os.geteuid() == 0 else relay.CACHE_DIR / "run"
LOCK_TIMEOUT_S = 120.0
FAIL_AT_ENV = "DSTP_WAN_FAIL_AT"  # test hook: "netns" or "relay" raises right after that stage of `up`


def state_dir(name: str) -> Path:
    """Return the state directory of path ``name``."""
    return STATE_ROOT / netns.check_name(name)


def default_cpu() -> str:
    """Return the CPU the relay is pinned to by default: the machine's last one."""
    return str(max(0, (os.cpu_count() or 1) - 1))


def _fail_hook(stage: str) -> None:
    """Return unless the test hook asks `up` to fail after ``stage``."""
    if os.environ.get(FAIL_AT_ENV) == stage:
        raise RuntimeError(f"injected failure after stage {stage!r} ({FAIL_AT_ENV})")


@contextlib.contextmanager
def setup_lock(timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Return a context holding the machine-wide lock that serialises setting paths up and down."""
    STATE_ROOT.mkdir(parents=True, exist_ok=True)
    with open(STATE_ROOT / ".lock", "w") as f:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"another `up`/`down` holds {STATE_ROOT / '.lock'} for > {timeout_s:.0f} s")
                time.sleep(0.05)
        yield


def teardown(name: str) -> list[str]:
    """Return what was removed: relay process, namespaces (with TUNs and processes), files."""
    with setup_lock():
        return _teardown(name)


def _teardown(name: str) -> list[str]:
    """Return what was removed (see :func:`teardown`); the caller holds the setup lock."""
    sdir = state_dir(name)
    removed: list[str] = []
    pids = set(relay.find_relays(sdir))
    pidfile = sdir / "relay.pid"
    if pidfile.exists() and pidfile.read_text().strip().isdigit():
        pids.add(int(pidfile.read_text().strip()))
    for pid in sorted(pids):
        if relay.stop(pid, sdir):
            removed.append(f"relay pid {pid}")
    for ns in netns.ns_names(name):
        removed += netns.delete(ns)
    if sdir.exists():
        shutil.rmtree(sdir, ignore_errors=True)
        removed.append(str(sdir))
    return removed


@dataclass
class WanPath:
    """A running emulated path (see module docstring). Use :meth:`up` or :meth:`attach`."""

    name: str
    rtt_s: float
    rate_bps: float
    loss: float
    burst_len: float
    mtu: int
    queue_bytes: int
    cpu: str | None
    relay_kind: str
    pid: int
    seed: int
    rt_prio: int = 0
    tcp: dict[str, str] = field(default_factory=dict)
    server_ns: str = ""
    client_ns: str = ""
    server_addr: str = netns.SERVER_ADDR
    client_addr: str = netns.CLIENT_ADDR

    @classmethod
    def up(
        cls,
        rtt_ms: float = 100.0,
        rate_bps: float = 1e9,
        loss: float = 0.0,
        mtu: int = 1500,
        burst_len: float = 0.0,
        queue: str | int = "1bdp",
        cpu: str | None = "default",
        name: str = netns.PREFIX,
        tcp_rmem: str = netns.STOCK_TCP_RMEM,
        tcp_wmem: str = netns.STOCK_TCP_WMEM,
        congestion: str | None = None,
        relay_kind: str = "auto",
        seed: int = 0,
        rt_prio: int = 10,
    ) -> WanPath:
        """Return a running path; an existing path of the same name is torn down first.

        ``queue``: bytes (int) or a spec like ``"1bdp"``, ``"0.5bdp"``, ``"200p"``, ``"4MB"``; the
        default is one BDP (rate x RTT), at least 4 MTU-sized packets. ``cpu``: taskset CPU list for
        the relay, ``"default"`` = the last CPU, None = not pinned. ``rt_prio``: SCHED_FIFO priority
        of the relay (0 = normal scheduling; see :func:`bench.wan.relay.start`). On any failure everything
        created so far is removed before the exception propagates.
        """
        netns.check_name(name)
        if not 0 <= loss < 1:
            raise ValueError(f"loss must be a probability in [0, 1): {loss}")
        if not 68 <= mtu <= 65535:
            raise ValueError(f"mtu must be in [68, 65535]: {mtu}")
        bdp = rate_bps * rtt_ms / 1000 / 8
        if isinstance(queue, str):
            queue_bytes = parse_queue(queue, bdp, mtu)
            if queue.strip().lower().endswith("bdp"):
                queue_bytes = max(queue_bytes, 4 * mtu)
        else:
            queue_bytes = int(queue)
        cpu = default_cpu() if cpu == "default" else cpu
        with setup_lock():
            return cls._up_locked(name, rtt_ms, rate_bps, loss, mtu, burst_len, queue_bytes, cpu, tcp_rmem,
                                  tcp_wmem, congestion, relay_kind, seed, rt_prio)

    @classmethod
    def _up_locked(cls, name: str, rtt_ms: float, rate_bps: float, loss: float, mtu: int, burst_len: float,
                   queue_bytes: int, cpu: str | None, tcp_rmem: str, tcp_wmem: str, congestion: str | None,
                   relay_kind: str, seed: int, rt_prio: int) -> WanPath:
        """Return a running path (see :meth:`up`); the caller holds the setup lock."""
        _teardown(name)
        srv, cli = netns.ns_names(name)
        sdir = state_dir(name)
        try:
            sdir.mkdir(parents=True, exist_ok=True)
            netns.create(name, mtu, tcp_rmem, tcp_wmem, congestion)
            _fail_hook("netns")
            kind = relay.choose_kind(relay_kind)
            spec = relay.RelaySpec(srv, cli, rtt_ms / 2000, rate_bps, queue_bytes, loss, burst_len, mtu, seed)
            pid = relay.start(kind, spec, sdir, cpu, rt_prio)
            if not (netns.carrier_up(srv) and netns.carrier_up(cli)):
                raise RuntimeError("relay started but a TUN device has no carrier")
            _fail_hook("relay")
            path = cls(name=name, rtt_s=rtt_ms / 1000, rate_bps=rate_bps, loss=loss, burst_len=burst_len,
                       mtu=mtu, queue_bytes=queue_bytes, cpu=cpu, relay_kind=kind, pid=pid, seed=seed,
                       rt_prio=rt_prio, tcp=netns.tcp_settings(srv), server_ns=srv, client_ns=cli)
            (sdir / "state.json").write_text(json.dumps(asdict(path), indent=1) + "\n")
            return path
        except BaseException:
            _teardown(name)
            raise

    @classmethod
    def attach(cls, name: str = netns.PREFIX) -> WanPath:
        """Return the running path ``name`` from its state file (raises if it is not up)."""
        state = state_dir(name) / "state.json"
        if not state.exists():
            raise RuntimeError(f"no WAN path {name!r} is up (no {state})")
        return cls(**json.loads(state.read_text()))

    @property
    def state_dir(self) -> Path:
        """Return this path's state directory."""
        return state_dir(self.name)

    @property
    def tcp_rmem(self) -> str:
        """Return net.ipv4.tcp_rmem in effect in the namespaces."""
        return self.tcp.get("tcp_rmem", "")

    @property
    def tcp_wmem(self) -> str:
        """Return net.ipv4.tcp_wmem in effect in the namespaces."""
        return self.tcp.get("tcp_wmem", "")

    def describe(self) -> dict[str, Any]:
        """Return the path's settings as the flat dict printed by ``up``."""
        return {
            "name": self.name, "server_ns": self.server_ns, "client_ns": self.client_ns,
            "server_addr": self.server_addr, "client_addr": self.client_addr,
            "rtt_ms": round(self.rtt_s * 1000, 6), "one_way_delay_ms": round(self.rtt_s * 500, 6),
            "rate_bps": self.rate_bps, "loss": self.loss, "loss_applies": "per packet, each direction",
            "burst_len": self.burst_len, "mtu": self.mtu, "queue_bytes": self.queue_bytes,
            "relay": self.relay_kind, "pid": self.pid, "cpu": self.cpu, "rt_prio": self.rt_prio, "seed": self.seed,
            "tcp_rmem": self.tcp_rmem, "tcp_wmem": self.tcp_wmem,
            "tcp_congestion_control": self.tcp.get("tcp_congestion_control"),
            "tcp_allowed_congestion_control": self.tcp.get("tcp_allowed_congestion_control"),
            "core_rmem_max": self.tcp.get("core_rmem_max"), "core_wmem_max": self.tcp.get("core_wmem_max"),
            "state_dir": str(self.state_dir),
        }

    def stats(self, fresh: bool = True) -> dict[str, Any]:
        """Return the relay's counters (a fresh snapshot via SIGUSR1 unless ``fresh=False``)."""
        return relay.read_stats(self.state_dir, self.pid, fresh=fresh)

    def kernel_counters(self) -> dict[str, dict[str, int]]:
        """Return the kernel counters of both TUN devices (tx_dropped: packets the relay missed)."""
        return {ns: netns.tun_counters(ns) for ns in (self.server_ns, self.client_ns)}

    def exec_argv(self, ns: str, argv: list[str]) -> list[str]:
        """Return ``argv`` wrapped to run in namespace ``ns`` (``server_ns`` or ``client_ns``)."""
        if ns not in (self.server_ns, self.client_ns):
            raise ValueError(f"{ns!r} is not a namespace of this path")
        return netns.ns_exec(ns, argv)

    def run_in(self, ns: str, argv: list[str], **popen_kwargs: Any) -> subprocess.Popen:
        """Return a started process running ``argv`` inside ``ns`` (caller waits/closes it)."""
        return subprocess.Popen(self.exec_argv(ns, argv), **popen_kwargs)

    def check(self, seconds: float = 12, streams: int = 8, ping_count: int = 20) -> dict[str, Any]:
        """Return the self-check results (see :func:`bench.wan.checks.self_check`)."""
        return checks.self_check(self, seconds=seconds, streams=streams, ping_count=ping_count)

    def down(self) -> list[str]:
        """Return what was removed when tearing this path down (idempotent)."""
        return teardown(self.name)

    def __enter__(self) -> WanPath:
        """Return this path (``with WanPath.up(...) as path``)."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Return after tearing the path down."""
        self.down()

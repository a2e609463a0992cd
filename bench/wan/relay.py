"""Building, starting, stopping and querying the relay process (C from relay.c, or pyrelay.py).

The C relay is compiled at ``up`` time into ``~/.cache/dstp/wan/relay-<source hash>``; no binary
is kept in the repository. The relay is started detached (``setsid -f``, pinned with ``taskset``),
writes its pid to ``relay.pid`` and its counters to ``stats.json`` in the path's state directory
every 250 ms and on SIGUSR1.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench.wan.netns import NETNS_RUN, TUN_DEV, pid_alive

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent
C_SOURCE = HERE / "relay.c"
CACHE_DIR = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "dstp" / "wan"
CFLAGS = ["-O2", "-march=native", "-Wall", "-Wextra", "-Wno-unused-parameter"]


@dataclass
class RelaySpec:
    """The emulation parameters handed to a relay process."""

    server_ns: str
    client_ns: str
    delay_s: float
    rate_bps: float
    queue_bytes: int
    loss: float
    burst_len: float
    mtu: int
    seed: int = 0


def build_c_relay(cache_dir: Path = CACHE_DIR) -> tuple[Path | None, str]:
    """Return (path of the compiled C relay or None, why not) — compiled once per source version."""
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        return None, "no C compiler (gcc/cc) on PATH"
    digest = hashlib.sha256(C_SOURCE.read_bytes() + " ".join(CFLAGS).encode()).hexdigest()[:16]
    binary = cache_dir / f"relay-{digest}"
    if binary.exists():
        return binary, "cached"
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = cache_dir / f".relay-{digest}.{os.getpid()}"
    proc = subprocess.run([gcc, *CFLAGS, "-o", str(tmp), str(C_SOURCE)], capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        return None, f"gcc failed: {proc.stderr.strip()[-500:]}"
    os.replace(tmp, binary)  # atomic: concurrent `up`s never run a half-written binary
    return binary, "compiled"


def relay_argv(kind: str, spec: RelaySpec, state_dir: Path) -> list[str]:
    """Return the command line of a relay of ``kind`` ("c" or "python") for ``spec``."""
    opts = [
        "--srv-ns", str(NETNS_RUN / spec.server_ns), "--cli-ns", str(NETNS_RUN / spec.client_ns),
        "--dev", TUN_DEV, "--delay", repr(spec.delay_s), "--rate", repr(float(spec.rate_bps)),
        "--queue", str(spec.queue_bytes), "--loss", repr(spec.loss), "--burst-len", repr(spec.burst_len),
        "--mtu", str(spec.mtu), "--seed", str(spec.seed),
        "--stats", str(state_dir / "stats.json"), "--pid-file", str(state_dir / "relay.pid"),
    ]
    if kind == "c":
        binary, why = build_c_relay()
        if binary is None:
            raise RuntimeError(f"C relay unavailable: {why}")
        return [str(binary), *opts]
    if kind == "python":
        return [sys.executable, "-m", "bench.wan.pyrelay", *opts]
    raise ValueError(f"unknown relay kind {kind!r}")


def choose_kind(requested: str) -> str:
    """Return the relay kind to run: ``requested`` unless "auto" (C if it compiles, else Python)."""
    if requested != "auto":
        return requested
    binary, _ = build_c_relay()
    return "c" if binary is not None else "python"


def start(kind: str, spec: RelaySpec, state_dir: Path, cpu: str | None, rt_prio: int = 0,
          timeout_s: float = 10.0) -> int:
    """Return the pid of a detached relay once it has attached both TUN devices (raises otherwise).

    ``cpu``: taskset CPU list (None: not pinned). ``rt_prio`` > 0 runs the relay SCHED_FIFO at that
    priority (``chrt -f``) so that CFS tasks sharing its CPU (iperf3, the benchmark itself) cannot
    delay deliveries by a scheduler slice (milliseconds); the kernel's RT throttling still leaves
    5% of that CPU to others.
    """
    argv = relay_argv(kind, spec, state_dir)
    if rt_prio > 0:
        argv = ["chrt", "-f", str(rt_prio), *argv]
    if cpu is not None:
        argv = ["taskset", "-c", cpu, *argv]
    for name in ("stats.json", "relay.pid"):
        (state_dir / name).unlink(missing_ok=True)
    log = state_dir / "relay.log"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    with open(log, "w") as logf:
        # setsid -f forks: the relay is re-parented away from us (no zombie, no Popen to reap later).
        subprocess.run(["setsid", "-f", *argv], stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                       cwd=REPO_ROOT, env=env, check=True, timeout=30)
    started = time.monotonic()
    deadline = started + timeout_s
    pid = None
    while time.monotonic() < deadline:
        if pid is None and (state_dir / "relay.pid").exists():
            text = (state_dir / "relay.pid").read_text().strip()
            pid = int(text) if text.isdigit() else None
        if (state_dir / "stats.json").exists() and pid is not None:
            return pid
        if pid is not None and not pid_alive(pid):
            break
        if pid is None and log.stat().st_size > 0 and time.monotonic() > started + 0.5:
            break  # e.g. taskset rejected the CPU list before the relay could start
        time.sleep(0.02)
    if pid is not None:
        stop(pid, state_dir)
    raise RuntimeError(f"{kind} relay failed to start: {log.read_text().strip() or 'no output (timeout)'}")


def is_our_relay(pid: int, state_dir: Path) -> bool:
    """Return True if ``pid`` is a live relay writing into ``state_dir`` (guards against pid reuse)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return str(state_dir / "stats.json").encode() in cmdline and pid_alive(pid)


def stop(pid: int, state_dir: Path, grace_s: float = 3.0) -> bool:
    """Return True if our relay ``pid`` was running and is now gone (SIGTERM, then SIGKILL)."""
    if not is_our_relay(pid, state_dir):
        return False
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 2.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not pid_alive(pid):
                return True
            time.sleep(0.02)
    return not pid_alive(pid)


def find_relays(state_dir: Path) -> list[int]:
    """Return pids of live relays writing into ``state_dir`` (found via /proc, state file or not)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and is_our_relay(int(entry.name), state_dir):
            pids.append(int(entry.name))
    return pids


def read_stats(state_dir: Path, pid: int | None = None, fresh: bool = True) -> dict:
    """Return the relay counters; with ``fresh``, ask the relay (SIGUSR1) for a new snapshot first."""
    path = state_dir / "stats.json"
    doc = json.loads(path.read_text())
    if fresh and pid is not None and is_our_relay(pid, state_dir):
        seq = doc.get("seq", 0)
        os.kill(pid, signal.SIGUSR1)
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            time.sleep(0.005)
            try:
                new = json.loads(path.read_text())
            except (json.JSONDecodeError, FileNotFoundError):
                continue
            if new.get("seq", 0) > seq:
                return new
    return doc

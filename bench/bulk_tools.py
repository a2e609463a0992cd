"""The peers of the bulk benchmark, each run as the processes a user would run, with CPU time and a time cap.

Every tool is timed the same way: the client process's wall time from spawn
to exit (connection setup, login, the data, the final checksum — what a user
waits for), and the CPU seconds of the client process (``os.wait4``, all its
threads and reaped children) plus those the server spent meanwhile (a
long-running ``dstp serve``: the /proc delta; one-shot ``iperf3 -s -1`` and
``globus-gridftp-server -1``: their own ``wait4``). A run with a time cap
gets SIGINT at the cap; it then counts the bytes that arrived: the pages
allocated in the output file on tmpfs (a sparse file: holes are never
allocated), or iperf3's sender count.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

from dstp.transport.client.files import PARTIAL_SUFFIX, STATE_SUFFIX, partial_path
from dstp.transport.wire.crc import crc32c_of_file

from bench.bulk_catalog import DATASET, BulkFile
from bench.dstp_process import AgentProcess, ServerProcess

__all__ = ["LOOPBACK", "Place", "Run", "dstp_get", "dstp_query", "gridftp", "installed", "iperf3", "splice_floor", "udt_raw"]

REPO = Path(__file__).resolve().parent.parent
GRACE_S = 10.0  # after SIGINT at the cap, how long a client may take to exit before SIGKILL


@dataclass(frozen=True, slots=True)
class Place:
    """Where the two ends run: network namespaces (None: this one) and the addresses they use."""

    server_ns: str | None = None
    client_ns: str | None = None
    server_addr: str = "127.0.0.1"
    client_addr: str = "127.0.0.1"

    def server(self, argv: Sequence[str]) -> list[str]:
        """Return ``argv`` wrapped to run on the server side."""
        return ["ip", "netns", "exec", self.server_ns, *argv] if self.server_ns else list(argv)

    def client(self, argv: Sequence[str]) -> list[str]:
        """Return ``argv`` wrapped to run on the client side."""
        return ["ip", "netns", "exec", self.client_ns, *argv] if self.client_ns else list(argv)


LOOPBACK = Place()


@dataclass
class Run:
    """One transfer by one tool: what moved, how long the client took, what it cost."""

    tool: str
    bytes: int
    seconds: float  # client process wall time, spawn to exit (or to the cap)
    client_cpu_s: float
    server_cpu_s: float
    complete: bool  # False: stopped at the time cap (or failed) before the end
    ok: bool = True
    verified: str = ""  # how the output was checked: "bytes" (compared), "crc32c", "rows", ""
    identical: bool | None = None
    transfer_s: float | None = None  # the tool's own clock (iperf3's test time; dstp: OpenFile to CRC checked)
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def mb_per_s(self) -> float:
        """Return throughput in MB/s (10^6 bytes) over the whole-process time."""
        return self.bytes / self.seconds / 1e6 if self.seconds > 0 else 0.0

    @property
    def cpu_s_per_gb(self) -> float:
        """Return client + server CPU seconds per 10^9 bytes moved."""
        return (self.client_cpu_s + self.server_cpu_s) / (self.bytes / 1e9) if self.bytes else float("nan")

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "MBps": round(self.mb_per_s, 2), "Mbps": round(self.mb_per_s * 8, 1),
                "cpu_s_per_GB": round(self.cpu_s_per_gb, 3)}


def installed(program: str) -> bool:
    """Return True if ``program`` is on PATH."""
    return shutil.which(program) is not None


# -- processes ----------------------------------------------------------------------------


@dataclass
class Finished:
    """A finished client process."""

    returncode: int
    wall_s: float
    cpu_s: float
    stdout: str
    stderr: str
    interrupted: bool


def run_capped(argv: Sequence[str], *, cap_s: float | None = None, env: dict[str, str] | None = None) -> Finished:
    """Return how ``argv`` ran: SIGINT at ``cap_s`` (SIGKILL ``GRACE_S`` later); CPU from ``wait4``.

    Output goes to temporary files, not pipes, so a chatty process (iperf3's JSON) never blocks.
    """
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        lock = threading.Lock()
        state = {"reaped": False, "interrupted": False}
        started = time.perf_counter()
        proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env, cwd=REPO)

        def signal_(sig: int) -> None:
            with lock:
                if not state["reaped"]:
                    state["interrupted"] = True
                    os.kill(proc.pid, sig)

        timers = []
        if cap_s is not None:
            timers = [threading.Timer(cap_s, signal_, (signal.SIGINT,)),
                      threading.Timer(cap_s + GRACE_S, signal_, (signal.SIGKILL,))]
        for t in timers:
            t.daemon = True
            t.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except BaseException:  # interrupted (Ctrl-C): never leave the client running
            proc.kill()
            os.waitpid(proc.pid, 0)
            proc.returncode = -signal.SIGKILL
            raise
        finally:
            with lock:
                state["reaped"] = True
            for t in timers:
                t.cancel()
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return Finished(proc.returncode, wall, usage.ru_utime + usage.ru_stime, out.read(), err.read(),
                        bool(state["interrupted"]))


def start_server(argv: Sequence[str]) -> subprocess.Popen[bytes]:
    """Return a started one-shot server process (output discarded)."""
    return subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, cwd=REPO)


def reap(proc: subprocess.Popen[Any], timeout_s: float = 10.0) -> float:
    """Return the CPU seconds of ``proc`` once it exits (SIGTERM after ``timeout_s``, SIGKILL 5 s later)."""
    deadlines = [(timeout_s, proc.terminate), (5.0, proc.kill)]
    try:
        while True:
            limit, escalate = deadlines.pop(0) if deadlines else (None, None)
            end = None if limit is None else time.monotonic() + limit
            while end is None or time.monotonic() < end:
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG if end is not None else 0)
                if pid:
                    proc.returncode = os.waitstatus_to_exitcode(status)
                    return usage.ru_utime + usage.ru_stime
                time.sleep(0.02)
            assert escalate is not None
            escalate()
    except BaseException:
        if proc.returncode is None:
            proc.kill()
            os.waitpid(proc.pid, 0)
            proc.returncode = -signal.SIGKILL
        raise


def free_port(place: Place) -> int:
    """Return a TCP port free on the server side (probed here on loopback, random in a namespace)."""
    if place.server_ns is None:
        with socket.socket() as s:
            s.bind((place.server_addr, 0))
            return int(s.getsockname()[1])
    return random.randint(20000, 60000)


def wait_listening(place: Place, port: int, timeout_s: float = 10.0) -> None:
    """Return once a TCP socket listens on ``port`` on the server side (raise after ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        out = subprocess.run(place.server(["ss", "-Hltn", f"sport = :{port}"]), capture_output=True, text=True,
                             timeout=10, stdin=subprocess.DEVNULL).stdout
        if out.strip():
            return
        time.sleep(0.02)
    raise RuntimeError(f"nothing listens on port {port} after {timeout_s:.0f} s")


# -- outputs ------------------------------------------------------------------------------


def allocated_bytes(path: Path) -> int:
    """Return the bytes a (sparse) file on tmpfs actually holds, up to its size."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return 0
    return min(st.st_size, st.st_blocks * 512)


def check_output(out: Path, source: BulkFile, compare_bytes: bool) -> tuple[str, bool]:
    """Return (how it was checked, identical?) for a finished download of ``source``."""
    if not out.exists() or out.stat().st_size != source.size:
        return ("size", False)
    if compare_bytes:
        with open(out, "rb") as a, open(source.path, "rb") as b:
            while True:
                x, y = a.read(1 << 22), b.read(1 << 22)
                if x != y:
                    return ("bytes", False)
                if not x:
                    return ("bytes", True)
    return ("crc32c", crc32c_of_file(out) == source.crc32c)


def remove_output(out: Path) -> None:
    """Delete a download and its resume state (a leftover state file would make the next run resume)."""
    for p in (out, out.with_name(out.name + STATE_SUFFIX), out.with_name(out.name + STATE_SUFFIX + ".tmp"),
              out.with_name(out.name + PARTIAL_SUFFIX)):
        p.unlink(missing_ok=True)


# -- the peers ----------------------------------------------------------------------------


def iperf3(place: Place, tool: str, streams: int, nbytes: int, *, cap_s: float | None = None,
           congestion: str | None = None, files: tuple[BulkFile, Path] | None = None) -> Run:
    """Return one ``iperf3 -n nbytes -P streams`` run, client -> server (the ceiling: memory to memory).

    ``files`` (source, output): ``-F`` on both ends — the client sends the source file's bytes, the server
    writes what it receives to the output (tmpfs): the network plus the write a download pays, by a C peer.
    With more than one stream iperf3 writes every stream's bytes from the output's start, so only one
    stream writes a whole copy."""
    port = free_port(place)
    into = ["-F", str(files[1])] if files else []
    if files:
        remove_output(files[1])
    server = start_server(place.server(["iperf3", "-s", "-1", "-B", place.server_addr, "-p", str(port), *into]))
    try:
        wait_listening(place, port)
        argv = ["iperf3", "-c", place.server_addr, "-B", place.client_addr, "-p", str(port), "-P", str(streams),
                "-n", str(nbytes), "-J", *(["-C", congestion] if congestion else []),
                *(["-F", str(files[0].path)] if files else [])]
        done = run_capped(place.client(argv), cap_s=cap_s)
    finally:
        server_cpu = reap(server)
    written = -1
    if files:
        written = files[1].stat().st_size if files[1].exists() else 0
        remove_output(files[1])
    try:
        end = json.loads(done.stdout)["end"]
    except (ValueError, KeyError):
        return Run(tool, 0, done.wall_s, done.cpu_s, server_cpu, False, ok=False,
                   detail={"error": (done.stderr or done.stdout)[-300:]})
    received = end.get("sum_received", {})
    sent = end.get("sum_sent", {})
    # Interrupted at the cap, iperf3 reports only what it sent (in flight: at most a window more).
    use = received if received.get("bytes") else sent
    counted = int(use.get("bytes", 0))
    # iperf3 3.12 with -F can end a few hundred bytes before the file's end (8,388,502 of 8,388,608): the
    # run counts what reached the output, and is complete when that is everything the server received.
    whole = written < 0 or written == counted
    return Run(tool, counted if written < 0 else written, done.wall_s, done.cpu_s, server_cpu,
               complete=not done.interrupted and use is received and whole, ok=bool(counted) and whole,
               transfer_s=float(use.get("seconds", 0.0)) or None,
               detail={"retransmits": sent.get("retransmits"), "congestion": end.get("sender_tcp_congestion"),
                       "counted": "received" if use is received else "sent (interrupted)",
                       **({"written": written} if files else {})})


def local_copy(tool: str, source: BulkFile, out: Path, *, compare_bytes: bool = False) -> Run:
    """Return one ``cp SOURCE OUT`` run: the same bytes read and written on this host with no network —
    the ceiling of a tmpfs → tmpfs transfer (a receiver pays the same page allocation for its output)."""
    remove_output(out)
    done = run_capped(["cp", "--reflink=never", "--sparse=never", str(source.path), str(out)])
    try:
        if done.returncode == 0:
            how, same = check_output(out, source, compare_bytes)
            return Run(tool, source.size, done.wall_s, done.cpu_s, 0.0, True, ok=same, verified=how, identical=same)
        return Run(tool, 0, done.wall_s, done.cpu_s, 0.0, False, ok=False, detail={"error": done.stderr.strip()[-300:]})
    finally:
        remove_output(out)


def warm_memory(folder: Path, nbytes: int, block: int = 16 << 20) -> dict[str, Any]:
    """Write ``nbytes`` to a file in ``folder`` (tmpfs), delete it, twice; return each pass's MB/s.

    On a virtual machine a page the guest has not used for a while can cost a fault in the host
    when it is first written again: a tmpfs output landing on such pages was 2–4× slower, which
    tool it hit depending on the order of the runs. Writing and freeing the memory first makes
    every timed run meet pages in the same state; both passes' rates are kept in the results.
    """
    passes = []
    zeros = bytes(block)
    path = folder / "memory-warm-up"
    for _ in range(2):
        started = time.perf_counter()
        with open(path, "wb", buffering=0) as f:
            for _ in range(max(1, nbytes // block)):
                f.write(zeros)
        seconds = time.perf_counter() - started
        path.unlink()
        passes.append(round(nbytes / seconds / 1e6, 1))
    return {"bytes": nbytes, "MBps_per_pass": passes}


def gridftp(place: Place, tool: str, parallel: int, source: BulkFile, out: Path, *, cap_s: float | None = None,
            compare_bytes: bool = False) -> Run:
    """Return one ``globus-url-copy -p N ftp://server/FILE file:///OUT`` run against a one-shot anonymous server."""
    remove_output(out)
    port = free_port(place)
    server = start_server(place.server([
        "globus-gridftp-server", "-aa", "-anonymous-user", "root", "-allow-root", "-p", str(port),
        "-control-interface", place.server_addr, "-data-interface", place.server_addr, "-1",
        "-disable-usage-stats", "-d", "error",
    ]))
    try:
        wait_listening(place, port)
        argv = ["globus-url-copy", "-p", str(parallel), f"ftp://{place.server_addr}:{port}{source.path}",
                f"file://{out}"]
        done = run_capped(place.client(argv), cap_s=cap_s)
    finally:
        server_cpu = reap(server)
    return _file_run(tool, source, out, done, server_cpu, compare_bytes)


def _file_run(tool: str, source: BulkFile, out: Path, done: Finished, server_cpu: float, compare_bytes: bool,
              transfer_s: float | None = None) -> Run:
    """Return the Run of a peer that wrote ``out`` (checked against ``source``), then remove ``out``; a run cut at
    its cap counts the bytes that arrived."""
    try:
        if done.returncode == 0 and not done.interrupted:
            how, same = check_output(out, source, compare_bytes)
            return Run(tool, source.size, done.wall_s, done.cpu_s, server_cpu, True, ok=same, verified=how,
                       identical=same, transfer_s=transfer_s)
        got = allocated_bytes(out)
        return Run(tool, got, done.wall_s, done.cpu_s, server_cpu, False, ok=done.interrupted and got > 0,
                   detail={"error": done.stderr.strip()[-300:]} if not done.interrupted else {})
    finally:
        remove_output(out)


def splice_floor(place: Place, tool: str, streams: int, source: BulkFile, out: Path, *, cap_s: float | None = None,
                 compare_bytes: bool = False) -> Run:
    """Return one run of ``bench/floor``'s C pair: ``sendfile`` into ``streams`` connections, ``splice`` from
    them into the pre-sized output — no protocol and no checksum, the least a download to tmpfs pays here."""
    from bench.floor import build

    exe = str(build())
    remove_output(out)
    port = free_port(place)
    server = start_server(place.server([exe, "send", place.server_addr, str(port), str(streams), str(source.path)]))
    try:
        wait_listening(place, port)
        done = run_capped(place.client([exe, "recv", place.server_addr, str(port), str(streams), str(source.size),
                                        str(out)]), cap_s=cap_s)
    finally:
        server_cpu = reap(server)
    seconds = json.loads(done.stdout)["seconds"] if done.returncode == 0 and done.stdout.strip() else None
    return _file_run(tool, source, out, done, server_cpu, compare_bytes, seconds)


_GET_LINE = re.compile(r"([\d,]+) bytes → .* in ([\d.]+) s \(.* over (\w+) × (\d+)")


def dstp_get(place: Place, tool: str, server: ServerProcess, source: BulkFile, out: Path, cache: Path, *,
             transport: str = "auto", streams: int = 0, congestion: str = "", cap_s: float | None = None,
             compare_bytes: bool = False, length: int = -1, env: dict[str, str] | None = None,
             agent: AgentProcess | None = None) -> Run:
    """Return one ``dstp get`` run (a fresh process; its tuning cache under ``cache``; ``env``: more variables).

    With ``agent`` the command hands the download to that ``dstp agent``: the agent's CPU during the run
    counts as the client's, and a run that did not go through the agent fails."""
    remove_output(out)
    argv = [sys.executable, "-m", "dstp.cli", "get", "--server", server.endpoints["grpc"], DATASET, source.name,
            "-o", str(out), "-v", "--no-progress"]
    if transport != "auto":
        argv += ["--transport", transport]
    if streams:
        argv += ["--streams", str(streams)]
    if congestion:
        argv += ["--congestion-control", congestion]
    if length >= 0:
        argv += ["--length", str(length)]
    env = {**{k: v for k, v in os.environ.items() if k != "DSTP_AGENT_SOCK"}, "XDG_CACHE_HOME": str(cache),
           **(env or {}), **({"DSTP_AGENT_SOCK": str(agent.socket)} if agent else {})}
    cpu0, agent_cpu0 = server.cpu_seconds(), agent.cpu_seconds() if agent else 0.0
    done = run_capped(place.client(argv), cap_s=cap_s, env=env)
    server_cpu = server.cpu_seconds() - cpu0
    if agent is not None:
        done = replace(done, cpu_s=done.cpu_s + agent.cpu_seconds() - agent_cpu0)
    detail: dict[str, Any] = {}
    if agent is not None and done.returncode == 0 and not re.search(r"^agent: ", done.stderr, re.M):
        detail["error"] = "the download did not go through the agent: " + done.stderr.strip()[-300:]
        return Run(tool, 0, done.wall_s, done.cpu_s, server_cpu, False, ok=False, detail=detail)
    m = _GET_LINE.search(done.stderr)
    choice = re.search(r"^choice: (.*)$", done.stderr, re.M)
    if choice:
        detail["choice"] = choice.group(1)
    path = re.search(r"^data path: (.*)$", done.stderr, re.M)
    if path:
        detail["data_path"] = path.group(1)
    try:
        if m and done.returncode == 0 and length < 0:
            detail.update(transport=m.group(3), streams=int(m.group(4)))
            how, same = check_output(out, source, compare_bytes)
            return Run(tool, source.size, done.wall_s, done.cpu_s, server_cpu, True, ok=same, verified=how,
                       identical=same, transfer_s=float(m.group(2)), detail=detail)
        if m and done.returncode == 0:
            return Run(tool, int(m.group(1).replace(",", "")), done.wall_s, done.cpu_s, server_cpu, True,
                       transfer_s=float(m.group(2)), detail=detail)
        # A download in progress lives in OUT.dstp-partial.data until its CRC is checked (8be8ce6): a run cut at
        # the cap counts what that file holds (counting OUT alone reported 0 bytes for every capped run).
        got = max(allocated_bytes(out), allocated_bytes(partial_path(out)))
        if not done.interrupted:
            detail["error"] = done.stderr.strip()[-400:]
        return Run(tool, got, done.wall_s, done.cpu_s, server_cpu, False, ok=done.interrupted and got > 0,
                   detail=detail)
    finally:
        remove_output(out)


def dstp_query(place: Place, tool: str, server: ServerProcess, sql: str, cache: Path, *, transport: str = "auto",
               streams: int = 0, digest: bool = False) -> Run:
    """Return one query in a fresh client process (``python -m bench.bulk_client``); batches are dropped."""
    argv = [sys.executable, "-m", "bench.bulk_client", "--server", server.endpoints["grpc"], "--sql", sql,
            "--transport", transport, "--streams", str(streams), *(["--digest"] if digest else [])]
    env = {**os.environ, "XDG_CACHE_HOME": str(cache),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH", "")]))}
    cpu0 = server.cpu_seconds()
    done = run_capped(place.client(argv), env=env)
    server_cpu = server.cpu_seconds() - cpu0
    try:
        doc = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return Run(tool, 0, done.wall_s, done.cpu_s, server_cpu, False, ok=False,
                   detail={"error": done.stderr.strip()[-400:]})
    return Run(tool, int(doc["bytes"]), done.wall_s, done.cpu_s, server_cpu, done.returncode == 0,
               ok=done.returncode == 0, verified="rows", transfer_s=float(doc["seconds"]),
               detail={k: doc[k] for k in ("rows", "transport", "choice", "wire_bytes", "digest", "streams")})


def udt_raw(tool: str, nbytes: int, *, mss: int, recv_buffer: int, recv_fc: int, send_buffer: int, send_fc: int,
            max_seconds: float = 25.0) -> Run:
    """Return one raw libudt transfer (``bench/udt_raw``'s C++ peers) with per-side buffers and windows."""
    from bench.udt_raw.__main__ import _last_json, build_raw

    exe = str(build_raw())
    chunk = 16 * 2**20
    receiver = subprocess.Popen([exe, "recv", "0", str(mss), str(recv_buffer), str(recv_fc), str(nbytes), str(chunk),
                                 str(max_seconds)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert receiver.stdout is not None
        ready = receiver.stdout.readline()
        if not ready.startswith("READY "):
            raise RuntimeError(f"raw UDT receiver did not start: {ready!r}")
        send = run_capped([exe, "send", "127.0.0.1", ready.split()[1], str(mss), str(send_buffer), str(send_fc),
                           str(nbytes), str(chunk)], cap_s=max_seconds + GRACE_S)
        recv_cpu = reap(receiver, timeout_s=max_seconds + GRACE_S)  # type: ignore[arg-type]
        report = _last_json(receiver.stdout.read())
    finally:
        if receiver.returncode is None:
            receiver.kill()
            os.waitpid(receiver.pid, 0)
            receiver.returncode = -9
        if receiver.stdout:
            receiver.stdout.close()
    sent = _last_json(send.stdout) if send.stdout.strip() else {}
    return Run(tool, int(report["bytes"]), send.wall_s, recv_cpu, send.cpu_s, report["bytes"] == nbytes,
               transfer_s=float(report["seconds"]),
               detail={"mss": report.get("mss"), "retransmits": sent.get("pktRetransTotal"),
                       "recv_buffer": recv_buffer, "recv_fc": recv_fc, "send_buffer": send_buffer, "send_fc": send_fc})

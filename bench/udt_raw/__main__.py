"""Raw UDT throughput on 127.0.0.1: libudt from C++ vs dstp's Python extension.

    python -m bench.udt_raw --mss 1500 --buffer 64MiB --fc auto --bytes 2GiB          # raw C++
    python -m bench.udt_raw --python --mss 1500 --buffer 64MiB --fc auto --bytes 2GiB # extension
    python -m bench.udt_raw --compare ...     # both, plus the ratio
    python -m bench.udt_raw --matrix          # defaults and 64 MiB at MSS 1500 and 9000, both sides

Receiver and sender run as two processes (the receiver first; it prints the
port it listens on). Each reports its own transfer time and CPU; the driver
also takes each process's whole CPU time from ``os.wait4``. Throughput is
bytes / receiver seconds (accept to last byte), in MB/s (10^6 bytes).

The C++ program (``udt_raw.cpp``) is compiled with g++ into a cache directory
(``$XDG_CACHE_HOME/dstp/udt_raw/<hash>/``) on first use; no binary is kept in
the repository. Every run is capped (``--max-seconds``, default 25 s: the
receiver stops there and reports what it got; the driver kills anything
still alive 15 s later). Results are merged into
``bench/results/udt_raw.json`` keyed by configuration, with the machine and
versions.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "udt_raw.cpp"
REPO = HERE.parent.parent
RESULTS = REPO / "bench" / "results" / "udt_raw.json"
MIB = 1 << 20
KILL_GRACE = 15.0

_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
          "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30}


def parse_size(text: str) -> int:
    """'64MiB' -> 67108864, '2GiB', '1500', '10MB' (decimal)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (use e.g. 64MiB, 2GiB, 1500)")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def flow_window(buffer: int, mss: int) -> int:
    try:
        from dstp.transport.udt_socket import flow_window_for
    except ImportError:  # run from a checkout without dstp installed
        return max(32, -(-2 * buffer // mss))
    return flow_window_for(buffer, mss)


# ---------------------------------------------------------------------------
# Building the C++ side
# ---------------------------------------------------------------------------


def build_raw() -> Path:
    """Compile udt_raw.cpp once per source/flags hash; return the binary."""
    cxx = os.environ.get("CXX", "g++")
    if shutil.which(cxx) is None:
        raise SystemExit(f"{cxx} not found: install g++ (and libudt-dev)")
    flags = ["-O2", "-std=c++17"]
    inc = [f"-I{d}" for d in os.environ.get("DSTP_UDT_INCLUDE", "").split(os.pathsep) if d]
    libdirs = [d for d in os.environ.get("DSTP_UDT_LIB", "").split(os.pathsep) if d]
    libs = [f"-L{d}" for d in libdirs] + [f"-Wl,-rpath,{d}" for d in libdirs] + ["-ludt", "-lpthread"]
    key = hashlib.sha256(SOURCE.read_bytes() + " ".join([cxx, *flags, *inc, *libs]).encode()).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "dstp" / "udt_raw" / key
    exe = cache / "udt_raw"
    if not exe.exists():
        cache.mkdir(parents=True, exist_ok=True)
        tmp = cache / f"udt_raw.{os.getpid()}.tmp"
        cmd = [cxx, *flags, *inc, str(SOURCE), "-o", str(tmp), *libs]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"building {SOURCE.name} failed (is libudt-dev installed?):\n{proc.stderr}")
        tmp.replace(exe)
    return exe


# ---------------------------------------------------------------------------
# One transfer
# ---------------------------------------------------------------------------


def _wait(proc: subprocess.Popen[str]) -> dict[str, float]:
    """Reap ``proc`` with os.wait4 to get its own CPU time."""
    _, status, ru = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {"user": ru.ru_utime, "system": ru.ru_stime, "maxrss_kib": ru.ru_maxrss}


def _last_json(text: str) -> dict[str, Any]:
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"peer printed no result:\n{text}")


def run_once(impl: str, mss: int, buffer: int, fc: int, nbytes: int, chunk: int, max_seconds: float,
             recv_call: str) -> dict[str, Any]:
    if impl == "cpp":
        exe = [str(build_raw())]
    else:
        exe = [sys.executable, "-m", "bench.udt_raw._peer"]
    recv_args = ["recv", "0", str(mss), str(buffer), str(fc), str(nbytes), str(chunk), str(max_seconds)]
    if impl == "python":
        recv_args.append(recv_call)
    load = os.getloadavg()[0]  # other work on the machine skews loopback numbers a lot
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    procs: list[subprocess.Popen[str]] = []

    def kill_all() -> None:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)

    watchdog = threading.Timer(max_seconds + KILL_GRACE, kill_all)
    watchdog.start()
    try:
        receiver = subprocess.Popen([*exe, *recv_args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    env=env, cwd=REPO)
        procs.append(receiver)
        assert receiver.stdout is not None
        ready = receiver.stdout.readline()
        if not ready.startswith("READY "):
            raise RuntimeError(f"receiver did not start: {ready!r} {receiver.stderr.read() if receiver.stderr else ''}")
        port = ready.split()[1]
        send_args = ["send", "127.0.0.1", port, str(mss), str(buffer), str(fc), str(nbytes), str(chunk)]
        t0 = time.perf_counter()
        sender = subprocess.Popen([*exe, *send_args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=env, cwd=REPO)
        procs.append(sender)
        # Both print one short line at the end: reading after the wait cannot deadlock.
        recv_ru = _wait(receiver)
        send_ru = _wait(sender)
        wall = time.perf_counter() - t0
        outs = {}
        for name, p in (("recv", receiver), ("send", sender)):
            out = p.stdout.read() if p.stdout else ""
            err = p.stderr.read() if p.stderr else ""
            if p.returncode != 0:
                raise RuntimeError(f"{impl} {name} exited with {p.returncode}: {err.strip()}")
            outs[name] = _last_json(out)
    finally:
        watchdog.cancel()
        kill_all()
        for p in procs:
            for f in (p.stdout, p.stderr):
                if f:
                    f.close()
    r, s = outs["recv"], outs["send"]
    mbps = r["bytes"] / r["seconds"] / 1e6 if r["seconds"] > 0 else 0.0
    return {
        "impl": impl,
        "mss_requested": mss,
        "mss": r["mss"],
        "buffer": buffer,
        "fc": fc,
        "bytes": r["bytes"],
        "complete": r["bytes"] == nbytes,
        "seconds": round(r["seconds"], 4),
        "MBps": round(mbps, 1),
        "wall_seconds": round(wall, 3),
        "sender_close_seconds": round(s["close_seconds"], 4),
        "recv_cpu_transfer_s": round(r["transfer_cpu_seconds"], 3),
        "send_cpu_transfer_s": round(s["transfer_cpu_seconds"], 3),
        "recv_cpu_process_s": round(recv_ru["user"] + recv_ru["system"], 3),
        "send_cpu_process_s": round(send_ru["user"] + send_ru["system"], 3),
        "recv_core_pct": round(100 * r["transfer_cpu_seconds"] / r["seconds"], 1) if r["seconds"] else None,
        "send_core_pct": round(100 * s["transfer_cpu_seconds"] / s["close_seconds"], 1) if s["close_seconds"] else None,
        "sender_retrans": s["pktRetransTotal"],
        "sender_loss_reports": s["pktSndLossTotal"],
        "rtt_ms": s["msRTT"],  # the sender's (the receiver's counters may be gone once the sender closed)
        "recv_call": recv_call if impl == "python" else "UDT::recv",
        "loadavg_1min_before": round(load, 2),
    }


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Keep the median run (by MB/s) and add every run's MB/s, the max and CPU per GB."""
    median = dict(sorted(runs, key=lambda x: x["MBps"])[len(runs) // 2])
    median["runs"] = len(runs)
    median["MBps_all"] = [x["MBps"] for x in runs]
    median["MBps_median"] = round(statistics.median(x["MBps"] for x in runs), 1)
    median["MBps_max"] = max(x["MBps"] for x in runs)
    median["retrans_all"] = [x["sender_retrans"] for x in runs]
    gb = sum(x["bytes"] for x in runs) / 1e9
    median["send_cpu_s_per_GB"] = round(sum(x["send_cpu_transfer_s"] for x in runs) / gb, 3)
    median["recv_cpu_s_per_GB"] = round(sum(x["recv_cpu_transfer_s"] for x in runs) / gb, 3)
    return median


def run_config(impls: list[str], args: argparse.Namespace, mss: int, buffer: int, fc: int) -> list[dict[str, Any]]:
    """Run each implementation ``--repeat`` times, interleaved so both see the same machine noise."""
    runs: dict[str, list[dict[str, Any]]] = {impl: [] for impl in impls}
    for _ in range(args.repeat):
        for impl in impls:
            runs[impl].append(run_once(impl, mss, buffer, fc, args.bytes, args.chunk, args.max_seconds,
                                       args.recv_call))
    return [summarize(runs[impl]) for impl in impls]


# ---------------------------------------------------------------------------
# Reporting
# ---------------------------------------------------------------------------


def _cmd(args: list[str]) -> str:
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def machine() -> dict[str, Any]:
    cpu = ""
    for line in _read("/proc/cpuinfo").splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "kernel": platform.release(),
        "os": _read("/etc/debian_version") and f"Debian {_read('/etc/debian_version')}",
        "net.core.rmem_max": _read("/proc/sys/net/core/rmem_max"),
        "net.core.wmem_max": _read("/proc/sys/net/core/wmem_max"),
        "lo_mtu": _read("/sys/class/net/lo/mtu"),
    }


def versions() -> dict[str, Any]:
    out: dict[str, Any] = {"python": platform.python_version()}
    out["libudt"] = _cmd(["dpkg-query", "-W", "-f=${Version}", "libudt0"]) or "unknown"
    out["g++"] = _cmd([os.environ.get("CXX", "g++"), "-dumpfullversion"])
    try:
        import pybind11

        out["pybind11"] = pybind11.__version__
    except ImportError:
        pass
    try:
        from importlib.metadata import version

        out["dstp"] = version("dstp")
    except Exception:  # noqa: BLE001 - not installed
        pass
    return out


def key_of(r: dict[str, Any]) -> str:
    buf = "default" if r["buffer"] == 0 else f"{r['buffer'] // MIB}MiB"
    fc = "default" if r["fc"] == 0 else str(r["fc"])
    return f"{r['impl']} mss={r['mss_requested']} buffer={buf} fc={fc}"


def save(results: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    try:
        doc = json.loads(RESULTS.read_text())
    except (OSError, ValueError):
        doc = {}
    doc.setdefault("results", {})
    for r in results:
        r = dict(r, measured_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
        doc["results"][key_of(r)] = r
    ratios = {}
    for k, r in doc["results"].items():
        if r["impl"] == "python":
            raw = doc["results"].get("cpp" + k[len("python"):])
            if raw and raw["MBps"]:
                ratios[k[len("python "):]] = {
                    "median": round(r["MBps"] / raw["MBps"], 3),
                    "best": round(r.get("MBps_max", r["MBps"]) / raw.get("MBps_max", raw["MBps"]), 3),
                    "send_cpu_per_GB": round(r["send_cpu_s_per_GB"] / raw["send_cpu_s_per_GB"], 3)
                    if raw.get("send_cpu_s_per_GB") else None,
                }
    doc["ratios_python_over_cpp"] = dict(sorted(ratios.items()))
    doc["machine"] = machine()
    doc["versions"] = versions()
    doc["command"] = "python -m bench.udt_raw " + " ".join(args.argv)
    doc["results"] = dict(sorted(doc["results"].items()))
    RESULTS.write_text(json.dumps(doc, indent=2) + "\n")
    return doc


def show(r: dict[str, Any]) -> None:
    runs = "" if r["runs"] == 1 else f"  (max {r['MBps_max']}, all {r['MBps_all']})"
    print(f"{key_of(r):44s} {r['MBps']:6.1f} MB/s{runs}\n{'':44s} median run: {r['bytes'] / 2**30:.2f} GiB in "
          f"{r['seconds']:.2f} s, cpu send {r['send_cpu_transfer_s']:.2f} s ({r['send_core_pct']}% of a core) "
          f"recv {r['recv_cpu_transfer_s']:.2f} s ({r['recv_core_pct']}%), retrans {r['sender_retrans']}, "
          f"mss {r['mss']}; cpu s/GB send {r['send_cpu_s_per_GB']} recv {r['recv_cpu_s_per_GB']}"
          + ("" if r["complete"] else "  [time cap]"), flush=True)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python -m bench.udt_raw", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mss", type=int, action="append", help="UDT_MSS (repeatable; default 1500)")
    p.add_argument("--buffer", default="default",
                   help="UDT_SNDBUF/RCVBUF and UDP_SNDBUF/RCVBUF, e.g. 64MiB, or 'default' (libudt's)")
    p.add_argument("--fc", default="auto", help="UDT_FC packets: 'auto' (2*buffer/MSS), 'default' or a number")
    p.add_argument("--bytes", type=parse_size, default=parse_size("2GiB"))
    p.add_argument("--chunk", type=parse_size, default=parse_size("16MiB"), help="bytes per send/recv call")
    p.add_argument("--max-seconds", type=float, default=25.0, help="cap on one transfer")
    p.add_argument("--repeat", type=int, default=1,
                   help="runs per configuration, interleaved between C++ and Python (the median is kept)")
    p.add_argument("--recv-call", choices=["recv_into", "recvall_into"], default="recv_into",
                   help="Python receiver loop")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--python", action="store_true", help="run the transfer through dstp's extension")
    mode.add_argument("--compare", action="store_true", help="run C++ then Python and print the ratio")
    mode.add_argument("--matrix", action="store_true",
                      help="defaults and 64MiB/auto FC at MSS 1500 and 9000, C++ and Python")
    p.add_argument("--no-save", action="store_true", help=f"do not update {RESULTS.relative_to(REPO)}")
    args = p.parse_args(argv)
    args.argv = argv

    impls = ["python"] if args.python else ["cpp", "python"] if (args.compare or args.matrix) else ["cpp"]
    if args.matrix:
        configs = [(m, b, f) for m in (1500, 9000) for b, f in ((0, "default"), (64 * MIB, "auto"))]
    else:
        buffer = 0 if args.buffer == "default" else parse_size(args.buffer)
        configs = [(m, buffer, args.fc) for m in (args.mss or [1500])]

    if "cpp" in impls:
        build_raw()
    results = []
    for mss, buffer, fc_text in configs:
        if fc_text == "default":
            fc = 0
        elif fc_text == "auto":
            fc = flow_window(buffer, mss) if buffer else 0
        else:
            fc = int(fc_text)
        pair = run_config(impls, args, mss, buffer, fc)
        for r in pair:
            show(r)
        if len(pair) == 2 and pair[0]["MBps"]:
            print(f"{'':44s} ratio python/C++ = {pair[1]['MBps'] / pair[0]['MBps']:.2f} (median runs), "
                  f"{pair[1]['MBps_max'] / pair[0]['MBps_max']:.2f} (best runs)", flush=True)
        results.extend(pair)
    if not args.no_save:
        doc = save(results, args)
        print(f"saved to {RESULTS.relative_to(REPO)}")
        if impls == ["python"]:  # compare with the last C++ run of the same configuration, if any
            for r in results:
                ratio = doc["ratios_python_over_cpp"].get(key_of(r)[len("python "):])
                if ratio:
                    print(f"ratio python/C++ vs the stored C++ run: {ratio}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

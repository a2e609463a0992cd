"""Is ``auto`` — now the default transport and codec — ever slower than the best fixed choice?

A matrix of cells: result size (1 kB … 100 MB of Arrow payload; 1 GB with ``--sizes``) × path
(loopback; the emulated 20 ms and 110 ms paths of :mod:`bench.wan` with ``--paths``) × client
(``cold``: a new ``dstp.Client`` with an empty tuner cache per request, in a new process, timed from
its construction; ``warm``: one client per peer kept for the run, warmed by one untimed request of each size).
In every cell each peer asks ``select temperature, time from ccm3 limit N`` (12 bytes a record,
N from the size) of one ``dstp serve`` of the large samples:

* fixed choices — ``grpc`` raw, LZ4 and zstd; ``striped`` × 1 and × 4 raw; ``udt`` raw when the
  server offers it;
* ``auto`` — no transport or compression named (the client's default).

Peers are interleaved request by request, their order rotated each round; the time is taken in
the driver process around one request (from the query to the whole result decoded in memory).
Per cell: the median of ``--repeats`` rounds per peer, the best fixed peer, and auto's time over
it (the goal: ≤ 1.05). Every peer's records are checked against grpc's (rows, temperature sum,
first and last time). The driver runs in the client's namespace on a WAN path, the server in
the server's. Results: ``bench/results/auto_matrix.json`` and ``.md``.

    python -m bench.auto_matrix [--repeats 5] [--sizes 1e3,1e4,1e5,1e6,1e7,1e8] [--paths loopback,wan20,wan110]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

from bench.report import RESULTS, markdown_table, median, write_json, write_markdown

NAME = "auto_matrix"
RECORD_BYTES = 12  # float32 temperature + int64 µs time
SIZES = (1e3, 1e4, 1e5, 1e6, 1e7, 1e8)
QUICK_SIZES = (1e3, 1e5)
#: peer → (transport, streams, compression); ``auto`` names nothing (the client's defaults).
FIXED = {
    "grpc": ("grpc", 0, "none"),
    "grpc-lz4": ("grpc", 0, "lz4"),
    "grpc-zstd": ("grpc", 0, "zstd"),
    "striped1": ("striped", 1, "none"),
    "striped4": ("striped", 4, "none"),
    "udt": ("udt", 0, "none"),
}
GOAL = 1.05
WAN_PATHS = {"wan20": 20.0, "wan110": 110.0}  # RTT ms; 1 Gb/s, no loss, MTU 1500, stock TCP buffers


def sql_for(size: float) -> str:
    return f"select temperature, time from ccm3 limit {max(1, round(size / RECORD_BYTES))}"


def _fetch(client: Any, peer: str, sql: str) -> Any:
    if peer == "auto":
        return client.query(sql)
    transport, streams, compression = FIXED[peer]
    return client.query(sql, transport=transport, streams=streams, compression=compression)


def _check(table: Any) -> list[Any]:
    import numpy as np

    when = table.column("time")
    return [table.num_rows, float(np.sum(table.column("temperature").to_numpy(), dtype=np.float64)),
            str(when[0].as_py()) if len(when) else None, str(when[-1].as_py()) if len(when) else None]


def drive(server: str, sizes: Sequence[float], repeats: int, peers: Sequence[str]) -> list[dict[str, Any]]:
    """Return one record per timed request (peer, size, mode, seconds, channel, choice, check)."""
    import dstp
    from dstp.transport.client.tuning import AutoTuner

    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="dstp-auto-matrix-") as tmp:
        warm = {p: dstp.Client(server, timeout=600, tuner=AutoTuner(Path(tmp) / f"warm-{p}.json")) for p in peers}
        try:
            for size in sizes:  # warm: every peer has asked once for every size (the tuner learns)
                for p in peers:
                    _fetch(warm[p], p, sql_for(size))
            n = 0
            for r in range(repeats):
                for size in sizes:
                    sql = sql_for(size)
                    for mode in ("cold", "warm"):
                        order = list(peers[r % len(peers):]) + list(peers[:r % len(peers)])
                        for p in order:
                            n += 1
                            if mode == "cold":  # a process of its own: gRPC shares connections between the
                                # clients of one process, so an in-process "new" client would find one up
                                cmd = [sys.executable, "-m", "bench.auto_matrix", "one", "--server", server,
                                       "--peers", p, "--sizes", str(size), "--tuner", str(Path(tmp) / f"cold-{n}.json")]
                                done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600,
                                                      cwd=Path(__file__).resolve().parents[1])
                                if done.returncode != 0:
                                    raise RuntimeError(f"cold {p} {size:g}: {done.stderr[-1500:]}")
                                runs.append({"mode": mode, "round": r, **json.loads(done.stdout.splitlines()[-1])})
                                continue
                            c = warm[p]
                            started = time.perf_counter()
                            table = _fetch(c, p, sql)
                            seconds = time.perf_counter() - started
                            runs.append({"mode": mode, "round": r, **_record(c, p, size, seconds, table)})
                            del table
        finally:
            for c in warm.values():
                c.close()
    return runs


def _record(client: Any, peer: str, size: float, seconds: float, table: Any) -> dict[str, Any]:
    s = client.last_summary
    return {"peer": peer, "size": size, "seconds": seconds, "channel": s.transport if s else None,
            "choice": s.choice if s else None, "wire_bytes": s.wire_bytes if s else None, "check": _check(table)}


def one(server: str, peer: str, size: float, tuner: Path) -> dict[str, Any]:
    """Return the record of one request by a new client in this (new) process: its construction, connection and
    query are timed, the imports not."""
    import dstp
    from dstp.transport.client.tuning import AutoTuner

    started = time.perf_counter()
    with dstp.Client(server, timeout=600, tuner=AutoTuner(tuner)) as client:
        table = _fetch(client, peer, sql_for(size))
        seconds = time.perf_counter() - started
        return _record(client, peer, size, seconds, table)


def summarize(runs: list[dict[str, Any]], path: str) -> list[dict[str, Any]]:
    """Return one row per (size, mode): each peer's median, the best fixed peer, auto's ratio to it."""
    rows = []
    for size in sorted({r["size"] for r in runs}):
        for mode in ("cold", "warm"):
            cell = [r for r in runs if r["size"] == size and r["mode"] == mode]
            peers = sorted({r["peer"] for r in cell})
            med = {p: median(r["seconds"] for r in cell if r["peer"] == p) for p in peers}
            fixed = {p: v for p, v in med.items() if p != "auto"}
            best = min(fixed, key=fixed.__getitem__)
            reference = {json.dumps(r["check"]) for r in cell if r["peer"] == "grpc"}
            checks_ok = all(json.dumps(r["check"]) in reference for r in cell) and len(reference) == 1
            auto_channels = sorted({f"{r['channel']}" for r in cell if r["peer"] == "auto"})
            ratio = med["auto"] / fixed[best]
            rows.append({"path": path, "size": size, "mode": mode, **{f"{p}_s": round(v, 6) for p, v in med.items()},
                         "best_fixed": best, "best_fixed_s": round(fixed[best], 4), "auto_s": round(med["auto"], 4),
                         "auto_over_best": round(ratio, 3), "goal_met": ratio <= GOAL,
                         "auto_channel": ",".join(auto_channels), "records_equal": checks_ok,
                         "auto_choice": next((r["choice"] for r in cell if r["peer"] == "auto"), "")})
    return rows


def _offers_udt() -> bool:
    from importlib.util import find_spec

    return find_spec("dstp.transport._udt") is not None


@contextlib.contextmanager
def _path(name: str) -> Iterator[tuple[list[str], list[str], str, dict[str, Any]]]:
    """Return (server prefix, client prefix, server host, description) of a path, set up for the block."""
    if name == "loopback":
        yield [], [], "127.0.0.1", {"kind": "loopback"}
        return
    from bench.wan import WanPath

    with WanPath.up(name=f"dstpwan-am{int(WAN_PATHS[name])}", rtt_ms=WAN_PATHS[name], rate_bps=1e9, loss=0.0,
                    mtu=1500) as wan:
        yield wan.exec_argv(wan.server_ns, []), wan.exec_argv(wan.client_ns, []), wan.server_addr, wan.describe()


def measure(path: str, root: Path, sizes: Sequence[float], repeats: int, peers: Sequence[str]) -> dict[str, Any]:
    """Return the runs and rows of one path: a server, and the driver in a process of its own."""
    from bench.dstp_process import serve

    with _path(path) as (server_prefix, client_prefix, host, info):
        args = ["--host", host, "--data-port", "0", "--udt-port", "0" if "udt" in peers else "-1"]
        with serve(root, *args, prefix=server_prefix) as server:
            cmd = [*client_prefix, sys.executable, "-m", "bench.auto_matrix", "drive", "--server",
                   server.endpoints["grpc"], "--sizes", ",".join(str(s) for s in sizes), "--repeats", str(repeats),
                   "--peers", ",".join(peers)]
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=7200,
                                  cwd=Path(__file__).resolve().parents[1])
            if done.returncode != 0:
                raise RuntimeError(f"the driver failed on {path}: {done.stderr[-2000:]}")
            runs = json.loads(done.stdout.strip().splitlines()[-1])
    for r in runs:
        r["path"] = path
    return {"path": path, "info": info, "runs": runs, "rows": summarize(runs, path)}


def markdown(result: dict[str, Any]) -> str:
    cols = [("path", "path"), ("size", "bytes"), ("mode", "client")]
    cols += [(f"{p}_ms", f"{p} ms") for p in result["peers"]]
    cols += [("best_fixed", "best fixed"), ("auto_over_best", "auto / best"), ("goal_met", "≤ 1.05"),
             ("auto_channel", "auto took"), ("records_equal", "records equal")]
    rows = [{**r, "size": f"{r['size']:.0e}", **{f"{p}_ms": f"{r[p + '_s'] * 1e3:.2f}" for p in result["peers"]
                                                  if p + "_s" in r}}
            for p in result["paths"] for r in p["rows"]]
    head = (f"Medians of {result['repeats']} interleaved rounds, seconds per request in the client process "
            f"({result['load']}). Command: `{result['command']}`.\n\n")
    return head + markdown_table(rows, cols) + "\n"


def run(quick: bool, samples: dict[str, Path], repeats: int = 5, sizes: Sequence[float] = SIZES,
        paths: Sequence[str] = ("loopback",)) -> dict[str, Any]:
    """Return the matrix; in full mode also write JSON and markdown to bench/results."""
    root = samples["small" if quick else "large"]
    sizes = QUICK_SIZES if quick else sizes
    repeats = 1 if quick else repeats
    peers = [p for p in FIXED if p != "udt" or _offers_udt()] + ["auto"]
    load = f"load average {os.getloadavg()[0]:.2f} at the start on {os.cpu_count()} cores"
    measured = []
    for path in paths:
        try:
            measured.append(measure(path, root, sizes, repeats, peers))
        except (RuntimeError, OSError, ValueError) as exc:  # no namespaces here: say so, keep the rest
            measured.append({"path": path, "error": str(exc), "rows": [], "runs": []})
    rows = [r for m in measured for r in m["rows"]]
    result: dict[str, Any] = {
        "sizes": list(sizes), "repeats": repeats, "peers": peers, "paths": measured, "load": load,
        "load_after": f"{os.getloadavg()[0]:.2f}", "goal": GOAL,
        "command": "python -m bench.auto_matrix " + " ".join(sys.argv[1:]) if not quick else "",
        "cells": len(rows), "cells_meeting_goal": sum(r["goal_met"] for r in rows),
        "all_records_equal": all(r["records_equal"] for r in rows),
    }
    if not quick:
        name = NAME if list(paths) == ["loopback"] else f"{NAME}-{'-'.join(paths)}"
        write_json(name, result)
        write_markdown(name, "auto vs the best fixed choice, per cell", markdown(result))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.auto_matrix", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", nargs="?", default="run", choices=["run", "drive", "one"])
    parser.add_argument("--tuner", default="")
    parser.add_argument("--server", default="")
    parser.add_argument("--sizes", default=",".join(str(s) for s in SIZES))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--peers", default="")
    parser.add_argument("--paths", default="loopback")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    sizes = [float(s) for s in args.sizes.split(",") if s]
    if args.command == "one":
        print(json.dumps(one(args.server, args.peers, sizes[0], Path(args.tuner))))
        return 0
    if args.command == "drive":
        print(json.dumps(drive(args.server, sizes, args.repeats, args.peers.split(","))))
        return 0
    from bench.__main__ import exclusive_machine, samples

    with exclusive_machine():
        result = run(args.quick, samples(args.quick), args.repeats, sizes, args.paths.split(","))
    print(json.dumps({k: v for k, v in result.items() if not isinstance(v, (list, dict))}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

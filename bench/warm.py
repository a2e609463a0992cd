"""Warm data connections: a client's first and second query, striped ×8 with kept connections vs cold, and gRPC.

The question is Table 4's (``select temperature, time from ccm3 where humidity > 50 limit N``,
N = 1,000,000 over the medium samples; :mod:`bench.table4`). ``dstp serve`` runs in its own
process; each measurement is one fresh client process (``python -m bench.warm --client …``)
that connects and pings (untimed: imports, the gRPC connection, the RTT the policy needs), then
times two identical queries back to back, each from the call to every record decoded:

* ``grpc`` — ``transport="grpc"``: the result on the control connection's stream;
* ``striped8-warm`` — ``transport="striped", streams=8`` with kept connections (the default):
  the first query dials eight stripes, the second rides them (and the window they grew);
* ``striped8-cold`` — the same with the client's pool switched off: every query dials eight
  fresh connections that start in slow start (the behaviour before kept connections).

Variants are interleaved run by run (order rotated each round), ``REPEATS`` rounds; per variant
the median of the first and of the second query. On loopback, and across the emulated
transatlantic path of :mod:`bench.wan` (110 ms RTT, 1 Gb/s, MTU 1500; server and client in
their namespaces) when that can be set up here (root, network namespaces).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

NAME = "warm"
SIZE = 1_000_000
QUICK_SIZE = 10_000
REPEATS = 3
VARIANTS = ("grpc", "striped8-warm", "striped8-cold")


# -- the client process -------------------------------------------------------------------


def client_main(url: str, variant: str, size: int) -> dict[str, Any]:
    """Return the two timed queries of one fresh client (run inside ``python -m bench.warm --client``)."""
    import numpy as np

    import dstp
    from bench.peers.sql import table4_sql

    client = dstp.connect(url, timeout=600)
    client.rtt()  # three Pings: untimed, as in Table 4's drivers
    if variant == "striped8-cold":
        client.policy.pool = None  # no kept connections: every transfer dials and closes its stripes
    transport, streams = ("grpc", 0) if variant == "grpc" else ("striped", 8)
    out: dict[str, Any] = {"variant": variant, "size": size}
    try:
        for which in ("first", "second"):
            gc.collect()
            started = time.perf_counter()
            table = client.query(table4_sql(size), transport=transport, streams=streams)
            out[f"{which}_s"] = time.perf_counter() - started
            out[f"{which}_rows"] = table.num_rows
            out[f"{which}_temperature_sum"] = float(np.sum(table.column("temperature").to_numpy(), dtype=np.float64))
            summary = client.last_summary
            out[f"{which}_reconnects"] = summary.reconnects if summary is not None else 0
        pool = client.policy.pool
        out["reused"] = pool.stats.reused if pool is not None else 0
    finally:
        client.close()
    return out


# -- the suite ----------------------------------------------------------------------------


def _one(prefix: Sequence[str], url: str, variant: str, size: int, timeout_s: float = 300) -> dict[str, Any]:
    """Return one client process's answer (or its error)."""
    cmd = [*prefix, sys.executable, "-m", "bench.warm", "--client", url, "--variant", variant, "--size", str(size)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return {"variant": variant, "error": f"no answer in {timeout_s:g} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"variant": variant, "error": (done.stderr.strip().splitlines() or ["failed"])[-1][:300]}
    answer: dict[str, Any] = json.loads(lines[-1])
    return answer


def measure(label: str, root: Path, size: int, repeats: int, host: str = "127.0.0.1",
            wan: Any = None) -> list[dict[str, Any]]:
    """Return every run on one path: variants interleaved, order rotated each round."""
    from bench.dstp_process import serve

    server_prefix = wan.exec_argv(wan.server_ns, []) if wan else []
    client_prefix = wan.exec_argv(wan.client_ns, []) if wan else []
    runs = []
    with serve(root, "--host", host, "--udt-port", "-1", prefix=server_prefix) as srv:
        url = srv.endpoints["grpc"]
        _one(client_prefix, url, "striped8-warm", size)  # untimed: page cache, server code paths
        order = list(VARIANTS)
        for rep in range(repeats):
            shift = rep % len(order)
            for variant in order[shift:] + order[:shift]:
                runs.append({"path": label, "rep": rep, **_one(client_prefix, url, variant, size)})
    return runs


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def summarize(runs: list[dict[str, Any]], size: int) -> list[dict[str, Any]]:
    """Return one row per (path, variant): medians of the first and second query, and the records check."""
    rows = []
    for path in dict.fromkeys(r["path"] for r in runs):
        mine = [r for r in runs if r["path"] == path and "error" not in r]
        ref = next((r for r in mine if r["variant"] == "grpc"), None)
        for variant in VARIANTS:
            ok = [r for r in mine if r["variant"] == variant]
            row: dict[str, Any] = {"path": path, "variant": variant, "runs": len(ok)}
            errors = [r["error"] for r in runs if r["path"] == path and r["variant"] == variant and "error" in r]
            if errors:
                row["error"] = errors[0]
            if ok:
                row.update(first_s=_median([r["first_s"] for r in ok]), second_s=_median([r["second_s"] for r in ok]),
                           first_runs=[round(r["first_s"], 4) for r in ok],
                           second_runs=[round(r["second_s"], 4) for r in ok],
                           reused=_median([r["reused"] for r in ok]),
                           reconnects=sum(r["first_reconnects"] + r["second_reconnects"] for r in ok),
                           check=_check(ok, ref, size))
            rows.append(row)
    return rows


def _check(ok: list[dict[str, Any]], ref: dict[str, Any] | None, size: int) -> str:
    """Return "ok" when every query returned ``size`` records with the gRPC stream's temperature sum."""
    for r in ok:
        for which in ("first", "second"):
            if r[f"{which}_rows"] != size:
                return f"{r[f'{which}_rows']} records, not {size}"
            if ref is not None and not math.isclose(r[f"{which}_temperature_sum"], ref["first_temperature_sum"],
                                                    rel_tol=1e-6):
                return "temperature sum differs from the gRPC stream's"
    return "ok" if ref is not None else "no reference"


def markdown(result: dict[str, Any]) -> str:
    """Return the readable table of a result."""
    lines = [
        f"Table 4's question, {result['size']:,} records, median of {result['repeats']} interleaved runs per "
        "variant; each run is a fresh client process timing two identical queries back to back (call → every "
        "record decoded). `reused`: stripes the second query took from the kept connections.",
        "",
        "| path | variant | first query s | second query s | second / first | reused | runs | check |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for row in result["rows"]:
        if "first_s" not in row:
            lines.append(f"| {row['path']} | {row['variant']} | – | – | – | – | 0 | {row.get('error', '')} |")
            continue
        lines.append(f"| {row['path']} | {row['variant']} | {row['first_s']:.3f} | {row['second_s']:.3f} | "
                     f"{row['second_s'] / row['first_s']:.2f} | {row['reused']:g} | {row['runs']} | {row['check']} |")
    for path, info in result["paths"].items():
        if "error" in info:
            lines += ["", f"{path}: {info['error']}"]
        elif info.get("slow_start_after_idle") is not None:
            lines += ["", f"{path}: server namespace net.ipv4.tcp_slow_start_after_idle = "
                          f"{info['slow_start_after_idle']}"]
    lines += ["", "Runs (seconds, first / second query):", ""]
    for row in result["rows"]:
        if "first_runs" in row:
            lines.append(f"- {row['path']} {row['variant']}: {row['first_runs']} / {row['second_runs']}")
    return "\n".join(lines) + "\n"


def _slow_start_after_idle(prefix: Sequence[str]) -> str | None:
    try:
        done = subprocess.run([*prefix, "cat", "/proc/sys/net/ipv4/tcp_slow_start_after_idle"], capture_output=True,
                              text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None


@contextlib.contextmanager
def _wan() -> Iterator[tuple[Any, dict[str, Any]]]:
    from bench.table4 import wan_path

    with wan_path() as (wan, info):
        yield wan, info


def run(quick: bool, samples: dict[str, Path], repeats: int = REPEATS, wan: bool = True) -> dict[str, Any]:
    """Return the results; in full mode also write bench/results/warm.{json,md}."""
    from bench.report import write_json, write_markdown

    started = time.monotonic()
    root = samples["small" if quick else "medium"]
    size = QUICK_SIZE if quick else SIZE
    repeats = 1 if quick else repeats
    runs = measure("loopback", root, size, repeats)
    paths: dict[str, Any] = {"loopback": {"kind": "loopback", "addr": "127.0.0.1",
                                          "slow_start_after_idle": _slow_start_after_idle([])}}
    if not quick and wan:
        try:
            with _wan() as (path, info):
                paths["wan-110ms"] = {**info,
                                      "slow_start_after_idle": _slow_start_after_idle(
                                          path.exec_argv(path.server_ns, []))}
                runs += measure("wan-110ms", root, size, repeats, host=path.server_addr, wan=path)
        except (RuntimeError, OSError, ValueError) as exc:
            paths["wan-110ms"] = {"error": f"the emulated WAN path could not be used: {exc}"}
    rows = summarize(runs, size)
    result: dict[str, Any] = {"size": size, "repeats": repeats, "variants": list(VARIANTS), "paths": paths,
                              "rows": rows, "runs": runs, "suite_seconds": time.monotonic() - started,
                              "all_checks_ok": all(r.get("check") == "ok" for r in rows)}
    for row in rows:
        if "first_s" in row:
            key = f"{row['path']}_{row['variant']}".replace("-", "_")
            result[f"{key}_first_s"] = round(row["first_s"], 3)
            result[f"{key}_second_s"] = round(row["second_s"], 3)
    if not quick:
        write_json(NAME, result)
        write_markdown(NAME, "Warm data connections: first vs second query", markdown(result))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.warm", description=__doc__)
    parser.add_argument("--client", metavar="URL", help="run one client process against URL and print JSON")
    parser.add_argument("--variant", choices=VARIANTS, default="striped8-warm")
    parser.add_argument("--size", type=int, default=SIZE)
    args = parser.parse_args(argv)
    if args.client:
        print(json.dumps(client_main(args.client, args.variant, args.size)))
        return 0
    parser.error("use `python -m bench run --only warm` for the suite, or --client URL for one client")
    return 2


if __name__ == "__main__":
    sys.exit(main())


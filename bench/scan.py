"""The scan bound: a 1.1 GB query result with netCDF-C reads vs chunks read outside the lock, 1 and 2 threads.

Issue 15, item 5. ``select * from ccm3 limit 25000000`` over the large samples
(zlib level 1 + shuffle, one time step per chunk, as CESM writes them): 25 M
records, 1.12 GB of Arrow. Four ``dstp serve`` processes on the same files
differ only in how they scan (environment settings):

* ``default`` — no settings: the server as shipped (compressed chunks read, inflated (ISA-L) and
  unshuffled outside the netCDF lock by :mod:`dstp.catalog.chunks`, one block at a time; plain
  projections streamed from the scan without DuckDB);
* ``lock`` — ``DSTP_DIRECT_CHUNKS=false``: every read through netCDF-C under its lock (the default
  until the chunk reader was turned on);
* ``netcdf-c`` — that, and ``DSTP_PLAIN_PROJECTIONS=false``: every query through DuckDB (the server's
  scan before this round; the client is today's in every row);
* ``read-ahead`` — ``DSTP_SCAN_THREADS=2``: the default, with two blocks read ahead of DuckDB on threads.

Each server is queried by fresh client processes (``python -m bench.bulk_client``: batches
counted and dropped) over the striped channel ×8, the gRPC stream and ``auto`` (what ``dstp
query`` does unless told, after ``AUTO_LEARNING`` untimed queries); configurations and
transports interleaved, order rotated each round, medians of ``REPEATS``. Whole-process
figures (client spawn to exit) next to the client's own clock (connect to last batch), and
client and server CPU per GB (from /proc).
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.bulk import SQL_LARGE, SQL_QUICK, summarize
from bench.bulk_tools import LOOPBACK, Run, dstp_query
from bench.report import write_json, write_markdown

NAME = "scan"
REPEATS = 3
CONFIGS: dict[str, dict[str, str]] = {
    "default": {},
    "lock": {"DSTP_DIRECT_CHUNKS": "false"},
    "netcdf-c": {"DSTP_DIRECT_CHUNKS": "false", "DSTP_SCAN_THREADS": "1", "DSTP_PLAIN_PROJECTIONS": "false"},
    "read-ahead": {"DSTP_SCAN_THREADS": "2"},
}
TRANSPORTS = {"striped ×8": ("striped", 8), "gRPC stream": ("grpc", 0), "auto": ("auto", 0)}
#: Untimed ``auto`` queries per server before the timed rounds: its tuner starts at 4 stripes and learns
#: (per server address, in the run's own cache), as a scientist's second and later queries would find it.
AUTO_LEARNING = 2


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"`{result['sql']}` over the {result['samples']} samples; medians of {result['repeats']} interleaved runs, "
        "each a fresh client process. MB/s = result bytes over the client's whole process time (spawn to "
        "exit); own clock = connect to last batch. CPU s/GB = client + server CPU per 10^9 bytes. "
        f"Inflate: {result['inflate']}.",
        "",
        "| scan | transport | MB/s (whole process) | MB/s (own clock) | s | CPU s/GB | client CPU s | server CPU s "
        "| rows | runs |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result["rows"]:
        if not row["n"]:
            lines.append(f"| {row['config']} | {row['transport']} | – | – | – | – | – | – | – | 0 |")
            continue
        lines.append(
            f"| {row['config']} | {row['transport']} | {row['MBps']:.1f} | {row['transfer_MBps']:.1f} | "
            f"{row['seconds']:.3f} | {row['cpu_s_per_GB']:.3f} | {row['client_cpu_s']:.3f} | "
            f"{row['server_cpu_s']:.3f} | {row['rows']:,} | {row['n']} |")
    chosen = [f"{r['config']}: {', '.join(r['channels'])}" for r in result["rows"] if r["transport"] == "auto" and r["n"]]
    if chosen:
        lines += ["", "`auto` chose " + "; ".join(chosen) + " (its reasons, compression included: `choices` in scan.json)."]
    if result.get("errors"):
        lines += ["", "Errors: " + "; ".join(result["errors"])]
    return "\n".join(lines) + "\n"


def _channel(detail: dict[str, Any]) -> str:
    """Return the channel a run used, e.g. ``striped ×8`` (what ``auto`` chose)."""
    kind = str(detail.get("transport", "?"))
    return f"{kind} ×{detail['streams']}" if kind == "striped" and detail.get("streams") else kind


def plot(result: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result["rows"] if r["n"]]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    labels = [f"{r['config']}\n{r['transport']}" for r in rows]
    ax.bar(labels, [r["MBps"] for r in rows], color=["#999" if r["config"] == "netcdf-c" else "#3a7" for r in rows])
    ax.set_ylabel("MB/s, whole client process")
    ax.set_title("1.1 GB query result on loopback, by scan")
    fig.tight_layout()
    fig.savefig(out / f"{NAME}.png", dpi=110)
    plt.close(fig)


def run(quick: bool, samples: dict[str, Path], repeats: int = REPEATS) -> dict[str, Any]:
    from bench.dstp_process import serve
    from bench.report import RESULTS
    from dstp.catalog.chunks import INFLATE

    started = time.monotonic()
    root = samples["small" if quick else "large"]
    sql = SQL_QUICK if quick else SQL_LARGE
    repeats = 1 if quick else repeats
    runs: dict[tuple[str, str], list[Run]] = {(c, t): [] for c in CONFIGS for t in TRANSPORTS}
    with contextlib.ExitStack() as stack:
        servers = {c: stack.enter_context(serve(root, "--udt-port", "-1", env=env)) for c, env in CONFIGS.items()}
        cache = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="dstp-bench-scan-")))
        order = [(c, t) for c in CONFIGS for t in TRANSPORTS]
        for c in CONFIGS:  # untimed: page cache, each server's code paths
            dstp_query(LOOPBACK, "warm-up", servers[c], sql, cache, transport="striped", streams=8)
            for _ in range(AUTO_LEARNING):
                dstp_query(LOOPBACK, "auto learning", servers[c], sql, cache, transport="auto")
        for rep in range(repeats):
            shift = rep % len(order)
            for config, transport in order[shift:] + order[:shift]:
                kind, streams = TRANSPORTS[transport]
                runs[(config, transport)].append(
                    dstp_query(LOOPBACK, f"{config} {transport}", servers[config], sql, cache,
                               transport=kind, streams=streams))
    rows = []
    for (config, transport), got in runs.items():
        row = {"config": config, "transport": transport, **summarize(f"{config} {transport}", got)}
        row["rows"] = max((r.detail.get("rows", 0) for r in got if r.ok), default=0)
        row["channels"] = sorted({_channel(r.detail) for r in got if r.ok})
        rows.append(row)
    expected = {r["rows"] for r in rows if r["n"]}
    result: dict[str, Any] = {
        "sql": sql, "samples": "small" if quick else "large", "repeats": repeats, "inflate": INFLATE,
        "configs": CONFIGS, "rows": rows, "same_rows": len(expected) == 1,
        "errors": sorted({e for r in rows for e in r["errors"]}), "suite_seconds": round(time.monotonic() - started, 1),
    }
    for row in rows:
        if row["n"]:
            key = f"{row['config']}_{row['transport'].split()[0]}".replace("-", "_").lower()
            result[f"{key}_MBps"] = round(row["MBps"], 1)
    if not quick:
        write_json(NAME, result)
        write_markdown(NAME, "The scan bound: a 1.1 GB query result by scan", markdown(result))
        plot(result, RESULTS)
    return result

"""``dstp get`` over the UDT channel against raw libudt at the same settings (issue 15's UDT target).

One 256 MiB file on loopback, tmpfs to tmpfs. Two peers, interleaved (the order rotating each round):

* **dstp UDT** — ``dstp get --transport udt`` in a fresh client process against a running ``dstp serve``;
  whole process from spawn to exit (set-up, gRPC OpenFile, the UDT handshake, the CRC check, teardown).
* **raw libudt** — ``bench/udt_raw``'s C++ sender and receiver at the MSS, buffers and flow windows the
  channel uses, whole processes too.

The target: dstp ≥ 0.7× raw libudt, whole process. ``python -m bench run --only udt_get`` writes
``bench/results/udt_get.{json,md,png}``; ``--quick`` moves 8 MiB once and writes nothing.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from bench.report import command_line, save_figure

NAME = "udt_get"
SIZE_MIB = 256
REPEATS = 7
TARGET = 0.7


def run(quick: bool, samples: dict[str, Path], repeats: int = REPEATS) -> dict[str, Any]:
    """Return the medians; a full run writes bench/results/udt_get.{json,md,png}."""
    from bench import bulk
    from bench import bulk_tools as tools
    from bench.bulk_catalog import make_catalog
    from bench.report import RESULTS, machine, write_json, write_markdown
    from dstp.transport import udt_socket

    repeats = 1 if quick else repeats
    started = time.monotonic()
    settings = bulk.udt_channel_settings()
    raw = bulk.Tool("raw libudt, channel's settings", "udt_raw")
    peers = (bulk.UDT, raw)
    with bulk.workspace(NAME) as work:
        catalog = make_catalog(work / "catalog", (8 if quick else SIZE_MIB,))
        source = catalog.files[0]
        with bulk.Bench(tools.LOOPBACK, work / "loopback", None, True, root=catalog.root) as bench:

            def one(tool: bulk.Tool) -> bulk.Run:
                if tool.kind == "udt_raw":
                    return tools.udt_raw(tool.name, source.size, **settings)
                return bulk.run_tool(tool, bench, source)

            runs = bulk.interleaved(peers, repeats, one)
    rows = [bulk.summarize(name, r) for name, r in runs.items()]
    mbps = {name: [r.mb_per_s for r in rs if r.ok] for name, rs in runs.items()}
    medians = {name: statistics.median(v) if v else None for name, v in mbps.items()}
    dstp_mbps, raw_mbps = medians[bulk.UDT.name], medians[raw.name]
    ratio = dstp_mbps / raw_mbps if dstp_mbps and raw_mbps else None
    pairs = [a / b for a, b in zip(mbps[bulk.UDT.name], mbps[raw.name]) if b]
    result: dict[str, Any] = {
        "mode": "quick" if quick else "full", "repeats": repeats, "machine": machine(), "bytes": source.size,
        "settings": settings, "libudt_link": getattr(udt_socket._require(), "LIBUDT_LINK", "unknown"),
        "ratio_of_medians": ratio, "pair_ratios": pairs, "target": TARGET,
        "met": ratio is not None and ratio >= TARGET, "rows": rows,
        "seconds": round(time.monotonic() - started, 1),
    }
    if not quick:
        write_json(NAME, result)
        write_markdown(NAME, "dstp get over UDT vs raw libudt, loopback", report(result))
        plot(result, RESULTS)
    return {"mode": result["mode"], "dstp_MBps": dstp_mbps, "raw_MBps": raw_mbps, "ratio": ratio}


def report(result: dict[str, Any]) -> str:
    s = result["settings"]
    lines = [f"{result['bytes']:,} bytes, loopback, tmpfs to tmpfs, {result['repeats']} interleaved rounds, "
             f"medians; MB/s = bytes over each process's wall time (spawn to exit). Settings for both: MSS "
             f"{s['mss']}, buffers {s['send_buffer'] >> 20} MiB, flow window {s['send_fc']}; libudt linked "
             f"{result['libudt_link']}.", "",
             "| peer | MB/s (whole process, median) | runs MB/s | s (median) | client CPU s | server CPU s |",
             "|---|---|---|---|---|---|"]
    for row in result["rows"]:
        runs = [r for r in row["runs"] if r.get("ok")]
        each = ", ".join(f"{r['MBps']:.0f}" for r in runs)
        lines.append(f"| {row['tool']} | {statistics.median(r['MBps'] for r in runs):.1f} | {each} | "
                     f"{statistics.median(r['seconds'] for r in runs):.3f} | "
                     f"{statistics.median(r.get('client_cpu_s') or 0 for r in runs):.2f} | "
                     f"{statistics.median(r.get('server_cpu_s') or 0 for r in runs):.2f} |")
    ratio = result["ratio_of_medians"]
    pairs = ", ".join(f"{p:.2f}" for p in result["pair_ratios"])
    verdict = "met" if result["met"] else "MISSED"
    lines += ["", f"Target: dstp ≥ {result['target']}× raw libudt (whole process): **{ratio:.2f}×, {verdict}** "
                  f"(round by round: {pairs})."]
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 2.8))
    for i, row in enumerate(result["rows"]):
        values = [r["MBps"] for r in row["runs"] if r.get("ok")]
        ax.barh(i, statistics.median(values), color="#3a7" if i == 0 else "#888")
        ax.plot(values, [i] * len(values), "k.", markersize=5)
    ax.set_yticks(range(len(result["rows"])), [row["tool"] for row in result["rows"]])
    ax.set_xlabel("MB/s, whole process (bars: median; dots: runs)")
    ax.set_title(f"{result['bytes'] >> 20} MiB on loopback: dstp UDT vs raw libudt")
    save_figure(fig, out / f"{NAME}.png")


if __name__ == "__main__":
    command_line(run)

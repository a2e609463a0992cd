"""``dstp get`` over the UDT channel against raw libudt at the same settings (issue 15's UDT target).

One 256 MiB file on loopback, tmpfs to tmpfs. Two peers, interleaved (the order rotating each round):

* **dstp UDT** — ``dstp get --transport udt`` in a fresh client process against a running ``dstp serve``;
  whole process from spawn to exit (set-up, gRPC OpenFile, the UDT handshake, the CRC check, teardown).
* **raw libudt** — ``bench/udt_raw``'s C++ sender and receiver (memory to memory: no file read or written) at
  the MSS, buffers and flow windows the channel uses, whole processes too;
* **raw libudt, best setting here** — the same peers at the setting with the highest median in
  ``bench/results/udt_settings.json`` (``python -m bench.udt_settings``: a grid of MSS, buffers and windows on
  this machine), when it differs from the channel's.

The target: dstp ≥ 0.7× raw libudt at its best setting here, whole process: dstp is held to the faster of
the two raw rows in the same run. ``python -m bench run --only udt_get`` writes
``bench/results/udt_get.{json,md,png}``; ``--quick`` moves 8 MiB once and writes nothing.
"""

from __future__ import annotations

import json
import os
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
    best_label, best_settings = best_raw_setting()
    best = bulk.Tool(f"raw libudt, best setting here ({best_label})", "udt_raw")
    same = best_settings == settings
    peers = (bulk.UDT, raw) if same else (bulk.UDT, raw, best)
    by_tool = {raw.name: settings, best.name: best_settings}
    loads: list[tuple[float, float]] = []
    with bulk.workspace(NAME) as work:
        catalog = make_catalog(work / "catalog", (8 if quick else SIZE_MIB,))
        source = catalog.files[0]
        with bulk.Bench(tools.LOOPBACK, work / "loopback", None, True, root=catalog.root) as bench:

            def one(tool: bulk.Tool) -> bulk.Run:
                before = os.getloadavg()[0]
                if tool.kind == "udt_raw":
                    run = tools.udt_raw(tool.name, source.size, **by_tool[tool.name])
                else:
                    run = bulk.run_tool(tool, bench, source)
                loads.append((before, os.getloadavg()[0]))
                return run

            runs = bulk.interleaved(peers, repeats, one)
    rows = [bulk.summarize(name, r) for name, r in runs.items()]
    mbps = {name: [r.mb_per_s for r in rs if r.ok] for name, rs in runs.items()}
    medians = {name: statistics.median(v) if v else None for name, v in mbps.items()}
    # Held to the faster raw row of this run (the grid's best setting can lose to the channel's in a given run).
    raw_rows = [raw] if same else [raw, best]
    target_raw = max(raw_rows, key=lambda t: medians[t.name] or 0.0)
    dstp_mbps, raw_mbps = medians[bulk.UDT.name], medians[target_raw.name]
    ratio = dstp_mbps / raw_mbps if dstp_mbps and raw_mbps else None
    pairs = [a / b for a, b in zip(mbps[bulk.UDT.name], mbps[target_raw.name]) if b]
    channel_mbps = medians[raw.name]
    channel_ratio = dstp_mbps / channel_mbps if dstp_mbps and channel_mbps else None
    result: dict[str, Any] = {
        "mode": "quick" if quick else "full", "repeats": repeats, "machine": machine(), "bytes": source.size,
        "settings": settings, "best_setting": {"label": best_label, **best_settings}, "compared_with": target_raw.name,
        "ratio_to_channel_settings": channel_ratio, "loads": loads, "libudt_link": getattr(udt_socket._require(), "LIBUDT_LINK", "unknown"),
        "ratio_of_medians": ratio, "pair_ratios": pairs, "target": TARGET,
        "met": ratio is not None and ratio >= TARGET, "rows": rows,
        "seconds": round(time.monotonic() - started, 1),
    }
    if not quick:
        write_json(NAME, result)
        write_markdown(NAME, "dstp get over UDT vs raw libudt, loopback", report(result))
        plot(result, RESULTS)
    return {"mode": result["mode"], "dstp_MBps": dstp_mbps, "raw_MBps": raw_mbps, "ratio": ratio}


def best_raw_setting() -> tuple[str, dict[str, int]]:
    """Return the label and settings of raw libudt's fastest setting (median) in bench/results/udt_settings.json."""
    from bench.report import RESULTS

    saved = json.loads((RESULTS / "udt_settings.json").read_text())
    best = next(r for r in saved["rows"] if r["setting"] == saved["best"])
    keys = ("mss", "recv_buffer", "recv_fc", "send_buffer", "send_fc")
    return best["setting"], {k: int(best[k]) for k in keys}


def report(result: dict[str, Any]) -> str:
    s = result["settings"]
    b = result["best_setting"]
    lines = [f"{result['bytes']:,} bytes, loopback, tmpfs to tmpfs, {result['repeats']} interleaved rounds, "
             f"medians; MB/s = bytes over each process's wall time (spawn to exit). Settings for both: MSS "
             f"{s['mss']}, buffers {s['send_buffer'] >> 20} MiB, flow window {s['send_fc']}; raw libudt's best setting "
             f"here (bench/results/udt_settings.md): {b['label']}, flow window {b['send_fc'] or 'default'}; libudt "
             f"linked {result['libudt_link']}. Raw libudt moves memory to memory; dstp reads and writes tmpfs files. "
             f"Load average (1 min) {result['loads'][0][0]:.2f} at the start, {result['loads'][-1][1]:.2f} at the end.",
             "",
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
    lines += ["", f"Target: dstp ≥ {result['target']}× raw libudt at its best setting here (whole process, against the "
                  f"faster raw row, “{result['compared_with']}”): **{ratio:.2f}×, {verdict}** (round by round: {pairs})."]
    if result.get("ratio_to_channel_settings") is not None:
        lines.append(f"Against raw libudt at the channel's own settings: {result['ratio_to_channel_settings']:.2f}×.")
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.2))
    for i, row in enumerate(result["rows"]):
        values = [r["MBps"] for r in row["runs"] if r.get("ok")]
        ax.barh(i, statistics.median(values) if values else 0, color="#3a7" if i == 0 else "#888")
        ax.plot(values, [i] * len(values), "k.", markersize=5)
    ax.set_yticks(range(len(result["rows"])), [row["tool"] for row in result["rows"]])
    ax.set_xlabel("MB/s, whole process (bars: median; dots: runs)")
    ax.set_title(f"{result['bytes'] >> 20} MiB on loopback: dstp UDT vs raw libudt")
    save_figure(fig, out / f"{NAME}.png")


if __name__ == "__main__":
    command_line(run)

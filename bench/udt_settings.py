"""Raw libudt over a grid of settings on this machine: which MSS, buffers and flow window move 256 MiB fastest.

Issue 38 quoted raw libudt at 544 MB/s against dstp's 230 MB/s; ``udt_get`` compared dstp with raw libudt at the
channel's own settings (MSS 9000, 64 MiB buffers). This grid says what raw libudt does at its best here, so dstp
is held to that. Every setting runs once per round, the order rotating; MB/s is bytes over the sender process's
wall time (spawn to exit), as in ``udt_get``. The load average is recorded before and after each round (other
work on the two cores moves loopback numbers a lot).

    python -m bench.udt_settings [--repeats 5] [--mib 256]

writes ``bench/results/udt_settings.{json,md}``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

MIB = 1 << 20

#: (label, mss, buffer bytes (0: libudt's defaults), flow window (0: default; -1: matched to the buffer))
GRID: tuple[tuple[str, int, int, int], ...] = (
    ("MSS 1500, libudt defaults", 1500, 0, 0),
    ("MSS 9000, libudt defaults", 9000, 0, 0),
    ("MSS 1500, 64 MiB, fc matched", 1500, 64 * MIB, -1),
    ("MSS 9000, 64 MiB, fc matched (channel)", 9000, 64 * MIB, -1),
    ("MSS 9000, 16 MiB, fc matched", 9000, 16 * MIB, -1),
    ("MSS 9000, 8 MiB, fc matched", 9000, 8 * MIB, -1),
    ("MSS 9000, 64 MiB, fc default", 9000, 64 * MIB, 0),
    ("MSS 16000, libudt defaults", 16000, 0, 0),
    ("MSS 16000, 64 MiB, fc matched", 16000, 64 * MIB, -1),
    ("MSS 32000, 64 MiB, fc matched", 32000, 64 * MIB, -1),
    ("MSS 64000, 64 MiB, fc matched", 64000, 64 * MIB, -1),
)


def settings_of(mss: int, buffer: int, fc: int) -> dict[str, int]:
    from dstp.transport.udt_socket import flow_window_for

    window = flow_window_for(buffer, mss) if fc < 0 else fc
    return {"mss": mss, "recv_buffer": buffer, "recv_fc": window, "send_buffer": buffer, "send_fc": window}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from bench import bulk
    from bench import bulk_tools as tools
    from bench.report import machine, write_json, write_markdown

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--only", nargs="*", default=(), help="settings whose label contains one of these words")
    args = parser.parse_args(argv)
    nbytes = args.mib * MIB
    grid = [g for g in GRID if not args.only or any(w in g[0] for w in args.only)]
    peers = tuple(bulk.Tool(label, "udt_raw") for label, *_ in grid)
    settings = {label: settings_of(mss, buf, fc) for label, mss, buf, fc in grid}
    loads: list[dict[str, float]] = []
    started = time.monotonic()

    def one(tool: bulk.Tool) -> Any:
        before = os.getloadavg()[0]
        run = tools.udt_raw(tool.name, nbytes, **settings[tool.name])
        loads.append({"before": before, "after": os.getloadavg()[0]})
        run.detail["load"] = loads[-1]
        return run

    runs = bulk.interleaved(peers, args.repeats, one)
    rows: list[dict[str, Any]] = []
    for label, rs in runs.items():
        ok = [r.mb_per_s for r in rs if r.ok and r.complete]
        rows.append({"setting": label, **settings[label], "MBps_median": statistics.median(ok) if ok else None,
                     "MBps_max": max(ok) if ok else None, "MBps_all": [round(r.mb_per_s, 1) for r in rs],
                     "complete": [r.complete for r in rs], "retransmits": [r.detail.get("retransmits") for r in rs],
                     "loads": [r.detail.get("load") for r in rs]})
    best = max((r for r in rows if r["MBps_median"]), key=lambda r: r["MBps_median"])
    result = {"bytes": nbytes, "repeats": args.repeats, "machine": machine(), "rows": rows, "best": best["setting"],
              "load_start": loads[0]["before"] if loads else None, "load_end": loads[-1]["after"] if loads else None,
              "seconds": round(time.monotonic() - started, 1)}
    if not args.no_write:
        write_json("udt_settings", result)
        write_markdown("udt_settings", "raw libudt over a grid of settings, loopback", report(result))
    print(report(result))
    return result


def report(result: dict[str, Any]) -> str:
    lines = [f"{result['bytes']:,} bytes memory to memory on loopback, `bench/udt_raw`'s C++ peers, "
             f"{result['repeats']} interleaved rounds; MB/s = bytes over the sender process's wall time. "
             f"Load average (1 min) {result['load_start']:.2f} at the start, {result['load_end']:.2f} at the end.", "",
             "| setting | flow window | MB/s median | max | runs |", "|---|---|---|---|---|"]
    for r in sorted(result["rows"], key=lambda r: -(r["MBps_median"] or 0)):
        med = f"{r['MBps_median']:.1f}" if r["MBps_median"] else "—"
        top = f"{r['MBps_max']:.1f}" if r["MBps_max"] else "—"
        lines.append(f"| {r['setting']} | {r['send_fc'] or 'default'} | {med} | {top} | "
                     f"{', '.join(f'{v:.0f}' for v in r['MBps_all'])} |")
    lines += ["", f"Best here (median): **{result['best']}**."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()

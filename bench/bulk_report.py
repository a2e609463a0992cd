"""The bulk benchmark's verdicts, markdown tables and plots (bench/results/bulk.{json,md}, bulk_*.png)."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Iterable

from bench.report import RESULTS, markdown_table, write_json, write_markdown

NAME = "bulk"

__all__ = ["markdown", "plots", "targets", "write"]


def _row(rows: Iterable[dict[str, Any]], tool: str) -> dict[str, Any] | None:
    return next((r for r in rows if r["tool"] == tool and r["n"]), None)


def _ok(x: Any) -> bool:
    return isinstance(x, (int, float)) and not math.isnan(x)


def _target(what: str, value: float | None, goal: float, detail: str, higher: bool = True) -> dict[str, Any]:
    met = None if value is None or not _ok(value) else (value >= goal if higher else value <= goal)
    return {"target": what, "value": None if value is None or not _ok(value) else round(value, 3), "goal": goal,
            "met": met, "detail": detail}


def _fixed_stripes(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return the dstp rows with a fixed stripe count and no congestion-control flag."""
    return [r for r in rows if re.fullmatch(r"dstp ×\d+", r["tool"]) and r["n"]]


def targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Return the issue's targets, each with the measured value, the goal and met/missed (None: not measured)."""
    out: list[dict[str, Any]] = []
    lb = result.get("loopback", {})
    for label, f in lb.get("files", {}).items():
        grid = _row(f["rows"], "GridFTP -p 8")
        for tool in ("dstp auto", "dstp ×8", "dstp auto via agent"):
            d = _row(f["rows"], tool)
            ratio = d["MBps"] / grid["MBps"] if d and grid else None
            out.append(_target(f"loopback {label}: {tool} ≥ 2 × GridFTP -p 8 (whole process)", ratio, 2.0,
                               f"{d['MBps']:.0f} vs {grid['MBps']:.0f} MB/s" if d and grid else "not measured"))
    raw_files = [f for f in lb.get("files", {}).values() if _row(f["rows"], "raw libudt, channel's settings")]
    if raw_files:
        rows = raw_files[0]["rows"]
        udt, raw, raw64 = (_row(rows, t) for t in ("dstp UDT", "raw libudt, channel's settings",
                                                    "raw libudt, 64 MiB buffers"))
        if udt and raw:
            out.append(_target("loopback: UDT channel ≥ 70 % of raw libudt, same MSS and buffers",
                               udt["transfer_MBps"] / raw["transfer_MBps"], 0.7,
                               f"{udt['transfer_MBps']:.0f} vs {raw['transfer_MBps']:.0f} MB/s (transfer clocks)"))
        if udt and raw64:
            out.append(_target("loopback: UDT channel ≥ 70 % of raw libudt at its best setting (64 MiB buffers; "
                               "informational)",
                               udt["transfer_MBps"] / raw64["transfer_MBps"], 0.7,
                               f"{udt['transfer_MBps']:.0f} vs {raw64['transfer_MBps']:.0f} MB/s (transfer clocks)"))
    for cell in result.get("wan", []):
        rows, link = cell["rows"], cell["rate_bps"] / 1e6
        if cell["rtt_ms"] == 100 and cell["loss"] == 0:
            d8 = _row(rows, "dstp ×8")
            if d8:
                ref = _row(rows, "iperf3 ×8 bbr")
                own = (f"; dstp's own clock {d8['transfer_MBps'] * 8:.0f} Mb/s = {d8['transfer_MBps'] * 8 / link:.0%}"
                       if _ok(d8["transfer_MBps"]) else "")
                same = (f"; iperf3 ×8 BBR on the same bytes {ref['Mbps']:.0f} Mb/s = {ref['Mbps'] / link:.0%}"
                        if ref else "")
                out.append(_target(f"{cell['cell']}: dstp ×8 ≥ 85 % of the link (whole process)", d8["Mbps"] / link,
                                   0.85, f"{d8['Mbps']:.0f} Mb/s{own}{same}"))
            fixed, auto = _fixed_stripes(rows), _row(rows, "dstp auto")
            if auto and cell.get("mtu") == 9000:
                out.append(_target(f"{cell['cell']}: auto ≥ 0.80 Gb/s (whole process, after learning)",
                                   auto["Mbps"] / 1e3, 0.80, f"auto {auto['Mbps']:.0f} Mb/s"))
            for tool, goal in (("dstp ×8 via agent", 0.85), ("dstp auto via agent", 0.80)):
                via = _row(rows, tool)
                if via and cell.get("mtu") == 9000:
                    out.append(_target(f"{cell['cell']}: {tool} ≥ {goal:.2f} Gb/s (whole `dstp get` process; the "
                                       "agent's connections kept warm)", via["Mbps"] / 1e3, goal,
                                       f"{via['Mbps']:.0f} Mb/s"))
            if fixed and auto:
                best = max(fixed, key=lambda r: r["Mbps"])
                warm = sum(1 for w in cell.get("auto_warmup", []) if "Mbps" in w)
                out.append(_target(f"{cell['cell']}: auto within 10 % of the best fixed stripe count",
                                   auto["Mbps"] / best["Mbps"], 0.9,
                                   f"auto {auto['Mbps']:.0f} Mb/s vs {best['tool']} {best['Mbps']:.0f} Mb/s, "
                                   f"after {warm} learning transfers"))
        if cell["rtt_ms"] == 200 and cell["loss"] == 1e-3:
            udt, cubic = _row(rows, "dstp UDT"), _row(rows, "iperf3 ×1 cubic")
            if udt and cubic:
                out.append(_target(f"{cell['cell']}: UDT ≥ 3 × one CUBIC stream", udt["Mbps"] / cubic["Mbps"], 3.0,
                                   f"{udt['Mbps']:.1f} vs {cubic['Mbps']:.1f} Mb/s"))
        udt = _row(rows, "dstp UDT")
        if udt:
            tcp = [r for r in rows if r["tool"] not in ("dstp UDT", "dstp auto") and r["n"]
                   and (r["tool"].startswith("dstp") or "bbr" in r["tool"])]
            winner = max(tcp, key=lambda r: r["Mbps"]) if tcp else None
            auto = _row(rows, "dstp auto")
            picked = [c for c in (auto or {}).get("choices", []) if c.startswith("auto: udt")]
            if winner and udt["Mbps"] < winner["Mbps"] and auto:
                out.append(_target(f"{cell['cell']}: UDT loses to {winner['tool']} — auto must not pick UDT",
                                   float(len(picked)), 0.0,
                                   f"UDT {udt['Mbps']:.0f} vs {winner['Mbps']:.0f} Mb/s; auto picked UDT in "
                                   f"{len(picked)} of {len(auto['choices'])} measured runs", higher=False))
    return out


# -- markdown -----------------------------------------------------------------------------


def _short(choice: str) -> str:
    """Return an auto choice without the parts that change run to run (RTT, sizes, best rates)."""
    c = re.sub(r"; (file|result) up to [\d.]+ MiB", "", choice)
    c = re.sub(r"; RTT [\d.]+ ms", "", c)
    c = re.sub(r"settled on (\d+) streams \([\d.]+ Mb/s best\)", r"settled on \1 streams", c)
    c = c.replace("[predicted from the tuning cache: the run was cut at the cap]", "[predicted: run cut at the cap]")
    return c.replace("auto: ", "", 1)


def _choice(row: dict[str, Any]) -> str:
    """Return the distinct auto choices of an auto row, shortened ('' for fixed peers)."""
    if "auto" not in row.get("tool", "auto"):
        return ""
    seen: list[str] = []
    for c in row.get("choices", []):
        short = _short(c)
        if short not in seen:
            seen.append(short)
    return " / ".join(seen)


def _table(rows: list[dict[str, Any]], unit: str) -> str:
    view = []
    for r in rows:
        scale = 8 if unit == "Mb/s" else 1
        state = ("; ".join(r["errors"]) or "failed") if not r["n"] else (
            "capped" if not r["complete"] else "identical" if r["identical"] else
            "MISMATCH" if r["identical"] is False else "ok")
        view.append({"tool": r["tool"], "rate": r["MBps"] * scale if r["n"] else float("nan"),
                     "own": r["transfer_MBps"] * scale if r["n"] else float("nan"), "s": r["seconds"],
                     "cpu": r["cpu_s_per_GB"], "ccpu": r["client_cpu_s"], "scpu": r["server_cpu_s"], "n": r["n"],
                     "state": state, "choice": _choice(r)})
    return markdown_table(view, [("tool", "peer"), ("rate", f"{unit} (whole process)"), ("own", f"{unit} (tool's clock)"),
                                 ("s", "s"), ("cpu", "CPU s/GB"), ("ccpu", "client CPU s"), ("scpu", "server CPU s"),
                                 ("n", "runs"), ("state", "output"), ("choice", "auto chose")])


def markdown(result: dict[str, Any]) -> str:
    """Return the results as markdown (tables, targets, auto's learning)."""
    lb = result["loopback"]
    parts = [
        f"Mode **{result['mode']}**, medians of {result['repeats']} interleaved runs, whole run "
        f"{result['seconds'] / 60:.1f} min. Rates are bytes over the client process's wall time (spawn to exit); "
        "\"tool's clock\" is the tool's own (iperf3: its test; dstp: OpenFile to CRC checked; query: connect to "
        "last batch; raw UDT: the receiver's accept to last byte). CPU s/GB = client + server process CPU per "
        f"10^9 bytes. GridFTP: {lb['gridftp']}.",
    ]
    for label, f in lb["files"].items():
        parts.append(f"### Loopback, tmpfs to tmpfs, {label} file ({f['bytes']:,} bytes)\n\n{_table(f['rows'], 'MB/s')}")
    q = lb["query"]
    parts.append(f"### Loopback, query result: `{q['sql']}` ({q['samples']} samples)\n\n{_table(q['rows'], 'MB/s')}")
    s = lb.get("udt_settings", {})
    if s:
        parts.append("UDT settings used for the raw runs: " + "; ".join(
            f"{k}: MSS {v['mss']}, receiver {v['recv_buffer'] >> 20} MiB / FC {v['recv_fc']}, sender "
            f"{v['send_buffer'] >> 20} MiB / FC {v['send_fc']}" for k, v in s.items()))
    for cell in result["wan"]:
        p = cell["path"]
        parts.append(
            f"### Emulated path: {cell['cell']}, MTU {cell['mtu']}\n\n"
            f"tcp_rmem `{p.get('tcp_rmem')}`, tcp_wmem `{p.get('tcp_wmem')}`, queue {p.get('queue_bytes', 0):,} B, "
            f"namespace default congestion control {p.get('tcp_congestion_control')}; relay: "
            f"{cell['relay']['drop_loss']:,} random drops, {cell['relay']['drop_queue']:,} queue drops of "
            f"{cell['relay']['rx_packets']:,} packets; cell took {cell['seconds']:.0f} s.\n\n{_table(cell['rows'], 'Mb/s')}")
        warm = [w for w in cell.get("auto_warmup", []) if "Mbps" in w]
        if warm:
            parts.append("auto's learning transfers: " + "; ".join(
                f"{w['Mbps']:.0f} Mb/s over {w['bytes'] / 2**20:.0f} MiB{'' if w['complete'] else ' (cut)'}: "
                f"{_short(w['choice'] or '')}" for w in warm) + f". Then: {cell['auto_warmup'][-1]['state']}.")
    if result.get("targets"):
        parts.append("### Targets\n\n" + markdown_table(
            [{**t, "met": {True: "met", False: "MISSED", None: "not measured"}[t["met"]]} for t in result["targets"]],
            [("target", "target"), ("value", "measured"), ("goal", "goal"), ("met", "verdict"), ("detail", "numbers")]))
    if result.get("plots"):
        parts.append("Plots: " + ", ".join(f"`bench/results/{p}`" for p in result["plots"]))
    return "\n\n".join(parts)


# -- plots --------------------------------------------------------------------------------


def _bars(ax: Any, groups: list[tuple[str, list[dict[str, Any]]]], key: str, scale: float) -> None:
    """Draw grouped bars: one group per place, one bar per peer measured there (a peer keeps its colour)."""
    import matplotlib

    tools: list[str] = []
    for _, rows in groups:
        tools += [r["tool"] for r in rows if r["tool"] not in tools]
    colour = {t: matplotlib.colormaps["tab20"](i % 20) for i, t in enumerate(tools)}
    present = [[r for r in rows if r["n"] and _ok(r[key]) and r[key] > 0] for _, rows in groups]
    width = 0.85 / max(1, max((len(p) for p in present), default=1))
    labelled: set[str] = set()
    for g, rows in enumerate(present):
        for i, r in enumerate(rows):
            x = g + width * (i - (len(rows) - 1) / 2)
            ax.bar(x, r[key] * scale, width, color=colour[r["tool"]],
                   label=None if r["tool"] in labelled else r["tool"])
            labelled.add(r["tool"])
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([g for g, _ in groups], fontsize=8)
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)


def plots(result: dict[str, Any], out: Path = RESULTS) -> list[str]:
    """Write the throughput and CPU plots; return their file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lb = result["loopback"]
    local = [(f"loopback {k}", v["rows"]) for k, v in lb["files"].items()] + [("loopback query", lb["query"]["rows"])]
    wan = [(c["cell"].replace(", 1 Gb/s", "").replace(", ", "\n"), c["rows"]) for c in result["wan"]]
    out.mkdir(parents=True, exist_ok=True)
    names = []
    fig, axes = plt.subplots(2 if wan else 1, 1, figsize=(12, 10 if wan else 5), squeeze=False)
    _bars(axes[0][0], local, "MBps", 1.0)
    axes[0][0].set_ylabel("MB/s (whole process)")
    axes[0][0].set_title("Loopback, tmpfs to tmpfs: throughput per peer")
    if wan:
        _bars(axes[1][0], wan, "MBps", 8.0)
        axes[1][0].set_yscale("log")
        axes[1][0].set_ylabel("Mb/s (whole process, log)")
        axes[1][0].set_title("Emulated 1 Gb/s paths: 1 GiB or 30 s per run")
    fig.tight_layout()
    fig.savefig(out / f"{NAME}_throughput.png", dpi=110)
    plt.close(fig)
    names.append(f"{NAME}_throughput.png")
    fig, axes = plt.subplots(2 if wan else 1, 1, figsize=(12, 10 if wan else 5), squeeze=False)
    _bars(axes[0][0], local, "cpu_s_per_GB", 1.0)
    axes[0][0].set_ylabel("CPU s per GB (client + server)")
    axes[0][0].set_title("Loopback: CPU cost per peer")
    if wan:
        _bars(axes[1][0], wan, "cpu_s_per_GB", 1.0)
        axes[1][0].set_yscale("log")
        axes[1][0].set_ylabel("CPU s per GB (log)")
        axes[1][0].set_title("Emulated paths: CPU cost per peer (relay not counted)")
    fig.tight_layout()
    fig.savefig(out / f"{NAME}_cpu.png", dpi=110)
    plt.close(fig)
    names.append(f"{NAME}_cpu.png")
    return names


def write(result: dict[str, Any]) -> None:
    """Write bench/results/bulk.json, bulk.md and the plots."""
    result["plots"] = plots(result)
    write_json(NAME, result)
    write_markdown(NAME, "Bulk transfer: dstp get and query results vs iperf3, GridFTP and raw UDT", markdown(result))

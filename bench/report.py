"""Benchmark results: machine description, JSON files, markdown tables, medians."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import time
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable, Sequence

RESULTS = Path(__file__).resolve().parent / "results"
PACKAGES = ("dstp", "pyarrow", "duckdb", "grpcio", "netCDF4", "numpy", "xarray", "sqlglot")


def machine() -> dict[str, Any]:
    """Return what the results were measured on: CPU, memory, kernel, versions, git commit."""
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        mem = int(Path("/proc/meminfo").read_text().split()[1]) * 1024
    except OSError:
        mem = 0
    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).parent, timeout=10).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True,
                                    cwd=Path(__file__).parent, timeout=10).stdout.strip())
    except (OSError, subprocess.SubprocessError):
        commit, dirty = "", False
    return {
        "cpu": cpu, "cores": os.cpu_count(), "memory_bytes": mem, "kernel": platform.release(),
        "python": platform.python_version(), "versions": versions,
        "git_commit": commit + ("-dirty" if dirty else ""), "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def median(values: Iterable[float]) -> float:
    vals = list(values)
    return statistics.median(vals) if vals else float("nan")


def write_json(name: str, payload: dict[str, Any], out: Path = RESULTS) -> Path:
    """Write ``payload`` (plus the machine) to ``out/name.json``; return the path."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    path.write_text(json.dumps({"machine": machine(), **payload}, indent=2, default=str) + "\n")
    return path


def markdown_table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]]) -> str:
    """Return rows as a markdown table; ``columns`` are (key, heading) pairs."""
    def fmt(v: Any) -> str:
        if isinstance(v, float):
            if v != v:
                return "–"
            return f"{v:,.3f}" if abs(v) < 10 else f"{v:,.1f}" if abs(v) < 1000 else f"{v:,.0f}"
        if isinstance(v, int):
            return f"{v:,}"
        return "" if v is None else str(v)

    head = "| " + " | ".join(h for _, h in columns) + " |"
    rule = "|" + "|".join("---" for _ in columns) + "|"
    body = ["| " + " | ".join(fmt(r.get(k)) for k, _ in columns) + " |" for r in rows]
    return "\n".join([head, rule, *body])


def write_markdown(name: str, title: str, text: str, out: Path = RESULTS) -> Path:
    """Write a markdown section to ``out/name.md``; return the path."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.md"
    path.write_text(f"## {title}\n\n{text}\n")
    return path


def save_figure(fig: Any, path: Path) -> None:
    """Lay ``fig`` out, write it to ``path`` (PNG, 110 dpi) and free it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def command_line(run: Any) -> None:
    """Run one suite module directly (``python -m bench.NAME [--quick]``) and print its summary as JSON."""
    import sys

    from bench.__main__ import samples

    quick = "--quick" in sys.argv
    print(json.dumps(run(quick, samples(quick)), indent=2))

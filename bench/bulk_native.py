"""The native data path against the Python one and the peers: ``python -m bench run --only bulk_native``.

One 1 GiB file (random bytes, a published netCDF file on tmpfs) moved on loopback to
tmpfs, in the same run, interleaved run by run (the order rotating), medians of
``REPEATS`` runs, whole client process (spawn to exit, as bench/bulk.py times it):

* ``iperf3 -P 8`` (memory to memory: the network's ceiling), ``cp`` of the same file to the
  same tmpfs (no network: the ceiling of writing 1 GiB to tmpfs on this host), ``iperf3 -F``
  on both ends (the file's bytes sent, the received bytes written to tmpfs: the network and
  the download's write together, by a C peer with no protocol; one stream, as iperf3 writes
  every stream from the output's start), ``bench/floor``'s C pair over 8 streams (``sendfile``
  on the sender, ``splice`` socket → pipe → output on the receiver: no protocol, no checksum
  and no copy in user space — the least a striped download to tmpfs pays on this host) and
  ``globus-url-copy -p 8`` against a one-shot GridFTP server;
* ``dstp get --streams 8`` with the native data path (transport/native.py) on both ends;
  (``DSTP_NATIVE=1``: opt-in);
* the same with ``DSTP_NATIVE=0`` on both ends: a second ``dstp serve`` and its clients
  run the Python path (the default);
* ``dstp get`` with no flags (``auto``), native, after its tuner's warm-up.

Start-up: ``python -c "import dstp.cli"`` and ``dstp get`` of an 8 MiB file over one
stripe (start-up, connect, OpenFile, the first and every block, CRC check, exit), native
and Python, medians of ``STARTUP_REPEATS`` runs.

Before the timed runs the guest's memory is written and freed (``bulk_tools.warm_memory``,
``WARM_BYTES``): on this VM a tmpfs page the guest has not touched for a while costs a fault in
the host, and which tool met such pages depended on the order of the runs (the same client moved
1 GiB in 1.3 s or 3.2 s).

The machine has 2 cores shared with whatever else runs: the JSON keeps every run.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

from bench import bulk_tools as tools
from bench.bulk import AUTO, Bench, Tool, interleaved, run_tool, summarize, warm_up, workspace
from bench.bulk_catalog import make_catalog
from bench.bulk_tools import Run

NAME = "bulk_native"
REPEATS = 5
STARTUP_REPEATS = 7
WARM_BYTES = 8 << 30
RESULTS = Path(__file__).resolve().parent / "results"
PYTHON_PATH = {"DSTP_NATIVE": "0"}
NATIVE_PATH = {"DSTP_NATIVE": "1"}  # opt-in (transport/native.py)

NATIVE_8 = Tool("dstp ×8 native", "dstp", 8)
PYTHON_8 = Tool("dstp ×8 python", "dstp", 8)
LOCAL_COPY = Tool("cp (no network)", "copy")
INTO_FILE = Tool("iperf3 → tmpfs", "iperf3_file", 1)
SPLICE_8 = Tool("splice ×8 → tmpfs", "splice", 8)
TOOLS = (Tool("iperf3 ×8", "iperf3", 8), LOCAL_COPY, INTO_FILE, SPLICE_8,
         Tool("GridFTP -p 8", "gridftp", 8), NATIVE_8, PYTHON_8, AUTO)


@contextlib.contextmanager
def _environment(extra: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _wall(argv: list[str], env: dict[str, str] | None = None) -> float:
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env={**os.environ, **(env or {})})
    return time.perf_counter() - started


def startup(native_bench: Bench, python_bench: Bench, small: Any, repeats: int) -> dict[str, Any]:
    """Return start-up figures: importing the CLI, and a whole 8 MiB ``dstp get`` on one stripe."""
    imports = [_wall([sys.executable, "-c", "import dstp.cli"]) for _ in range(repeats)]
    runs: dict[str, list[Run]] = {"native": [], "python": []}
    for _ in range(repeats):
        for label, bench, env in (("native", native_bench, None), ("python", python_bench, PYTHON_PATH)):
            assert bench.server is not None
            runs[label].append(tools.dstp_get(tools.LOOPBACK, f"get 8 MiB {label}", bench.server, small, bench.out,
                                              bench.fixed_cache, transport="striped", streams=1, env=env))
    return {
        "import_dstp_cli_s": statistics.median(imports), "import_runs_s": imports,
        "get_8MiB_x1_s": {k: statistics.median(r.seconds for r in v if r.ok) for k, v in runs.items()},
        "get_8MiB_runs": {k: [r.as_dict() for r in v] for k, v in runs.items()},
    }


def run(quick: bool, samples: dict[str, Path], repeats: int = REPEATS) -> dict[str, Any]:
    """Return the comparison; a full run writes bench/results/bulk_native.{json,md}."""
    from bench.report import write_json

    started = time.monotonic()
    repeats = 1 if quick else repeats
    sizes = (8,) if quick else (8, 1024)
    result: dict[str, Any] = {"mode": "quick" if quick else "full", "repeats": repeats, "load_before": os.getloadavg()}
    with workspace(NAME) as work, _environment(NATIVE_PATH):  # every process native unless told otherwise
        catalog = make_catalog(work / "catalog", sizes)
        small, big = catalog.files[0], catalog.files[-1]
        result["memory_warm_up"] = tools.warm_memory(work, (64 << 20) if quick else WARM_BYTES)
        with Bench(tools.LOOPBACK, work / "native", None, quick, root=catalog.root) as native_bench:
            with _environment(PYTHON_PATH):  # the second server runs the Python path
                python_bench = Bench(tools.LOOPBACK, work / "python", None, quick, root=catalog.root)
            with python_bench:
                result["startup"] = startup(native_bench, python_bench, small, 1 if quick else STARTUP_REPEATS)
                result["auto_warmup"] = warm_up(AUTO, native_bench, big, 0 if quick else 4)

                def one(tool: Tool) -> Run:
                    if tool is PYTHON_8:
                        assert python_bench.server is not None
                        return tools.dstp_get(tools.LOOPBACK, tool.name, python_bench.server, big, python_bench.out,
                                              python_bench.fixed_cache, transport="striped", streams=8,
                                              compare_bytes=quick, env=PYTHON_PATH)
                    return run_tool(tool, native_bench, big)

                runs = interleaved(TOOLS, repeats, one)
    result["file_bytes"] = big.size
    result["rows"] = [summarize(n, r) for n, r in runs.items()]
    result["load_after"] = os.getloadavg()
    result["seconds"] = round(time.monotonic() - started, 1)
    if not quick:
        write_json(NAME, result)
        (RESULTS / f"{NAME}.md").write_text(markdown(result))
    return result


def markdown(result: dict[str, Any]) -> str:
    """Return the results as a table."""
    rows = {r["tool"]: r for r in result["rows"]}
    grid = rows.get("GridFTP -p 8", {}).get("MBps") or 0
    copy = rows.get(LOCAL_COPY.name, {}).get("MBps") or 0
    iperf = rows.get("iperf3 ×8", {}).get("MBps") or 0
    into_file = rows.get(INTO_FILE.name, {}).get("MBps") or 0
    floor = rows.get(SPLICE_8.name, {}).get("MBps") or 0
    lines = [f"# dstp get, 1 GiB, loopback tmpfs → tmpfs: native vs Python data path ({result['repeats']} interleaved "
             "runs, medians, whole client process)", "",
             "| tool | MB/s | s | × GridFTP -p 8 | × iperf3 -P 8 | × cp | client CPU s | server CPU s | runs |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in result["rows"]:
        mbps = r["MBps"] or 0
        runs = ", ".join(f"{x['bytes'] / x['seconds'] / 1e6:.0f}" for x in r["runs"] if x.get("ok") and x["seconds"])
        lines.append(f"| {r['tool']} | {mbps:.0f} | {r['seconds'] or 0:.2f} | {mbps / grid if grid else 0:.2f} | "
                     f"{mbps / iperf if iperf else 0:.2f} | {mbps / copy if copy else 0:.2f} | "
                     f"{r['client_cpu_s'] or 0:.2f} | {r['server_cpu_s'] or 0:.2f}"
                     f" | {runs} |")
    if grid and into_file:
        lines += ["", f"The network and the write together, by iperf3 with no protocol and no checksum: "
                  f"{into_file:.0f} MB/s = {into_file / grid:.2f}× GridFTP -p 8 (issue 15's target for `dstp get`: 2×)."]
    if grid and floor:
        lines += ["", f"The network and the write with nothing else — sendfile into 8 streams, splice from them into "
                  f"the output, no protocol, no checksum, no copy in user space: {floor:.0f} MB/s = "
                  f"{floor / grid:.2f}× GridFTP -p 8."]
    s = result["startup"]
    warm = result.get("memory_warm_up") or {"bytes": 0, "MBps_per_pass": []}
    lines += ["", "## Start-up (medians)", "",
              f"* `python -c \"import dstp.cli\"`: {s['import_dstp_cli_s']:.3f} s",
              f"* `dstp get` of 8 MiB over one stripe, whole process: native {s['get_8MiB_x1_s']['native']:.3f} s, "
              f"Python path {s['get_8MiB_x1_s']['python']:.3f} s",
              "", f"Memory written and freed before the runs: {warm['bytes'] / 2**30:.0f} GiB, twice, at "
              f"{' and '.join(f'{x:.0f}' for x in warm['MBps_per_pass'])} MB/s (one writer, tmpfs).",
              "", f"Load average before/after: {result['load_before']} / {result['load_after']} (2 cores, shared)."]
    return "\n".join(lines) + "\n"

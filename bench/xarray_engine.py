"""The xarray engine (``engine="dstp"``) against xarray opening the same files locally.

For each bundled sample dataset (ccm3, ocean; small and medium samples) and each case, the
engine and local xarray are timed in turn (interleaved, ``--repeats`` rounds, medians), the
client's clock around the operation alone:

* ``open`` — ``xr.open_dataset("dstp://…", engine="dstp")`` vs ``xr.open_mfdataset(files)``
  (nested along the aggregation dimension, ``data_vars``/``coords="minimal"``, ``compat="override"``);
* ``slab`` — on a Dataset opened untimed: one variable's ``isel(time 0–2, lat 5–19).values``;
* ``variable`` — one whole variable's ``.values``;
* ``load`` — ``ds.load()``: every variable;
* ``dask`` — opened with ``chunks={"time": 4, "lat": 12}`` (both sides), then one variable's
  ``.compute()``; the engine's chunks read by box queries (one per compute here,
  ``clients/python/_chunk_batches.py``). In the same rounds, interleaved, the engine ``chunk by chunk``
  (``compute(callbacks=())``: no local dask callback, as under dask.distributed and as every compute
  was before the boxes: one query per chunk), so the old and the new path meet the same load;
* ``dask ds`` — ``ds.compute()`` of every variable, chunked as above (engine: one box per grid).

The server is a ``dstp serve`` process on loopback (gRPC only); local xarray reads the files from
the same disk (page cache warm after the first round). Every engine result is compared with the
local one (``np.array_equal``, NaN equal). Goals (issue 38): open, slab ≤ 2× local; dask ≤ 3×.

    python -m bench.xarray_engine [--repeats 9]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from bench.report import markdown_table, median, write_json, write_markdown

NAME = "xarray_engine"
DATASETS = {"ccm3": ("temperature", "T", "time"), "ocean": ("salinity", "so", "time")}
CHUNKS = {"time": 4, "lat": 12}
GOALS = {"open": 2.0, "slab": 2.0, "variable": 2.0, "load": 2.0, "dask": 3.0, "dask ds": 3.0}


def _local(files: list[Path], agg: str, **kwargs: Any) -> Any:
    import xarray as xr

    return xr.open_mfdataset(files, combine="nested", concat_dim=agg, data_vars="minimal", coords="minimal",
                             compat="override", **kwargs)


Peer = tuple[Callable[[], Any], Callable[[Any], Any]]  # (prepare, run)


def _cases(url: str, files: list[Path], var: str, local_var: str, agg: str) -> dict[str, tuple[Peer, Peer]]:
    """Return case → ((prepare, run) of the engine, (prepare, run) of local xarray)."""
    import xarray as xr

    def engine(**kw: Any) -> Any:
        return xr.open_dataset(url, engine="dstp", **kw)

    slab = {"time": slice(0, 3), "lat": slice(5, 20)}
    cases: dict[str, tuple[Peer, Peer]] = {
        "open": ((lambda: None, lambda _: engine()), (lambda: None, lambda _: _local(files, agg))),
        "slab": ((engine, lambda d: d[var].isel(slab).values),
                 (lambda: _local(files, agg), lambda d: d[local_var].isel(slab).values)),
        "variable": ((engine, lambda d: d[var].values), (lambda: _local(files, agg), lambda d: d[local_var].values)),
        "load": ((engine, lambda d: d.load()), (lambda: _local(files, agg), lambda d: d.load())),
        "dask": ((lambda: engine(chunks=CHUNKS), lambda d: d[var].compute().values),
                 (lambda: _local(files, agg, chunks=CHUNKS), lambda d: d[local_var].compute().values)),
        "dask ds": ((lambda: engine(chunks=CHUNKS), lambda d: d.compute()),
                    (lambda: _local(files, agg, chunks=CHUNKS), lambda d: d.compute())),
    }
    return cases


def _chunk_by_chunk(url: str, var: str) -> Peer:
    """The engine's dask case without box queries: one query per chunk (the path before them)."""
    import xarray as xr

    return (lambda: xr.open_dataset(url, engine="dstp", chunks=CHUNKS),
            lambda d: d[var].compute(callbacks=()).values)


def _same(a: Any, b: Any) -> bool | None:
    if not isinstance(a, np.ndarray):
        return None
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind == "f" or b.dtype.kind == "f":
        return a.shape == b.shape and bool(np.array_equal(a.astype("f8"), b.astype("f8"), equal_nan=True))
    return a.shape == b.shape and bool(np.array_equal(a, b))


def measure(root: Path, label: str, repeats: int) -> list[dict[str, Any]]:
    import dask

    from bench.dstp_process import serve

    rows = []
    dask.config.set(scheduler="threads")
    with serve(root, "--data-port", "-1", "--udt-port", "-1") as server:
        for dataset, (var, local_var, agg) in DATASETS.items():
            files = sorted((root / dataset).glob("*.nc"))
            url = f"dstp://{server.endpoints['grpc']}/{dataset}"
            for case, (mine, theirs) in _cases(url, files, var, local_var, agg).items():
                times: dict[str, list[float]] = {"engine": [], "local": [], "chunk by chunk": []}
                equal = None
                for r in range(repeats + 1):  # the first round warms both (connections, page cache)
                    results: dict[str, Any] = {}
                    peers: list[tuple[str, Peer]] = [("engine", mine), ("local", theirs)]
                    if case == "dask":
                        peers.append(("chunk by chunk", _chunk_by_chunk(url, var)))
                    for who, (prepare, run) in peers[:: 1 if r % 2 else -1]:
                        ready = prepare()
                        started = time.perf_counter()
                        results[who] = run(ready)
                        if r:
                            times[who].append(time.perf_counter() - started)
                    if case in ("slab", "variable", "dask") and equal is None:
                        equal = _same(results["engine"], results["local"])
                        if case == "dask":
                            equal = equal and _same(results["chunk by chunk"], results["local"])
                    if case == "dask ds" and equal is None:
                        equal = all(_same(results["engine"][v].values, results["local"][v].values)
                                    for v in results["engine"].data_vars if v in results["local"].data_vars)
                e, loc = median(times["engine"]), median(times["local"])
                old = median(times["chunk by chunk"]) if times["chunk by chunk"] else None
                rows.append({"samples": label, "dataset": dataset, "case": case, "engine_ms": round(e * 1e3, 2),
                             "local_ms": round(loc * 1e3, 2), "ratio": round(e / loc, 2),
                             "chunk_by_chunk_ms": round(old * 1e3, 2) if old else None,
                             "chunk_by_chunk_ratio": round(old / loc, 2) if old else None,
                             "goal": GOALS[case], "goal_met": e / loc <= GOALS[case], "values_equal": equal,
                             "engine_runs_ms": [round(t * 1e3, 2) for t in times["engine"]]})
    return rows


def run(quick: bool, samples: dict[str, Path], repeats: int = 9) -> dict[str, Any]:
    sizes = ("small",) if quick else ("small", "medium")
    repeats = 1 if quick else repeats
    load = f"load average {os.getloadavg()[0]:.2f} at the start on {os.cpu_count()} cores"
    rows = [row for size in sizes for row in measure(samples[size], size, repeats)]
    result = {"repeats": repeats, "load": load, "load_after": f"{os.getloadavg()[0]:.2f}", "rows": rows,
              "goals_met": sum(r["goal_met"] for r in rows), "cases": len(rows),
              "all_values_equal": all(r["values_equal"] is not False for r in rows)}
    if not quick:
        write_json(NAME, result)
        cols = [("samples", "samples"), ("dataset", "dataset"), ("case", "case"), ("engine_ms", "engine ms"),
                ("local_ms", "local ms"), ("ratio", "× local"), ("goal", "goal ×"), ("goal_met", "met"),
                ("values_equal", "values equal"), ("chunk_by_chunk_ms", "chunk by chunk ms"),
                ("chunk_by_chunk_ratio", "chunk by chunk × local")]
        head = (f"Medians of {repeats} interleaved rounds, loopback, client's clock ({load}; "
                f"{result['load_after']} after). Command: `python -m bench.xarray_engine --repeats {repeats}`.\n\n")
        write_markdown(NAME, "xarray engine=\"dstp\" vs local xarray", head + markdown_table(rows, cols) + "\n")
        _plot(rows)
    return result


def _plot(rows: list[dict[str, Any]]) -> None:
    """Write xarray_engine.png: each case's time as a multiple of local xarray's, with the goals."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bench.report import RESULTS, save_figure

    labels = [f"{r['samples']} {r['dataset']} {r['case']}" for r in rows]
    fig, ax = plt.subplots(figsize=(8, 6))
    y = range(len(rows))
    ax.barh([i + 0.2 for i in y], [r["ratio"] for r in rows], height=0.4, color="#3a7", label="engine")
    old = [(i - 0.2, r["chunk_by_chunk_ratio"]) for i, r in zip(y, rows) if r["chunk_by_chunk_ratio"]]
    if old:
        ax.barh([i for i, _ in old], [v for _, v in old], height=0.4, color="#c73", label="engine, chunk by chunk")
    for i, r in zip(y, rows):
        ax.plot([r["goal"], r["goal"]], [i - 0.45, i + 0.45], color="#c33", linewidth=1)
    ax.axvline(1.0, color="#777", linewidth=0.8)
    ax.set_yticks(list(y), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("time as a multiple of local xarray's (red: the goal)")
    ax.set_title('xarray engine="dstp" vs local xarray, loopback')
    ax.legend(fontsize=8)
    save_figure(fig, RESULTS / f"{NAME}.png")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.xarray_engine", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    from bench.__main__ import exclusive_machine, samples

    with exclusive_machine():
        result = run(args.quick, samples(args.quick), args.repeats)
    print(json.dumps({k: v for k, v in result.items() if not isinstance(v, (list, dict))}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

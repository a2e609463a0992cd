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
  ``.compute()``.

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
GOALS = {"open": 2.0, "slab": 2.0, "variable": 2.0, "load": 2.0, "dask": 3.0}


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
    }
    return cases


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
                times: dict[str, list[float]] = {"engine": [], "local": []}
                equal = None
                for r in range(repeats + 1):  # the first round warms both (connections, page cache)
                    results: dict[str, Any] = {}
                    peers: list[tuple[str, Peer]] = [("engine", mine), ("local", theirs)]
                    for who, (prepare, run) in peers[:: 1 if r % 2 else -1]:
                        ready = prepare()
                        started = time.perf_counter()
                        results[who] = run(ready)
                        if r:
                            times[who].append(time.perf_counter() - started)
                    if case in ("slab", "variable", "dask") and equal is None:
                        equal = _same(results["engine"], results["local"])
                e, loc = median(times["engine"]), median(times["local"])
                rows.append({"samples": label, "dataset": dataset, "case": case, "engine_ms": round(e * 1e3, 2),
                             "local_ms": round(loc * 1e3, 2), "ratio": round(e / loc, 2),
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
                ("values_equal", "values equal")]
        head = (f"Medians of {repeats} interleaved rounds, loopback, client's clock ({load}; "
                f"{result['load_after']} after). Command: `python -m bench.xarray_engine --repeats {repeats}`.\n\n")
        write_markdown(NAME, "xarray engine=\"dstp\" vs local xarray", head + markdown_table(rows, cols) + "\n")
    return result


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

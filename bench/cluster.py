"""Scale-out overhead: the seed query from one server, and from a coordinator over 1 and 3 Dask workers.

What is measured (medians over ``repeats`` runs, the three servers alternating; every server is a
separate ``dstp serve`` process on loopback, the client this process):

* **single** — ``dstp serve ROOT``; the client asks for the striped channel (2 stripes): Query, then the
  records over one data connection.
* **local-cluster N** — ``dstp serve ROOT --local-cluster N``: a LocalCluster of N worker processes.
  Query plans the seed query into N partitions (files of the outermost dimension) and submits them as
  Dask tasks; it answers once each task has its ticket, and the client fetches every partition from its
  worker's own data channel in parallel (2 stripes each) while the workers compute. The time is Query +
  every fetch, end to end.
* **overhead** — cluster median / single median. This machine has 2 cores, so 3 workers cannot be faster
  than one server: the number says what the cluster path costs (the issue's bound: ≤ 1.25×), not what
  it gains on a real cluster.
* **bytes per worker** — wire bytes each worker's data channel sent to the client in the last run.

Reproduce: ``python -m bench run --only cluster`` (``--quick``: small samples, one run, no files written).
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import dstp
from bench.dstp_process import serve
from bench.report import markdown_table, median, write_json, write_markdown

SQL = "select temperature, time from ccm3 where humidity > 50"
#: A reduction split into partial aggregates on the workers (dstp/cluster/reduce.py).
REDUCE_SQL = ("select lev, month(time) as month, avg(temperature), sum(temperature), count(*) from ccm3 "
              "group by lev, month")
NAME = "cluster"
STREAMS = 2


def _once(client: dstp.Client) -> tuple[float, int, dict[str, int]]:
    """Return (seconds, rows, wire bytes by worker endpoint) of one striped run of the seed query."""
    started = time.perf_counter()
    stream = client.query_batches(SQL, transport="striped", streams=STREAMS)
    table = stream.read_all()
    seconds = time.perf_counter() - started
    parts = getattr(stream, "partitions", None)
    if parts:
        per_worker: dict[str, int] = {}
        for p in parts:
            per_worker[p.endpoint] = per_worker.get(p.endpoint, 0) + p.wire_bytes
    else:
        per_worker = {"single server": stream.summary.wire_bytes if stream.summary else 0}
    return seconds, table.num_rows, per_worker


def _reduce_once(client: dstp.Client) -> tuple[float, Any]:
    """Return (seconds, table) of one run of the reduction over the gRPC stream."""
    started = time.perf_counter()
    table = client.query(REDUCE_SQL, transport="grpc")
    return time.perf_counter() - started, table


def _differences(single: Any, other: Any) -> dict[str, Any]:
    """Compare a cluster's reduction with the single server's, group by group: values bit-identical, and
    the largest relative difference of the floating-point ones (sums added in another order)."""
    import numpy as np

    keys = [("lev", "ascending"), ("month", "ascending")]
    a, b = single.sort_by(keys), other.sort_by(keys)
    identical = total = 0
    worst = 0.0
    for name in a.column_names:
        x = a[name].to_numpy(zero_copy_only=False).astype(float)
        y = b[name].to_numpy(zero_copy_only=False).astype(float)
        identical += int(np.sum(x == y))
        total += len(x)
        worst = max(worst, float(np.max(np.abs(x - y) / np.maximum(np.abs(x), 1e-300), initial=0.0)))
    return {"values": total, "identical": identical, "max_rel_diff": worst, "max_rel_text": f"{worst:.1e}"}


def run(quick: bool, folders: dict[str, Path]) -> dict[str, Any]:
    root = folders["small" if quick else "medium"]
    repeats = 1 if quick else 5
    setups = [("single", ()), ("local-cluster 1", ("--local-cluster", "1")), ("local-cluster 3", ("--local-cluster", "3"))]
    times: dict[str, list[float]] = {name: [] for name, _ in setups}
    reduce_times: dict[str, list[float]] = {name: [] for name, _ in setups}
    reduce_rows: dict[str, int] = {}
    reduce_tables: dict[str, Any] = {}
    rows: dict[str, int] = {}
    bytes_by_worker: dict[str, dict[str, int]] = {}
    with contextlib.ExitStack() as stack:
        clients = {}
        for name, args in setups:
            server = stack.enter_context(serve(root, "--udt-port", "-1", *args, timeout=180))
            clients[name] = stack.enter_context(dstp.connect(server.endpoints["grpc"]))
            _once(clients[name])  # warm: catalog handles, DuckDB, worker imports
            _reduce_once(clients[name])
        for _ in range(repeats):
            for name, _args in setups:
                seconds, n, per_worker = _once(clients[name])
                times[name].append(seconds)
                rows[name] = n
                bytes_by_worker[name] = per_worker
                seconds, reduced = _reduce_once(clients[name])
                reduce_times[name].append(seconds)
                reduce_rows[name] = reduced.num_rows
                reduce_tables[name] = reduced
    assert len(set(rows.values())) == 1, f"the setups returned different row counts: {rows}"
    assert len(set(reduce_rows.values())) == 1, f"the reductions returned different row counts: {reduce_rows}"
    single = median(times["single"])
    table = []
    for name, _ in setups:
        m = median(times[name])
        table.append({"setup": name, "records": rows[name], "median_s": m, "overhead": m / single,
                      "workers": len(bytes_by_worker[name]) if name != "single" else 0,
                      "bytes_per_worker": ", ".join(f"{b:,}" for b in sorted(bytes_by_worker[name].values()))})
    reduce_single = median(reduce_times["single"])
    reductions = [{"setup": name, "groups": reduce_rows[name], "median_s": median(reduce_times[name]),
                   "ratio": median(reduce_times[name]) / reduce_single,
                   **_differences(reduce_tables["single"], reduce_tables[name])} for name, _ in setups]
    result = {"sql": SQL, "samples": "small" if quick else "medium", "repeats": repeats, "streams": STREAMS,
              "rows": table, "runs_s": times, "bytes_by_worker": bytes_by_worker,
              "overhead_1": table[1]["overhead"], "overhead_3": table[2]["overhead"],
              "reduce_sql": REDUCE_SQL, "reductions": reductions, "reduce_runs_s": reduce_times}
    if not quick:
        write_json(NAME, result)
        text = (f"`{SQL}` on the {result['samples']} samples, medians of {repeats} alternating runs, "
                f"striped channel with {STREAMS} stripes per data connection; 2-core machine, everything on "
                "loopback.\n\n"
                + markdown_table(table, [("setup", "setup"), ("records", "records"), ("median_s", "median s"),
                                         ("overhead", "× single"), ("workers", "workers"),
                                         ("bytes_per_worker", "wire bytes per worker")])
                + "\n\nThe cluster path streams: Query answers once every partition task has its ticket, and "
                  "each worker sends its piece while computing it, the client fetching the partitions in "
                  "parallel; on 2 cores the 3 worker "
                  "processes, the coordinator and the client share the same CPUs, so no speed-up is possible "
                  "here — the ratio is the cost of the path (issue 17 asks ≤ 1.25×).\n\n"
                + f"Reduction `{REDUCE_SQL}` over the gRPC stream, same runs (alternating with the query "
                  "above): on a cluster the workers reduce their pieces to partial aggregates and the "
                  "coordinator combines them.\n\n"
                + markdown_table(reductions, [("setup", "setup"), ("groups", "groups"), ("median_s", "median s"),
                                              ("ratio", "× single"), ("identical", "values bit-identical"),
                                              ("values", "of"), ("max_rel_text", "max relative difference")]))
        write_markdown(NAME, "Scale-out: single server vs --local-cluster 1 and 3", text)
    return result

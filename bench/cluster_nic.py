"""Scale-out when the workers' NICs are the limit: aggregate throughput with 1, 2 and 3 throttled workers.

Issue 17's benchmark question. Each Dask worker runs in a network namespace of its own whose only link
(a veth into a bridge) sends at most ``RATE`` (``tc tbf`` on the worker's egress); the scheduler, the
``dstp serve --cluster`` coordinator and the client run in a hub namespace on that bridge. A query's
partitions go to the workers and each worker's data channel sends its part straight to the client, so
with the NIC as the limit the result should arrive ``n`` times as fast from ``n`` workers.

Workers join one at a time (a joining worker is used from the next query on); after each join, ``REPEATS``
fresh client processes run the query (striped, 2 streams per worker) and report seconds, records, bytes
and bytes per worker, then ``REPEATS`` fresh clients download the largest sample file (``dstp get``, striped,
2 streams), which the coordinator hands out in shares to the workers (m → n; ``cluster_file_min_bytes`` is
set to 1 MiB, below the samples' 12 MB files). An ``iperf3 -R`` through one
worker's link measures what the link carries.

Host-local files (``--layouts``): the same three throttled workers, each with a catalog root of its own
holding only some of ccm3's six monthly files — ``shared`` (every file on every worker), ``pairs``
(each file on two workers), ``disjoint`` (each file on one) — all joined before the first query. The
coordinator places each piece on a worker that holds its files (dstp/cluster/locality.py); the query
and ``dstp get`` of one ccm3 file are measured as above, ``REPEATS`` fresh clients per layout, the layouts
one after the other (each needs its own workers).

Needs root (``ip netns``, ``tc``); the topology is torn down afterwards, whatever happens.
Reproduce: ``python -m bench.cluster_nic`` (writes bench/results/cluster_nic.{json,md});
``python -m bench.cluster_nic --layouts`` (writes bench/results/cluster_locality.{json,md}).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

from bench.dstp_process import stop

NAME = "cluster_nic"
HUB = "dstpc-hub"
SUBNET = "10.77.0"
RATE = "100mbit"
REPEATS = 3
WORKERS = 3
SQL = "select temperature, humidity, cloud from ccm3"
SCHEDULER = f"tcp://{SUBNET}.1:8786"
FILE_MIN_BYTES = 2**20  # hand downloads from 1 MiB up to the workers (the default, 16 MiB, is above the samples)


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=check, timeout=30)


def in_ns(ns: str, *argv: str) -> list[str]:
    return ["ip", "netns", "exec", ns, *argv]


def worker_ns(k: int) -> str:
    return f"dstpc-w{k}"


@contextlib.contextmanager
def topology(workers: int, rate: str = RATE) -> Iterator[None]:
    """A hub namespace with a bridge at .1, and ``workers`` namespaces at .10, .11, … sending at ``rate``."""
    made = [HUB] + [worker_ns(k) for k in range(workers)]
    try:
        sh("ip", "netns", "add", HUB)
        sh(*in_ns(HUB, "ip", "link", "set", "lo", "up"))
        sh(*in_ns(HUB, "ip", "link", "add", "br0", "type", "bridge"))
        sh(*in_ns(HUB, "ip", "addr", "add", f"{SUBNET}.1/24", "dev", "br0"))
        sh(*in_ns(HUB, "ip", "link", "set", "br0", "up"))
        for k in range(workers):
            ns, inner, outer = worker_ns(k), f"vw{k}", f"vh{k}"
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "add", inner, "type", "veth", "peer", "name", outer)
            sh("ip", "link", "set", inner, "netns", ns)
            sh("ip", "link", "set", outer, "netns", HUB)
            sh(*in_ns(HUB, "ip", "link", "set", outer, "master", "br0"))
            sh(*in_ns(HUB, "ip", "link", "set", outer, "up"))
            sh(*in_ns(ns, "ip", "link", "set", "lo", "up"))
            sh(*in_ns(ns, "ip", "addr", "add", f"{SUBNET}.{10 + k}/24", "dev", inner))
            sh(*in_ns(ns, "ip", "link", "set", inner, "up"))
            sh(*in_ns(ns, "tc", "qdisc", "add", "dev", inner, "root", "tbf", "rate", rate, "burst", "64kb",
                      "latency", "100ms"))
        yield
    finally:
        for ns in made:
            pids = sh("ip", "netns", "pids", ns, check=False).stdout.split()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), 9)
            sh("ip", "netns", "del", ns, check=False)


@contextlib.contextmanager
def process(argv: list[str], env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
                            env={**os.environ, **(env or {})})
    try:
        yield proc
    finally:
        stop(proc)


def client_main(url: str, workers: int, get: str = "") -> dict[str, Any]:
    """One fresh client (inside the hub): wait for ``workers`` workers, run the query (or download
    ``get``, DATASET/FILE), report."""
    import distributed

    import dstp

    with distributed.Client(SCHEDULER, timeout=60) as dask_client:
        dask_client.wait_for_workers(workers, timeout=60)
    if get:
        return _download(url, workers, get)
    with dstp.connect(url, timeout=300) as client:
        started = time.perf_counter()
        stream = client.query_batches(SQL, transport="striped", streams=2)
        rows = nbytes = 0
        for batch in stream:
            rows += batch.num_rows
            nbytes += batch.nbytes
        seconds = time.perf_counter() - started
        per_worker: dict[str, int] = {}
        for part in getattr(stream, "partitions", None) or []:
            per_worker[part.endpoint] = per_worker.get(part.endpoint, 0) + part.wire_bytes
    return {"workers": workers, "seconds": seconds, "rows": rows, "bytes": nbytes, "per_worker": per_worker}


def _download(url: str, workers: int, path: str) -> dict[str, Any]:
    import tempfile

    import dstp

    dataset, name = path.split("/")
    with tempfile.TemporaryDirectory(dir="/dev/shm") as tmp, dstp.connect(url, timeout=300) as client:
        started = time.perf_counter()
        summary = client.get(dataset, name, Path(tmp) / name, transport="striped", streams=2)
        seconds = time.perf_counter() - started
    per_worker: dict[str, int] = {}
    for share in summary.get("shares", []):
        where = share["endpoint"] if share["worker"] else "coordinator"
        per_worker[where] = per_worker.get(where, 0) + share["bytes"]
    return {"workers": workers, "file": path, "seconds": seconds, "bytes": summary["bytes"],
            "per_worker": per_worker or {"coordinator": summary["bytes"]}, "retried": summary.get("retried", "")}


def _client(url: str, workers: int, get: str = "") -> dict[str, Any]:
    argv = in_ns(HUB, sys.executable, "-m", "bench.cluster_nic", "--client", url, "--workers", str(workers),
                 *(["--get", get] if get else []))
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        return {"workers": workers, "file": get, "error": (done.stderr.strip().splitlines() or ["failed"])[-1][:300]}
    answer: dict[str, Any] = json.loads(lines[-1])
    return answer


def _wait_listening(ns: str, host: str, port: int, attempts: int = 60) -> None:
    """Return once something accepts connections at host:port inside ``ns`` (bounded: ``attempts`` × 0.5 s)."""
    probe = f"import socket; socket.create_connection(({host!r}, {port}), 1).close()"
    for _ in range(attempts):
        if subprocess.run(in_ns(ns, sys.executable, "-c", probe), capture_output=True, timeout=10).returncode == 0:
            return
        time.sleep(0.5)
    raise RuntimeError(f"nothing listens on {host}:{port} in {ns}")


def _link_mbps() -> float:
    """iperf3 -R through worker 0's throttled link (the worker sends), in Mb/s."""
    with process(in_ns(worker_ns(0), "iperf3", "-s", "-1")):
        time.sleep(0.5)
        out = sh(*in_ns(HUB, "iperf3", "-c", f"{SUBNET}.10", "-R", "-t", "3", "-J"), check=False).stdout
    try:
        return float(json.loads(out)["end"]["sum_received"]["bits_per_second"]) / 1e6
    except (ValueError, KeyError):
        return float("nan")


def run(root: Path, repeats: int = REPEATS, workers: int = WORKERS) -> dict[str, Any]:
    from bench.dstp_process import serve

    env = {"DSTP_CATALOG_ROOT": str(root), "MALLOC_TRIM_THRESHOLD_": str(64 * 2**20)}
    runs: list[dict[str, Any]] = []
    gets: list[dict[str, Any]] = []
    biggest = max(root.glob("*/*.nc"), key=lambda p: p.stat().st_size)
    name = f"{biggest.parent.name}/{biggest.name}"
    started = time.monotonic()
    with topology(workers), contextlib.ExitStack() as stack:
        link = _link_mbps()
        stack.enter_context(process(in_ns(HUB, sys.executable, "-m", "distributed.cli.dask_scheduler", "--host",
                                          f"{SUBNET}.1", "--port", "8786", "--no-dashboard")))
        _wait_listening(HUB, f"{SUBNET}.1", 8786)
        def join(k: int) -> None:
            stack.enter_context(process(in_ns(worker_ns(k), sys.executable, "-m", "distributed.cli.dask_worker",
                                              SCHEDULER, "--nworkers", "1", "--nthreads", "2", "--host",
                                              f"{SUBNET}.{10 + k}", "--no-dashboard"), env))

        join(0)  # the coordinator waits for a first worker before it serves
        srv = stack.enter_context(serve(root, "--host", f"{SUBNET}.1", "--cluster", SCHEDULER, "--udt-port", "-1",
                                        prefix=in_ns(HUB), env={"DSTP_CLUSTER_FILE_MIN_BYTES": str(FILE_MIN_BYTES)}))
        url = srv.endpoints["grpc"]
        for n in range(1, workers + 1):
            if n > 1:
                join(n - 1)
            _client(url, n)  # untimed: the new worker's catalog scan, page cache
            for _ in range(repeats):
                runs.append(_client(url, n))
            for _ in range(repeats):
                gets.append(_client(url, n, name))
    return {"sql": SQL, "file": name, "cluster_file_min_bytes": FILE_MIN_BYTES, "rate": RATE, "link_iperf3_Mbps": round(link, 1),
            "repeats": repeats, "rows": _medians(runs, workers), "file_rows": _medians(gets, workers),
            "runs": runs, "gets": gets, "suite_seconds": round(time.monotonic() - started, 1)}


#: Which of ccm3's six files (in time order) worker k holds, per layout.
LAYOUTS: dict[str, Any] = {
    "shared": lambda i, k: True,
    "pairs": lambda i, k: k in (i % 3, (i + 1) % 3),
    "disjoint": lambda i, k: k == i % 3,
}
LOCAL_FILE = "ccm3/ccm3_1990-01.nc"


def local_roots(root: Path, into: Path, layout: str, workers: int = WORKERS) -> list[Path]:
    """Return one catalog root per worker under ``into``: ccm3's descriptor and the files ``layout`` gives
    that worker (hard links where the filesystem allows, else copies)."""
    import shutil

    files = sorted((root / "ccm3").glob("ccm3_*.nc"))
    roots = []
    for k in range(workers):
        folder = into / layout / f"w{k}" / "ccm3"
        folder.mkdir(parents=True)
        shutil.copy2(root / "ccm3" / "ccm3.dstp.xml", folder)
        for i, f in enumerate(files):
            if LAYOUTS[layout](i, k):
                try:
                    os.link(f, folder / f.name)
                except OSError:
                    shutil.copy2(f, folder / f.name)
        roots.append(folder.parent)
    return roots


def run_layouts(root: Path, repeats: int = REPEATS, workers: int = WORKERS) -> dict[str, Any]:
    """The query and one download with every worker joined, for each layout of host-local files."""
    import tempfile

    from bench.dstp_process import serve

    rows = []
    started = time.monotonic()
    with topology(workers), tempfile.TemporaryDirectory(dir=root.parent) as tmp:
        link = _link_mbps()
        for layout in LAYOUTS:
            roots = local_roots(root, Path(tmp), layout, workers)
            with contextlib.ExitStack() as stack:
                stack.enter_context(process(in_ns(HUB, sys.executable, "-m", "distributed.cli.dask_scheduler",
                                                  "--host", f"{SUBNET}.1", "--port", "8786", "--no-dashboard")))
                _wait_listening(HUB, f"{SUBNET}.1", 8786)
                for k in range(workers):
                    stack.enter_context(process(in_ns(worker_ns(k), sys.executable, "-m", "distributed.cli.dask_worker",
                                                      SCHEDULER, "--nworkers", "1", "--nthreads", "2", "--host",
                                                      f"{SUBNET}.{10 + k}", "--no-dashboard",
                                                      "--preload", "dstp.cluster"),  # its own root, not the coordinator's
                                                {"DSTP_CATALOG_ROOT": str(roots[k]),
                                                 "MALLOC_TRIM_THRESHOLD_": str(64 * 2**20)}))
                srv = stack.enter_context(serve(root, "--host", f"{SUBNET}.1", "--cluster", SCHEDULER, "--udt-port",
                                                "-1", prefix=in_ns(HUB),
                                                env={"DSTP_CLUSTER_FILE_MIN_BYTES": str(FILE_MIN_BYTES)}))
                url = srv.endpoints["grpc"]
                _client(url, workers)  # untimed: the workers are asked which files they hold, page cache
                runs = [_client(url, workers) for _ in range(repeats)]
                gets = [_client(url, workers, LOCAL_FILE) for _ in range(repeats)]
            query, get = _medians(runs, workers)[-1], _medians(gets, workers)[-1]
            rows.append({"layout": layout, "holders_per_file": sum(LAYOUTS[layout](0, k) for k in range(workers)),
                         "query": query, "get": get})
    return {"sql": SQL, "file": LOCAL_FILE, "rate": RATE, "link_iperf3_Mbps": round(link, 1), "repeats": repeats,
            "workers": workers, "rows": rows, "suite_seconds": round(time.monotonic() - started, 1)}


def layouts_markdown(result: dict[str, Any]) -> str:
    lines = [f"Three workers, each link sending at most {result['rate']} (iperf3 -R through one: "
             f"{result['link_iperf3_Mbps']} Mb/s), each with its own catalog root holding some of ccm3's six "
             f"files; the coordinator places pieces where their files are. `{result['sql']}` and `dstp get "
             f"{result['file']}` (striped, 2 streams per source), median of {result['repeats']} fresh client "
             "processes per layout.", "",
             "| layout | holders per file | query s | query Mb/s | MB per worker | get s | get Mb/s | get MB per source |",
             "|---|---:|---:|---:|---|---:|---:|---|"]
    for row in result["rows"]:
        q, g = row["query"], row["get"]
        if not q["runs"] or not g["runs"]:
            lines.append(f"| {row['layout']} | {row['holders_per_file']} | – | – | "
                         f"{'; '.join(q.get('errors', []) + g.get('errors', []))} | – | – | |")
            continue
        per_q = ", ".join(f"{v:g}" for v in q["per_worker_MB"].values())
        per_g = ", ".join(f"{v:g}" for v in g["per_worker_MB"].values())
        lines.append(f"| {row['layout']} | {row['holders_per_file']} | {q['seconds']:.3f} | {q['Mbps']:.1f} | {per_q} | "
                     f"{g['seconds']:.3f} | {g['Mbps']:.1f} | {per_g} |")
    return "\n".join(lines) + "\n"


def plot_layouts(result: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result["rows"] if r["query"]["runs"] and r["get"]["runs"]]
    x = range(len(rows))
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    ax.bar([i - 0.2 for i in x], [r["query"]["Mbps"] for r in rows], 0.4, label="query result")
    ax.bar([i + 0.2 for i in x], [r["get"]["Mbps"] for r in rows], 0.4, label="dstp get (from the file's holders)")
    ax.axhline(result["workers"] * result["link_iperf3_Mbps"], color="k", linestyle=":", label="3 × one link (iperf3)")
    ax.set_xticks(list(x), [f"{r['layout']}\n({r['holders_per_file']} per file)" for r in rows])
    ax.set_ylabel("Mb/s")
    ax.legend(fontsize=8)
    ax.set_title("Host-local files, 3 throttled workers")
    fig.tight_layout()
    fig.savefig(out / "cluster_locality.png", dpi=110)
    plt.close(fig)


def _medians(runs: list[dict[str, Any]], workers: int) -> list[dict[str, Any]]:
    rows = []
    for n in range(1, workers + 1):
        ok = sorted((r for r in runs if r["workers"] == n and "error" not in r), key=lambda r: r["seconds"])
        if not ok:
            rows.append({"workers": n, "runs": 0, "errors": [r["error"] for r in runs if r["workers"] == n]})
            continue
        mid = ok[len(ok) // 2]
        rows.append({"workers": n, "runs": len(ok), "seconds": mid["seconds"], "rows": mid.get("rows", 0),
                     "MB": mid["bytes"] / 1e6, "Mbps": mid["bytes"] * 8 / mid["seconds"] / 1e6,
                     "per_worker_MB": {e: round(b / 1e6, 1) for e, b in mid["per_worker"].items()},
                     "all_seconds": [round(r["seconds"], 3) for r in ok],
                     "retried": sum(1 for r in ok if r.get("retried"))})
    return rows


def markdown(result: dict[str, Any]) -> str:
    lines = [f"`{result['sql']}` (medium samples); each worker's link sends at most {result['rate']} "
             f"(tc tbf; iperf3 -R through one link: {result['link_iperf3_Mbps']} Mb/s). Median of "
             f"{result['repeats']} fresh client processes per worker count; records over the striped channel, "
             "2 streams per worker, fetched from every worker at once.", "", *_table(result["rows"], records=True)]
    if result.get("file_rows"):
        lines += ["", f"`dstp get` of `{result['file']}` (striped, 2 streams per source; the coordinator hands the "
                  "file to the workers in shares, each sent from its worker's throttled link; cluster_file_min_bytes "
                  f"{result['cluster_file_min_bytes']:,}). Median of "
                  f"{result['repeats']} fresh client processes per worker count.", "",
                  *_table(result["file_rows"], records=False)]
    return "\n".join(lines) + "\n"


def _table(rows: list[dict[str, Any]], records: bool) -> list[str]:
    """Markdown rows of one table: per worker count, the median run's figures (records for queries)."""
    lines = ["| workers | s | Mb/s (aggregate) | MB |" + (" records |" if records else "") + " MB per worker | runs (s) |",
             "|---:|---:|---:|---:|" + ("---:|" if records else "") + "---|---|"]
    for row in rows:
        if not row["runs"]:
            lines.append(f"| {row['workers']} | – | – | – |" + (" – |" if records else "")
                         + f" {'; '.join(row['errors'])} | |")
            continue
        per = ", ".join(f"{v:g}" for v in row["per_worker_MB"].values())
        lines.append(f"| {row['workers']} | {row['seconds']:.3f} | {row['Mbps']:.1f} | {row['MB']:.1f} |"
                     + (f" {row['rows']:,} |" if records else "") + f" {per} | {row['all_seconds']} |")
    return lines


def plot(result: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result["rows"] if r["runs"]]
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    ax.plot([r["workers"] for r in rows], [r["Mbps"] for r in rows], "o-", label="query result")
    files = [r for r in result.get("file_rows", []) if r["runs"]]
    if files:
        ax.plot([r["workers"] for r in files], [r["Mbps"] for r in files], "s--", label="dstp get (file shares)")
    ax.plot([r["workers"] for r in rows], [r["workers"] * result["link_iperf3_Mbps"] for r in rows], "k:",
            label="workers × one link (iperf3)")
    ax.set_xlabel("workers (each link throttled)")
    ax.set_ylabel("Mb/s")
    ax.set_xticks([r["workers"] for r in rows])
    ax.legend()
    ax.set_title("Throughput with throttled worker NICs")
    fig.tight_layout()
    fig.savefig(out / f"{NAME}.png", dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster_nic", description=__doc__)
    parser.add_argument("--client", metavar="URL", help="run one client (inside the hub namespace) and print JSON")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--get", default="", metavar="FILE", help="with --client: download DATASET/FILE instead")
    parser.add_argument("--layouts", action="store_true",
                        help="measure host-local file layouts (shared, pairs, disjoint) with every worker joined")
    args = parser.parse_args(argv)
    if args.client:
        print(json.dumps(client_main(args.client, args.workers, args.get)))
        return 0
    import platformdirs

    from bench.report import RESULTS, write_json, write_markdown
    from dstp.samples import ensure_samples

    root = ensure_samples(Path(platformdirs.user_cache_dir("dstp")) / "bench", "medium")
    if args.layouts:
        local = run_layouts(root, args.repeats)
        write_json("cluster_locality", local)
        write_markdown("cluster_locality", "Scale-out with host-local files", layouts_markdown(local))
        plot_layouts(local, RESULTS)
        print(layouts_markdown(local))
        return 0
    result = run(root, args.repeats)
    write_json(NAME, result)
    write_markdown(NAME, "Scale-out with throttled worker NICs", markdown(result))
    plot(result, RESULTS)
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

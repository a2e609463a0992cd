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

Needs root (``ip netns``, ``tc``); the topology is torn down afterwards, whatever happens.
Reproduce: ``python -m bench.cluster_nic`` (writes bench/results/cluster_nic.{json,md}).
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
    args = parser.parse_args(argv)
    if args.client:
        print(json.dumps(client_main(args.client, args.workers, args.get)))
        return 0
    import platformdirs

    from bench.report import RESULTS, write_json, write_markdown
    from dstp.samples import ensure_samples

    root = ensure_samples(Path(platformdirs.user_cache_dir("dstp")) / "bench", "medium")
    result = run(root, args.repeats)
    write_json(NAME, result)
    write_markdown(NAME, "Scale-out with throttled worker NICs", markdown(result))
    plot(result, RESULTS)
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

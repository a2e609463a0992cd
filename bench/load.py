"""Load: 50 clients × 60 s of small queries on loopback (25 gRPC, 25 HTTP), against 8 clients.

What is measured, against one ``dstp serve`` process over the small samples (issue 13's done-when):

* **correctness under load** — every answer is checked against an oracle computed once, before the
  load, with netCDF4 and numpy straight from the files (not from dstp): the row count and the sum of
  the selected variable. A mismatch is a *wrong answer*; the target is 0.
* **errors** — anything but a correct answer or documented back-pressure (``limit_exceeded``:
  gRPC RESOURCE_EXHAUSTED with ``retry-after``, HTTP 429 with ``Retry-After``; the client waits that
  long, at most 1 s, and asks again). The target is 0 other errors.
* **latency** — p50/p99 of answered queries, end to end (queueing for a slot included).
* **goodput** — correct answers per second with 50 clients, against 8 clients (4 gRPC, 4 HTTP) on the
  same server: the ratio must stay ≥ 0.8 (issue 13 measured ~0.2 before: refused requests paid full
  planning).
* **server resources** — file descriptors, threads and RSS of the server process after a warm-up
  (before), sampled every second under load (during, the peak), and once the load is over (after);
  after − before must show no growth.

Clients run in worker processes (several threads each), so the measurement is not bound by one client
process's GIL. Each configuration runs its own server: ``plain`` (no tokens, no TLS) and ``secure``
(API tokens required, one per client; TLS on gRPC and HTTP with a self-signed certificate). Run alone:
``python -m bench.load [--seconds 60] [--clients 50] [--config plain,secure] [--quick]``; with the
other suites: ``python -m bench run --only load``. Results: ``bench/results/load.json`` and ``load.md``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import netCDF4
import numpy as np

from bench.dstp_process import ServerProcess, serve
from bench.report import markdown_table, write_json, write_markdown

NAME = "load"

#: Small queries, each with the variable whose sum the oracle checks.
QUERIES: tuple[tuple[str, str], ...] = (
    ("select temperature from ccm3 where lev > 800 and lev < 900 and lat > 80", "temperature"),
    ("select humidity from ccm3 where lev > 500 and lev < 700 and lat < -80 and lon < 90", "humidity"),
    ("select temperature from ccm3 where lat between 0 and 10 and lev > 900", "temperature"),
    ("select cloud from ccm3 where lev > 800 and lev < 900 and lat > 70 and lon between 100 and 120", "cloud"),
)
#: The files' variables behind the query columns.
VARIABLES = {"temperature": "T", "humidity": "RELHUM", "cloud": "CLOUD"}

FULL = {"seconds": 60.0, "clients": 50, "baseline": 8, "warmup": 5.0}
QUICK = {"seconds": 3.0, "clients": 6, "baseline": 2, "warmup": 1.0}
CONFIGS = ("plain", "secure")
#: Client threads per worker process.
THREADS_PER_WORKER = 10


# -- the oracle --------------------------------------------------------------------------------------

def _where(sql: str, lev: np.ndarray, lat: np.ndarray, lon: np.ndarray) -> tuple[Any, Any, Any]:
    """Return the index masks of ``sql``'s WHERE on lev, lat and lon (the queries above only)."""
    clauses = sql.split(" where ", 1)[1].split(" and ")
    masks = {"lev": np.ones(lev.size, bool), "lat": np.ones(lat.size, bool), "lon": np.ones(lon.size, bool)}
    values = {"lev": lev, "lat": lat, "lon": lon}
    i = 0
    while i < len(clauses):
        name, op, *rest = clauses[i].split()
        if op == "between":
            low, high = float(rest[0]), float(clauses[i + 1])
            masks[name] &= (values[name] >= low) & (values[name] <= high)
            i += 2
            continue
        value = float(rest[0])
        masks[name] &= {"=": values[name] == value, ">": values[name] > value, "<": values[name] < value}[op]
        i += 1
    return masks["lev"], masks["lat"], masks["lon"]


def oracle(folder: Path) -> dict[str, tuple[int, float]]:
    """Return, per query, (rows, sum of its variable over non-NULL values), from the ccm3 files directly."""
    files = sorted((folder / "ccm3").glob("ccm3_*.nc"))
    out = {}
    for sql, column in QUERIES:
        rows, total = 0, 0.0
        for path in files:
            with netCDF4.Dataset(path) as nc:  # CF packing and fill values decoded by netCDF4 itself
                lev, lat, lon = (np.asarray(nc[v][:]) for v in ("lev", "lat", "lon"))
                ml, mt, mn = _where(sql, lev, lat, lon)
                var = nc[VARIABLES[column]]
                data = var[:][:, ml][:, :, mt][:, :, :, mn]
                rows += int(np.prod(data.shape))
                total += float(np.ma.sum(data.astype(np.float64)))
        out[sql] = (rows, total)
    return out


def agrees(expected: tuple[int, float], rows: int, total: float) -> bool:
    want_rows, want_total = expected
    return rows == want_rows and abs(total - want_total) <= 1e-4 * max(1.0, abs(want_total))


# -- the clients ---------------------------------------------------------------------------------------

@dataclass
class Tally:
    """What one client thread (or a phase, summed) saw."""

    ok: int = 0
    wrong: int = 0
    backpressure: int = 0
    errors: int = 0
    latencies: list[float] = field(default_factory=list)
    samples: list[str] = field(default_factory=list)

    def add(self, other: "Tally") -> None:
        self.ok += other.ok
        self.wrong += other.wrong
        self.backpressure += other.backpressure
        self.errors += other.errors
        self.latencies += other.latencies
        self.samples += other.samples[: max(0, 5 - len(self.samples))]


def _token(spec: dict[str, Any], index: int) -> str:
    """Return client ``index``'s token: its own from ``tokens`` (one principal each), else the shared one."""
    tokens = spec.get("tokens") or ()
    return str(tokens[index % len(tokens)]) if tokens else str(spec["token"])


def _grpc_client(spec: dict[str, Any], stop_at: float, start_at: float, index: int) -> Tally:
    import dstp

    tally = Tally()
    expected = spec["expected"]
    with dstp.connect(spec["grpc"], token=_token(spec, index), tls=bool(spec["ca"]) or None, ca_file=spec["ca"],
                      timeout=120) as client:
        i = index
        while time.monotonic() < start_at:
            time.sleep(0.01)
        while time.monotonic() < stop_at:
            sql, column = QUERIES[i % len(QUERIES)]
            i += 1
            started = time.monotonic()
            try:
                table = client.query(sql)
            except dstp.LimitExceededError as exc:
                tally.backpressure += 1
                time.sleep(min(1.0, exc.retry_after_s or 0.1))
                continue
            except dstp.DstpError as exc:
                tally.errors += 1
                tally.samples.append(f"grpc {exc.code}: {exc.message[:160]}")
                continue
            tally.latencies.append(time.monotonic() - started)
            values = table.column(column).to_numpy(zero_copy_only=False)
            if agrees(expected[sql], table.num_rows, float(np.nansum(values.astype(np.float64)))):
                tally.ok += 1
            else:
                tally.wrong += 1
    return tally


def _http_client(spec: dict[str, Any], stop_at: float, start_at: float, index: int) -> Tally:
    import httpx
    import pyarrow as pa

    tally = Tally()
    expected = spec["expected"]
    scheme = "https" if spec["ca"] else "http"
    token = _token(spec, index)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with httpx.Client(base_url=f"{scheme}://{spec['http']}", verify=spec["ca"] or True, headers=headers,
                      timeout=120) as http:
        i = index
        while time.monotonic() < start_at:
            time.sleep(0.01)
        while time.monotonic() < stop_at:
            sql, column = QUERIES[i % len(QUERIES)]
            i += 1
            started = time.monotonic()
            try:
                r = http.get("/query", params={"sql": sql, "format": "arrow"})
            except httpx.HTTPError as exc:
                tally.errors += 1
                tally.samples.append(f"http {type(exc).__name__}: {exc}"[:200])
                continue
            if r.status_code == 429:
                tally.backpressure += 1
                time.sleep(min(1.0, float(r.headers.get("retry-after", "0.1"))))
                continue
            if r.status_code != 200:
                tally.errors += 1
                tally.samples.append(f"http {r.status_code}: {r.text[:160]}")
                continue
            tally.latencies.append(time.monotonic() - started)
            table = pa.ipc.open_stream(r.content).read_all()
            values = table.column(column).to_numpy(zero_copy_only=False)
            if agrees(expected[sql], table.num_rows, float(np.nansum(values.astype(np.float64)))):
                tally.ok += 1
            else:
                tally.wrong += 1
    return tally


def _worker(spec: dict[str, Any], kinds: list[str], first: int, out: Any) -> None:
    """A worker process: one thread per client of ``kinds``; puts its summed Tally on ``out``."""
    tallies: list[Tally] = []
    lock = threading.Lock()

    def run(kind: str, index: int) -> None:
        try:
            tally = (_grpc_client if kind == "grpc" else _http_client)(spec, spec["stop_at"], spec["start_at"], index)
        except Exception as exc:  # noqa: BLE001 - a client that could not even start is an error of the run
            tally = Tally(errors=1, samples=[f"{kind} client failed: {exc!r}"[:200]])
        with lock:
            tallies.append(tally)

    threads = [threading.Thread(target=run, args=(kind, first + k)) for k, kind in enumerate(kinds)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    total = Tally()
    for t in tallies:
        total.add(t)
    out.put(total)


# -- the server's resources ------------------------------------------------------------------------------

def resources(server: ServerProcess) -> dict[str, int]:
    """Return the server process's open file descriptors, threads and RSS."""
    pid = server.pid
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return {"fds": len(list(Path(f"/proc/{pid}/fd").iterdir())), "threads": int(fields["Threads"].strip()),
            "rss_mb": int(fields["VmRSS"].split()[0]) // 1024}


def _phase(server: ServerProcess, spec: dict[str, Any], clients: int, seconds: float) -> dict[str, Any]:
    """Run ``clients`` clients (half gRPC, half HTTP) for ``seconds``; return the phase's figures."""
    kinds = ["grpc" if k % 2 == 0 else "http" for k in range(clients)]
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    start_at = time.monotonic() + 3.0 + 0.05 * clients  # every worker connected before the clock starts
    phase_spec = {**spec, "start_at": start_at, "stop_at": start_at + seconds}
    groups = [kinds[i:i + THREADS_PER_WORKER] for i in range(0, len(kinds), THREADS_PER_WORKER)]
    workers = [ctx.Process(target=_worker, args=(phase_spec, group, i * THREADS_PER_WORKER, out))
               for i, group in enumerate(groups)]
    for w in workers:
        w.start()
    peak = resources(server)
    while time.monotonic() < start_at + seconds:
        time.sleep(1.0)
        now = resources(server)
        peak = {k: max(peak[k], now[k]) for k in peak}
    total = Tally()
    for _ in workers:
        total.add(out.get(timeout=300))
    for w in workers:
        w.join(60)
    lat = sorted(total.latencies)
    return {
        "clients": clients, "grpc": kinds.count("grpc"), "http": kinds.count("http"), "seconds": seconds,
        "ok": total.ok, "wrong": total.wrong, "backpressure": total.backpressure, "errors": total.errors,
        "error_samples": total.samples, "goodput_qps": round(total.ok / seconds, 2),
        "p50_ms": round(1000 * statistics.median(lat), 1) if lat else None,
        "p99_ms": round(1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))], 1) if lat else None,
        "server_peak": peak,
    }


def run_config(config: str, folder: Path, sizes: dict[str, Any], expected: dict[str, tuple[int, float]]
               ) -> dict[str, Any]:
    """Start a server in configuration ``config`` and run the warm-up, baseline and load phases against it."""
    with tempfile.TemporaryDirectory(prefix="dstp-load-") as tmp:
        args: list[str] = ["--http-port", "0", "--data-port", "-1", "--udt-port", "-1"]
        token, ca = "", ""
        if config == "secure":
            from dstp.auth import TokenStore
            from dstp.auth.tls import self_signed

            store = Path(tmp) / "tokens.json"
            token = TokenStore(store).create("loadtest").secret
            tls = self_signed(Path(tmp) / "tls", ["127.0.0.1", "localhost"])
            ca = str(tls.cert_path)
            args += ["--token-store", str(store), "--allow-anonymous", "false",
                     "--tls-cert", str(tls.cert_path), "--tls-key", str(tls.key_path)]
        with serve(folder, *args) as server:
            spec = {"grpc": server.endpoints["grpc"], "http": server.endpoints["http"], "token": token, "ca": ca,
                    "expected": expected}
            _phase(server, spec, sizes["baseline"], sizes["warmup"])  # warm-up: caches, threads, DuckDB
            time.sleep(1.0)
            before = resources(server)
            baseline = _phase(server, spec, sizes["baseline"], sizes["seconds"])
            loaded = _phase(server, spec, sizes["clients"], sizes["seconds"])
            time.sleep(3.0)  # the last connections close, slots come back
            after = resources(server)
    ratio = loaded["goodput_qps"] / baseline["goodput_qps"] if baseline["goodput_qps"] else None
    return {"config": config, "before": before, "after": after,
            "growth": {k: after[k] - before[k] for k in before}, "baseline": baseline, "load": loaded,
            "goodput_ratio": round(ratio, 3) if ratio is not None else None}


def markdown(result: dict[str, Any]) -> str:
    """Return the results as readable tables."""
    rows = []
    for r in result["configs"]:
        for phase in ("baseline", "load"):
            p = r[phase]
            rows.append({"config": r["config"], "clients": f"{p['clients']} ({p['grpc']} gRPC, {p['http']} HTTP)",
                         "ok": p["ok"], "wrong": p["wrong"], "backpressure": p["backpressure"],
                         "errors": p["errors"], "goodput": p["goodput_qps"], "p50": p["p50_ms"], "p99": p["p99_ms"],
                         "fds": p["server_peak"]["fds"], "threads": p["server_peak"]["threads"],
                         "rss": p["server_peak"]["rss_mb"]})
    growth = [{"config": r["config"], "ratio": r["goodput_ratio"], **{f"{k}_{when}": r[when][k]
              for when in ("before", "after") for k in ("fds", "threads", "rss_mb")}} for r in result["configs"]]
    sizes = result["sizes"]
    return "\n".join([
        f"{sizes['clients']} clients × {sizes['seconds']:g} s against {sizes['baseline']} clients, small queries on "
        "loopback; generated by `python -m bench.load` (its docstring says what is measured).", "",
        markdown_table(rows, [("config", "config"), ("clients", "clients"), ("ok", "answers"),
                              ("wrong", "wrong"), ("backpressure", "back-pressure"), ("errors", "other errors"),
                              ("goodput", "goodput q/s"), ("p50", "p50 ms"), ("p99", "p99 ms"),
                              ("fds", "peak fds"), ("threads", "peak threads"), ("rss", "peak RSS MB")]), "",
        "Goodput ratio (loaded / baseline; the target is ≥ 0.8), and the server after a warm-up (before) and "
        "after the load:", "",
        markdown_table(growth, [("config", "config"), ("ratio", "goodput ratio"), ("fds_before", "fds before"),
                                ("fds_after", "fds after"), ("threads_before", "threads before"),
                                ("threads_after", "threads after"), ("rss_mb_before", "RSS MB before"),
                                ("rss_mb_after", "RSS MB after")]), "",
    ])


def run(quick: bool, folders: dict[str, Path], *, configs: tuple[str, ...] = CONFIGS,
        sizes: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run the load benchmark (``quick``: toy sizes, nothing written); return its results."""
    sizes = dict(sizes or (QUICK if quick else FULL))
    folder = folders["small"]
    expected = oracle(folder)
    result: dict[str, Any] = {"sizes": sizes, "queries": [q for q, _ in QUERIES],
                              "configs": [run_config(c, folder, sizes, expected) for c in configs]}
    for r in result["configs"]:
        print(f"load {r['config']}: goodput {r['load']['goodput_qps']} q/s with {sizes['clients']} clients, "
              f"{r['baseline']['goodput_qps']} with {sizes['baseline']} (ratio {r['goodput_ratio']}); wrong "
              f"{r['load']['wrong']}, errors {r['load']['errors']}, p99 {r['load']['p99_ms']} ms", file=sys.stderr)
    if not quick:
        write_json(NAME, result)
        write_markdown(NAME, "Load: many clients, small queries", markdown(result))
    result["wrong"] = sum(r[p]["wrong"] for r in result["configs"] for p in ("baseline", "load"))
    result["errors"] = sum(r[p]["errors"] for r in result["configs"] for p in ("baseline", "load"))
    return result


def main(argv: list[str] | None = None) -> int:
    from bench.__main__ import exclusive_machine, samples

    parser = argparse.ArgumentParser(prog="python -m bench.load", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="toy sizes, nothing written")
    parser.add_argument("--seconds", type=float, default=None, help="length of each measured phase")
    parser.add_argument("--clients", type=int, default=None, help="clients of the loaded phase (half gRPC, half HTTP)")
    parser.add_argument("--config", default=",".join(CONFIGS), help=f"comma-separated subset of {', '.join(CONFIGS)}")
    args = parser.parse_args(argv)
    sizes = dict(QUICK if args.quick else FULL)
    if args.seconds is not None:
        sizes["seconds"] = args.seconds
    if args.clients is not None:
        sizes["clients"] = args.clients
    configs = tuple(c for c in args.config.split(",") if c)
    with exclusive_machine():
        result = run(args.quick, samples(True), configs=configs, sizes=sizes)
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

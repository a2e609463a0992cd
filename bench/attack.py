"""Hold under attack (issue 33): load at 8, 16, 64 and 128 clients, and a descriptor-exhaustion flood.

What is measured, against ``dstp serve`` processes over the small samples on loopback:

* **scaling** — bench.load's clients (half gRPC, half HTTP, small queries, every answer checked against
  the netCDF4 oracle of bench.load) at 8, 16, 64 and 128 clients, each with a token of its own (one
  principal each, as many users are). Reported per step: answers, *wrong* answers (target 0), calls
  refused with back-pressure (``limit_exceeded``: target 0 while the clients fit in the slots plus
  ``max_waiting`` = 8 + 64), other errors, goodput and its ratio to 8 clients (target ≥ 0.9 at 64),
  p50/p99 latency.
* **descriptor exhaustion** — a server started with an open-file limit of 4,096 (``prlimit``) is
  flooded with connections that send only the HTTP/2 preface and an empty SETTINGS frame, no token and no
  call (issue 33: 2 x 10,000 of them took a server to 19,999 of its 20,000 descriptors): 3,000 each on the
  gRPC and the Flight doors, from 127.0.0.2 and 127.0.0.3, reopened as the server closes them, and 300
  unfinished HELLOs from 30 addresses on the striped data port. Meanwhile a bystander at 127.0.0.1 asks a
  tiny query every 0.5 s on each door (gRPC, HTTP, striped, Flight); reported per door: answers, failures,
  p50 and max latency, next to the same probes without the flood; and the server's descriptors, threads
  and RSS before, at the peak, and 10 s after the flood. The server runs twice, with glibc's default malloc
  arenas and with ``MALLOC_ARENA_MAX=2`` (the RSS that stayed at 948 MB after an attack run, issue 33).

Run: ``python -m bench run --only attack`` (``--quick``: toy sizes, nothing written). Results:
``bench/results/attack.json`` and ``attack.md``.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

from bench.dstp_process import ServerProcess, serve
from bench.load import _phase, oracle, resources
from bench.report import markdown_table, write_json, write_markdown

NAME = "attack"
TINY = "select temperature from ccm3 where lat > 80 limit 3"
FULL = {"steps": (8, 16, 64, 128), "seconds": 20.0, "warmup": 5.0, "flood": 3000, "probe_s": 30.0, "fd_limit": 4096}
QUICK = {"steps": (2, 4), "seconds": 2.0, "warmup": 1.0, "flood": 200, "probe_s": 3.0, "fd_limit": 1024}


# -- scaling -------------------------------------------------------------------------------------------

def scaling(folder: Path, sizes: dict[str, Any], expected: dict[str, tuple[int, float]]) -> list[dict[str, Any]]:
    from dstp.auth import TokenStore

    steps = list(sizes["steps"])
    with tempfile.TemporaryDirectory(prefix="dstp-attack-") as tmp:
        store = TokenStore(Path(tmp) / "tokens.json")
        tokens = [store.create(f"user{i:03d}").secret for i in range(max(steps))]
        args = ["--http-port", "0", "--data-port", "-1", "--udt-port", "-1", "--token-store", str(store.path),
                "--allow-anonymous", "false"]
        with serve(folder, *args) as server:
            spec = {"grpc": server.endpoints["grpc"], "http": server.endpoints["http"], "token": "", "ca": "",
                    "tokens": tokens, "expected": expected}
            _phase(server, spec, steps[0], sizes["warmup"])
            out = [_phase(server, spec, n, sizes["seconds"]) for n in steps]
    base = out[0]["goodput_qps"] or None
    for p in out:
        p["ratio_to_first"] = round(p["goodput_qps"] / base, 3) if base else None
    return out


# -- the descriptor-exhaustion flood ---------------------------------------------------------------------------

def _probes(endpoints: dict[str, str]) -> dict[str, Callable[[], int]]:
    """Return, per door, a probe asking TINY and returning its row count."""
    import httpx
    import pyarrow.flight as fl

    import dstp

    def grpc_probe() -> int:
        with dstp.connect(endpoints["grpc"], timeout=10) as c:
            return int(c.query(TINY).num_rows)

    def striped_probe() -> int:
        with dstp.connect(endpoints["grpc"], timeout=10) as c:
            return int(c.query(TINY, transport="striped").num_rows)

    def http_probe() -> int:
        r = httpx.get(f"http://{endpoints['http']}/query", params={"sql": TINY}, timeout=10)
        r.raise_for_status()
        return r.text.count("\n") - 1

    def flight_probe() -> int:
        client = fl.connect(f"grpc+tcp://{endpoints['flight']}")
        try:
            options = fl.FlightCallOptions(timeout=10)
            info = client.get_flight_info(fl.FlightDescriptor.for_command(TINY), options)
            return int(client.do_get(info.endpoints[0].ticket, options).read_all().num_rows)
        finally:
            client.close()

    return {"grpc": grpc_probe, "http": http_probe, "striped": striped_probe, "flight": flight_probe}


def _probe_doors(endpoints: dict[str, str], seconds: float) -> dict[str, dict[str, Any]]:
    """Probe every door every 0.5 s for ``seconds`` (a thread per door); return answers, failures, p50, max."""
    probes = _probes(endpoints)
    found: dict[str, dict[str, Any]] = {}

    def run(door: str, probe: Callable[[], int]) -> None:
        latencies, failures, samples = [], 0, []
        stop_at = time.monotonic() + seconds
        while time.monotonic() < stop_at:
            started = time.monotonic()
            try:
                ok = probe() == 3
            except Exception as exc:  # noqa: BLE001 - a failed probe is what is counted
                ok = False
                samples.append(f"{type(exc).__name__}: {exc}"[:160])
            took = time.monotonic() - started
            if ok:
                latencies.append(took)
            else:
                failures += 1
            time.sleep(max(0.0, 0.5 - took))
        found[door] = {"answers": len(latencies), "failures": failures, "samples": samples[:3],
                       "p50_ms": round(1000 * statistics.median(latencies), 1) if latencies else None,
                       "max_ms": round(1000 * max(latencies), 1) if latencies else None}

    threads = [threading.Thread(target=run, args=item) for item in probes.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return found


def _flood(endpoints: dict[str, str], per_door: int) -> list[Any]:
    """Start the floods (tests/attacks.py); return them (stop() each)."""
    repo = Path(__file__).resolve().parents[1]
    if str(repo / "tests") not in sys.path:
        sys.path.insert(0, str(repo / "tests"))
    from attacks import IdleHttp2Flood, PendingHelloFlood

    half = per_door // 2
    return [IdleHttp2Flood(endpoints["grpc"], ["127.0.0.2", "127.0.0.3"], per_source=half, max_opens=20 * per_door),
            IdleHttp2Flood(endpoints["flight"], ["127.0.0.2", "127.0.0.3"], per_source=half, max_opens=20 * per_door),
            PendingHelloFlood(endpoints["data"], [f"127.0.1.{i}" for i in range(2, 32)], per_source=10,
                              max_opens=20 * 300)]


def exhaustion(folder: Path, sizes: dict[str, Any], arenas: str) -> dict[str, Any]:
    """Flood a server whose open-file limit is sizes["fd_limit"]; probe every door; return the figures."""
    limit = sizes["fd_limit"]
    env = {"MALLOC_ARENA_MAX": arenas} if arenas else {}
    args = ["--http-port", "0", "--data-port", "0", "--udt-port", "-1", "--flight-port", "0"]
    with serve(folder, *args, prefix=("prlimit", f"--nofile={limit}:{limit}"), env=env) as server:
        ends = server.endpoints
        quiet = _probe_doors(ends, sizes["probe_s"] / 3)  # warm-up and the doors without a flood
        before = resources(server)
        floods = _flood(ends, sizes["flood"])
        peak = dict(before)
        sampling = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not sampling.wait(0.5):
                now = resources(server)
                peak = {k: max(peak[k], now[k]) for k in peak}

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            time.sleep(2.0)  # the floods are under way
            attacked = _probe_doors(ends, sizes["probe_s"])
        finally:
            opened = {f"{type(f).__name__}:{i}": f.opened for i, f in enumerate(floods)}
            for f in floods:
                f.stop()
            sampling.set()
            sampler.join()
        time.sleep(10.0)
        after = resources(server)
    return {"arenas": arenas or "default", "fd_limit": limit, "opened": opened, "quiet": quiet, "attacked": attacked,
            "before": before, "peak": peak, "after": after}


def markdown(result: dict[str, Any]) -> str:
    scale = [{"clients": p["clients"], "ok": p["ok"], "wrong": p["wrong"], "refused": p["backpressure"],
              "errors": p["errors"], "goodput": p["goodput_qps"], "ratio": p["ratio_to_first"], "p50": p["p50_ms"],
              "p99": p["p99_ms"], "fds": p["server_peak"]["fds"], "threads": p["server_peak"]["threads"]}
             for p in result["scaling"]]
    doors = []
    for run in result["exhaustion"]:
        for door in ("grpc", "http", "striped", "flight"):
            q, a = run["quiet"][door], run["attacked"][door]
            doors.append({"arenas": run["arenas"], "door": door, "quiet": f"{q['p50_ms']} / {q['max_ms']}",
                          "answers": a["answers"], "failures": a["failures"], "p50": a["p50_ms"], "max": a["max_ms"]})
    server = [{"arenas": r["arenas"], **{f"{k}_{when}": r[when][k] for when in ("before", "peak", "after")
                                         for k in ("fds", "threads", "rss_mb")}} for r in result["exhaustion"]]
    return "\n".join([
        "Generated by `python -m bench run --only attack` (bench/attack.py says what is measured).", "",
        "Load: small queries, half gRPC half HTTP, one token per client; refused = back-pressure "
        "(limit_exceeded).", "",
        markdown_table(scale, [("clients", "clients"), ("ok", "answers"), ("wrong", "wrong"), ("refused", "refused"),
                               ("errors", "other errors"), ("goodput", "goodput q/s"), ("ratio", "× 8 clients"),
                               ("p50", "p50 ms"), ("p99", "p99 ms"), ("fds", "peak fds"),
                               ("threads", "peak threads")]), "",
        f"Descriptor exhaustion: a server with an open-file limit of {result['exhaustion'][0]['fd_limit']:,}, idle "
        "HTTP/2 floods on gRPC and Flight and unfinished HELLOs on the data port; a bystander's tiny query every "
        "0.5 s per door (latency p50 / max in ms; quiet: the same probes before the flood).", "",
        markdown_table(doors, [("arenas", "malloc arenas"), ("door", "door"), ("quiet", "quiet p50 / max"),
                               ("answers", "answers"), ("failures", "failures"), ("p50", "p50 ms"),
                               ("max", "max ms")]), "",
        "The server before the flood, at its peak, and 10 s after:", "",
        markdown_table(server, [("arenas", "malloc arenas"), ("fds_before", "fds before"), ("fds_peak", "fds peak"),
                                ("fds_after", "fds after"), ("threads_before", "threads before"),
                                ("threads_peak", "threads peak"), ("threads_after", "threads after"),
                                ("rss_mb_before", "RSS MB before"), ("rss_mb_peak", "RSS MB peak"),
                                ("rss_mb_after", "RSS MB after")]), "",
    ])


def run(quick: bool, folders: dict[str, Path]) -> dict[str, Any]:
    """Run the benchmark (``quick``: toy sizes, nothing written); return its results."""
    sizes = dict(QUICK if quick else FULL)
    folder = folders["small"]
    expected = oracle(folder)
    result: dict[str, Any] = {"sizes": sizes, "scaling": scaling(folder, sizes, expected),
                              "exhaustion": [exhaustion(folder, sizes, arenas) for arenas in ("", "2")]}
    for p in result["scaling"]:
        print(f"attack load {p['clients']} clients: {p['goodput_qps']} q/s (x{p['ratio_to_first']}), refused "
              f"{p['backpressure']}, wrong {p['wrong']}, errors {p['errors']}", file=sys.stderr)
    for r in result["exhaustion"]:
        print(f"attack flood (arenas {r['arenas']}): " + ", ".join(
            f"{d} {v['answers']} ok/{v['failures']} failed p50 {v['p50_ms']} max {v['max_ms']} ms {v['samples'][:1]}"
            for d, v in r["attacked"].items()) + f"; RSS {r['before']['rss_mb']}→{r['peak']['rss_mb']}→"
            f"{r['after']['rss_mb']} MB", file=sys.stderr)
    if not quick:
        write_json(NAME, result)
        write_markdown(NAME, "Hold under attack: load steps and a descriptor-exhaustion flood", markdown(result))
    result["wrong"] = sum(p["wrong"] for p in result["scaling"])
    result["probe_failures"] = sum(v["failures"] for r in result["exhaustion"] for v in r["attacked"].values())
    return result

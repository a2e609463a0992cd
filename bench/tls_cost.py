"""What TLS costs: the seed query and a 1 GiB ``dstp get``, with and without TLS, in the same run.

``python -m bench run --only tls_cost`` (``--quick``: small samples, an 8 MiB
file, loopback only, one repetition, nothing written).

"With TLS" is the whole of issue 13's item 4 as a user meets it: ``dstp serve
--tls-cert/--tls-key`` (gRPC and HTTP speak TLS; the data channels seal every
frame with AES-256-GCM keyed per ticket over the TLS control plane), clients
started with ``DSTP_CA_FILE`` and ``DSTP_TOKEN``. "Without" is the plaintext
server of a trusted network, same catalog, same tools. Both servers run at
once and the runs alternate (plain, TLS, plain, …) so that both modes see the
same machine; medians over ``REPEATS`` runs.

What is measured, each run a fresh client process (imports, connection and
TLS handshakes, the data, and for downloads the final CRC-32C check):

* **seed query** (``select temperature, time from ccm3 where humidity > 50``
  on the medium samples: 1.6 M records) with ``python -m bench.bulk_client``,
  over the gRPC stream (TLS by gRPC's own C core) and striped TCP × 4
  (sealed frames);
* **dstp get** of a 1 GiB file (random bytes, tmpfs to tmpfs), striped × 8
  (sealed) and over the gRPC stream.

Where: loopback, and across the emulated 100 ms / 1 Gb/s path of
``bench/wan`` (no loss; server and client in their own network namespaces).
Throughput is bytes over the client process's wall time; CPU is client +
server seconds per GB (``wait4`` and the server's /proc delta).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any, Iterator, Sequence

from bench.bulk_catalog import DATASET, make_catalog
from bench.bulk_tools import LOOPBACK, REPO, Place, run_capped
from bench.dstp_process import ServerProcess, serve
from bench.report import markdown_table, median, write_json, write_markdown

NAME = "tls_cost"
REPEATS = 3
SEED_SQL = "select temperature, time from ccm3 where humidity > 50"
WAN_NAME = "dstpwan-tls"
WAN_PORT = 50071
CAP_S = 120.0
MODES = ("plain", "tls")


def _client_env(mode: str, cert: Path, token: str, cache: Path) -> dict[str, str]:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "DSTP_TOKEN": token,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH", "")]))}
    env.pop("DSTP_CA_FILE", None)
    env.pop("DSTP_TLS", None)
    if mode == "tls":
        env["DSTP_CA_FILE"] = str(cert)
    return env


def query_run(place: Place, server: ServerProcess, mode: str, transport: str, streams: int, env: dict[str, str]
              ) -> dict[str, Any]:
    """Return one seed query in a fresh client process."""
    argv = [sys.executable, "-m", "bench.bulk_client", "--server", server.endpoints["grpc"], "--sql", SEED_SQL,
            "--transport", transport, "--streams", str(streams)]
    cpu0 = server.cpu_seconds()
    done = run_capped(place.client(argv), cap_s=CAP_S, env=env)
    server_cpu = server.cpu_seconds() - cpu0
    try:
        doc = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"ok": False, "error": done.stderr.strip()[-400:]}
    run = {"ok": done.returncode == 0, "rows": doc["rows"], "bytes": doc["bytes"], "seconds": done.wall_s,
           "cpu_s": done.cpu_s + server_cpu, "transport": doc["transport"]}
    if done.returncode != 0:  # the records came, the process then failed: say how
        run["error"] = f"exit status {done.returncode} after the result: {done.stderr.strip()[-2000:]}"
    return run


_GET = re.compile(r"([\d,]+) bytes → .* in ([\d.]+) s \(.* over (\w+) × (\d+)")


def get_run(place: Place, server: ServerProcess, mode: str, transport: str, streams: int, source: Any, out: Path,
            env: dict[str, str]) -> dict[str, Any]:
    """Return one ``dstp get`` in a fresh client process (the output's CRC-32C is checked by dstp itself)."""
    out.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "dstp.cli", "get", "--server", server.endpoints["grpc"], DATASET, source.name,
            "-o", str(out), "--no-progress", "--transport", transport]
    if streams:
        argv += ["--streams", str(streams)]
    cpu0 = server.cpu_seconds()
    done = run_capped(place.client(argv), cap_s=CAP_S, env=env)
    server_cpu = server.cpu_seconds() - cpu0
    m = _GET.search(done.stderr)
    try:
        if done.returncode != 0 or m is None:
            return {"ok": False, "error": done.stderr.strip()[-400:]}
        return {"ok": True, "bytes": source.size, "seconds": done.wall_s, "cpu_s": done.cpu_s + server_cpu,
                "transport": f"{m.group(3)} × {m.group(4)}"}
    finally:
        out.unlink(missing_ok=True)
        for leftover in out.parent.glob(out.name + ".dstp-partial*"):
            leftover.unlink()


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    good = [r for r in runs if r.get("ok")]
    if not good:
        return {"ok": False, "runs": runs}
    nbytes = good[0]["bytes"]
    seconds = median(r["seconds"] for r in good)
    return {"ok": len(good) == len(runs), "runs": runs, "seconds": round(seconds, 3),
            "MBps": round(nbytes / seconds / 1e6, 1), "cpu_s_per_GB": round(median(r["cpu_s"] for r in good)
                                                                          / (nbytes / 1e9), 2),
            "rows": good[0].get("rows"), "transport": good[0]["transport"]}


@contextlib.contextmanager
def servers(place: Place, roots: dict[str, Path], cert: Path, key: Path, store: Path,
            host_args: Sequence[str]) -> Iterator[dict[tuple[str, str], ServerProcess]]:
    """Start a plaintext and a TLS server for each catalog root; yield them by (root name, mode)."""
    prefix = ["ip", "netns", "exec", place.server_ns] if place.server_ns else []
    env_args = ("--token-store", str(store), "--allow-anonymous", "false")
    with contextlib.ExitStack() as stack:
        found = {}
        for i, (label, root) in enumerate(roots.items()):
            for j, mode in enumerate(MODES):
                port = [*host_args[:-1], str(int(host_args[-1]) + 2 * i + j)] if host_args else []
                tls = ["--tls-cert", str(cert), "--tls-key", str(key)] if mode == "tls" else []
                found[(label, mode)] = stack.enter_context(
                    serve(root, *port, *env_args, *tls, "--udt-port", "-1", prefix=prefix))
        yield found


def measure(place: Place, roots: dict[str, Path], source: Any, work: Path, repeats: int, seed_tools: Sequence[tuple[str, int]],
            get_tools: Sequence[tuple[str, int]], host_args: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Return one row per (what, tool, mode) at ``place``: medians of ``repeats`` alternating runs."""
    from dstp.auth import TokenStore
    from dstp.auth.tls import self_signed

    tls = self_signed(work / "tls", ["localhost", "127.0.0.1", place.server_addr])
    store = work / "tokens.json"
    token = TokenStore(store).create("bench", []).secret
    runs: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    with servers(place, roots, tls.cert_path, tls.key_path, store, host_args) as running:
        for _ in range(repeats):
            for mode in MODES:
                env = _client_env(mode, tls.cert_path, token, work / f"cache-{mode}")
                for transport, streams in seed_tools:
                    runs.setdefault(("seed query", f"{transport} × {streams or 1}", mode), []).append(
                        query_run(place, running[("seed", mode)], mode, transport, streams, env))
                for transport, streams in get_tools:
                    runs.setdefault((f"dstp get {source.label}", f"{transport} × {streams or 1}", mode), []).append(
                        get_run(place, running[("bulk", mode)], mode, transport, streams, source, work / "out.nc",
                                env))
    rows = []
    for (what, tool, mode), got in runs.items():
        rows.append({"what": what, "tool": tool, "mode": mode, **_summary(got)})
    for row in rows:  # the cost: TLS throughput relative to plaintext, same what and tool
        if row["mode"] == "tls":
            plain = next(r for r in rows if r["mode"] == "plain" and r["what"] == row["what"] and r["tool"] == row["tool"])
            if row.get("MBps") and plain.get("MBps"):
                row["vs_plain"] = round(row["MBps"] / plain["MBps"], 3)
    return rows


@contextlib.contextmanager
def workspace() -> Iterator[Path]:
    root = (Path("/dev/shm") if Path("/dev/shm").is_dir() else Path("/tmp")) / f"dstp-bench-{NAME}-{os.getpid()}"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run(quick: bool, samples: dict[str, Path], repeats: int = REPEATS) -> dict[str, Any]:
    """Return the TLS cost; in full mode also write bench/results/tls_cost.{json,md}."""
    repeats = 1 if quick else repeats
    size = 8 if quick else 1024
    result: dict[str, Any] = {"mode": "quick" if quick else "full", "repeats": repeats, "sql": SEED_SQL}
    with workspace() as work:
        catalog = make_catalog(work / "catalog", (size,))
        source = catalog.files[0]
        seed_root = work / "seed"
        shutil.copytree(samples["small" if quick else "medium"] / "ccm3", seed_root / "ccm3")
        roots = {"seed": seed_root, "bulk": catalog.root}
        result["loopback"] = measure(LOOPBACK, roots, source, work / "loopback", repeats,
                                     (("grpc", 0), ("striped", 4)), (("striped", 8), ("grpc", 0)))
        if not quick:
            from bench.wan import WanPath

            with WanPath.up(rtt_ms=100, rate_bps=1e9, loss=0.0, name=WAN_NAME) as path:
                place = Place(path.server_ns, path.client_ns, path.server_addr, path.client_addr)
                result["wan_100ms"] = measure(place, roots, source, work / "wan", repeats,
                                              (("grpc", 0), ("striped", 8)), (("striped", 8),),
                                              ("--host", path.server_addr, "--port", str(WAN_PORT)))
                result["wan_path"] = path.describe()
    if not quick:
        _write(result)
    return {"mode": result["mode"], "loopback": result["loopback"], "wan_100ms": result.get("wan_100ms", [])}


def _write(result: dict[str, Any]) -> None:
    write_json(NAME, result)
    columns = [("what", "what"), ("tool", "channel"), ("mode", "mode"), ("seconds", "seconds (median)"),
               ("MBps", "MB/s"), ("vs_plain", "TLS / plain"), ("cpu_s_per_GB", "CPU s/GB")]
    text = [__doc__.split("\n\n", 1)[1].strip(), "", "## Loopback", "",
            markdown_table(result["loopback"], columns)]
    if result.get("wan_100ms"):
        text += ["", "## Emulated WAN, 100 ms, 1 Gb/s", "", markdown_table(result["wan_100ms"], columns)]
    write_markdown(NAME, "TLS cost", "\n".join(text))

"""Catalog listings at 1,000 and 10,000 datasets: how long one page takes on every listing door (issue 35).

The archives are bench/archive.py's ``N datasets`` layout (N one-file datasets, each with its own folder and
descriptor; generated once into the user cache and shared with that benchmark). One ``dstp serve`` process per
N (warm: its catalog index is kept in the cache too), HTTP and gRPC on loopback. Per door, one request first
(unmeasured: the first describe of each dataset on the page), then ``REPEATS`` requests timed one after another
from this process (httpx, a kept connection; request sent until the whole body is read); the median and the 90th
percentile are reported with the body's size:

* ``/stac/collections`` — the first page (100) and the last; ``/datasets.json?limit=100`` — first and last page;
* ERDDAP ``allDatasets.csv?page=…&itemsPerPage=100`` and ``/erddap/info/index.json?itemsPerPage=100``; ERDDAP's
  search (``search/index.json?searchFor=…``, a few hits and every dataset's last page) and the
  ``griddap/index.json`` and ``tabledap/index.json`` lists, 100 a page;
* the home page ``/`` (100 per page), first and last; ``/changes?since=0``;
* ``ListDatasets`` (gRPC, one page of 100, ``Client.datasets_page``) and ``dstp ls --limit 100`` (a whole
  process: interpreter start, connect, one page, print);
* for reference, the unpaged listings: ``/datasets.json`` and ``allDatasets.csv`` with every dataset.

Goal: every page ≤ 100 ms at 10,000 datasets. ``--quick``: 30 datasets, 3 repeats, nothing written.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

NAME = "listings"
SIZES = (1_000, 10_000)
QUICK_SIZES = (30,)
REPEATS = 20
GOAL_MS = 100.0
PAGE = 100


def _timed(call: Callable[[], int], repeats: int) -> dict[str, Any]:
    size = call()  # unmeasured: descriptions of the page's datasets are made once per version
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        size = call()
        seconds.append(time.perf_counter() - started)
    seconds.sort()
    return {"median_ms": statistics.median(seconds) * 1000,
            "p90_ms": seconds[min(len(seconds) - 1, int(0.9 * len(seconds)))] * 1000, "bytes": size,
            "repeats": repeats}


def _doors(n: int) -> list[tuple[str, str, bool]]:
    """Return (label, path, paged) of each HTTP door measured."""
    last = max(0, n - PAGE)
    return [
        ("/stac/collections (first page)", f"/stac/collections?limit={PAGE}", True),
        ("/stac/collections (last page)", f"/stac/collections?limit={PAGE}&offset={last}", True),
        ("/datasets.json (first page)", f"/datasets.json?limit={PAGE}", True),
        ("/datasets.json (last page)", f"/datasets.json?limit={PAGE}&offset={last}", True),
        ("ERDDAP allDatasets.csv (page 1)", f"/erddap/tabledap/allDatasets.csv?page=1&itemsPerPage={PAGE}", True),
        ("ERDDAP info/index.json (page 1)", f"/erddap/info/index.json?page=1&itemsPerPage={PAGE}", True),
        ("ERDDAP search/index.json?searchFor=ds_0000 (10 hits)",
         f"/erddap/search/index.json?searchFor=ds_0000&page=1&itemsPerPage={PAGE}", True),
        ("ERDDAP search/index.json?searchFor=t2m (last page)",
         f"/erddap/search/index.json?searchFor=t2m&page={max(1, -(-n // PAGE))}&itemsPerPage={PAGE}", True),
        ("ERDDAP griddap/index.json (page 1)", f"/erddap/griddap/index.json?page=1&itemsPerPage={PAGE}", True),
        ("ERDDAP tabledap/index.json (last page)",
         f"/erddap/tabledap/index.json?page={max(1, -(-n // PAGE))}&itemsPerPage={PAGE}", True),
        ("home page / (first page)", f"/?limit={PAGE}", True),
        ("home page / (last page)", f"/?limit={PAGE}&offset={last}", True),
        ("/changes?since=0", "/changes?since=0", True),
        ("/datasets.json (all, unpaged)", "/datasets.json", False),
        ("ERDDAP allDatasets.csv (all, unpaged)", "/erddap/tabledap/allDatasets.csv", False),
    ]


def measure(root: Path, state: Path, n: int, repeats: int) -> list[dict[str, Any]]:
    """Return one row per door for the catalog ``root`` of ``n`` datasets."""
    import httpx

    import dstp
    from bench.dstp_process import serve

    rows: list[dict[str, Any]] = []
    env = {"DSTP_STATE_DIR": str(state), "DSTP_DATA_PORT": "-1", "DSTP_UDT_PORT": "-1"}
    with serve(root, "--http-port", "0", env=env, timeout=3600) as server:
        http = httpx.Client(base_url=f"http://{server.endpoints['http']}", timeout=600)
        try:
            for label, path, paged in _doors(n):
                def get(path: str = path) -> int:
                    answer = http.get(path)
                    answer.raise_for_status()
                    return len(answer.content)

                rows.append({"datasets": n, "door": label, "paged": paged, **_timed(get, repeats)})
                print(json.dumps(rows[-1]), file=sys.stderr)
        finally:
            http.close()
        with dstp.connect(server.endpoints["grpc"]) as client:
            def page() -> int:
                return len(client.datasets_page(0, PAGE).datasets)

            rows.append({"datasets": n, "door": "gRPC ListDatasets (one page; bytes = datasets)", "paged": True, **_timed(page, repeats)})

        def ls() -> int:
            done = subprocess.run([sys.executable, "-m", "dstp.cli", "ls", "--limit", str(PAGE), "--server",
                                   server.endpoints["grpc"]], capture_output=True, check=True)
            return len(done.stdout)

        rows.append({"datasets": n, "door": f"dstp ls --limit {PAGE} (whole process)", "paged": True,
                     **_timed(ls, max(1, repeats // 4))})
        print(json.dumps(rows[-1]), file=sys.stderr)
    return rows


def run(quick: bool, samples: dict[str, Path]) -> dict[str, Any]:
    """Return the listing figures; a full run writes bench/results/listings.{json,md}."""
    import platformdirs

    from bench.archive import _generate
    from bench.report import machine, write_json, write_markdown

    base = Path(platformdirs.user_cache_dir("dstp")) / "bench" / "archive"
    if quick:
        base = Path(tempfile.mkdtemp(prefix="dstp-bench-listings-"))
    sizes, repeats = (QUICK_SIZES, 3) if quick else (SIZES, REPEATS)
    rows: list[dict[str, Any]] = []
    for n in sizes:
        root = base / f"many-{n}"
        _generate(root, n, "many")
        rows += measure(root, base / f"state-listings-{n}", n, repeats)
    result: dict[str, Any] = {"mode": "quick" if quick else "full", "goal_ms": GOAL_MS, "page": PAGE, "rows": rows,
                              "machine": machine()}
    if not quick:
        write_json(NAME, result)
        write_markdown(NAME, "Catalog listings: one page at 1,000 and 10,000 datasets", report(result))
    else:
        import shutil

        shutil.rmtree(base, ignore_errors=True)
    worst = max((r for r in rows if r["paged"] and not r["door"].startswith("dstp ls")), key=lambda r: r["median_ms"])
    return {"mode": result["mode"], "worst_page": worst["door"], "worst_page_ms": worst["median_ms"]}


def report(result: dict[str, Any]) -> str:
    """Return the markdown table of a full run."""
    lines = [f"One page = {result['page']} datasets. Median and 90th percentile of {REPEATS} requests one after "
             f"another on loopback (`dstp ls`: {REPEATS // 4} whole processes), after one unmeasured request. Goal: "
             f"every page ≤ {result['goal_ms']:g} ms at 10,000 datasets. Machine: {result['machine']['cores']} "
             "cores, shared.", "",
             "| door | datasets | median ms | p90 ms | body bytes | paged | goal |", "|---|---:|---:|---:|---:|---|---|"]
    for r in result["rows"]:
        goal = "–" if not r["paged"] or r["door"].startswith("dstp ls") else \
            ("met" if r["median_ms"] <= result["goal_ms"] else "missed")
        lines.append(f"| {r['door']} | {r['datasets']:,} | {r['median_ms']:,.1f} | {r['p90_ms']:,.1f} | "
                     f"{r['bytes']:,} | {'yes' if r['paged'] else 'no'} | {goal} |")
    return "\n".join(lines) + "\n"

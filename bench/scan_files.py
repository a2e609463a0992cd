"""A full scan's cost per file at 1,000 and 5,000 files: is it flat once the decoded-chunk cache is sized?

The archive is the ERA5-like one of ``bench.startup`` (``archive/one-10000/era5``: one file per time
step, ``t2m(time, lat, lon)`` int16 packed, 73 × 144, zlib + shuffle, one 21 KB chunk per file);
its first N files are hard-linked into a dataset of their own. For each N and each configuration
one ``dstp serve`` runs; one client asks each server in turn ``select avg(t2m) from era5`` (every
chunk read, decoded, reduced: no transfer to speak of), once untimed, then ``--repeats`` rounds,
servers interleaved. Per file = median seconds / N.

Configurations (environment of the server):

* ``64 MiB`` — ``DSTP_DECODED_CHUNK_CACHE_BYTES=67108864``: the size the cache had before;
* ``default`` — no setting: the cache sized from memory (``dstp.catalog.chunks.default_cache_bytes``).

``--label`` names the run in the output (to put a run of an older server beside it).

    python -m bench.scan_files [--repeats 5] [--files 1000,5000]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Iterator

from bench.report import markdown_table, median, write_json, write_markdown

NAME = "scan_files"
SQL = "select avg(t2m) from era5"
CONFIGS = {"64 MiB": {"DSTP_DECODED_CHUNK_CACHE_BYTES": str(64 * 2**20)}, "default": {}}


def archive(files: int) -> Path:
    """Return a catalog root holding ``era5`` of the first ``files`` files of the 10,000-file archive."""
    import platformdirs

    cache = Path(platformdirs.user_cache_dir("dstp")) / "bench"
    source = cache / "archive" / "one-10000" / "era5"
    if not source.is_dir():
        raise RuntimeError(f"{source} is missing: `python -m bench run --only startup` generates it")
    root = cache / "scan-files" / f"era5-{files}"
    target = root / "era5"
    if not (target / "era5.dstp.xml").exists():
        target.mkdir(parents=True, exist_ok=True)
        for f in sorted(source.glob("era5_*.nc"))[:files]:
            if not (target / f.name).exists():
                shutil.copy2(f, target / f.name)  # (a hard link: the server sees one inode under two names)
        (target / "era5.dstp.xml").write_bytes((source / "era5.dstp.xml").read_bytes())
    return root


@contextlib.contextmanager
def servers(files: list[int]) -> Iterator[dict[tuple[str, int], str]]:
    from bench.dstp_process import serve

    with contextlib.ExitStack() as stack:
        out = {}
        for n in files:
            for config, env in CONFIGS.items():
                srv = stack.enter_context(serve(archive(n), "--data-port", "-1", "--udt-port", "-1", env=env,
                                                timeout=600))
                out[(config, n)] = srv.endpoints["grpc"]
        yield out


def run(quick: bool, repeats: int = 5, files: tuple[int, ...] = (1000, 5000), label: str = "") -> dict[str, Any]:
    import dstp

    files = (100, 200) if quick else files
    repeats = 1 if quick else repeats
    load = f"load average {os.getloadavg()[0]:.2f} at the start on {os.cpu_count()} cores"
    runs: list[dict[str, Any]] = []
    with servers(list(files)) as addresses:
        clients = {k: dstp.connect(a, timeout=600) for k, a in addresses.items()}
        try:
            answers = {k: c.query(SQL, transport="grpc").column(0)[0].as_py() for k, c in clients.items()}
            keys = list(clients)
            for r in range(repeats):
                for k in keys[r % len(keys):] + keys[:r % len(keys)]:
                    started = time.perf_counter()
                    value = clients[k].query(SQL, transport="grpc").column(0)[0].as_py()
                    seconds = time.perf_counter() - started
                    # (an average of floats summed in another order may differ in its last bits)
                    runs.append({"config": k[0], "files": k[1], "seconds": seconds,
                                 "equal": math.isclose(value, answers[k], rel_tol=1e-9)})
        finally:
            for c in clients.values():
                c.close()
    rows: list[dict[str, Any]] = []
    for config in CONFIGS:
        for n in files:
            mine = [r for r in runs if r["config"] == config and r["files"] == n]
            s = median(r["seconds"] for r in mine)
            rows.append({"label": label, "config": config, "files": n, "median_s": round(s, 3),
                         "ms_per_file": round(s / n * 1e3, 4), "same_answer": all(r["equal"] for r in mine)})
    for config in CONFIGS:
        per = {row["files"]: row["ms_per_file"] for row in rows if row["config"] == config}
        for row in rows:
            if row["config"] == config:
                row["per_file_vs_smallest"] = round(row["ms_per_file"] / per[min(files)], 2)
    result = {"label": label, "sql": SQL, "repeats": repeats, "load": load, "load_after": f"{os.getloadavg()[0]:.2f}",
              "rows": rows, "runs": runs}
    if not quick:
        name = f"{NAME}{'-' + label if label else ''}"
        write_json(name, result)
        cols = [("label", "server"), ("config", "cache"), ("files", "files"), ("median_s", "median s"),
                ("ms_per_file", "ms per file"), ("per_file_vs_smallest", "per file vs fewest files"),
                ("same_answer", "same answer every run (to 1e-9)")]
        head = (f"`{SQL}`, medians of {repeats} interleaved rounds after one untimed query per server, loopback "
                f"({load}; {result['load_after']} after). Command: `python -m bench.scan_files --repeats {repeats}"
                f"{' --label ' + label if label else ''}`.\n\n")
        write_markdown(name, "A full scan's cost per file", head + markdown_table(rows, cols) + "\n")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scan_files", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--files", default="1000,5000")
    parser.add_argument("--label", default="")
    args = parser.parse_args(argv)
    from bench.__main__ import exclusive_machine

    with exclusive_machine():
        result = run(False, args.repeats, tuple(int(n) for n in args.files.split(",")), args.label)
    print(json.dumps({k: v for k, v in result.items() if not isinstance(v, (list, dict))}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

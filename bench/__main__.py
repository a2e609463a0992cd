"""Run the benchmarks: ``python -m bench run [--quick] [--only NAME,…]``.

Full runs write JSON, markdown tables and plots into ``bench/results/``;
``--quick`` runs every benchmark at toy size with no timing assertions (CI
runs it so the harness never rots) and writes nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import sys
import time
from pathlib import Path
from typing import Iterator

import platformdirs

from dstp.samples import ensure_samples

SUITES = ("seed_query", "table4", "bulk", "bulk_native", "rotpole", "facades", "tls_cost", "load", "cluster",
          "reductions", "warm", "scan", "startup", "udt_get", "attack", "archive", "listings", "tiles", "dap", "auto_matrix", "stores",
          "wan_stores", "doors", "zarr_edr", "zarr_sources", "xarray_engine")


def samples(quick: bool) -> dict[str, Path]:
    """Return the sample folders the suites use, generating them on first use."""
    cache = Path(platformdirs.user_cache_dir("dstp")) / "bench"
    sizes = ("small",) if quick else ("small", "medium", "large")
    return {s: ensure_samples(cache, s, lambda m: print(m, file=sys.stderr)) for s in sizes}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run benchmarks")
    run.add_argument("--quick", action="store_true", help="toy sizes, no files written (CI smoke test)")
    run.add_argument("--only", default="", help=f"comma-separated subset of: {', '.join(SUITES)}")
    args = parser.parse_args(argv)
    chosen = [s for s in (args.only.split(",") if args.only else SUITES) if s]
    unknown = set(chosen) - set(SUITES)
    if unknown:
        parser.error(f"unknown benchmarks: {', '.join(sorted(unknown))}")
    with exclusive_machine():
        return _run(chosen, args.quick)


@contextlib.contextmanager
def exclusive_machine(path: Path = Path("/tmp/dstp-bench.lock")) -> Iterator[None]:
    """Hold a machine-wide lock so that two benchmark runs never measure each other."""
    with open(path, "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for another benchmark run to finish ({path})", file=sys.stderr)
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _run(chosen: list[str], quick: bool) -> int:
    folders = samples(quick)
    for name in chosen:
        module = __import__(f"bench.{name}", fromlist=["run"])
        started = time.monotonic()
        result = module.run(quick, folders)
        print(json.dumps({"benchmark": name, "seconds": round(time.monotonic() - started, 1),
                          **{k: v for k, v in result.items() if not isinstance(v, (list, dict))}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

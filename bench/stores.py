"""Reading an archive where it lives: local disk vs an S3-compatible server vs an HTTP server with ranges.

Everything runs in one process on loopback (no emulated latency): moto's S3 server (``moto[server]``, SigV4 and
IAM checked) and uvicorn serving the folder with range requests — the servers ``tests/catalog`` uses. The
archive is the ``ccm3`` sample (netCDF-4, deflate+shuffle chunks, noleap; ``small`` in quick mode, ``medium``
else), published three ways: files beside the descriptor, ``<files store="s3" …>``, ``<files store="https" …>``.

Per backend:

* **cold open** — ``Catalog.scan`` with a new catalog index: list the store, read each object's header,
  coordinates and chunk index by ranged GETs (an image of 64 KiB blocks), keep them in the index; the local
  images are then dropped (as an evicted cache), so the queries below read chunks in place;
* **queries** — a slab (one month, a lat/lon box, one variable) and a full scan (``count``/``avg`` over all of
  ``temperature``), each run twice: *cold* (no decoded chunk in memory) and *warm* (the chunk reader's LRU);
  the time, GET requests the server answered, and bytes fetched;
* **restart** — a new process-equivalent ``Catalog.scan`` on the kept index: its time and its requests (the
  goal: no GET, only the listing); then the first slab query after it.

And the two libraries the store could be built on, on the same S3 server: a 1 MiB ranged read (median of 20)
and a listing of 1,000 objects (median of 5), obstore vs fsspec/s3fs.

Results: ``bench/results/stores.{json,md}``. No timing is asserted anywhere (tests/bench/test_stores_quick.py
checks that every measurement runs and that answers agree across backends).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "tests") not in sys.path:
    sys.path.insert(0, str(REPO / "tests"))  # the loopback servers the tests use (tests/store_servers.py)

NAME = "stores"
SLAB = ("select temperature, lat, lon from ccm3 where time >= '1990-05-01' and time < '1990-06-01' "
        "and lat between 20 and 50 and lon between 0 and 60")
SCAN = "select count(*) as n, avg(temperature) as mean from ccm3"


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    out = fn()
    return time.perf_counter() - started, out


def _descriptors(samples: Path, root: Path, store: str | None) -> None:
    xml = (samples / "ccm3" / "ccm3.dstp.xml").read_text()
    (root / "ccm3").mkdir(parents=True)
    if store is None:
        for f in (samples / "ccm3").glob("*.nc"):
            shutil.copy2(f, root / "ccm3" / f.name)  # a link leading outside the folder is not published
    else:
        xml, n = re.subn(r'<files glob="([^"]+)"', rf'<files store="{store}" glob="ccm3/\1"', xml)
        assert n == 1
    (root / "ccm3" / "ccm3.dstp.xml").write_text(xml)


def measure_backend(name: str, samples: Path, work: Path, objects_of: Callable[[], Any] | None,
                    log: Any | None) -> dict[str, Any]:
    """Return one backend's row: cold open, each query cold and warm, restart on the index."""
    from in_process import answer_table

    from dstp.catalog.registry import Catalog
    from dstp.settings import Settings

    settings = Settings(batch_rows=65_536)
    root, index = work / name / "root", work / name / "index.sqlite"
    _descriptors(samples, root, None if objects_of is None else name)

    def requests() -> dict[str, int]:
        return dict(log.counts) if log is not None else {}

    def fetched(objects: Any) -> int:
        return sum(s.stats.bytes for s in objects.stores.values()) if objects is not None else 0

    row: dict[str, Any] = {"backend": name}
    if log is not None:
        log.reset()
    objects = objects_of() if objects_of is not None else None
    row["cold_open_s"], catalog = _timed(lambda: Catalog.scan(root, index=index, objects=objects))
    assert not catalog.problems, catalog.problems
    row["cold_open_requests"] = requests()
    row["cold_open_bytes"] = fetched(objects)
    if objects is not None:
        shutil.rmtree(objects.cache_dir, ignore_errors=True)  # evicted: the queries read by ranges
    answers: dict[str, Any] = {}
    for label, sql in (("slab", SLAB), ("scan", SCAN)):
        for run in ("cold", "warm"):
            if log is not None:
                log.reset()
            before = fetched(objects)
            seconds, table = _timed(lambda: answer_table(catalog, sql, settings))
            row[f"{label}_{run}_s"] = seconds
            row[f"{label}_{run}_gets"] = requests().get("GET", 0) if log is not None else None
            row[f"{label}_{run}_bytes"] = fetched(objects) - before if objects is not None else None
            answers[label] = table
        row[f"{label}_rows"] = answers[label].num_rows
    catalog.close()
    if log is not None:
        log.reset()
    objects = objects_of() if objects_of is not None else None
    row["restart_s"], again = _timed(lambda: Catalog.scan(root, index=index, objects=objects))
    row["restart_requests"] = requests()
    if log is not None:
        log.reset()
    row["first_query_after_restart_s"], _ = _timed(lambda: answer_table(again, SLAB, settings))
    row["first_query_after_restart_requests"] = requests()
    row["whole_copies_after_restart"] = objects.fetched if objects is not None else 0
    again.close()
    row["answers"] = {k: _digest(v) for k, v in answers.items()}
    return row


def _digest(table: Any) -> str:
    import hashlib

    import pyarrow as pa

    sorted_table = table.sort_by([(c, "ascending") for c in table.column_names])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, sorted_table.schema) as writer:
        writer.write_table(sorted_table)
    return hashlib.sha256(sink.getvalue().to_pybytes()).hexdigest()[:16]


def chunk_bytes(paths: list[Path], variable: str) -> int:
    """Return the stored bytes of all of ``variable``'s chunks in ``paths``, as h5py lists them (in dstp's listing
    helper process: h5py's HDF5 never enters this one)."""
    from dstp._chunk_index import MAX_LISTED_CHUNKS, file_identity
    from dstp.catalog.chunk_lister import LISTER

    total = 0
    for path in paths:
        listing = LISTER.listing(path, file_identity(os.stat(path)), variable, MAX_LISTED_CHUNKS)
        assert listing is not None, path
        total += sum(size for _, size, _ in listing[4].values())
    return total


def libraries(server: Any, repeats: int) -> dict[str, Any]:
    """Return the medians of a 1 MiB ranged read and of a listing of 1,000 objects, obstore vs fsspec/s3fs."""
    import obstore
    import s3fs
    from obstore.store import S3Store

    client = server.client()
    client.create_bucket(Bucket="bench-lib")
    client.put_object(Bucket="bench-lib", Key="big.bin", Body=os.urandom(8 << 20))
    for i in range(1000):
        client.put_object(Bucket="bench-lib", Key=f"many/{i:05d}.nc", Body=b"x")
    store = S3Store("bench-lib", endpoint=server.endpoint, region="us-east-1", access_key_id=server.access_key,
                    secret_access_key=server.secret_key, client_options={"allow_http": True})
    fs = s3fs.S3FileSystem(key=server.access_key, secret=server.secret_key,
                           client_kwargs={"endpoint_url": server.endpoint, "region_name": "us-east-1"})
    out: dict[str, Any] = {}
    span = 1 << 20

    def obstore_read() -> int:
        return len(obstore.get_range(store, "big.bin", start=3 << 20, length=span))

    def s3fs_read() -> int:
        return len(fs.cat_file("bench-lib/big.bin", start=3 << 20, end=(3 << 20) + span))

    def obstore_list() -> int:
        return sum(len(b) for b in obstore.list(store, "many", chunk_size=1000))

    def s3fs_list() -> int:
        fs.invalidate_cache()
        return len(fs.ls("bench-lib/many", detail=False))

    for label, fn, n in (("obstore_range_1MiB", obstore_read, repeats * 4), ("s3fs_range_1MiB", s3fs_read, repeats * 4),
                         ("obstore_list_1000", obstore_list, repeats), ("s3fs_list_1000", s3fs_list, repeats)):
        fn()  # connections and credentials set up, untimed
        times = []
        for _ in range(n):
            seconds, got = _timed(fn)
            times.append(seconds)
        assert got in (span, 1000), (label, got)
        out[f"{label}_s"] = statistics.median(times)
    return out


def run(quick: bool, samples: dict[str, Path], repeats: int = 5) -> dict[str, Any]:
    """Return the results; in full mode also write bench/results/stores.{json,md}."""
    from bench.report import write_json, write_markdown
    from store_servers import RangeHTTPServer, S3Server

    from dstp.catalog.objects import ObjectFiles
    from dstp.catalog.stores import StoreConfig, open_store

    started = time.monotonic()
    size = "small" if quick else "medium"
    repeats = 1 if quick else repeats
    with tempfile.TemporaryDirectory(prefix="dstp-bench-stores-") as tmp:
        work = Path(tmp)
        archive = samples.get(size)
        if archive is None:
            from dstp.samples import generate_samples

            archive = work / "samples"
            generate_samples(archive, size)
        (archive / "manifest.txt").write_text("\n".join(p.relative_to(archive).as_posix()
                                                        for p in sorted((archive / "ccm3").glob("*.nc"))) + "\n")
        s3 = S3Server()
        http = RangeHTTPServer(archive)
        try:
            s3.client().create_bucket(Bucket="archive")
            s3.upload_tree("archive", archive / "ccm3", "ccm3")
            os.environ["DSTP_BENCH_KEY"], os.environ["DSTP_BENCH_SECRET"] = s3.access_key, s3.secret_key
            s3_config = StoreConfig("s3", "s3://archive", endpoint=s3.endpoint, region="us-east-1",
                                    access_key_id_env="DSTP_BENCH_KEY", secret_access_key_env="DSTP_BENCH_SECRET")
            http_config = StoreConfig("https", http.url, manifest="manifest.txt")
            rows = [measure_backend("local", archive, work, None, None)]
            for config, log in ((s3_config, s3.log), (http_config, http.log)):
                def objects_of(config: StoreConfig = config) -> ObjectFiles:
                    return ObjectFiles({config.name: open_store(config)}, work / config.name / "cache")
                rows.append(measure_backend(config.name, archive, work, objects_of, log))
            libs = libraries(s3, repeats)
        finally:
            http.stop()
            s3.stop()
        archive_bytes = sum(p.stat().st_size for p in (archive / "ccm3").glob("*.nc"))
        needed = chunk_bytes(sorted((archive / "ccm3").glob("*.nc")), "T")
    for row in rows[1:]:
        # the slab's chunks are a subset of the scan's and stay decoded in memory: together they read each T chunk
        row["scan_fetched_over_needed"] = (row["slab_cold_bytes"] + row["scan_cold_bytes"]) / needed
    agree = all(r["answers"] == rows[0]["answers"] for r in rows)
    result: dict[str, Any] = {"size": size, "archive_bytes": archive_bytes, "temperature_chunk_bytes": needed,
                              "rows": rows, "libraries": libs,
                              "answers_agree": agree, "suite_seconds": time.monotonic() - started}
    if not quick:
        write_json(NAME, result)
        write_markdown(NAME, "Archives where they live: local vs S3 (moto) vs HTTPS ranges, loopback",
                       markdown(result))
    return result


def markdown(result: dict[str, Any]) -> str:
    def req(r: dict[str, int]) -> str:
        return ", ".join(f"{k} {v}" for k, v in sorted(r.items())) or "—"

    def mb(n: int | None) -> str:
        return "—" if n is None else f"{n / 2**20:.2f}"

    lines = [f"ccm3 `{result['size']}` samples ({result['archive_bytes'] / 2**20:.1f} MiB of netCDF-4), one process, "
             "loopback (no added latency). Answers equal across backends: "
             f"{'yes' if result['answers_agree'] else 'NO'}. Bytes fetched by the slab and the scan together over "
             f"the stored bytes of every `temperature` chunk ({result['temperature_chunk_bytes'] / 2**20:.2f} MiB): "
             + ", ".join(f"{r['backend']} {r['scan_fetched_over_needed']:.3f}" for r in result["rows"][1:]) + ".", "",
             "| backend | cold open s (requests; MiB) | slab cold s (GETs; MiB) | slab warm s | scan cold s (GETs; MiB) "
             "| scan warm s | restart s (requests) | first query after restart s (requests) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        lines.append(
            f"| {r['backend']} | {r['cold_open_s']:.2f} ({req(r['cold_open_requests'])}; {mb(r['cold_open_bytes'])}) "
            f"| {r['slab_cold_s']:.3f} ({r['slab_cold_gets']}; {mb(r['slab_cold_bytes'])}) | {r['slab_warm_s']:.3f} "
            f"| {r['scan_cold_s']:.3f} ({r['scan_cold_gets']}; {mb(r['scan_cold_bytes'])}) | {r['scan_warm_s']:.3f} "
            f"| {r['restart_s']:.2f} ({req(r['restart_requests'])}) "
            f"| {r['first_query_after_restart_s']:.3f} ({req(r['first_query_after_restart_requests'])}) |")
    libs = result["libraries"]
    lines += ["", "Store libraries on the same S3 server (median):", "",
              "| library | 1 MiB ranged read ms | list 1,000 objects ms |", "|---|---|---|",
              f"| obstore | {libs['obstore_range_1MiB_s'] * 1e3:.1f} | {libs['obstore_list_1000_s'] * 1e3:.1f} |",
              f"| fsspec/s3fs | {libs['s3fs_range_1MiB_s'] * 1e3:.1f} | {libs['s3fs_list_1000_s'] * 1e3:.1f} |"]
    return "\n".join(lines)


if __name__ == "__main__":
    print(json.dumps(run("--quick" in sys.argv, {}), indent=2, default=str))

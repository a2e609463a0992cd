"""An ERA5-like archive in an S3 server across a WAN: dstp vs xarray + s3fs/h5netcdf vs kerchunk + xarray (issue 36).

The archive: 12 monthly netCDF-4 files of ``t2m(time, lat, lon)``, 6-hourly on a 2° grid (91 × 180), int16
packed with each file's own scale and offset and time units (``hours since`` its month), deflate + shuffle in
chunks of (24, 46, 90) — as ERA5's netCDF is kept in S3. It is put into moto's S3 server (``python -m
moto.server``) in the server namespace of the WAN emulator (``bench/wan``: two network namespaces and a relay
that delays every packet; 1 Gb/s, no loss), at 20 and 80 ms RTT. Every reader runs in the client namespace,
so each of its requests crosses the path:

* **dstp** — the catalog over ``<files store="era5" …>`` (what ``dstp serve`` runs next to its users' clients;
  here in one process, answering through the same query engine): *cold* (a new catalog index: listing and the
  headers by ranges) and *warm* (a restart with the index kept: one LIST, no header read);
* **xarray + s3fs** — ``xr.open_mfdataset`` of the 12 objects opened through s3fs, ``engine="h5netcdf"``
  (s3fs's and xarray's defaults);
* **kerchunk + xarray** — references made beforehand by ``kerchunk.hdf.SingleHdf5ToZarr`` and
  ``MultiZarrToZarr`` (from the local files, not measured), opened as a Zarr store over s3fs.

Three questions: a **point** time series (one grid point, the whole year), a **box** over one month (20° × 40°),
a **threshold count** over the whole archive (``t2m > 300 K``). Each (reader, question) runs in a fresh process
(``python -m bench.wan_stores worker …``): the open and the question on the reader's own clock, and the whole
process (Python start and imports included) on the driver's; the readers take turns within each repeat, and
medians are reported. The answers are compared across readers (counts, sums).

Results: ``bench/results/wan_stores.{json,md}``. Needs root (network namespaces). ``--quick``: 2 files, 20 ms, one
repeat, nothing written.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
NAME = "wan_stores"
WAN_NAME = "dstpwanstores"
PORT = 9000
KEY, SECRET = "AKIAWANBENCH00000000", "wan-bench-secret"
BUCKET = "era5"
QUESTIONS = ("point", "box", "count")
READERS = ("dstp_cold", "dstp_warm", "dstp_warm_no_read_ahead", "xarray_s3fs", "kerchunk")
#: dstp readers with settings of their own: ``dstp_warm_no_read_ahead`` is the warm reader without the store
#: read-ahead (``store_read_ahead_bytes`` 0: each block's chunks fetched when the block is read, as before it
#: existed) — the "before" of the read-ahead, measured interleaved with the "after" in the same run.
READER_SETTINGS: dict[str, dict[str, Any]] = {"dstp_warm_no_read_ahead": {"store_read_ahead_bytes": 0}}
SQL = {
    "point": "select time, t2m from era5 where lat = 40 and lon = 10",
    "box": ("select time, lat, lon, t2m from era5 where time >= '2020-03-01' and time < '2020-04-01' "
            "and lat between 30 and 50 and lon between 0 and 40"),
    "count": "select count(*) as n from era5 where t2m > 300",
}


# -- the archive --------------------------------------------------------------------------------------------

def write_archive(folder: Path, months: int) -> list[Path]:
    import netCDF4
    import numpy as np

    folder.mkdir(parents=True, exist_ok=True)
    lat = np.linspace(-90, 90, 91)
    lon = np.arange(0, 360, 2.0)
    rng = np.random.default_rng(36)
    paths = []
    for m in range(1, months + 1):
        days = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][m - 1]
        steps = days * 4
        hours = np.arange(steps) * 6.0
        base = 288 - 30 * np.abs(np.sin(np.deg2rad(lat)))[:, None] + 5 * np.cos(np.deg2rad(lon))[None, :]
        season = 8 * np.sin(2 * np.pi * (m - 4) / 12) * np.sign(lat)[:, None]
        t2m = (base + season)[None] + 3 * np.sin(2 * np.pi * hours / 24)[:, None, None] + \
            rng.normal(0, 2, (steps, lat.size, lon.size))
        lo, hi = float(t2m.min()), float(t2m.max())
        scale = (hi - lo) / 65000
        offset = (hi + lo) / 2
        path = folder / f"era5_t2m_2020{m:02d}.nc"
        with netCDF4.Dataset(path, "w") as nc:
            nc.createDimension("time", None)
            nc.createDimension("lat", lat.size)
            nc.createDimension("lon", lon.size)
            t = nc.createVariable("time", "f8", ("time",))
            t.units, t.calendar, t.standard_name = f"hours since 2020-{m:02d}-01 00:00:00", "standard", "time"
            t[:] = hours
            for name, values, units in (("lat", lat, "degrees_north"), ("lon", lon, "degrees_east")):
                v = nc.createVariable(name, "f8", (name,))
                v.units, v.standard_name = units, {"lat": "latitude", "lon": "longitude"}[name]
                v[:] = values
            v = nc.createVariable("t2m", "i2", ("time", "lat", "lon"), zlib=True, complevel=1, shuffle=True,
                                  chunksizes=(24, 46, 90), fill_value=-32767)
            v.scale_factor, v.add_offset = np.float64(scale), np.float64(offset)
            v.units, v.long_name = "K", "2 metre temperature"
            v.set_auto_maskandscale(False)
            v[:] = np.round((t2m - offset) / scale).astype("i2")
        paths.append(path)
    return paths


# -- workers (one process each, in the client namespace) ----------------------------------------------------

def _env(endpoint: str) -> None:
    os.environ.update(AWS_ACCESS_KEY_ID=KEY, AWS_SECRET_ACCESS_KEY=SECRET, AWS_DEFAULT_REGION="us-east-1",
                      AWS_ENDPOINT_URL=endpoint)


def worker_upload(spec: dict[str, Any]) -> dict[str, Any]:
    import boto3

    _env(spec["endpoint"])
    client = boto3.client("s3", endpoint_url=spec["endpoint"])
    deadline = time.monotonic() + 60
    while True:
        try:
            client.create_bucket(Bucket=BUCKET)
            break
        except Exception:  # noqa: BLE001 - the server may not listen yet
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    for path in sorted(Path(spec["folder"]).glob("*.nc")):
        client.upload_file(str(path), BUCKET, path.name)
    return {"uploaded": len(list(Path(spec["folder"]).glob("*.nc")))}


def worker_refs(spec: dict[str, Any]) -> dict[str, Any]:
    """Write the kerchunk references of the local files, naming the objects (s3://era5/NAME)."""
    from kerchunk.combine import MultiZarrToZarr
    from kerchunk.hdf import SingleHdf5ToZarr

    singles, urls = [], {}
    for path in sorted(Path(spec["folder"]).glob("*.nc")):
        with open(path, "rb") as f:
            singles.append(SingleHdf5ToZarr(f, str(path), inline_threshold=300).translate())
        urls[str(path)] = f"s3://{BUCKET}/{path.name}"
    # combined from the local files (MultiZarrToZarr reads the time values), then pointed at the objects
    combined = MultiZarrToZarr(singles, concat_dims=["time"], identical_dims=["lat", "lon"],
                               coo_map={"time": "cf:time"}).translate()  # each file has its own time units
    for key, ref in combined["refs"].items():
        if isinstance(ref, list) and ref and ref[0] in urls:
            combined["refs"][key] = [urls[ref[0]], *ref[1:]]
    Path(spec["out"]).write_text(json.dumps(combined))
    return {"refs": len(combined.get("refs", {}))}


def _digest(question: str, values: Any) -> dict[str, Any]:
    import numpy as np

    arr = np.asarray(values, dtype="f8")
    if question == "count":
        return {"n": int(arr.reshape(-1)[0])}
    finite = arr[np.isfinite(arr)]
    return {"n": int(finite.size), "sum": round(float(finite.sum()), 2)}


def worker_dstp(spec: dict[str, Any]) -> dict[str, Any]:
    sys.path.insert(0, str(REPO / "tests"))
    from in_process import answer_table

    from dstp.catalog.objects import ObjectFiles
    from dstp.catalog.registry import Catalog
    from dstp.catalog.stores import StoreConfig, open_store
    from dstp.settings import Settings

    _env(spec["endpoint"])
    config = StoreConfig("era5", f"s3://{BUCKET}", endpoint=spec["endpoint"], region="us-east-1",
                         access_key_id_env="AWS_ACCESS_KEY_ID", secret_access_key_env="AWS_SECRET_ACCESS_KEY")
    started = time.perf_counter()
    store = open_store(config)
    objects = ObjectFiles({"era5": store}, Path(spec["cache"]))
    catalog = Catalog.scan(Path(spec["root"]), index=Path(spec["index"]), objects=objects)
    opened = time.perf_counter()
    assert not catalog.problems, catalog.problems
    open_gets, open_bytes = store.stats.gets, store.stats.bytes
    open_lists = store.stats.lists
    table = answer_table(catalog, SQL[spec["question"]], Settings(batch_rows=65_536, **spec.get("settings", {})))
    done = time.perf_counter()
    column = "n" if spec["question"] == "count" else "t2m"
    out = {"open_s": opened - started, "query_s": done - opened, "open_gets": open_gets, "open_bytes": open_bytes,
           "query_gets": store.stats.gets - open_gets, "query_bytes": store.stats.bytes - open_bytes,
           "lists": store.stats.lists, "open_lists": open_lists,
           # what the read-ahead measured of the path: least time to a first byte, most bytes/s, its window
           "link_latency_s": store.link.latency_s, "link_rate_Bps": store.link.rate_Bps,
           "link_window_bytes": store.link.window(),
           "answer": _digest(spec["question"], table.column(column).to_numpy())}
    catalog.close()
    objects.close()
    return out


def _xarray_question(ds: Any, question: str) -> Any:
    if question == "point":
        return ds["t2m"].sel(lat=40, lon=10).values
    if question == "box":
        return ds["t2m"].sel(time=slice("2020-03-01", "2020-03-31T23:59"), lat=slice(30, 50), lon=slice(0, 40)).values
    return [int((ds["t2m"] > 300).sum().values)]


def worker_xarray(spec: dict[str, Any]) -> dict[str, Any]:
    import s3fs
    import xarray as xr

    _env(spec["endpoint"])
    started = time.perf_counter()
    fs = s3fs.S3FileSystem(key=KEY, secret=SECRET, endpoint_url=spec["endpoint"])
    files = [fs.open(f"{BUCKET}/{name}", "rb") for name in spec["names"]]
    ds = xr.open_mfdataset(files, engine="h5netcdf", combine="by_coords")
    opened = time.perf_counter()
    values = _xarray_question(ds, spec["question"])
    done = time.perf_counter()
    return {"open_s": opened - started, "query_s": done - opened, "answer": _digest(spec["question"], values)}


def worker_kerchunk(spec: dict[str, Any]) -> dict[str, Any]:
    import xarray as xr

    _env(spec["endpoint"])
    started = time.perf_counter()
    refs = json.loads(Path(spec["refs"]).read_text())
    ds = xr.open_dataset(refs, engine="kerchunk",
                         storage_options={"remote_protocol": "s3",
                                          "remote_options": {"key": KEY, "secret": SECRET,
                                                             "endpoint_url": spec["endpoint"]}})
    opened = time.perf_counter()
    values = _xarray_question(ds, spec["question"])
    done = time.perf_counter()
    return {"open_s": opened - started, "query_s": done - opened, "answer": _digest(spec["question"], values)}


def worker_needed(spec: dict[str, Any]) -> dict[str, Any]:
    """Return the stored bytes of the ``t2m`` chunks each question needs (h5py, independently of dstp): the point
    (lat 40, lon 10) and the box (lat 30–50, lon 0–40) lie in the chunk at lat index 46, lon index 0."""
    import h5py

    needed = {"point": 0, "box": 0, "count": 0}
    for path in sorted(Path(spec["folder"]).glob("*.nc")):
        with h5py.File(path, "r") as f:
            infos: list[Any] = []
            f["t2m"].id.chunk_iter(infos.append)
        for info in infos:
            needed["count"] += info.size
            if tuple(info.chunk_offset[1:]) == (46, 0):
                needed["point"] += info.size
                needed["box"] += info.size if path.name.endswith("202003.nc") else 0
    return needed


WORKERS = {"upload": worker_upload, "refs": worker_refs, "needed": worker_needed, "dstp": worker_dstp, "xarray_s3fs": worker_xarray,
           "kerchunk": worker_kerchunk}


# -- the driver ---------------------------------------------------------------------------------------------

def _worker_argv(kind: str, spec: dict[str, Any]) -> list[str]:
    return [sys.executable, "-m", "bench.wan_stores", "worker", kind, json.dumps(spec)]


def _run(argv: list[str], timeout: float = 900) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=REPO)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        return wall, {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}
    return wall, json.loads(done.stdout.strip().splitlines()[-1])


def _descriptor(folder: Path, root: Path) -> None:
    """Write the catalog folder: the descriptor ``dstp publish`` drafts, naming the store's objects."""
    from dstp.catalog.publish import publish

    publish(sorted(folder.glob("*.nc")), "era5")
    xml = (folder / "era5.dstp.xml").read_text()
    import re

    xml, n = re.subn(r'<files glob="[^"]+"', '<files store="era5" glob="era5_t2m_*.nc"', xml)
    assert n == 1
    (root / "era5").mkdir(parents=True, exist_ok=True)
    (root / "era5" / "era5.dstp.xml").write_text(xml)


def measure_rtt(path: Any, rtt: float, archive: Path, work: Path, repeats: int,
                readers: tuple[str, ...] = READERS) -> dict[str, Any]:
    endpoint = f"http://{path.server_addr}:{PORT}"
    server = path.run_in(path.server_ns, [sys.executable, "-m", "moto.server", "-H", path.server_addr, "-p",
                                          str(PORT)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _, up = _run(path.exec_argv(path.client_ns, _worker_argv("upload", {"endpoint": endpoint,
                                                                          "folder": str(archive)})))
        assert "error" not in up, up
        root = work / "root"
        names = sorted(p.name for p in archive.glob("*.nc"))
        base = {"endpoint": endpoint, "root": str(root), "names": names, "refs": str(work / "refs.json")}
        # the warm index, made once (not measured)
        _, warm = _run(path.exec_argv(path.client_ns, _worker_argv("dstp", {
            **base, "question": "point", "index": str(work / "warm.sqlite"), "cache": str(work / "warm-cache")})))
        assert "error" not in warm, warm
        runs: list[dict[str, Any]] = []
        for rep in range(repeats):
            for question in QUESTIONS:
                order = readers[rep % len(readers):] + readers[:rep % len(readers)]  # take turns
                for reader in order:
                    spec: dict[str, Any] = {**base, "question": question}
                    kind = reader
                    if reader.startswith("dstp"):
                        kind = "dstp"
                        cold = reader == "dstp_cold"
                        spec["settings"] = READER_SETTINGS.get(reader, {})
                        n = len(runs)
                        spec["index"] = str(work / (f"cold-{n}.sqlite" if cold else "warm.sqlite"))
                        spec["cache"] = str(work / (f"cold-cache-{n}" if cold else "warm-cache"))
                        shutil.rmtree(work / "warm-cache", ignore_errors=True)  # no local image or copy kept
                    wall, out = _run(path.exec_argv(path.client_ns, _worker_argv(kind, spec)))
                    runs.append({"rtt_ms": rtt, "repeat": rep, "question": question, "reader": reader,
                                 "process_s": wall, **out})
                    print(json.dumps(runs[-1]), file=sys.stderr)
        return {"rtt_ms": rtt, "runs": runs}
    finally:
        server.terminate()
        server.wait(timeout=10)


def summarize(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from bench.report import median

    rows = []
    for rtt in sorted({r["rtt_ms"] for r in runs}):
        for question in QUESTIONS:
            for reader in READERS:
                mine = [r for r in runs if r["rtt_ms"] == rtt and r["question"] == question and r["reader"] == reader]
                ok = [r for r in mine if "error" not in r]
                row: dict[str, Any] = {"rtt_ms": rtt, "question": question, "reader": reader, "runs": len(mine),
                                       "errors": sorted({r["error"] for r in mine if "error" in r})}
                if ok:
                    row.update({k: median(r[k] for r in ok) for k in ("open_s", "query_s", "process_s")})
                    row["open_plus_query_s"] = median(r["open_s"] + r["query_s"] for r in ok)
                    for k in ("open_gets", "query_gets", "open_bytes", "query_bytes"):
                        if k in ok[0]:
                            row[k] = median(r[k] for r in ok)
                    row["answer"] = ok[0]["answer"]
                rows.append(row)
    return rows


def markdown(result: dict[str, Any]) -> str:
    lines = [f"12 monthly ERA5-like netCDF-4 files ({result['archive_bytes'] / 2**20:.1f} MiB) in moto's S3 server "
             "behind the WAN emulator (1 Gb/s, no loss); each reader in a fresh process in the client namespace; "
             f"medians of {result['repeats']} interleaved repeats. *own* = open + question on the reader's clock; "
             "*process* = the whole process (Python start and imports included). Answers equal to xarray + s3fs's: "
             + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in result["answers_agree"].items()) + ".", "",
             "| RTT | question | reader | open s | question s | own s | process s | dstp GETs open/question | "
             "dstp bytes fetched ÷ needed | vs xarray+s3fs (own) | vs xarray+s3fs (process) | answer = xarray's |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in result["rows"]:
        if row["runs"] == 0:
            continue  # not measured at this RTT (the read-ahead reader: 80 ms only, bench.wan_stores extra)
        if "open_s" not in row:
            lines.append(f"| {row['rtt_ms']:g} ms | {row['question']} | {row['reader']} | failed: "
                         f"{'; '.join(row['errors'])[:120]} | | | | | | | | |")
            continue
        ref = next((r for r in result["rows"] if r["rtt_ms"] == row["rtt_ms"] and r["question"] == row["question"]
                    and r["reader"] == "xarray_s3fs" and "open_s" in r), None)
        speedup = f"{ref['open_plus_query_s'] / row['open_plus_query_s']:.1f}×" if ref else "—"
        whole = f"{ref['process_s'] / row['process_s']:.1f}×" if ref else "—"
        gets = f"{row['open_gets']:g}/{row['query_gets']:g}" if "open_gets" in row else "—"
        ratio = f"{row['fetched_over_needed']:.3f}" if "fetched_over_needed" in row else "—"
        lines.append(f"| {row['rtt_ms']:g} ms | {row['question']} | {row['reader']} | {row['open_s']:.2f} | "
                     f"{row['query_s']:.2f} | {row['open_plus_query_s']:.2f} | {row['process_s']:.2f} | {gets} | "
                     f"{ratio} | {speedup} | {whole} | {'yes' if row['answer_equals_xarray'] else 'NO'} |")
    from bench.report import median

    for rtt in sorted({r["rtt_ms"] for r in result["runs"]}):
        warm = [r for r in result["runs"] if r["rtt_ms"] == rtt and r["reader"] == "dstp_warm" and "open_s" in r
                and r.get("link_latency_s") is not None]
        if warm:
            lines += ["", f"At {rtt:g} ms, dstp_warm before its first chunk GET: {median(r['open_lists'] for r in warm):g} "
                      f"LIST, {median(r['open_gets'] for r in warm):g} GET; the path as its GETs measured it (median "
                      f"of {len(warm)} runs): least time to a first byte {median(r['link_latency_s'] for r in warm) * 1e3:.0f} ms, "
                      f"most delivered {median(r['link_rate_Bps'] for r in warm) / 2**20:.1f} MiB/s, read-ahead window "
                      f"{median(r['link_window_bytes'] for r in warm) / 2**20:.0f} MiB at the end."]
    extras = sorted({(r["reader"], r["rtt_ms"]) for r in result["runs"] if r.get("extra")})
    if extras:
        lines += ["", "Measured afterwards, in a window of its own (`python -m bench.wan_stores extra RTT REPEATS "
                  "READER`), against the other readers' medians above: "
                  + ", ".join(f"{reader} at {rtt:g} ms" for reader, rtt in extras) + "."]
    return "\n".join(lines) + "\n"


def run(quick: bool, samples: dict[str, Path], repeats: int = 3, wan_name: str = WAN_NAME) -> dict[str, Any]:
    from bench.report import write_json, write_markdown
    from bench.wan import WanPath

    started = time.monotonic()
    rtts = (20.0,) if quick else (20.0, 80.0)
    repeats = 1 if quick else repeats
    with tempfile.TemporaryDirectory(prefix="dstp-bench-wan-stores-") as tmp:
        work = Path(tmp)
        archive = work / "archive"
        write_archive(archive, 2 if quick else 12)
        _descriptor(archive, work / "root")
        _, refs = _run(_worker_argv("refs", {"folder": str(archive), "out": str(work / "refs.json")}))
        _, needed = _run(_worker_argv("needed", {"folder": str(archive)}))
        runs: list[dict[str, Any]] = []
        paths: list[dict[str, Any]] = []
        for rtt in rtts:
            with WanPath.up(rtt_ms=rtt, rate_bps=1e9, loss=0.0, name=wan_name) as path:
                paths.append({"rtt_ms": rtt, "tcp": path.tcp, "relay": path.relay_kind})
                runs += measure_rtt(path, rtt, archive, work, repeats)["runs"]
        archive_bytes = sum(p.stat().st_size for p in archive.glob("*.nc"))
    result = finish(runs, needed)
    result.update({"archive_bytes": archive_bytes, "repeats": repeats, "refs": refs, "paths": paths,
                   "suite_seconds": time.monotonic() - started})
    if not quick:
        write_json(NAME, result)
        write_markdown(NAME, "An ERA5-like archive in S3 across a WAN: dstp vs xarray + s3fs vs kerchunk",
                       markdown(result))
    return result


def finish(runs: list[dict[str, Any]], needed: dict[str, Any]) -> dict[str, Any]:
    """Return the rows (medians), each answer checked against xarray's, dstp's bytes against the chunks needed."""
    rows = summarize(runs)
    for row in rows:
        if "query_bytes" in row and needed.get(row["question"]):
            row["fetched_over_needed"] = row["query_bytes"] / needed[row["question"]]
    for row in rows:  # xarray on the objects is the reference (it decodes each file on its own)
        ref = next((r for r in rows if r["rtt_ms"] == row["rtt_ms"] and r["question"] == row["question"]
                    and r["reader"] == "xarray_s3fs"), {})
        row["answer_equals_xarray"] = "answer" in row and row["answer"] == ref.get("answer")
    agree = {reader: all(r["answer_equals_xarray"] for r in rows if r["reader"] == reader and "answer" in r)
             for reader in READERS}
    return {"rows": rows, "runs": runs, "needed_bytes": needed, "answers_agree": agree}


def extra(rtt: float, readers: tuple[str, ...], repeats: int) -> dict[str, Any]:
    """Run ``readers`` once more at ``rtt`` (interleaved, as in :func:`run`) and add their runs to
    ``bench/results/wan_stores.json``; :func:`rewrite` then recomputes its rows."""
    from bench.report import RESULTS
    from bench.wan import WanPath

    saved = json.loads((RESULTS / f"{NAME}.json").read_text())
    with tempfile.TemporaryDirectory(prefix="dstp-bench-wan-stores-") as tmp:
        work = Path(tmp)
        archive = work / "archive"
        write_archive(archive, 12)
        _descriptor(archive, work / "root")
        with WanPath.up(rtt_ms=rtt, rate_bps=1e9, loss=0.0, name=WAN_NAME) as path:
            runs = measure_rtt(path, rtt, archive, work, repeats, readers)["runs"]
    for r in runs:
        r["extra"] = True  # measured after the others, in a window of its own
    saved["runs"] = [r for r in saved["runs"] if not (r["rtt_ms"] == rtt and r["reader"] in readers)] + runs
    (RESULTS / f"{NAME}.json").write_text(json.dumps(saved, indent=2, default=str) + "\n")
    return saved


def rewrite() -> dict[str, Any]:
    """Recompute the rows and the table of ``bench/results/wan_stores.json`` from its runs (no WAN: the archive is
    written again, the same bytes, to count the chunks each question needs)."""
    from bench.report import RESULTS, write_markdown

    saved = json.loads((RESULTS / f"{NAME}.json").read_text())
    with tempfile.TemporaryDirectory(prefix="dstp-bench-wan-stores-") as tmp:
        archive = Path(tmp) / "archive"
        write_archive(archive, 12)
        assert sum(p.stat().st_size for p in archive.glob("*.nc")) == saved["archive_bytes"]
        _, needed = _run(_worker_argv("needed", {"folder": str(archive)}))
    saved.update(finish(saved["runs"], needed))
    (RESULTS / f"{NAME}.json").write_text(json.dumps(saved, indent=2, default=str) + "\n")
    write_markdown(NAME, "An ERA5-like archive in S3 across a WAN: dstp vs xarray + s3fs vs kerchunk", markdown(saved))
    return saved


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "worker":
        print(json.dumps(WORKERS[sys.argv[2]](json.loads(sys.argv[3]))))
    elif sys.argv[1:2] == ["extra"]:  # extra RTT_MS REPEATS READER…
        extra(float(sys.argv[2]), tuple(sys.argv[4:]), int(sys.argv[3]))
    elif sys.argv[1:] == ["rewrite"]:
        print(json.dumps(rewrite()["answers_agree"]))
    else:
        print(json.dumps({k: v for k, v in run("--quick" in sys.argv, {}).items() if k != "runs"}, default=str))

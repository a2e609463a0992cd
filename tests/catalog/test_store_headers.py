"""The first look at a netCDF-4 object of a store reads its header, coordinates and chunk indexes by ranged GETs
(an image of the object's metadata that netCDF-C opens), not the whole object; what the image does not hold is
read by ranges (compressed chunks) or from a whole copy fetched then — every answer as xarray's on local files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from in_process import answer_table
from oracle import assert_same_records, frame, run_sql
from store_servers import S3Server
from test_store_catalog import s3_store, store_catalog

from dstp.catalog.objects import ObjectFiles
from dstp.catalog.registry import Catalog
from dstp.catalog.stores import open_store
from dstp.settings import Settings

SETTINGS = Settings(batch_rows=4096)

#: Run in a process of its own: h5py's HDF5 never shares a process with netCDF4's.
_CHUNK_BYTES = """
import h5py, json, sys
total = 0
def add(name, obj):
    global total
    if isinstance(obj, h5py.Dataset) and obj.chunks is not None:
        total += obj.id.get_storage_size()
for path in sys.argv[1:]:
    with h5py.File(path, "r") as f:
        f.visititems(add)
print(json.dumps(total))
"""


def data_chunk_bytes(paths: list[Path]) -> int:
    """Return the bytes of all the chunks of all chunked variables of ``paths`` (h5py, independently of dstp)."""
    out = subprocess.run([sys.executable, "-c", _CHUNK_BYTES, *map(str, paths)], check=True, capture_output=True)
    return int(json.loads(out.stdout))


def test_first_indexing_of_netcdf4_objects_fetches_far_less_than_their_chunks(samples: Path, s3: S3Server,
                                                                               tmp_path: Path) -> None:
    files = sorted((samples / "ccm3").glob("*.nc"))
    chunks = data_chunk_bytes(files)
    s3.log.reset()
    catalog = store_catalog(samples, tmp_path / "root", [s3_store(s3)], datasets=("ccm3",))
    try:
        assert not catalog.problems, catalog.problems
        objects = catalog.handles.objects
        assert objects is not None
        fetched = objects.stores["models"].stats.bytes
        assert objects.fetched == 0, "a whole copy was fetched to read a netCDF-4 header"
        assert objects.imaged == len(files)
        assert 0 < fetched < chunks / 4, (fetched, chunks)
        assert s3.log.counts["GET"] <= 2 * len(files), s3.log.counts  # a 64 KiB block or two per file
        # every answer still is xarray's on the local files
        for sql in ("select temperature, time from ccm3 where time >= '1990-06-01' and time < timestamp '1990-09-01'",
                    "select lat, lon, time, temperature from ccm3 where lev > 900 and lat between -30 and 30"):
            assert_same_records(answer_table(catalog, sql, SETTINGS),
                                run_sql(frame(samples, "ccm3", ["temperature"]), sql, "ccm3"))
        assert objects.fetched == 0, "a query fetched a whole copy of a deflate-chunked object"
    finally:
        catalog.close()


def test_netcdf3_objects_are_still_read_from_a_whole_copy(samples: Path, s3: S3Server, tmp_path: Path) -> None:
    files = sorted((samples / "ocean").glob("*.nc"))
    catalog = store_catalog(samples, tmp_path / "root", [s3_store(s3)], datasets=("ocean",))
    try:
        assert not catalog.problems, catalog.problems
        objects = catalog.handles.objects
        assert objects is not None and objects.imaged == 0 and objects.fetched == len(files)
        sql = "select salinity, time from ocean where depth = 5"
        assert_same_records(answer_table(catalog, sql, SETTINGS),
                            run_sql(frame(samples, "ocean", ["salinity"]), sql, "ocean"))
    finally:
        catalog.close()


def test_variables_the_image_does_not_hold_are_read_from_a_whole_copy(s3: S3Server, tmp_path: Path) -> None:
    """A contiguous variable (1.6 MB, beyond the header's blocks) and a chunked one with a filter the chunk reader
    does not decode (fletcher32) are read by netCDF-C: never from the image (whose other bytes are zeros), from a
    whole copy fetched at that read; small ones the image holds are read from it."""
    import netCDF4
    import xarray as xr

    from dstp.catalog.publish import publish

    local = tmp_path / "files"
    local.mkdir()
    rng = np.random.default_rng(11)
    n = 200_000
    with netCDF4.Dataset(local / "mixed.nc", "w") as nc:
        nc.createDimension("x", n)
        nc.createDimension("k", 3)
        nc.createVariable("x", "i4", ("x",))[:] = np.arange(n)
        nc.createVariable("k", "i4", ("k",))[:] = [10, 20, 30]
        nc.createVariable("whole", "f8", ("x",))[:] = rng.normal(280, 5, n)
        nc.createVariable("checked", "f4", ("x",), fletcher32=True, chunksizes=(50_000,))[:] = rng.normal(0, 1, n)
        nc.createVariable("small", "f4", ("k",))[:] = [1.5, 2.5, 3.5]
    publish([local / "mixed.nc"], "mixed")
    s3.upload_tree("archive", local, "cmip/samples/mixed")
    xml = (local / "mixed.dstp.xml").read_text().replace('<files glob="mixed.nc"',
                                                           '<files store="models" glob="mixed/mixed.nc"')
    (tmp_path / "root" / "mixed").mkdir(parents=True)
    (tmp_path / "root" / "mixed" / "mixed.dstp.xml").write_text(xml)
    objects = ObjectFiles({"models": open_store(s3_store(s3))}, tmp_path / "cache")
    catalog = Catalog.scan(tmp_path / "root", objects=objects)
    try:
        assert not catalog.problems, catalog.problems
        assert objects.imaged == 1 and objects.fetched == 0
        got = answer_table(catalog, "select k, small from mixed", SETTINGS)
        assert sorted(got.to_pylist(), key=lambda r: r["k"]) == \
            [{"k": 10, "small": 1.5}, {"k": 20, "small": 2.5}, {"k": 30, "small": 3.5}]
        assert objects.fetched == 0  # held by the image
        with xr.open_dataset(local / "mixed.nc") as ds:
            want = ds[["whole", "checked"]].to_dataframe().reset_index()
        want = want[want["x"] >= n - 50].sort_values("x")
        got = answer_table(catalog, f"select x, whole, checked from mixed where x >= {n - 50} order by x", SETTINGS)
        assert got.column("x").to_pylist() == want["x"].tolist()
        np.testing.assert_array_equal(np.asarray(got.column("whole")), want["whole"].to_numpy())
        np.testing.assert_array_equal(np.asarray(got.column("checked")), want["checked"].to_numpy())
        assert objects.fetched == 1  # the whole copy, fetched for the variables the image does not hold
    finally:
        catalog.close()
        objects.close()


def test_a_raw_open_of_a_netcdf4_object_gives_its_bytes_not_the_header_image(samples: Path, s3: S3Server,
                                                                            tmp_path: Path) -> None:
    """What ``dstp get`` streams (``open_raw``) is the object's whole content, even once only its header image was
    read: never the image's zeros."""
    import os

    catalog = store_catalog(samples, tmp_path / "root", [s3_store(s3)], datasets=("ccm3",))
    try:
        objects = catalog.handles.objects
        assert objects is not None and objects.imaged > 0 and objects.fetched == 0
        paths = sorted(f.path for f in catalog.get("ccm3").files if "@models" in str(f.path))
        assert paths
        for path in paths:
            fd = catalog.handles.open_raw(path)
            with os.fdopen(fd, "rb") as f:
                assert f.read() == (samples / "ccm3" / path.name).read_bytes(), path.name
    finally:
        catalog.close()


_IMAGE_OF = """
import json, os, sys
from dstp._chunk_index import object_image
path = sys.argv[1]

def fetch(spans):
    with open(path, "rb") as f:
        return [os.pread(f.fileno(), e - s, s) for s, e in spans]

answer = object_image(fetch, os.path.getsize(path), 64 * 1024)
print(json.dumps(answer["covered"]))
"""


def test_the_image_names_as_held_only_data_it_holds(tmp_path: Path) -> None:
    """Variable-length strings live in global heaps their extents do not name: a big string variable (not read at the
    look) is not held by the image, a small one (read at the look, heaps and all) is; a contiguous variable is held
    only when its bytes lie in the blocks read."""
    import netCDF4

    path = tmp_path / "strings.nc"
    with netCDF4.Dataset(path, "w") as nc:
        nc.createDimension("n", 200_000)
        nc.createDimension("m", 4)
        nc.createVariable("names", str, ("n",))[:] = np.array([f"station {i}" for i in range(200_000)], dtype=object)
        nc.createVariable("few", str, ("m",))[:] = np.array(["a", "bb", "ccc", "dddd"], dtype=object)
        nc.createVariable("big", "f8", ("n",))[:] = np.arange(200_000.0)
        nc.createVariable("tiny", "f8", ("m",))[:] = [1.0, 2.0, 3.0, 4.0]
    out = subprocess.run([sys.executable, "-c", _IMAGE_OF, str(path)], check=True, capture_output=True)
    covered = json.loads(out.stdout)
    assert covered["names"] is False and covered["big"] is False
    assert covered["few"] is True and covered["tiny"] is True


_VARIABLE_CHUNK_BYTES = """
import h5py, json, sys
total = 0
for path in sys.argv[2:]:
    with h5py.File(path, "r") as f:
        total += f[sys.argv[1]].id.get_storage_size()
print(json.dumps(total))
"""


def test_blocks_read_ahead_on_threads_fetch_each_chunk_once(samples: Path, s3: S3Server, tmp_path: Path) -> None:
    """Blocks of one scan read ahead on threads share chunks (small blocks: many per chunk): a chunk one block is
    fetching is waited for by the others, not fetched again — bytes fetched equal the chunks' bytes."""
    files = sorted((samples / "ccm3").glob("*.nc"))
    out = subprocess.run([sys.executable, "-c", _VARIABLE_CHUNK_BYTES, "T", *map(str, files)], check=True,
                         capture_output=True)
    needed = int(json.loads(out.stdout))
    catalog = store_catalog(samples, tmp_path / "root", [s3_store(s3)], datasets=("ccm3",))
    try:
        objects = catalog.handles.objects
        assert objects is not None
        store = objects.stores["models"]
        before = store.stats.bytes
        sql = "select count(*) as n, sum(temperature) as total from ccm3"
        got = answer_table(catalog, sql, Settings(batch_rows=512, scan_threads=4))
        want = run_sql(frame(samples, "ccm3", ["temperature"]), sql, "ccm3")
        assert got.column("n").to_pylist() == want.column("n").to_pylist()
        total = want.column("total")[0].as_py()
        assert abs(got.column("total")[0].as_py() - total) <= 1e-9 * abs(total)
        assert store.stats.bytes - before == needed, (store.stats.bytes - before, needed)
    finally:
        catalog.close()

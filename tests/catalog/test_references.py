"""``dstp catalog export-references``: kerchunk references that xarray reads as it reads the files.

The oracle is xarray on each file, decoded on its own. xarray opens the references through fsspec's
``ReferenceFileSystem`` (``reference://``) and zarr-python, as others will. One difference is the format's, not
dstp's: JSON has no float32, so a float32 ``scale_factor`` comes back a double and xarray unpacks in float64
where it unpacks the file in float32. So each reference set is checked three ways: the raw stored values and
attributes are identical; the decoded values are identical to xarray's decoding of the file's raw values with
its attributes as JSON holds them; and within one float32 rounding of xarray on the file.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

import netCDF4
import numpy as np
import pytest
import xarray as xr
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from builders import daily
from store_servers import S3Server
from test_aggregation_oracle import ArchiveSpec, archives, write_archive

from dstp.catalog.objects import ObjectFiles
from dstp.catalog.publish import publish
from dstp.catalog.references import all_file_references, combined_references
from dstp.catalog.registry import Catalog
from dstp.catalog.stores import StoreConfig, open_store
from dstp.errors import CatalogError

CFTIME = xr.coders.CFDatetimeCoder(use_cftime=True)
#: The note of a variable written less far along the unlimited dimension than the dimension.
SHORT = re.compile(r"arch_\w+\.nc: '(\w+)' not written: it is \(.*\) in HDF5 but \(.*\) in netCDF \(written less far")


def open_references(document: dict[str, Any], **options: Any) -> xr.Dataset:
    """Open a reference set as others do: xarray's zarr engine over fsspec's reference filesystem."""
    storage = {"fo": document, **options}
    return xr.open_dataset("reference://", engine="zarr", decode_times=CFTIME,
                           backend_kwargs={"consolidated": False, "storage_options": storage}).load()


def open_raw_references(document: dict[str, Any], **options: Any) -> xr.Dataset:
    storage = {"fo": document, **options}
    return xr.open_dataset("reference://", engine="zarr", decode_cf=False,
                           backend_kwargs={"consolidated": False, "storage_options": storage}).load()


def _as_json(attrs: dict[str, Any]) -> dict[str, Any]:
    def plain(v: Any) -> Any:
        if isinstance(v, np.ndarray):
            return v.tolist() if v.ndim else v.item()
        if isinstance(v, np.generic):
            return v.item()
        return v
    return {k: plain(v) for k, v in attrs.items()}


def raw_file(path: Path, drop: tuple[str, ...] = ()) -> xr.Dataset:
    with xr.open_dataset(path, decode_cf=False) as d:
        return d.drop_vars(list(drop)).load()


def json_decoded(raw: xr.Dataset) -> xr.Dataset:
    """xarray's decoding of ``raw`` with every attribute as JSON holds it (a float32 factor as a double)."""
    plain = raw.copy()
    for name in plain.variables:
        plain[name].attrs = _as_json(plain[name].attrs)
    return xr.decode_cf(plain, decode_times=CFTIME)


def assert_same_raw(got: xr.Dataset, want: xr.Dataset) -> None:
    assert sorted(map(str, got.variables)) == sorted(map(str, want.variables))
    for name in want.variables:
        g, w = got[name], want[name]
        assert g.dims == w.dims and g.dtype == w.dtype, name
        assert np.array_equal(g.values, w.values, equal_nan=w.dtype.kind == "f"), name
        assert json.dumps(_as_json(g.attrs), sort_keys=True) == json.dumps(_as_json(w.attrs), sort_keys=True), name
    assert json.dumps(_as_json(got.attrs), sort_keys=True) == json.dumps(_as_json(want.attrs), sort_keys=True)


def assert_decodes_as_each_file(document: dict[str, Any], paths: list[Path], axis: str = "time",
                                drop: tuple[str, ...] = (), **options: Any) -> None:
    """The references equal the files (but for the variables ``drop`` names): raw values and attributes, and
    decoded (see the module's docstring)."""
    raws = [raw_file(p, drop) for p in paths]
    if len(paths) > 1:  # a file with no record yet adds nothing along the axis (its variables may be typed apart)
        paths = [p for p, r in zip(paths, raws) if r.sizes.get(axis, 0)] or paths[:1]
        raws = [raw_file(p, drop) for p in paths]
    want_raw = raws[0] if len(raws) == 1 else xr.concat(raws, dim=axis, data_vars="minimal", coords="minimal",
                                                        compat="override", join="exact")
    assert_same_raw(open_raw_references(document, **options), want_raw)
    got = open_references(document, **options)
    parts = [json_decoded(r) for r in raws]
    want = parts[0] if len(parts) == 1 else xr.concat(parts, dim=axis, data_vars="minimal", coords="minimal",
                                                      compat="override", join="exact")
    xr.testing.assert_identical(got, want)
    natives = []
    for p in paths:
        with xr.open_dataset(p, decode_times=CFTIME) as d:
            natives.append(d.drop_vars(list(drop)).load())
    native = natives[0] if len(natives) == 1 else xr.concat(natives, dim=axis, data_vars="minimal",
                                                            coords="minimal", compat="override", join="exact")
    for name in native.data_vars:
        a, b = got[name].values, native[name].values
        if b.dtype.kind == "f":  # xarray on the file: float32 unpacking where JSON gives float64 factors
            np.testing.assert_allclose(a, b, rtol=2 * float(np.finfo(np.float32).eps), equal_nan=True)
        else:
            assert np.array_equal(a, b), name


def scan(root: Path, **kwargs: Any) -> Catalog:
    catalog = Catalog.scan(root, **kwargs)
    assert not catalog.problems, catalog.problems
    return catalog


# -- per file: always right -----------------------------------------------------------------------------------


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=archives())
def test_per_file_references_read_as_xarray_reads_each_generated_file(spec: ArchiveSpec) -> None:
    with tempfile.TemporaryDirectory(prefix="dstp-refs-") as tmp:
        folder = Path(tmp)
        write_archive(spec, folder)
        publish(sorted(folder.glob("arch_*.nc")), "arch")
        catalog = scan(folder, direct_chunks=spec.direct_chunks)
        try:
            ds = catalog.get("arch")
            for k, refs in all_file_references(ds):
                # the generator leaves the last step of a default-fill variable unwritten: past its HDF5 extent
                # netCDF reads its default fill, which Zarr's one fill_value cannot say without masking it
                left = [m.group(1) for m in map(SHORT.match, refs.notes) if m is not None]
                assert len(left) == len(refs.notes), refs.notes
                assert left == [] or any(f.fill == "default_fill" for f in spec.files)
                assert_decodes_as_each_file(refs.document(), [ds.files[k].path], drop=tuple(left))
                if spec.direct_chunks and any(f.deflate for f in spec.files):
                    assert catalog.handles.chunks is not None and catalog.handles.chunks.listed > 0
        finally:
            catalog.close()


def _encoded_alike(spec: ArchiveSpec) -> ArchiveSpec:
    """The archive with every file of the first file's type and compression: files then differ in what their
    values make of them (packing, fills) and in time units, the differences kerchunk's combined set misses."""
    first = spec.files[0]
    return replace(spec, files=tuple(replace(f, encoding=first.encoding, deflate=first.deflate, fill=first.fill,
                                             packed_time=first.packed_time, float_time=first.float_time)
                                     for f in spec.files))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=st.one_of(archives(), archives().map(_encoded_alike)))
def test_combined_references_equal_the_files_or_are_refused(spec: ArchiveSpec) -> None:
    """Never a wrong answer: the combined set decodes as each file on its own, or is refused, naming --per-file."""
    with tempfile.TemporaryDirectory(prefix="dstp-refs-") as tmp:
        folder = Path(tmp)
        write_archive(spec, folder)
        publish(sorted(folder.glob("arch_*.nc")), "arch")
        catalog = scan(folder, direct_chunks=spec.direct_chunks)
        try:
            ds = catalog.get("arch")
            try:
                refs = combined_references(ds)
            except CatalogError as exc:
                assert "--per-file" in str(exc)
                event("refused: " + re.sub(r".*'s (\w+) \(.*|.*(do not divide|no variable|other values).*", r"\1\2",
                                           str(exc)))
                return
            event(f"combined: {len(ds.files)} file(s)")
            # a variable left out is named in a note (as for the per-file sets), and compared nowhere
            left = sorted({m.group(1) for m in map(SHORT.match, refs.notes) if m is not None})
            assert all(SHORT.match(n) for n in refs.notes), refs.notes
            assert left == [] or any(f.fill == "default_fill" for f in spec.files)
            assert_decodes_as_each_file(refs.document(), [f.path for f in ds.files], drop=tuple(left))
        finally:
            catalog.close()


# -- combined: the cases it is written for, and the cases refused ---------------------------------------------


def _days(folder: Path, days: list[int], steps: int = 3, chunk_steps: int = 1, lat: int = 3,
          lon: int = 4) -> list[Path]:
    paths = [daily(folder / f"d_{d:03d}.nc", d, steps=steps, lat=lat, lon=lon) for d in days]
    if chunk_steps != 1:  # rewrite t2m with chunks of chunk_steps steps
        for p in paths:
            with netCDF4.Dataset(p, "a") as nc:
                old = nc["t2m"]
                old.set_auto_maskandscale(False)
                values, attrs = old[:], {a: old.getncattr(a) for a in old.ncattrs() if a != "_FillValue"}
                v = nc.createVariable("t2m_c", "i2", ("time", "lat", "lon"), fill_value=np.int16(-32767), zlib=True,
                                      chunksizes=(chunk_steps, lat, lon))
                v.set_auto_maskandscale(False)
                v.setncatts(attrs)
                v[:] = values
    return paths


def test_combined_references_of_files_packed_alike_equal_the_files(tmp_path: Path) -> None:
    paths = _days(tmp_path, [0, 15, 30])  # day % 3 and day % 5 alike: one packing
    publish(paths, "days")
    catalog = scan(tmp_path)
    try:
        refs = combined_references(catalog.get("days"))
    finally:
        catalog.close()
    assert refs.notes == ()
    assert_decodes_as_each_file(refs.document(), paths)
    assert len(open_references(refs.document())["time"]) == 9


def test_files_packed_each_their_own_way_are_refused_combined(tmp_path: Path) -> None:
    paths = _days(tmp_path, [0, 1, 2])  # each day its own scale_factor and add_offset (builders.daily)
    publish(paths, "days")
    catalog = scan(tmp_path)
    try:
        with pytest.raises(CatalogError) as refused:
            combined_references(catalog.get("days"))
    finally:
        catalog.close()
    assert str(refused.value) == (
        "dataset 'days': d_001.nc differs from d_000.nc in 't2m''s scale_factor (0.019999999552965164, not "
        "0.009999999776482582), so one Zarr array cannot stand for all its files (kerchunk's combined references "
        "would decode it wrongly); export one reference set per file with --per-file")


def test_chunks_that_do_not_divide_a_file_along_the_axis_are_refused_combined(tmp_path: Path) -> None:
    paths = _days(tmp_path, [0, 15, 30], steps=3, chunk_steps=2)  # 3 steps a file, in chunks of 2
    publish(paths, "days")
    catalog = scan(tmp_path)
    try:
        with pytest.raises(CatalogError) as refused:
            combined_references(catalog.get("days"))
    finally:
        catalog.close()
    assert "d_000.nc holds 3 steps of 't2m_c' along 'time', which its chunks of 2 do not divide" in str(refused.value)
    assert "--per-file" in str(refused.value)


def test_a_field_off_the_axis_that_differs_between_files_is_refused_combined(tmp_path: Path) -> None:
    paths = _days(tmp_path, [0, 15, 30])
    for k, p in enumerate(paths):  # a static field that the third file holds otherwise (a corrected orography)
        with netCDF4.Dataset(p, "a") as nc:
            v = nc.createVariable("orog", "f4", ("lat", "lon"))
            v.units = "m"
            v[:] = np.arange(12, dtype=np.float32).reshape(3, 4) + (k == 2)
    publish(paths, "days")
    catalog = scan(tmp_path)
    try:
        with pytest.raises(CatalogError) as refused:
            combined_references(catalog.get("days"))
    finally:
        catalog.close()
    assert str(refused.value).startswith("dataset 'days': d_030.nc holds other values of 'orog', which is not along "
                                         "'time', than d_000.nc, so one Zarr array cannot stand for all its files")


def test_a_netcdf3_archive_is_refused(tmp_path: Path) -> None:
    with netCDF4.Dataset(tmp_path / "c.nc", "w", format="NETCDF3_CLASSIC") as nc:
        nc.createDimension("time", None)
        t = nc.createVariable("time", "f8", ("time",))
        t.units = "days since 2000-01-01"
        t[:] = [0.0, 1.0]
        nc.createVariable("x", "f4", ("time",))[:] = [1.0, 2.0]
    publish([tmp_path / "c.nc"], "classic")
    catalog = scan(tmp_path)
    try:
        with pytest.raises(CatalogError, match=r"c\.nc is a NETCDF3_CLASSIC file: references are written for "
                                               r"netCDF-4/HDF5 files only"):
            list(all_file_references(catalog.get("classic")))
    finally:
        catalog.close()


# -- the same archive in an S3 store ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    server = S3Server()
    server.client().create_bucket(Bucket="refs")
    yield server
    server.stop()


def test_references_of_an_archive_in_s3_read_as_the_local_files(s3: S3Server, tmp_path: Path) -> None:
    local, root = tmp_path / "files", tmp_path / "root"
    paths = _days(local, [0, 15, 30], steps=4, lat=240, lon=480)  # objects of 0.76 MB: more than a header block
    publish(paths, "days")
    s3.upload_tree("refs", local, "era/daily")
    xml, n = re.subn(r'<files glob="[^"]+"', '<files store="era" glob="daily/d_*.nc"',
                     (local / "days.dstp.xml").read_text())
    assert n == 1
    (root / "days").mkdir(parents=True)
    (root / "days" / "days.dstp.xml").write_text(xml)
    os.environ["DSTP_TEST_S3_KEY"], os.environ["DSTP_TEST_S3_SECRET"] = s3.access_key, s3.secret_key
    config = StoreConfig("era", "s3://refs/era", endpoint=s3.endpoint, region="us-east-1",
                         access_key_id_env="DSTP_TEST_S3_KEY", secret_access_key_env="DSTP_TEST_S3_SECRET")
    index = tmp_path / "index.sqlite"
    objects = ObjectFiles({"era": open_store(config)}, tmp_path / "cache")
    catalog = scan(root, objects=objects, index=index)
    try:
        ds = catalog.get("days")
        s3.log.reset()
        per_file = list(all_file_references(ds))
        combined = combined_references(ds)
        requests = dict(s3.log.counts)
    finally:
        catalog.close()
        objects.close()
    # the chunk listings and header images of the scan say everything: no request to the store; the combined set
    # reads the (inline) time values and compares lat/lon across files from the images
    assert requests == {}, requests
    # a fresh catalog from the index (what the command's own process is): chunk listings from the index, where
    # lat/lon (contiguous) lie from each object's header image, made again by one 64 KiB GET
    objects = ObjectFiles({"era": open_store(config)}, tmp_path / "cache")
    catalog = scan(root, objects=objects, index=index)
    try:
        s3.log.reset()
        again = list(all_file_references(catalog.get("days")))
        requests, fetched = dict(s3.log.counts), objects.stores["era"].stats.bytes  # type: ignore[attr-defined]
    finally:
        catalog.close()
        objects.close()
    assert requests == {"GET": 3} and fetched == 3 * 64 * 2**10 < sum(p.stat().st_size for p in paths) / 10
    assert [r.document() for _, r in again] == [r.document() for _, r in per_file]
    text = json.dumps([r.document() for _, r in per_file] + [combined.document()])
    assert s3.secret_key not in text and s3.access_key not in text and s3.endpoint not in text
    assert '"s3://refs/era/daily/d_000.nc"' in text
    reader: dict[str, Any] = {"remote_protocol": "s3", "remote_options": {
        "asynchronous": True, "key": s3.access_key, "secret": s3.secret_key, "client_kwargs": {"endpoint_url": s3.endpoint,
                                                                         "region_name": "us-east-1"}}}
    for k, refs in per_file:
        assert refs.notes == ()
        assert_decodes_as_each_file(refs.document(), [paths[k]], **reader)
    assert_decodes_as_each_file(combined.document(), paths, **reader)


#: fsspec's HTTP filesystem under the reference filesystem zarr-python opens (asynchronous, as zarr's store is)
HTTP_READER: dict[str, Any] = {"remote_protocol": "http", "remote_options": {"asynchronous": True}}


def test_references_of_an_archive_on_an_https_server_read_as_the_local_files(tmp_path: Path) -> None:
    """An HTTP(S) store (listed through its manifest): the references name each file by the store's URL."""
    from store_servers import RangeHTTPServer

    served, root = tmp_path / "served", tmp_path / "root"
    paths = _days(served / "daily", [0, 15, 30])
    publish(paths, "days")
    (served / "files.txt").write_text("".join(f"daily/{p.name}\n" for p in paths))
    xml, n = re.subn(r'<files glob="[^"]+"', '<files store="web" glob="daily/d_*.nc"',
                     (served / "daily" / "days.dstp.xml").read_text())
    assert n == 1
    (root / "days").mkdir(parents=True)
    (root / "days" / "days.dstp.xml").write_text(xml)
    web = RangeHTTPServer(served)
    try:
        objects = ObjectFiles({"web": open_store(StoreConfig("web", web.url, manifest="files.txt"))},
                              tmp_path / "cache")
        catalog = scan(root, objects=objects)
        try:
            ds = catalog.get("days")
            per_file = list(all_file_references(ds))
            combined = combined_references(ds)
        finally:
            catalog.close()
            objects.close()
        assert f'"{web.url}/daily/d_015.nc"' in json.dumps(per_file[1][1].document())
        for k, refs in per_file:
            assert_decodes_as_each_file(refs.document(), [paths[k]], **HTTP_READER)
        assert_decodes_as_each_file(combined.document(), paths, **HTTP_READER)
    finally:
        web.stop()


# -- the command ------------------------------------------------------------------------------------------------


def dstp(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dstp.cli", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})


def test_the_command_writes_combined_and_per_file_references(tmp_path: Path) -> None:
    root = tmp_path / "root"
    paths = _days(root / "days", [0, 1, 2])
    publish(paths, "days")
    env = {"DSTP_STATE_DIR": str(tmp_path / "state")}
    refused = dstp("catalog", "export-references", "days", "--root", str(root), "-o", str(tmp_path / "d.json"),
                   env=env)
    assert refused.returncode == 1, refused
    assert "d_001.nc differs from d_000.nc in 't2m''s scale_factor" in refused.stderr
    assert "--per-file" in refused.stderr and not (tmp_path / "d.json").exists()
    done = dstp("catalog", "export-references", "days", "--root", str(root), "-o", str(tmp_path / "each"),
                "--per-file", env=env)
    assert done.returncode == 0, done
    written = sorted((tmp_path / "each").iterdir())
    assert [p.name for p in written] == ["d_000.nc.json", "d_001.nc.json", "d_002.nc.json"]
    for path, document in zip(paths, written):
        assert_decodes_as_each_file(json.loads(document.read_text()), [path])


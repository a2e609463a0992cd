"""Zarr v2 and v3 stores in an S3 store (moto's server) as the files of a dataset: every answer equals xarray's
``open_zarr`` on the same stores on local disk, each store decoded on its own and concatenated along time."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest
import xarray as xr

from in_process import answer_table
from oracle import assert_same_records, run_sql
from store_servers import S3Server
from test_aggregation_oracle import oracle_records

from dstp.catalog.objects import ObjectFiles
from dstp.catalog.publish import publish
from dstp.catalog.registry import Catalog
from dstp.catalog.stores import StoreConfig, open_store
from dstp.settings import Settings

SETTINGS = Settings(batch_rows=4096)


def era5_like(month: int, seed: int, *, offset: float) -> xr.Dataset:
    """A month of a packed, masked, noleap archive: each store has its own packing."""
    rng = np.random.default_rng(seed)
    time = xr.date_range(f"2001-{month:02d}-01", periods=4, freq="7D", calendar="noleap", use_cftime=True)
    lat, lon = np.array([50.0, 40.0, 30.0]), np.array([0.0, 10.0, 20.0, 30.0])
    temp = 270 + offset + 10 * rng.random((4, 3, 4))
    temp[0, 1, 2] = np.nan
    humid = (100 * rng.random((4, 3, 4))).astype(np.float32)
    humid[2, 0, :] = np.nan
    ds = xr.Dataset({"temp": (("time", "lat", "lon"), temp, {"units": "K", "standard_name": "air_temperature"}),
                     "humid": (("time", "lat", "lon"), humid, {"units": "%"})},
                    coords={"time": time, "lat": ("lat", lat, {"units": "degrees_north"}),
                            "lon": ("lon", lon, {"units": "degrees_east"})})
    ds["temp"].encoding = {"dtype": "int16", "scale_factor": 0.01 * (1 + month % 3), "add_offset": 270.0 + offset,
                           "_FillValue": -32767}
    ds["time"].encoding = {"units": f"hours since 2001-{month:02d}-01", "calendar": "noleap"}
    return ds


@pytest.fixture(scope="module")
def zarr_archive(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[S3Server, Path]]:
    local = tmp_path_factory.mktemp("zarr-local")
    parts = [era5_like(1, 1, offset=0.0), era5_like(2, 2, offset=5.0)]
    for fmt in (2, 3):
        for month, part in zip((1, 2), parts):
            part.to_zarr(local / f"v{fmt}" / f"era5_2001-{month:02d}.zarr", zarr_format=fmt, consolidated=False)
    parts[0].to_netcdf(local / "template.nc")  # publish drafts the descriptor from a file of the same variables
    server = S3Server()
    server.client().create_bucket(Bucket="arco")
    server.upload_tree("arco", local, "era5", "*")
    yield server, local
    server.stop()


@pytest.mark.parametrize("fmt", [2, 3])
def test_zarr_stores_answer_as_xarray_open_zarr(zarr_archive: tuple[S3Server, Path], fmt: int) -> None:
    server, local = zarr_archive
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "root"
        (root / "era5").mkdir(parents=True)
        descriptor = publish([local / "template.nc"], "era5")
        xml, n = re.subn(r'<files glob="[^"]+"', f'<files store="arco" glob="v{fmt}/era5_*.zarr" aggregate="time"',
                         descriptor.read_text())
        descriptor.unlink()
        assert n == 1
        xml = re.sub(r' aggregate="time" aggregate="time"', ' aggregate="time"', xml)
        (root / "era5" / "era5.dstp.xml").write_text(xml)
        os.environ["DSTP_TEST_ZARR_KEY"], os.environ["DSTP_TEST_ZARR_SECRET"] = server.access_key, server.secret_key
        config = StoreConfig("arco", "s3://arco/era5", endpoint=server.endpoint, region="us-east-1",
                             access_key_id_env="DSTP_TEST_ZARR_KEY", secret_access_key_env="DSTP_TEST_ZARR_SECRET")
        objects = ObjectFiles({"arco": open_store(config)}, Path(tmp) / "cache")
        catalog = Catalog.scan(root, objects=objects)
        try:
            assert not catalog.problems, catalog.problems
            assert [f.path.name for f in catalog.get("era5").files] == ["era5_2001-01.zarr", "era5_2001-02.zarr"]
            coder = xr.coders.CFDatetimeCoder(use_cftime=True)
            stores = sorted((local / f"v{fmt}").glob("era5_*.zarr"))
            truth = xr.concat([xr.open_zarr(s, decode_times=coder, consolidated=False).load() for s in stores],
                              dim="time", data_vars="minimal", coords="minimal", compat="override")
            records = oracle_records(truth, ["temp", "humid"], ["time", "lat", "lon"])
            for sql in ("select time, lat, lon, temp, humid from era5",
                        "select time, temp from era5 where temp > 275",
                        "select lat, lon, humid from era5 where humid is null",
                        "select time, lat, temp from era5 where time >= '2001-02-01' and lon = 10"):
                assert_same_records(answer_table(catalog, sql, SETTINGS), run_sql(records, sql, "era5"))
            assert not any((Path(tmp) / "cache").rglob("*")) if (Path(tmp) / "cache").exists() else True
        finally:
            catalog.close()
            objects.close()


def test_a_rewritten_chunk_makes_the_zarr_store_a_new_version(zarr_archive: tuple[S3Server, Path],
                                                             tmp_path: Path) -> None:
    server, local = zarr_archive
    store = open_store(StoreConfig("arco", "s3://arco/era5", endpoint=server.endpoint, region="us-east-1",
                                   access_key_id_env="DSTP_TEST_ZARR_KEY", secret_access_key_env="DSTP_TEST_ZARR_SECRET"))
    os.environ["DSTP_TEST_ZARR_KEY"], os.environ["DSTP_TEST_ZARR_SECRET"] = server.access_key, server.secret_key
    before = {v.key: v for v in store.list_zarr("v3/*.zarr")}
    assert sorted(before) == ["v3/era5_2001-01.zarr", "v3/era5_2001-02.zarr"]
    assert before["v3/era5_2001-01.zarr"].size == sum(p.stat().st_size for p in
                                                      (local / "v3" / "era5_2001-01.zarr").rglob("*") if p.is_file())
    chunk = next(p for p in sorted((local / "v3" / "era5_2001-01.zarr" / "temp").rglob("*")) if p.is_file())
    key = f"era5/v3/era5_2001-02.zarr/{chunk.relative_to(local / 'v3' / 'era5_2001-01.zarr').as_posix()}"
    original = server.client().get_object(Bucket="arco", Key=key)["Body"].read()
    server.client().put_object(Bucket="arco", Key=key, Body=chunk.read_bytes())
    try:
        after = {v.key: v for v in store.list_zarr("v3/*.zarr")}
        assert after["v3/era5_2001-01.zarr"] == before["v3/era5_2001-01.zarr"]
        assert after["v3/era5_2001-02.zarr"].etag != before["v3/era5_2001-02.zarr"].etag
    finally:
        server.client().put_object(Bucket="arco", Key=key, Body=original)

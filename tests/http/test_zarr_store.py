"""The Zarr v3 door: xr.open_zarr and zarr-python over HTTP read what xarray reads from the files.

The oracle is xarray with its netCDF4 engine on the published files, each
file opened on its own and concatenated along the aggregation dimension.
Besides two bundled samples (ccm3: packed, 4-D; ocean) the archive written
here has what real archives vary: a 360_day model in monthly files with
packed int16 values and fill values on descending latitudes and 0…360
longitudes, and a noleap one whose files state their time units per file.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Iterator

import h5py
import httpx
import numpy as np
import pytest
import xarray as xr
import zarr
from hypothesis import HealthCheck, given, settings, strategies as st

import oracle
from protocol_archives import SPECS as ARCHIVES
from protocol_archives import assert_same, model_360_day, noleap_units_per_file, open_local, restricted_copy
from dstp.auth import TokenStore
from dstp.server import DstpServer
from dstp.settings import Settings

SPECS = {**{k: oracle.DATASETS[k] for k in ("ccm3", "ocean")}, **ARCHIVES}
# zarr-python warns that numcodecs' codecs (the passed-through chunks' shuffle and zlib) are not in the v3 spec
pytestmark = pytest.mark.filterwarnings("ignore:Numcodecs codecs are not in the Zarr version 3")


@pytest.fixture(scope="module")
def root(catalog_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    here = tmp_path_factory.mktemp("zarr")
    for name in ("ccm3", "ocean"):
        shutil.copytree(catalog_root / name, here / name)
    model_360_day(here / "model")
    noleap_units_per_file(here / "monthly")
    restricted_copy(catalog_root / "ocean", here / "secret", "ocean", "secret")
    return here


@pytest.fixture(scope="module")
def served(root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    store = tmp_path_factory.mktemp("tokens") / "tokens.json"
    tokens = TokenStore(store)
    issued = {"alice": tokens.create("alice", ["polar"]).secret, "bob": tokens.create("bob").secret}
    settings_ = Settings(catalog_root=root, port=0, http_port=0, data_port=-1, udt_port=-1, token_store=store,
                         allow_anonymous="true")
    with DstpServer(settings_) as srv:
        assert srv.endpoints is not None
        yield f"http://{srv.endpoints.http}", issued


def local(root: Path, dataset: str) -> xr.Dataset:
    return open_local(root, SPECS[dataset])


def remote(url: str, dataset: str) -> xr.Dataset:
    return xr.open_zarr(f"{url}/zarr/{dataset}", zarr_format=3, consolidated=True,
                        decode_times=xr.coders.CFDatetimeCoder(use_cftime=True))


@pytest.mark.parametrize("dataset", ["ccm3", "ocean", "model", "monthly"])
def test_open_zarr_reads_every_variable_as_xarray_reads_the_files(served, root: Path, dataset: str) -> None:
    url, _ = served
    want, got = local(root, dataset), remote(url, dataset)
    for dim, size in want.sizes.items():
        if dim not in ("nbnd", "bnds"):
            assert got.sizes[dim] == size, dim
    for name, var in want.data_vars.items():
        if name.endswith("_bnds") or var.dtype.kind in "OSU" or not var.dims:
            continue
        assert name in got.data_vars, name
        assert got[name].dims == var.dims, name
        assert got[name].dtype == var.dtype, name
        assert_same(got[name], var, name)
        for key in ("units", "long_name", "standard_name"):
            if key in var.attrs:
                assert str(got[name].attrs.get(key)) == str(var.attrs[key]), (name, key)
    for name, coord in want.coords.items():
        if coord.dtype.kind in "OSU" and not (coord.size and hasattr(coord.values.flat[0], "calendar")):
            continue
        assert name in got.coords, name
        assert_same(got[name], coord, name)


def test_zarr_python_reads_a_chunk_and_the_group(served, root: Path) -> None:
    url, _ = served
    group = zarr.open_group(f"{url}/zarr/model", mode="r", zarr_format=3)
    tas = group["tas"]
    assert tas.metadata.dimension_names == ("time", "lat", "lon")
    want = local(root, "model")["tas"].values
    np.testing.assert_array_equal(tas[40:50, 2:9, 3], want[40:50, 2:9, 3])  # across two files' boundary


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_slab_through_zarr_equals_the_files(served, root: Path, data: st.DataObject) -> None:
    url, _ = served
    want = local(root, "model")["tas"]
    got = remote(url, "model")["tas"]
    key = []
    for n in want.shape:
        a = data.draw(st.integers(0, n - 1))
        b = data.draw(st.integers(a + 1, n))
        step = data.draw(st.integers(1, 4))
        key.append(slice(a, b, step))
    assert_same(got[tuple(key)], want[tuple(key)], str(key))


def test_a_restricted_store_is_not_found_for_others(served) -> None:
    url, tokens = served
    for who, status in (("alice", 200), ("bob", 404), (None, 404)):
        headers = {"Authorization": f"Bearer {tokens[who]}"} if who else {}
        with httpx.Client(base_url=url, headers=headers, timeout=30) as http:
            assert http.get("/zarr/secret/zarr.json").status_code == status
            assert http.get("/zarr/secret/salinity/c/0/0/0/0").status_code == status


def test_keys_the_store_does_not_hold_are_404_naming_what_exists(served) -> None:
    url, _ = served
    with httpx.Client(base_url=url, timeout=30) as http:
        missing = http.get("/zarr/model/nosuch/zarr.json")
        assert missing.status_code == 404 and "tas" in missing.text
        outside = http.get("/zarr/model/tas/c/99/0/0")
        assert outside.status_code == 404 and "outside its chunk grid" in outside.text
        assert http.get("/zarr/model/.zattrs").status_code == 404  # a v2 key: Zarr readers take 404 as absent
        assert http.get("/zarr/nosuch/zarr.json").status_code == 404


def test_the_store_lists_the_files_variables_and_reads_chunks_through_queries(served, root: Path) -> None:
    url, _ = served
    got = remote(url, "ccm3")
    want = local(root, "ccm3")
    data = {n for n, v in want.data_vars.items() if v.dims and v.dtype.kind == "f" and not n.endswith("_bnds")}
    assert data and data <= set(got.data_vars)  # every numeric variable of the files is there
    with httpx.Client(base_url=url, timeout=30) as http:
        # RELHUM is packed with float32 scale/offset: decoded by a query, sent as float32 values
        meta = http.get("/zarr/ccm3/humidity/zarr.json").json()
        chunk = http.get("/zarr/ccm3/humidity/c/0/0/0/0")
        # T is stored alike in every file (deflate + shuffle, chunks of one step): the file's own bytes
        stored_meta = http.get("/zarr/ccm3/temperature/zarr.json").json()
        stored = http.get("/zarr/ccm3/temperature/c/1/0/0/0")
    assert chunk.status_code == 200 and chunk.headers["X-Dstp-Chunk"] == "decoded"
    assert len(chunk.content) == np.prod(meta["chunk_grid"]["configuration"]["chunk_shape"]) * 4
    first = np.frombuffer(chunk.content, "<f4").reshape(meta["chunk_grid"]["configuration"]["chunk_shape"])
    n = [min(c, s) for c, s in zip(first.shape, meta["shape"])]
    np.testing.assert_array_equal(first[: n[0], : n[1], : n[2], : n[3]],
                                  want["humidity"].values[: n[0], : n[1], : n[2], : n[3]])
    assert stored.status_code == 200 and stored.headers["X-Dstp-Chunk"] == "stored"
    assert [c["name"] for c in stored_meta["codecs"]] == ["bytes", "numcodecs.shuffle", "numcodecs.zlib"]
    step = stored_meta["chunk_grid"]["configuration"]["chunk_shape"][0]
    files = sorted((root / "ccm3").glob("ccm3_*.nc"))
    with h5py.File(files[0], "r") as h5:
        steps = h5["T"].shape[0]
        f, at = divmod(step, steps)  # chunk 1 along time: the second chunk of the aggregation
    with h5py.File(files[f], "r") as h5:
        mask, raw = h5["T"].id.read_direct_chunk((at, 0, 0, 0))
    assert mask == 0 and stored.content == raw

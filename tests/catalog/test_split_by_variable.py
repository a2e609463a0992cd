"""Datasets split by variable (files holding different variables on one grid, and constant fx/grid files),
merged by variable as xarray's ``open_mfdataset(combine="by_coords")`` / ``merge`` merges them."""

from __future__ import annotations

from pathlib import Path

import netCDF4
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import xarray as xr

from builders import split_by_variable, ugrid_split
from oracle import _times, assert_same_records, run_sql

from dstp.catalog.dataset import GriddedDataset
from dstp.catalog.descriptor import parse_descriptor, read_descriptor, render_descriptor
from dstp.catalog.publish import publish
from dstp.catalog.registry import Catalog
from dstp.errors import CatalogError, DataFileError, DescriptorError
from dstp.query.execute import QueryExecution, prepare_query
from dstp.settings import Settings

SETTINGS = Settings(batch_rows=5)
#: xarray's combine, spelled out (its defaults are changing): concatenate along coordinates, merge the rest,
#: refuse what disagrees.
COMBINE = dict(combine="by_coords", data_vars="minimal", coords="minimal", compat="equals", join="exact")


def answer(catalog: Catalog, sql: str) -> pa.Table:
    prepared = prepare_query(sql, catalog, SETTINGS)
    return pa.Table.from_batches(list(QueryExecution(prepared, SETTINGS).batches()), schema=prepared.schema)


def oracle(paths: list[Path], names: list[str], dims: list[str]) -> pd.DataFrame:
    """Return xarray's records of ``names`` over ``dims``: all files opened as one dataset by coordinates."""
    coder = xr.coders.CFDatetimeCoder(use_cftime=True)
    with xr.open_mfdataset(sorted(paths), decode_times=coder, **COMBINE) as ds:
        frame = ds[names].load().to_dataframe(dim_order=dims).reset_index()
        if "time" in frame:
            frame["time"] = _times(frame["time"].to_numpy(), ds["time"].values[0].calendar)
    return frame


def test_cmip_variables_in_files_of_their_own_and_an_fx_file_merge_by_variable(tmp_path: Path) -> None:
    # tas in two files (4 + 2 months), pr in one (6 months), areacella and sftlf in an fx file without time
    paths = split_by_variable(tmp_path, steps=6, splits={"tas": (4, 2), "pr": (6,)}, fx=("areacella", "sftlf"))
    descriptor = read_descriptor(publish(paths, "cmip"))
    assert descriptor.parts == ("fx_*.nc", "pr_*.nc", "tas_Amon_MODEL_historical_r1i1p1f1_gn_*.nc")
    assert descriptor.aggregate == "time"
    catalog = Catalog.scan(tmp_path)
    try:
        assert not catalog.problems, catalog.problems
        records = oracle(paths, ["tas", "pr", "areacella", "sftlf"], ["time", "lat", "lon"])
        assert len(records) == 6 * 9
        for sql in ("select time, lat, lon, height, tas, pr, areacella, sftlf from cmip",
                    "select time, lon, tas from cmip where sftlf > 50 and pr is not null",
                    "select time, sum(pr * areacella) / sum(areacella) as mean_pr from cmip group by time"):
            assert_same_records(answer(catalog, sql), run_sql(records, sql, "cmip"))
        ds = catalog.get("cmip")
        assert ds.auxiliaries["area_weight"].spec.variable == "areacella"  # cell_measures found in the fx file
        assert ds.missing_from(ds.attributes["tas"]) == () and ds.missing_from(ds.attributes["areacella"]) == ()
    finally:
        catalog.close()


@pytest.mark.parametrize("grid_time", [False, True], ids=["mesh-without-time", "mesh-with-an-empty-time"])
def test_data_on_mesh_nodes_is_filtered_by_the_grid_files_node_latitude(tmp_path: Path, grid_time: bool) -> None:
    paths = ugrid_split(tmp_path, grid_time=grid_time)
    descriptor = read_descriptor(publish(paths, "mesh"))
    assert descriptor.parts == ("grid.nc", "v1.nc") and descriptor.aggregate == "time"
    catalog = Catalog.scan(tmp_path)
    try:
        assert not catalog.problems, catalog.problems
        with xr.open_dataset(paths[0]) as grid, xr.open_dataset(paths[1]) as data:
            merged = xr.merge([grid.load(), data.load()], join="exact", compat="equals")
        frame = merged[["v1", "Mesh2_node_y"]].to_dataframe(dim_order=["time", "nMesh2_node"]).reset_index()
        frame["time"] = frame["time"].to_numpy().astype("datetime64[us]")
        sql = "select time, nMesh2_node, Mesh2_node_y, v1 from mesh where Mesh2_node_y > 10"
        want = run_sql(frame, sql, "mesh")
        assert 0 < want.num_rows < len(frame)
        assert_same_records(answer(catalog, sql), want)
    finally:
        catalog.close()


def test_a_drafted_split_descriptor_reads_back_with_its_parts(tmp_path: Path) -> None:
    """The drafted <part>s survive rendering and parsing (before: publish refused the files as a time aggregation)."""
    paths = ugrid_split(tmp_path)
    path = publish(paths, "mesh")
    text = path.read_bytes()
    assert b'<part glob="grid.nc"/>' in text
    assert parse_descriptor(render_descriptor(parse_descriptor(text, path=path)), path=path).parts == (
        "grid.nc", "v1.nc")


def _descriptor(folder: Path, parts: list[str], attributes: str = "") -> Path:
    part_elements = "".join(f'<part glob="{p}"/>' for p in parts)
    path = folder / "cmip.dstp.xml"
    path.write_text(f"""<?xml version="1.0"?>
<dataset xmlns="urn:dstp:descriptor:1" id="cmip" version="1">
  <title>cmip</title>
  <files glob="*.nc" aggregate="time">{part_elements}</files>
  <coordinates>
    <coordinate name="time" dimension="time" axis="T"/>
    <coordinate name="lat" dimension="lat" axis="Y"/>
    <coordinate name="lon" dimension="lon" axis="X"/>
  </coordinates>
  <attributes default-grid="time lat lon">
    <attribute name="tas" dimensions="time lat lon"/>
    <attribute name="pr" dimensions="time lat lon"/>{attributes}
  </attributes>
</dataset>
""")
    return path


def test_parts_that_cover_different_times_are_refused_naming_the_files(tmp_path: Path) -> None:
    split_by_variable(tmp_path, steps=6, splits={"tas": (6,)}, fx=())
    split_by_variable(tmp_path / "x", steps=5, splits={"pr": (5,)}, fx=())
    (tmp_path / "x" / "pr_Amon_MODEL_historical_r1i1p1f1_gn_0000.nc").rename(
        tmp_path / "pr_Amon_MODEL_historical_r1i1p1f1_gn_0000.nc")
    with pytest.raises(DataFileError, match=r"the parts of the dataset give 'time' different lengths"):
        GriddedDataset.open(read_descriptor(_descriptor(tmp_path, ["tas_*.nc", "pr_*.nc"])))
    with pytest.raises(CatalogError, match="different lengths"):
        publish(sorted(tmp_path.glob("*.nc")), "other")


def test_parts_whose_times_differ_are_refused_naming_the_coordinate(tmp_path: Path) -> None:
    split_by_variable(tmp_path, steps=4, splits={"tas": (4,), "pr": (4,)}, fx=())
    with netCDF4.Dataset(tmp_path / "pr_Amon_MODEL_historical_r1i1p1f1_gn_0000.nc", "a") as nc:
        nc["time"][2] = nc["time"][2] + 1.0
    with pytest.raises(DataFileError) as info:
        GriddedDataset.open(read_descriptor(_descriptor(tmp_path, ["tas_*.nc", "pr_*.nc"])))
    message = str(info.value)
    assert "coordinate 'time' differs from" in message and "index 2" in message, message


def test_files_and_parts_that_do_not_match_one_to_one_are_refused(tmp_path: Path) -> None:
    split_by_variable(tmp_path, steps=4, splits={"tas": (4,), "pr": (4,)}, fx=())
    for parts, words in ((["tas_*.nc"], "pr_Amon_MODEL_historical_r1i1p1f1_gn_0000.nc matches no part"),
                         (["*_Amon_*.nc", "pr_*.nc"], "matches the parts '*_Amon_*.nc' and 'pr_*.nc'"),
                         (["tas_*.nc", "pr_*.nc", "sftlf_*.nc"], "<part glob='sftlf_*.nc'/> matches none")):
        with pytest.raises(DescriptorError) as info:
            GriddedDataset.open(read_descriptor(_descriptor(tmp_path, parts)))
        assert words in str(info.value), str(info.value)


def test_a_data_variable_held_by_two_parts_is_refused(tmp_path: Path) -> None:
    split_by_variable(tmp_path, steps=4, splits={"tas": (4,), "pr": (4,)}, fx=())
    with netCDF4.Dataset(tmp_path / "pr_Amon_MODEL_historical_r1i1p1f1_gn_0000.nc", "a") as nc:
        nc.createVariable("tas", "f4", ("time", "lat", "lon"))[:] = np.zeros((4, 3, 3))
    with pytest.raises(DataFileError, match=r"variable 'tas' is in tas_.* \(part 'tas_\*.nc'\) and pr_.*"
                                            r"\(part 'pr_\*.nc'\); in a dataset split by variable"):
        GriddedDataset.open(read_descriptor(_descriptor(tmp_path, ["tas_*.nc", "pr_*.nc"])))

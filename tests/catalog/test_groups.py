"""netCDF-4 groups and plain HDF5, laid out as NASA products do, against xarray (``group=``).

* a GPM IMERG-like file: everything under ``/Grid``, ``precipitation(time, lon, lat)``
  (longitude before latitude), two such files aggregated along time;
* a SMAP-like file: the same variable names in two groups (``AM``, ``PM``) over
  shared dimensions, 2-D latitude/longitude in each;
* two groups that define different dimensions of one name; two groups whose
  dimensions of one name and size carry different coordinate values (their own
  dimension each, or one dimension of the root labelled by each group's own
  coordinate variable, CF 1.8 §2.7's search by proximity);
* an HDF5 file written with h5py (no dimension scales: netCDF-C names them
  ``phony_dim_N``);
* an ICESat-2 gridded file (ATL20/ATL15-like): x, y, 2-D latitude/longitude and the grid mapping in the root,
  the data in groups, compared with ``xr.open_dataset(path, group=…)`` plus the root's coordinates.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import netCDF4
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import xarray as xr

from oracle import assert_same_records, run_sql

from dstp.catalog.publish import draft_descriptor, publish
from dstp.catalog.registry import Catalog
from dstp.errors import DataFileError, UnknownColumnError
from dstp.query.execute import QueryExecution, prepare_query
from dstp.settings import Settings

SETTINGS = Settings(batch_rows=64)


def answer(catalog: Catalog, sql: str) -> pa.Table:
    prepared = prepare_query(sql, catalog, SETTINGS)
    return pa.Table.from_batches(list(QueryExecution(prepared, SETTINGS).batches()), schema=prepared.schema)


def _imerg(path: Path, day: int) -> None:
    rng = np.random.default_rng(day)
    with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        nc.FileHeader = "DOI=10.5067/GPM/IMERG/3B-HH/07"
        g = nc.createGroup("Grid")
        g.createDimension("time", 1)
        g.createDimension("lon", 8)
        g.createDimension("lat", 5)
        t = g.createVariable("time", "i4", ("time",))
        t.units, t.standard_name = "seconds since 1970-01-01 00:00:00 UTC", "time"
        t[:] = [1_600_000_000 + 86_400 * day]
        lon = g.createVariable("lon", "f4", ("lon",))
        lon.units, lon.standard_name = "degrees_east", "longitude"
        lon[:] = np.arange(8) * 45.0 - 157.5
        lat = g.createVariable("lat", "f4", ("lat",))
        lat.units, lat.standard_name = "degrees_north", "latitude"
        lat[:] = np.linspace(-60, 60, 5)
        p = g.createVariable("precipitation", "f4", ("time", "lon", "lat"), fill_value=np.float32(-9999.9))
        p.units = "mm/hr"
        values = (rng.random((1, 8, 5)) * 10).astype(np.float32)
        values[0, 2, 1] = -9999.9
        p[:] = values
        q = g.createVariable("precipitationQualityIndex", "f4", ("time", "lon", "lat"))
        q[:] = rng.random((1, 8, 5)).astype(np.float32)


def _smap(path: Path) -> None:
    rng = np.random.default_rng(5)
    with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        nc.createDimension("y", 3)
        nc.createDimension("x", 4)
        for name, offset in (("AM", 0.0), ("PM", 0.5)):
            g = nc.createGroup(f"Soil_Moisture_Retrieval_Data_{name}")
            lat = g.createVariable("latitude", "f4", ("y", "x"), fill_value=np.float32(-9999.0))
            lat.units, lat.standard_name = "degrees_north", "latitude"
            lat[:] = np.linspace(30, 40, 12).reshape(3, 4) + offset
            lon = g.createVariable("longitude", "f4", ("y", "x"), fill_value=np.float32(-9999.0))
            lon.units, lon.standard_name = "degrees_east", "longitude"
            lon[:] = np.linspace(-100, -90, 12).reshape(3, 4)
            sm = g.createVariable("soil_moisture", "f4", ("y", "x"), fill_value=np.float32(-9999.0))
            sm.units, sm.coordinates = "cm3 cm-3", "latitude longitude"
            values = rng.random((3, 4)).astype(np.float32) * 0.5
            values[1, 1] = -9999.0
            sm[:] = values


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("groups")
    (root / "imerg").mkdir()
    paths = []
    for day in (1, 0):
        paths.append(root / "imerg" / f"3B-DAY.MS.MRG.3IMERG.2020091{day}.nc4")
        _imerg(paths[-1], day)
    publish(paths, "imerg")
    (root / "smap").mkdir()
    _smap(root / "smap" / "SMAP_L3_SM_P.h5")
    publish([root / "smap" / "SMAP_L3_SM_P.h5"], "smap")
    (root / "smap_am").mkdir()
    _smap(root / "smap_am" / "SMAP_L3_SM_P.h5")
    publish([root / "smap_am" / "SMAP_L3_SM_P.h5"], "smap_am", group="Soil_Moisture_Retrieval_Data_AM")
    (root / "plain").mkdir()
    with h5py.File(root / "plain" / "plain.h5", "w") as f:
        g = f.create_group("Soil")
        g["sm"] = np.arange(12, dtype="f4").reshape(3, 4)
        g["sm"].attrs["units"] = "m3 m-3"
    publish([root / "plain" / "plain.h5"], "plain")
    return root


@pytest.fixture(scope="module")
def catalog(root: Path) -> Catalog:
    cat = Catalog.scan(root)
    assert not cat.problems, cat.problems
    yield cat
    cat.close()


def test_a_grid_group_with_lon_before_lat_aggregates_and_answers_as_xarray(catalog: Catalog, root: Path) -> None:
    files = sorted((root / "imerg").glob("*.nc4"))
    truth = xr.concat([xr.open_dataset(f, group="Grid").load() for f in files], dim="time")
    frame = truth[["precipitation"]].to_dataframe(dim_order=["time", "lon", "lat"]).reset_index()
    frame["time"] = frame["time"].astype("datetime64[us]")
    for sql in ("select time, lon, lat, precipitation from imerg",
                "select lat, precipitation from imerg where precipitation > 5 and lon < 0",
                "select time, precipitation from imerg where precipitation is null"):
        assert_same_records(answer(catalog, sql), run_sql(frame, sql, "imerg"))
    ds = catalog.get("imerg")
    assert ds.attributes["precipitation"].spec.variable == "Grid/precipitation"
    assert list(ds.dimensions) == ["time", "lon", "lat"]


def test_same_names_in_two_groups_are_told_apart_by_their_group_path(catalog: Catalog, root: Path) -> None:
    ds = catalog.get("smap")
    assert {"Soil_Moisture_Retrieval_Data_AM_soil_moisture", "Soil_Moisture_Retrieval_Data_PM_soil_moisture"} \
        <= set(ds.attributes)
    path = root / "smap" / "SMAP_L3_SM_P.h5"
    for part in ("AM", "PM"):
        with xr.open_dataset(path, group=f"Soil_Moisture_Retrieval_Data_{part}") as g:
            frame = g.load().to_dataframe().reset_index()
        prefix = f"Soil_Moisture_Retrieval_Data_{part}_"
        frame = frame.rename(columns={c: prefix + c for c in ("latitude", "longitude", "soil_moisture")})
        sql = (f"select {prefix}latitude, {prefix}soil_moisture from smap "
               f"where {prefix}latitude > 33 and {prefix}soil_moisture is not null")
        want = run_sql(frame, sql, "smap")
        assert want.num_rows > 0
        assert_same_records(answer(catalog, sql), want)


def test_a_descriptor_can_name_a_group(catalog: Catalog, root: Path) -> None:
    ds = catalog.get("smap_am")
    assert ds.descriptor.group == "Soil_Moisture_Retrieval_Data_AM"
    assert set(ds.attributes) == {"soil_moisture"} and {"latitude", "longitude"} <= set(ds.auxiliaries)
    with xr.open_dataset(root / "smap_am" / "SMAP_L3_SM_P.h5", group="Soil_Moisture_Retrieval_Data_AM") as g:
        frame = g.load().to_dataframe().reset_index()
    sql = "select latitude, longitude, soil_moisture from smap_am where longitude > -95"
    assert_same_records(answer(catalog, sql), run_sql(frame, sql, "smap_am"))


def test_group_attribute_resolves_plain_variable_names(tmp_path: Path) -> None:
    _imerg(tmp_path / "one.nc4", 0)
    xml = b"""<?xml version="1.0"?>
<dataset xmlns="urn:dstp:descriptor:1" id="one" version="1">
  <title>one</title>
  <files glob="one.nc4" group="/Grid"/>
  <coordinates>
    <coordinate name="time" dimension="time" axis="T"/>
    <coordinate name="lon" dimension="lon" axis="X"/>
    <coordinate name="lat" dimension="lat" axis="Y"/>
  </coordinates>
  <attributes default-grid="time lon lat">
    <attribute name="precip" variable="precipitation" dimensions="time lon lat"/>
  </attributes>
</dataset>
"""
    (tmp_path / "one.dstp.xml").write_bytes(xml)
    catalog = Catalog.scan(tmp_path)
    assert not catalog.problems, catalog.problems
    table = answer(catalog, "select precip from one where precip is null")
    assert table.num_rows == 1
    catalog.close()


def test_different_dimensions_of_one_name_are_keyed_by_group_path(tmp_path: Path) -> None:
    path = tmp_path / "two.nc"
    with netCDF4.Dataset(path, "w") as nc:
        for name, n in (("A", 3), ("B", 4)):
            g = nc.createGroup(name)
            g.createDimension("lat", n)
            g.createVariable("v", "f4", ("lat",))[:] = np.arange(n)
    desc = draft_descriptor([path], "two")
    dims = {a.name: a.dimensions for a in desc.attributes}
    assert dims == {"A_v": ("A/lat",), "B_v": ("B/lat",)}


def _regions(path: Path, *, shared_dimension: bool, same_latitudes: bool = False) -> None:
    """Two groups, each a 4-point latitude axis of its own values (or the same), ``tas`` on it."""
    with netCDF4.Dataset(path, "w") as nc:
        if shared_dimension:
            nc.createDimension("lat", 4)
        for group, first in (("Europe", 40.0), ("Africa", 40.0 if same_latitudes else -30.0)):
            g = nc.createGroup(group)
            if not shared_dimension:
                g.createDimension("lat", 4)
            lat = g.createVariable("lat", "f4", ("lat",))
            lat.units, lat.standard_name = "degrees_north", "latitude"
            lat[:] = first + np.arange(4) * 10.0
            tas = g.createVariable("tas", "f4", ("lat",))
            tas.units = "K"
            tas[:] = np.arange(4) + (100.0 if group == "Africa" else 0.0)


@pytest.mark.parametrize("shared_dimension", [False, True], ids=["own-dimensions", "root-dimension"])
def test_same_size_dimensions_of_one_name_keep_each_groups_coordinates(tmp_path: Path, shared_dimension: bool) -> None:
    path = tmp_path / "regions.nc"
    _regions(path, shared_dimension=shared_dimension)
    publish([path], "regions")
    catalog = Catalog.scan(tmp_path)
    try:
        assert not catalog.problems, catalog.problems
        ds = catalog.get("regions")
        assert {c.name: c.dimension for c in ds.coordinates.values()} == {
            "Europe_lat": "Europe/lat", "Africa_lat": "Africa/lat"}
        for group in ("Europe", "Africa"):
            with xr.open_dataset(path, group=group) as g:
                frame = g.load().to_dataframe().reset_index().rename(
                    columns={"lat": f"{group}_lat", "tas": f"{group}_tas"})
            sql = f"select {group}_lat, {group}_tas from regions where {group}_lat < 0 or {group}_lat > 55"
            want = run_sql(frame, sql, "regions")
            assert want.num_rows > 0
            assert_same_records(answer(catalog, sql), want)
        # Two latitude axes: no one area weight serves both, and the refusal says so.
        with pytest.raises(UnknownColumnError, match=r"several latitude axes \(Europe_lat, Africa_lat\)"):
            answer(catalog, "select weighted_avg(Africa_tas, area_weight) from regions")
    finally:
        catalog.close()


def test_same_size_dimensions_with_the_same_coordinates_stay_one_dimension(tmp_path: Path) -> None:
    path = tmp_path / "regions.nc"
    _regions(path, shared_dimension=False, same_latitudes=True)
    dims = {a.name: a.dimensions for a in draft_descriptor([path], "regions").attributes}
    assert dims["Europe_tas"] == dims["Africa_tas"] == ("lat",)


def test_plain_hdf5_without_dimension_scales_is_served(catalog: Catalog, root: Path) -> None:
    table = answer(catalog, "select * from plain where sm > 4")
    with h5py.File(root / "plain" / "plain.h5") as f:
        values = f["Soil/sm"][...]
    assert sorted(table.column("sm").to_pylist()) == sorted(values[values > 4].tolist())
    assert set(table.column_names) >= {"phony_dim_0", "phony_dim_1", "sm"}


def test_hdf5_scales_in_another_group_are_refused_naming_the_file_and_others_still_served(tmp_path: Path) -> None:
    # HDF-EOS5 / NASA L2 layout: /Geolocation/lat is the scale of /Data/precip. h5py reads it; netCDF4-python
    # fails inside its own code (AttributeError), which must not escape as a traceback or stop a server.
    bad = tmp_path / "bad"
    bad.mkdir()
    with h5py.File(bad / "swath.h5", "w") as f:
        lat = f.create_group("Geolocation").create_dataset("lat", data=np.array([10.0, 20.0, 30.0]))
        lat.make_scale("lat")
        precip = f.create_group("Data").create_dataset("precip", data=np.arange(3, dtype="f4"))
        precip.dims[0].attach_scale(lat)
    with pytest.raises(DataFileError, match=r"cannot read swath\.h5: netCDF4-python cannot map its HDF5 layout"):
        publish([bad / "swath.h5"], "swath")
    (bad / "swath.dstp.xml").write_text("""<?xml version="1.0"?>
<dataset xmlns="urn:dstp:descriptor:1" id="swath" version="1"><title>swath</title>
  <files glob="swath.h5"/>
  <coordinates><coordinate name="lat" variable="Geolocation/lat" dimension="lat" axis="Y"/></coordinates>
  <attributes default-grid="lat"><attribute name="precip" variable="Data/precip" dimensions="lat"/></attributes>
</dataset>""")
    (tmp_path / "good").mkdir()
    _imerg(tmp_path / "good" / "day.nc4", 0)
    publish([tmp_path / "good" / "day.nc4"], "good")
    catalog = Catalog.scan(tmp_path)
    try:
        assert "good" in catalog and "swath" not in catalog
        assert [p.path.name for p in catalog.problems] == ["swath.dstp.xml"]
        assert "swath.h5" in catalog.problems[0].message and "Traceback" not in catalog.problems[0].message
    finally:
        catalog.close()


def test_a_grid_mapping_in_a_group_is_found_from_its_variable(tmp_path: Path) -> None:
    lcc = {"grid_mapping_name": "lambert_conformal_conic", "standard_parallel": [30.0, 60.0],
           "longitude_of_central_meridian": 10.0, "latitude_of_projection_origin": 50.0}
    path = tmp_path / "grid.nc"
    with netCDF4.Dataset(path, "w") as nc:
        g = nc.createGroup("Grid")
        g.createDimension("y", 3)
        g.createDimension("x", 4)
        for name, values in (("x", [0.0, 50.0, 100.0, 150.0]), ("y", [0.0, 50.0, 100.0])):
            v = g.createVariable(name, "f8", (name,))
            v.standard_name, v.units, v.axis = f"projection_{name}_coordinate", "km", name.upper()
            v[:] = values
        crs = g.createVariable("crs", "i4", ())
        for k, v in lcc.items():
            crs.setncattr(k, v)
        tas = g.createVariable("tas", "f4", ("y", "x"))
        tas.units, tas.grid_mapping = "K", "crs"  # CF 1.8 §2.7: found in tas's own group
        tas[:] = np.arange(12, dtype="f4").reshape(3, 4)
    publish([path], "grid")
    catalog = Catalog.scan(tmp_path)
    try:
        ds = catalog.get("grid")
        assert list(ds.grid_mappings) == ["Grid/crs"] and ds.grid_mappings["Grid/crs"].wkt
        import pyproj

        gx, gy = np.meshgrid(np.array([0.0, 50.0, 100.0, 150.0]) * 1000, np.array([0.0, 50.0, 100.0]) * 1000)
        lon, lat = pyproj.Transformer.from_crs(pyproj.CRS.from_cf(lcc), "EPSG:4326", always_xy=True).transform(gx, gy)
        table = answer(catalog, "select y, x, lat, lon from grid")
        np.testing.assert_allclose(table.column("lat").to_numpy(), lat.reshape(-1), rtol=1e-12)
        np.testing.assert_allclose(table.column("lon").to_numpy(), lon.reshape(-1), rtol=1e-12)
    finally:
        catalog.close()


def _icesat2_gridded(path: Path) -> None:
    """ATL20-like: x, y, 2-D latitude/longitude and the grid mapping in the root; the data in groups below it.

    Plus an ATL15-like group with a time axis of its own on the root's x and y.
    """
    rng = np.random.default_rng(20)
    with netCDF4.Dataset(path, "w") as nc:
        nc.createDimension("x", 5)
        nc.createDimension("y", 4)
        crs = nc.createVariable("crs", "i4", ())
        crs.grid_mapping_name, crs.straight_vertical_longitude_from_pole = "polar_stereographic", -45.0
        crs.latitude_of_projection_origin, crs.standard_parallel = 90.0, 70.0
        crs.false_easting = crs.false_northing = 0.0
        for name, n, axis in (("grid_x", 5, "x"), ("grid_y", 4, "y")):
            v = nc.createVariable(name, "f8", (axis,))
            v.units, v.standard_name = "meters", f"projection_{axis}_coordinate"
            v[:] = -100_000.0 + np.arange(n) * 25_000.0
        for name, std, units, base in (("grid_lat", "latitude", "degrees_north", 70.0),
                                       ("grid_lon", "longitude", "degrees_east", -60.0)):
            v = nc.createVariable(name, "f8", ("y", "x"))
            v.units, v.standard_name = units, std
            v[:] = base + np.round(rng.uniform(0, 10, (4, 5)), 3)
        for group in ("monthly", "daily/day01"):
            g = nc.createGroup(group.split("/")[0])
            if "/" in group:
                g = g.createGroup(group.split("/")[1])
            fb = g.createVariable("mean_fb", "f4", ("y", "x"), fill_value=np.float32(3.4028235e38))
            fb.units, fb.coordinates, fb.grid_mapping = "meters", "grid_lat grid_lon", "crs"
            values = np.round(rng.uniform(0, 0.6, (4, 5)), 3).astype("f4")
            values[rng.random((4, 5)) < 0.2] = np.float32(3.4028235e38)
            fb[:] = values
        g = nc.createGroup("delta_h")
        g.createDimension("time", 3)
        t = g.createVariable("time", "f8", ("time",))
        t.units, t.standard_name = "days since 2018-01-01", "time"
        t[:] = [0.0, 91.0, 182.0]
        dh = g.createVariable("delta_h", "f4", ("time", "y", "x"))
        dh.units = "meters"
        dh[:] = np.round(rng.uniform(-1, 1, (3, 4, 5)), 3).astype("f4")


def _with_root_coordinates(path: Path, group: str, names: list[str]) -> pd.DataFrame:
    """xarray's records of a group, with the root's coordinate variables beside them (CF 1.8 §2.7)."""
    with xr.open_dataset(path, group=group) as g, xr.open_dataset(path) as root:
        merged = xr.merge([g.load(), root[names].load()])
    frame = merged.drop_vars([v for v in merged.variables if v == "crs"], errors="ignore").to_dataframe().reset_index()
    if "time" in frame:
        frame["time"] = frame["time"].astype("datetime64[us]")
    return frame


@pytest.mark.parametrize("group", ["monthly", "daily/day01", "delta_h", None])
def test_root_coordinates_of_data_in_a_group_are_published_and_answer_as_xarray(tmp_path: Path, group: str | None
                                                                               ) -> None:
    path = tmp_path / "ATL20-01_20190101.h5"
    _icesat2_gridded(path)
    publish([path], "is2", group=group)
    catalog = Catalog.scan(tmp_path)
    try:
        assert not catalog.problems, catalog.problems
        cases = {
            "monthly": ("mean_fb", ["grid_lat", "grid_lon", "grid_x", "grid_y"],
                        "select grid_x, grid_y, grid_lat, grid_lon, mean_fb from is2 where grid_lat > 73 or "
                        "mean_fb is null"),
            "daily/day01": ("mean_fb", ["grid_lat", "grid_lon"],
                            "select grid_lat, grid_lon, mean_fb from is2 where grid_lon < -55 and mean_fb > 0.1"),
            "delta_h": ("delta_h", ["grid_x", "grid_y"],
                        "select time, grid_x, grid_y, delta_h from is2 where grid_x >= -50000 and "
                        "time > '2018-02-01' and delta_h < 0.5"),
        }
        for part, (column, names, sql) in cases.items():
            if group is not None and part != group:
                continue
            if group is None:  # the whole file: the group's column is named by its path
                column_name = {"monthly": "monthly_mean_fb", "daily/day01": "daily_day01_mean_fb"}.get(part, column)
                sql = sql.replace(column, column_name)
            else:
                column_name = column
            frame = _with_root_coordinates(path, part, names).rename(columns={column: column_name})
            want = run_sql(frame, sql, "is2")
            assert want.num_rows > 0
            assert_same_records(answer(catalog, sql), want)
        ds = catalog.get("is2")  # x and y labelled by the root's values, not counted
        assert ds.coordinates["grid_x"].dimension == "x" and ds.coordinates["grid_y"].dimension == "y"
    finally:
        catalog.close()

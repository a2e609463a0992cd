"""Auxiliary coordinates, curvilinear and projected grids, grid mappings and bounds, against xarray.

Files are written here with netCDF4-python the way real producers lay them
out: a CORDEX-like rotated-pole grid and a Lambert conformal grid with 2-D
latitude/longitude, a projected grid with only x/y and a grid mapping, an
ensemble whose ``realization`` is an auxiliary coordinate, and bounds. Every
query is compared with the same SQL run by DuckDB over xarray's records; 2-D
predicates are also checked to read only the index box of matching cells.
"""

from __future__ import annotations

from pathlib import Path

import netCDF4
import numpy as np
import pyarrow as pa
import pyproj
import pytest
import xarray as xr

from oracle import assert_same_records, run_sql

from dstp.catalog.publish import publish
from dstp.catalog.registry import Catalog
from dstp.metadata import dataset_details, dataset_summary
from dstp.query.execute import QueryExecution, prepare_query
from dstp.settings import Settings

SETTINGS = Settings(batch_rows=500)

ROTATED = {"grid_mapping_name": "rotated_latitude_longitude",
           "grid_north_pole_latitude": 39.25, "grid_north_pole_longitude": -162.0}
LAMBERT = {"grid_mapping_name": "lambert_conformal_conic", "standard_parallel": [30.0, 60.0],
           "longitude_of_central_meridian": 10.0, "latitude_of_projection_origin": 50.0}


def _grid_file(path: Path, mapping: dict[str, object], *, with_latlon: bool, x_name: str, y_name: str,
               x: np.ndarray, y: np.ndarray, units: str) -> None:
    """Write tas(time, y, x) on a rotated or projected grid, with or without 2-D lat/lon."""
    crs = pyproj.CRS.from_cf(mapping)
    factor = 1000.0 if units == "km" else 1.0
    gx, gy = np.meshgrid(x * factor, y * factor)
    lon, lat = pyproj.Transformer.from_crs(crs, "EPSG:4326", always_xy=True).transform(gx, gy)
    rng = np.random.default_rng(3)
    with netCDF4.Dataset(path, "w") as nc:
        nc.createDimension("time", None)
        nc.createDimension(y_name, len(y))
        nc.createDimension(x_name, len(x))
        nc.createDimension("bnds", 2)
        t = nc.createVariable("time", "f8", ("time",))
        t.units, t.standard_name, t.bounds = "days since 2001-01-01", "time", "time_bnds"
        t[:] = [0.5, 1.5, 2.5]
        tb = nc.createVariable("time_bnds", "f8", ("time", "bnds"))
        tb[:] = [[0, 1], [1, 2], [2, 3]]
        std_x, std_y = ("grid_longitude", "grid_latitude") if units == "degrees" else \
            ("projection_x_coordinate", "projection_y_coordinate")
        xv = nc.createVariable(x_name, "f8", (x_name,))
        xv.standard_name, xv.units, xv.axis = std_x, units, "X"
        xv[:] = x
        yv = nc.createVariable(y_name, "f8", (y_name,))
        yv.standard_name, yv.units, yv.axis = std_y, units, "Y"
        yv[:] = y
        gm = nc.createVariable("crs", "i4", ())
        for k, v in mapping.items():
            gm.setncattr(k, v)
        tas = nc.createVariable("tas", "f4", ("time", y_name, x_name), fill_value=np.float32(1e20))
        tas.units, tas.standard_name, tas.grid_mapping = "K", "air_temperature", "crs"
        values = (270 + 30 * rng.random((3, len(y), len(x)))).astype(np.float32)
        values[rng.random(values.shape) < 0.05] = 1e20
        tas[:] = values
        if with_latlon:
            tas.coordinates = "lat lon"
            la = nc.createVariable("lat", "f8", (y_name, x_name))
            la.standard_name, la.units = "latitude", "degrees_north"
            la[:] = lat
            lo = nc.createVariable("lon", "f8", (y_name, x_name))
            lo.standard_name, lo.units = "longitude", "degrees_east"
            lo[:] = lon


@pytest.fixture(scope="module")
def grids(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("grids")
    cases = {
        "rotpole": (ROTATED, True, "rlon", "rlat", np.linspace(-12, 12, 60), np.linspace(-10, 10, 50), "degrees"),
        "lambert": (LAMBERT, True, "x", "y", np.arange(45) * 50.0 - 1100, np.arange(40) * 50.0 - 1000, "km"),
        "projected": (LAMBERT, False, "x", "y", np.arange(45) * 50.0 - 1100, np.arange(40) * 50.0 - 1000, "km"),
    }
    for name, (mapping, latlon, xn, yn, x, y, units) in cases.items():
        folder = root / name
        folder.mkdir()
        _grid_file(folder / f"{name}.nc", mapping, with_latlon=latlon, x_name=xn, y_name=yn, x=x, y=y, units=units)
        publish([folder / f"{name}.nc"], name)
    _ensemble(root / "ensemble")
    return root


def _ensemble(folder: Path) -> None:
    folder.mkdir()
    path = folder / "ens.nc"
    with netCDF4.Dataset(path, "w") as nc:
        nc.createDimension("member", 4)
        nc.createDimension("leadtime", 3)
        nc.createDimension("lat", 5)
        r = nc.createVariable("realization", "i4", ("member",))
        r.standard_name = "realization"
        r[:] = [0, 1, 2, 7]
        lt = nc.createVariable("leadtime", "f8", ("leadtime",))
        lt.units, lt.standard_name = "hours", "forecast_period"
        lt[:] = [6, 12, 24]
        la = nc.createVariable("lat", "f4", ("lat",))
        la.units, la.standard_name = "degrees_north", "latitude"
        la[:] = np.linspace(40, 60, 5)
        v = nc.createVariable("t2m", "f4", ("member", "leadtime", "lat"))
        v.units, v.coordinates = "K", "realization"
        v[:] = np.arange(60, dtype=np.float32).reshape(4, 3, 5) + 250
    publish([path], "ensemble")


@pytest.fixture(scope="module")
def catalog(grids: Path) -> Catalog:
    cat = Catalog.scan(grids)
    assert not cat.problems, cat.problems
    yield cat
    cat.close()


def answer(catalog: Catalog, sql: str) -> tuple[pa.Table, QueryExecution]:
    prepared = prepare_query(sql, catalog, SETTINGS)
    execution = QueryExecution(prepared, SETTINGS)
    return pa.Table.from_batches(list(execution.batches()), schema=prepared.schema), execution


def truth(grids: Path, name: str, variables: list[str]) -> object:
    with xr.open_dataset(next((grids / name).glob("*.nc"))) as ds:
        return ds[variables].load()


@pytest.mark.parametrize("name, x, y", [("rotpole", "rlon", "rlat"), ("lambert", "x", "y")])
def test_two_d_latitude_longitude_are_columns_and_prune_to_their_index_box(
    catalog: Catalog, grids: Path, name: str, x: str, y: str
) -> None:
    ds = truth(grids, name, ["tas"])
    frame = ds.to_dataframe(dim_order=["time", y, x]).reset_index()
    frame["time"] = frame["time"].astype("datetime64[us]")
    sql = f"select time, lat, lon, tas from {name} where lat between 50.5 and 52.5 and lon < 15"
    got, execution = answer(catalog, sql)
    want = run_sql(frame[["time", y, x, "lat", "lon", "tas"]], sql, name)
    assert want.num_rows > 0
    assert_same_records(got, want)
    # Read counters: every matching cell was read, nothing outside their index box, all time steps.
    inside = (ds.lat >= 50.5) & (ds.lat <= 52.5) & (ds.lon < 15)
    rows = np.flatnonzero(inside.any(x).values)
    cols = np.flatnonzero(inside.any(y).values)
    box = (rows[-1] - rows[0] + 1) * (cols[-1] - cols[0] + 1) * 3
    assert int(inside.sum()) * 3 <= execution.summary.stats.elements <= box
    assert box < ds.tas.size / 4
    # select * lists the 2-D coordinates after the grid's own
    star, _ = answer(catalog, f"select * from {name} limit 1")
    assert star.column_names == ["time", y, x, "lat", "lon", "tas"]


def test_a_latitude_band_across_a_rotated_grid_is_read_as_strips_in_grid_order(tmp_path: Path) -> None:
    # EUR-11's grid: a band of latitude crosses it diagonally, so its index box is mostly outside the band.
    rlon = -28.375 + 0.11 * np.arange(424)
    rlat = -23.375 + 0.11 * np.arange(412)
    _grid_file(tmp_path / "eur11.nc", ROTATED, with_latlon=True, x_name="rlon", y_name="rlat", x=rlon, y=rlat,
               units="degrees")
    publish([tmp_path / "eur11.nc"], "eur11")
    cat = Catalog.scan(tmp_path)
    sql = "select time, rlat, rlon, lat, tas from eur11 where lat between 50 and 52"
    got, execution = answer(cat, sql)
    with xr.open_dataset(tmp_path / "eur11.nc") as ds:
        ds.load()
    frame = ds[["tas"]].to_dataframe(dim_order=["time", "rlat", "rlon"]).reset_index()
    frame["time"] = frame["time"].astype("datetime64[us]")
    assert_same_records(got, run_sql(frame[["time", "rlat", "rlon", "lat", "lon", "tas"]], sql, "eur11"),
                        ordered=True)
    inside = (ds.lat >= 50) & (ds.lat <= 52)
    rows = np.flatnonzero(inside.any("rlon").values)
    cols = np.flatnonzero(inside.any("rlat").values)
    box = (rows[-1] - rows[0] + 1) * (cols[-1] - cols[0] + 1) * 3
    elements = execution.summary.stats.elements
    assert int(inside.sum()) * 3 <= elements < 0.6 * box
    assert len(execution.prepared.plan.hyperslab.strips) > 1
    cat.close()


def test_a_projected_grid_without_lat_lon_gets_derived_lat_lon(catalog: Catalog, grids: Path) -> None:
    ds = truth(grids, "projected", ["tas"])
    crs = pyproj.CRS.from_cf(LAMBERT)
    gx, gy = np.meshgrid(ds.x.values * 1000.0, ds.y.values * 1000.0)
    lon, lat = pyproj.Transformer.from_crs(crs, "EPSG:4326", always_xy=True).transform(gx, gy)
    ds = ds.assign(lat=(("y", "x"), lat), lon=(("y", "x"), lon))
    frame = ds.to_dataframe(dim_order=["time", "y", "x"]).reset_index()
    frame["time"] = frame["time"].astype("datetime64[us]")
    sql = "select x, y, lat, lon, tas from projected where lat > 55 and lon between 0 and 20 and tas > 280"
    got, execution = answer(catalog, sql)
    assert_same_records(got, run_sql(frame, sql, "projected"))
    assert execution.summary.stats.elements < ds.tas.size
    details = dataset_details(catalog.get("projected"))
    derived = {c.name: c for c in details.coordinates if c.role == "derived"}
    assert set(derived) == {"lat", "lon"} and "pyproj" in derived["lat"].note


def _same_crs(wkt: str, cf: dict[str, object]) -> bool:
    """Return whether a WKT CRS maps grid points to the same longitudes/latitudes as the CF parameters do."""
    points = ([-12.0, 0.0, 12.0], [-10.0, 0.0, 10.0])
    ours = pyproj.Transformer.from_crs(pyproj.CRS.from_wkt(wkt), "EPSG:4326", always_xy=True).transform(*points)
    theirs = pyproj.Transformer.from_crs(pyproj.CRS.from_cf(cf), "EPSG:4326", always_xy=True).transform(*points)
    return bool(np.allclose(ours, theirs, atol=1e-9))


def test_grid_mappings_travel_with_describe_and_the_result_schema(catalog: Catalog) -> None:
    details = dataset_details(catalog.get("rotpole"))
    (gm,) = details.grid_mappings
    assert gm.name == "crs" and gm.grid_mapping_name == "rotated_latitude_longitude"
    assert _same_crs(gm.wkt, ROTATED)
    assert "ob_tran" in gm.proj
    table, _ = answer(catalog, "select tas from rotpole limit 1")
    assert _same_crs(table.schema.metadata[b"dstp:crs_wkt:crs"].decode(), ROTATED)
    assert table.schema.field("tas").metadata[b"grid_mapping"] == b"crs"
    bbox = dataset_summary(catalog.get("rotpole")).bbox
    ds_lat = xr.open_dataset(next(Path(catalog.get("rotpole").files[0].path).parent.glob("*.nc")))
    assert bbox == pytest.approx((float(ds_lat.lat.min()), float(ds_lat.lat.max()),
                                  float(ds_lat.lon.min()), float(ds_lat.lon.max())))
    ds_lat.close()


def test_an_ensemble_realization_is_an_auxiliary_coordinate(catalog: Catalog, grids: Path) -> None:
    ds = truth(grids, "ensemble", ["t2m"])
    frame = ds.to_dataframe(dim_order=["member", "leadtime", "lat"]).reset_index()
    sql = "select realization, lat, t2m from ensemble where realization = 7 and lat > 45"
    got, _ = answer(catalog, sql)
    want = run_sql(frame, sql, "ensemble")
    assert want.num_rows == 3 * 3  # three lead times × three latitudes
    assert_same_records(got, want)


def test_bounds_are_visible_and_selectable_by_documented_names(catalog: Catalog, grids: Path) -> None:
    details = dataset_details(catalog.get("rotpole"))
    bounds = {c.name: c for c in details.coordinates if c.role == "bounds"}
    assert set(bounds) == {"time_lower", "time_upper"}
    got, _ = answer(catalog, "select time, time_lower, time_upper from rotpole")
    with xr.open_dataset(next((grids / "rotpole").glob("*.nc"))) as ds:
        want_lower = ds.time_bnds.values[:, 0].astype("datetime64[us]")
        want_upper = ds.time_bnds.values[:, 1].astype("datetime64[us]")
    assert got.column("time_lower").to_numpy().tolist() == want_lower.tolist()
    assert got.column("time_upper").to_numpy().tolist() == want_upper.tolist()
    star, _ = answer(catalog, "select * from rotpole limit 1")
    assert "time_lower" not in star.column_names  # bounds only on request


def _geodesic_cell_areas(mapping: dict[str, object], x: np.ndarray, y: np.ndarray, factor: float) -> np.ndarray:
    """Return each (y, x) cell's area on the CRS's own ellipsoid: the geodesic polygon through its four corners
    (midway to the neighbours on the map) — computed apart from dstp's scale-factor formula."""
    crs = pyproj.CRS.from_cf(mapping)
    to_lonlat = pyproj.Transformer.from_crs(crs, crs.geodetic_crs, always_xy=True)
    geod = crs.get_geod()
    assert geod is not None

    def edges(v: np.ndarray) -> np.ndarray:
        mid = (v[1:] + v[:-1]) / 2
        return np.concatenate([[2 * v[0] - mid[0]], mid, [2 * v[-1] - mid[-1]]]) * factor

    xe, ye = edges(x), edges(y)
    areas = np.empty((len(y), len(x)))
    for j in range(len(y)):
        for i in range(len(x)):
            lon, lat = to_lonlat.transform([xe[i], xe[i + 1], xe[i + 1], xe[i]], [ye[j], ye[j], ye[j + 1], ye[j + 1]])
            areas[j, i] = abs(geod.polygon_area_perimeter(lon, lat)[0])
    return areas


@pytest.mark.parametrize("name, mapping, x, y", [("rotpole", ROTATED, "rlon", "rlat"), ("lambert", LAMBERT, "x", "y"),
                                                 ("projected", LAMBERT, "x", "y")])
def test_area_weight_on_rotated_and_projected_grids_weights_by_cell_area(
    catalog: Catalog, grids: Path, name: str, mapping: dict[str, object], x: str, y: str
) -> None:
    # cos(2-D latitude) is not proportional to these cells' areas; the true areas of the cells are.
    ds = truth(grids, name, ["tas"])
    factor = 1.0 if name == "rotpole" else 1000.0
    areas = _geodesic_cell_areas(mapping, ds[x].values, ds[y].values, factor)
    weights = xr.DataArray(areas, dims=(y, x))
    want = ds.tas.weighted(weights).mean((y, x)).values
    got, _ = answer(catalog, f"select time, weighted_avg(tas, area_weight) as m from {name} group by time order by time")
    np.testing.assert_allclose(got.column("m").to_numpy(), want, rtol=2e-6)
    cos_lat = ds.tas.weighted(np.cos(np.deg2rad(ds.lat)) if "lat" in ds else weights).mean((y, x)).values
    assert name == "projected" or not np.allclose(cos_lat, want, rtol=2e-6)  # the old weight would have failed


def test_a_two_d_latitude_without_a_grid_mapping_has_no_area_weight_and_says_why(tmp_path: Path) -> None:
    path = tmp_path / "curvi.nc"
    _grid_file(path, LAMBERT, with_latlon=True, x_name="x", y_name="y", x=np.arange(5) * 50.0, y=np.arange(4) * 50.0,
               units="km")
    with netCDF4.Dataset(path, "a") as nc:
        nc["tas"].delncattr("grid_mapping")
    publish([path], "curvi")
    cat = Catalog.scan(tmp_path)
    try:
        from dstp.errors import UnknownColumnError

        with pytest.raises(UnknownColumnError, match=r"latitude lat is 2-D.*cell_measures"):
            answer(cat, "select weighted_avg(tas, area_weight) from curvi")
        assert any(w.startswith("no area_weight: ") for w in cat.get("curvi").warnings)
    finally:
        cat.close()

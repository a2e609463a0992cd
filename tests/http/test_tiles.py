"""XYZ tiles: each pixel is the colour of the grid cell under it, as xarray reads the file; access holds.

The oracle finds the nearest cell by brute force (argmin of the distance to every
centre, longitudes compared on the circle, great-circle distance on curvilinear
grids) and colours it with matplotlib; only pixels whose centre lies well inside a
cell (no tie with a neighbour) are compared, and pixels far outside a regional grid
must be transparent.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import xarray as xr

from dstp.server import DstpServer
from maps_fixtures import client, maps_server, oracle_colour, rgba  # noqa: F401

pytestmark = pytest.mark.filterwarnings("ignore::xarray.SerializationWarning")


def _pixels(z: int, x: int, y: int) -> tuple[np.ndarray, np.ndarray]:
    steps = (np.arange(256) + 0.5) / 256
    lon = (x + steps) / 2**z * 360 - 180
    lat = np.degrees(np.arctan(np.sinh(math.pi * (1 - 2 * (y + steps) / 2**z))))
    return np.broadcast_to(lon, (256, 256)), np.broadcast_to(lat[:, None], (256, 256))


def _nearest_rectilinear(field: xr.DataArray, lon: np.ndarray, lat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return the oracle values under each pixel and a mask of pixels well inside one cell."""
    lats, lons = field.lat.values.astype(np.float64), field.lon.values.astype(np.float64)
    dlat = np.abs(lat[..., None] - lats)
    dlon = np.abs((lon[..., None] - lons + 180) % 360 - 180)
    i, j = dlat.argmin(-1), dlon.argmin(-1)
    step_lat, step_lon = np.abs(np.diff(lats)).min(), np.abs(np.diff(lons)).min()
    clear = (np.take_along_axis(dlat, i[..., None], -1)[..., 0] < 0.45 * step_lat) & \
            (np.take_along_axis(dlon, j[..., None], -1)[..., 0] < 0.45 * step_lon)
    return field.values.astype(np.float64)[i, j], clear


CASES = [  # dataset, variable, file, file variable, query, time index, level
    ("ccm3", "temperature", "ccm3/ccm3_1990-01.nc", "T", 1, 2),
    ("ocean", "temperature", "ocean/ocean_2000-01.nc", "thetao", 2, 1),  # descending lat, land NaN, 360_day
]


@pytest.mark.parametrize("dataset, variable, path, name, t, k", CASES)
@pytest.mark.parametrize("z, x, y", [(0, 0, 0), (2, 1, 1), (3, 6, 2), (4, 15, 9)])
@pytest.mark.parametrize("explicit_range", [True, False])
def test_tile_pixels_have_the_colour_of_the_oracle_cell(maps_server, catalog_root, dataset, variable, path, name,
                                                        t, k, z, x, y, explicit_range) -> None:
    srv, tokens = maps_server
    with xr.open_dataset(catalog_root / path, decode_times=False) as ds:
        full = ds[name].isel(time=t)
        level_dim = [d for d in full.dims if d not in ("lat", "lon")][0]
        field = full.isel({level_dim: k}).load()
        time_text = xr.decode_cf(ds[["time"]]).time.values[t].isoformat()
        level = float(ds[level_dim].values[k])
    finite = field.values[np.isfinite(field.values)].astype(np.float64)
    vmin, vmax = (float(finite.min()) + 1, float(finite.max()) - 1) if explicit_range else \
        (float(finite.min()), float(finite.max()))
    params = {"time": time_text, "elevation": str(level), "colormap": "plasma"}
    if explicit_range:
        params |= {"vmin": str(vmin), "vmax": str(vmax)}
    with client(srv, tokens["alice"]) as http:
        answer = http.get(f"/tiles/{dataset}/{variable}/{z}/{x}/{y}.png", params=params)
    assert answer.status_code == 200, answer.text
    image = rgba(answer.content)
    assert image.shape == (256, 256, 4)
    lon, lat = _pixels(z, x, y)
    expected, clear = _nearest_rectilinear(field, lon, lat)
    missing = ~np.isfinite(expected)
    coloured = oracle_colour(np.where(missing, vmin, expected), "plasma", vmin, vmax)
    compared = clear & ~missing
    assert compared.sum() > 300
    assert (image[compared] == coloured[compared]).all()
    assert (image[clear & missing][:, 3] == 0).all()  # land: transparent
    if dataset == "ocean" and z == 0:
        assert (clear & missing).any()


def test_rotated_pole_tiles_draw_each_cell_where_it_lies_and_nothing_beyond(maps_server, tmp_path) -> None:
    srv, _ = maps_server
    with xr.open_dataset(srv.settings.catalog_root / "rot" / "rot.nc", decode_times=False) as ds:
        field = ds["tas"].isel(time=1).values.astype(np.float64)
        glat, glon = ds["lat"].values, ds["lon"].values
    vmin, vmax = float(field.min()), float(field.max())
    # EUR-11's grid over Europe: zoom 3 tiles x 3..4, y 2..3 cover it
    checked = outside = 0
    for x, y in [(3, 2), (4, 2), (3, 3), (4, 3)]:
        with client(srv) as http:
            answer = http.get(f"/tiles/rot/tas/3/{x}/{y}.png", params={"time": "2001-01-02"})
        assert answer.status_code == 200, answer.text
        image = rgba(answer.content)
        lon, lat = (a[::4, ::4] for a in _pixels(3, x, y))
        px = np.radians(np.stack([lat.ravel(), lon.ravel()], -1))
        cells = np.radians(np.stack([glat.ravel(), glon.ravel()], -1))
        # haversine from every probed pixel to every cell centre
        d = np.sin((px[:, None, 0] - cells[None, :, 0]) / 2) ** 2 + np.cos(px[:, None, 0]) * \
            np.cos(cells[None, :, 0]) * np.sin((px[:, None, 1] - cells[None, :, 1]) / 2) ** 2
        dist = 2 * np.arcsin(np.sqrt(d))
        order = np.sort(dist, axis=1)
        nearest = dist.argmin(1)
        spacing = np.radians(20 / 29) * 0.99  # rlat spacing, degrees on the rotated sphere
        sub = image[::4, ::4].reshape(-1, 4)
        inside = (order[:, 0] < 0.3 * spacing) & (order[:, 1] > 1.3 * order[:, 0])
        want = oracle_colour(field.ravel()[nearest], "viridis", vmin, vmax)
        assert (sub[inside] == want[inside]).all()
        far = order[:, 0] > 2 * spacing
        assert (sub[far][:, 3] == 0).all()
        checked += int(inside.sum())
        outside += int(far.sum())
    assert checked > 200 and outside > 200


def _haversine(lat: np.ndarray, lon: np.ndarray, glat: np.ndarray, glon: np.ndarray) -> np.ndarray:
    """Return the great-circle distance (radians) from every point to every cell centre."""
    px, cells = np.radians(np.stack([lat, lon], -1)), np.radians(np.stack([glat, glon], -1))
    d = np.sin((px[:, None, 0] - cells[None, :, 0]) / 2) ** 2 + np.cos(px[:, None, 0]) * \
        np.cos(cells[None, :, 0]) * np.sin((px[:, None, 1] - cells[None, :, 1]) / 2) ** 2
    return np.asarray(2 * np.arcsin(np.sqrt(d)))


@pytest.mark.parametrize("x, y", [(11, 7), (11, 8), (12, 8)])  # zoom 4: the grid spans 60…134°E, 32°S…27°N
def test_a_curvilinear_grid_on_index_dimensions_is_drawn_where_its_latitudes_and_longitudes_lie(maps_server,
                                                                                                x, y) -> None:
    """NEMO-like: nav_lat(y, x)/nav_lon(y, x) on dimensions with no axis of their own (was refused: 'no
    attribute 'sst' on a latitude/longitude grid to map')."""
    srv, _ = maps_server
    with xr.open_dataset(srv.settings.catalog_root / "curv" / "curv.nc", decode_times=False) as ds:
        field = ds["sst"].isel(time_counter=1).values.astype(np.float64)
        glat, glon = ds["nav_lat"].values.ravel(), ds["nav_lon"].values.ravel()
    vmin, vmax = float(field.min()), float(field.max())
    with client(srv) as http:
        answer = http.get(f"/tiles/curv/sst/4/{x}/{y}.png", params={"time": "1990-02-01", "vmin": str(vmin),
                                                                     "vmax": str(vmax)})
    assert answer.status_code == 200, answer.text
    sub = rgba(answer.content)[::4, ::4].reshape(-1, 4)
    lon, lat = (a[::4, ::4].ravel() for a in _pixels(4, x, y))
    dist = _haversine(lat, lon, glat, glon)
    order = np.sort(dist, axis=1)
    spacing = np.radians(1.2 * 0.9)  # the smallest step between neighbouring centres is about 1.2°
    inside = (order[:, 0] < 0.3 * spacing) & (order[:, 1] > 1.3 * order[:, 0])
    want = oracle_colour(field.ravel()[dist.argmin(1)], "viridis", vmin, vmax)
    assert inside.sum() > 50
    assert (sub[inside] == want[inside]).all()
    far = order[:, 0] > 2 * spacing
    assert (sub[far][:, 3] == 0).all()


def test_the_series_under_a_point_of_a_curvilinear_grid_on_index_dimensions_is_its_cells(maps_server) -> None:
    srv, _ = maps_server
    with xr.open_dataset(srv.settings.catalog_root / "curv" / "curv.nc", decode_times=False) as ds:
        lat, lon = float(ds["nav_lat"].values[12, 20]), float(ds["nav_lon"].values[12, 20])
        expected = [float(v) for v in ds["sst"].values[:, 12, 20]]
    with client(srv) as http:
        got = http.get("/datasets/curv/series.json", params={"variable": "sst", "lat": lat + 0.01,
                                                             "lon": lon - 0.01}).json()
    assert got["cell"] == {"lat": lat, "lon": lon}
    assert got["values"] == expected and len(got["time"]) == 2


@pytest.mark.parametrize("who, status", [("alice", 200), ("bob", 404), ("", 404)])
def test_a_restricted_datasets_tiles_are_not_found_for_others(maps_server, who, status) -> None:
    srv, tokens = maps_server
    with client(srv, tokens.get(who, "")) as http:
        # twice: the second answer would come from the cache if access were not asked first
        for _ in range(2):
            answer = http.get("/tiles/ocean/temperature/1/0/0.png")
            assert answer.status_code == status, answer.text
        if status == 404:
            assert "ocean" in answer.json()["error"]["message"]
    with client(srv, tokens["alice"]) as http:
        assert http.get("/tiles/ocean/temperature/1/0/0.png").headers["cache-control"].startswith("private")


@pytest.mark.parametrize("url, words", [
    ("/tiles/ccm3/temperature/31/0/0.png", "zoom 31 is out of range"),
    ("/tiles/ccm3/temperature/2/4/0.png", "tile 2/4/0 does not exist"),
    ("/tiles/ccm3/temperature/0/0/0.png?colormap=rainbowish", "colour map 'rainbowish' is not offered"),
    ("/tiles/ccm3/temperature/0/0/0.png?vmin=5&vmax=1", "vmin=5.0 and vmax=1.0"),
    ("/tiles/ccm3/gw/0/0/0.png", "no attribute 'gw' on a latitude/longitude grid"),
])
def test_bad_tile_requests_are_refused_with_what_to_fix(maps_server, url, words) -> None:
    srv, _ = maps_server
    with client(srv) as http:
        answer = http.get(url)
    assert answer.status_code == 400, answer.text
    assert words in answer.json()["error"]["message"]


def test_the_series_under_a_point_is_the_cells_values_over_every_file(maps_server, catalog_root) -> None:
    srv, _ = maps_server
    times, values = [], []
    for path in sorted((catalog_root / "ccm3").glob("*.nc")):
        with xr.open_dataset(path) as ds:  # each file decoded on its own
            cell = ds["T"].isel(lev=3).sel(lat=ds.lat.values[7], lon=ds.lon.values[50])
            times += [t.isoformat().replace(" ", "T") for t in ds.time.values]
            values += [float(v) for v in cell.values]
            lat, lon = float(ds.lat.values[7]), float(ds.lon.values[50])
            level = float(ds.lev.values[3])
    with client(srv) as http:
        # a point inside the cell, on −180…180 though the file's longitudes run 0…360
        answer = http.get("/datasets/ccm3/series.json", params={"variable": "temperature", "lat": lat + 1.0,
                                                                "lon": lon - 360 - 1.5, "elevation": level})
    assert answer.status_code == 200, answer.text
    got = answer.json()
    assert got["cell"] == {"lat": lat, "lon": lon}
    assert list(zip(got["time"], got["values"])) == sorted(zip(times, values))


def test_a_grid_on_rotated_axes_without_latitude_longitude_is_refused_not_misplaced(maps_server) -> None:
    srv, _ = maps_server
    with client(srv) as http:
        answer = http.get("/tiles/rotonly/tas/0/0/0.png")
        assert answer.status_code == 400, answer.text
        assert "rotonly has no attribute 'tas' on a latitude/longitude grid" in answer.json()["error"]["message"]
        assert answer.json()["error"]["message"].endswith("none")


def test_the_series_under_a_point_of_a_rotated_grid_is_its_cells(maps_server) -> None:
    srv, _ = maps_server
    with xr.open_dataset(srv.settings.catalog_root / "rot" / "rot.nc", decode_times=False) as ds:
        lat, lon = float(ds["lat"].values[12, 20]), float(ds["lon"].values[12, 20])
        expected = [float(v) for v in ds["tas"].values[:, 12, 20]]
    with client(srv) as http:
        got = http.get("/datasets/rot/series.json", params={"variable": "tas", "lat": lat + 0.01,
                                                            "lon": lon - 0.01}).json()
    assert got["cell"] == {"lat": lat, "lon": lon}
    assert got["values"] == expected and len(got["time"]) == 2


#: Grids on a grid mapping's axes: dataset, variable, file, y axis, x axis, grid mapping variable.
PROJECTED = [
    ("polar", "sic", "polar/polar.nc", "y", "x", "crs"),  # polar stereographic, metres, derived lat/lon
    ("polarkm", "sic", "polarkm/polar.nc", "y", "x", "crs"),  # the same grid with x/y in km
    ("rot", "tas", "rot/rot.nc", "rlat", "rlon", "rotated_pole"),  # rotated pole with the file's 2-D lat/lon
    ("rotgm", "tas", "rotgm/rotgm.nc", "rlat", "rlon", "rotated_pole"),  # rotated pole, grid mapping only
]


@pytest.mark.parametrize("dataset, variable, path, y_name, x_name, mapping", PROJECTED)
@pytest.mark.parametrize("z, x, y", [(1, 0, 0), (1, 1, 0), (2, 1, 0), (3, 3, 2), (3, 4, 2), (4, 8, 5)])
def test_a_tile_of_a_grid_mapping_grid_has_the_colour_of_the_cell_on_the_files_own_axes(
        maps_server, dataset, variable, path, y_name, x_name, mapping, z, x, y) -> None:
    """Oracle: pyproj carries each pixel centre into the CRS of the file's grid mapping (CRS.from_cf of its
    attributes), and the cell is the nearest x and the nearest y of the file's own axes (brute force)."""
    import pyproj

    srv, _ = maps_server
    with xr.open_dataset(srv.settings.catalog_root / path, decode_times=False) as ds:
        field = ds[variable].isel(time=0).values.astype(np.float64)
        ys, xs = ds[y_name].values.astype(np.float64), ds[x_name].values.astype(np.float64)
        crs = pyproj.CRS.from_cf(ds[mapping].attrs)
        unit = 1000.0 if ds[x_name].attrs.get("units") == "km" else 1.0
    vmin, vmax = float(np.nanmin(field)), float(np.nanmax(field))
    with client(srv) as http:
        answer = http.get(f"/tiles/{dataset}/{variable}/{z}/{x}/{y}.png",
                          params={"vmin": vmin, "vmax": vmax, "colormap": "turbo"})
    assert answer.status_code == 200, answer.text
    image = rgba(answer.content)
    lon, lat = _pixels(z, x, y)
    gx, gy = pyproj.Transformer.from_crs("EPSG:4326", crs, always_xy=True).transform(lon, lat)
    gx, gy = np.asarray(gx) / unit, np.asarray(gy) / unit
    dy = np.abs(gy[..., None] - ys)
    dx = np.abs(gx[..., None] - xs) if crs.is_projected else np.abs((gx[..., None] - xs + 180) % 360 - 180)
    i, j = dy.argmin(-1), dx.argmin(-1)
    near_y, near_x = np.take_along_axis(dy, i[..., None], -1)[..., 0], np.take_along_axis(dx, j[..., None], -1)[..., 0]
    step_y, step_x = np.abs(np.diff(ys)).min(), np.abs(np.diff(xs)).min()
    clear = (near_y < 0.45 * step_y) & (near_x < 0.45 * step_x)  # no tie with a neighbouring cell
    outside = (near_y > 0.55 * step_y) | (near_x > 0.55 * step_x)  # beyond half a cell past the grid
    want = oracle_colour(field[i, j], "turbo", vmin, vmax)
    assert (image[clear] == want[clear]).all(), int((image[clear] != want[clear]).any(-1).sum())
    assert (image[outside][:, 3] == 0).all()
    assert clear.sum() + outside.sum() > 0.8 * 256 * 256
    if (z, x, y) == ((1, 0, 0) if dataset.startswith("polar") else (3, 4, 2)):
        assert clear.sum() > 1000, "the tile shows the grid"

"""Archives for the map tests: four grids a map must draw where they lie, each with a land-mask-like pattern.

Every field is a function of true latitude and longitude (``pattern``), so a
test can compute what colour a place must have without reading our output:

- ``rect``: rectilinear, latitude descending, longitude 0…360, ``360_day``
  calendar, two levels; the pattern moves east by 90° with each time step.
- ``rot``: a CORDEX-like rotated-pole grid over Europe (2-D lat/lon, grid mapping).
- ``polar``: a polar stereographic grid of the Arctic (x/y in metres, grid mapping only:
  the catalog derives latitude and longitude with pyproj).
- ``curv``: a curvilinear ocean-model-like grid (2-D nav_lat/nav_lon on index dimensions y, x, no grid
  mapping), sheared and turned: ``CURV`` gives latitude and longitude as affine functions of (j, i).
- ``stations``: a CF timeSeries table of three stations.
- ``mesh``: a UGRID mesh (``builders.ugrid_split``): values on 6 nodes over 3 times.
"""

from __future__ import annotations

from pathlib import Path

import netCDF4
import numpy as np

from builders import rotated_pole, ugrid_split  # tests/ is on sys.path (tests/conftest.py)
from dstp.catalog.publish import publish

#: Polar stereographic, north, like NSIDC's EPSG:3413.
POLAR = {"grid_mapping_name": "polar_stereographic", "straight_vertical_longitude_from_pole": -45.0,
         "latitude_of_projection_origin": 90.0, "standard_parallel": 70.0, "false_easting": 0.0,
         "false_northing": 0.0, "semi_major_axis": 6378137.0, "inverse_flattening": 298.257223563}

#: Station positions (lat, lon) and their values at the first time.
STATIONS = {"ALERT": (82.5, -62.3), "OSLO": (59.9, 10.7), "LIMA": (-12.0, -77.0)}


def pattern(lat: np.ndarray, lon: np.ndarray, shift: float = 0.0) -> np.ndarray:
    """Return 10 where the longitude (shifted east by ``shift``) is in the quadrant 0…90°E, else 0, plus lat/100.

    Two levels far apart make a colour any reader can tell; lat/100 keeps a gradient inside each.
    """
    east = np.mod(np.asarray(lon) - shift, 360.0)
    return np.where(east < 90.0, 10.0, 0.0) + np.asarray(lat) / 100.0


def write_rect(folder: Path) -> Path:
    folder.mkdir(parents=True)
    lat = np.linspace(87.5, -87.5, 36)  # descending
    lon = np.arange(0.0, 360.0, 5.0) + 2.5  # 0…360
    path = folder / "rect.nc"
    with netCDF4.Dataset(path, "w") as nc:
        nc.createDimension("time", None)
        nc.createDimension("lev", 2)
        nc.createDimension("lat", len(lat))
        nc.createDimension("lon", len(lon))
        t = nc.createVariable("time", "f8", ("time",))
        t.units, t.calendar, t.standard_name, t.axis = "days since 2000-01-01", "360_day", "time", "T"
        t[:] = [0.0, 30.0, 60.0]
        lev = nc.createVariable("lev", "f8", ("lev",))
        lev.units, lev.positive, lev.axis, lev.standard_name = "hPa", "down", "Z", "air_pressure"
        lev[:] = [850.0, 500.0]
        for name, values, std, units in (("lat", lat, "latitude", "degrees_north"),
                                         ("lon", lon, "longitude", "degrees_east")):
            v = nc.createVariable(name, "f8", (name,))
            v.units, v.standard_name = units, std
            v[:] = values
        mask = nc.createVariable("mask", "f4", ("time", "lev", "lat", "lon"), fill_value=np.float32(-999))
        mask.units, mask.long_name = "1", "land-mask-like pattern"
        glat, glon = np.meshgrid(lat, lon, indexing="ij")
        for k in range(3):
            for j, offset in enumerate((0.0, 100.0)):
                mask[k, j] = pattern(glat, glon, 90.0 * k) + offset
        nc.title = "A rectilinear test grid"
    publish([path], "rect")
    return path


def write_rot(folder: Path) -> Path:
    folder.mkdir(parents=True)
    path = rotated_pole(folder / "rot.nc", "tas", lambda la, lo: pattern(la, lo)[None] * np.ones((2, 1, 1)),
                        rlat=np.linspace(-20, 20, 60), rlon=np.linspace(-25, 25, 70), times=[0, 1], units="K")
    publish([path], "rot")
    return path


def write_polar(folder: Path, km: bool = False) -> Path:
    """Write ``polar.nc`` (x/y in metres, or in km with ``km``) and publish it as the folder's name."""
    import pyproj

    folder.mkdir(parents=True)
    x = np.arange(-3_000_000.0, 3_000_001.0, 100_000.0)
    y = np.arange(3_000_000.0, -3_000_001.0, -100_000.0)  # north-up, descending like NSIDC grids
    gx, gy = np.meshgrid(x, y)
    lon, lat = pyproj.Transformer.from_crs(pyproj.CRS.from_cf(POLAR), "EPSG:4326", always_xy=True).transform(gx, gy)
    path = folder / "polar.nc"
    with netCDF4.Dataset(path, "w") as nc:
        nc.createDimension("time", 1)
        nc.createDimension("y", len(y))
        nc.createDimension("x", len(x))
        t = nc.createVariable("time", "f8", ("time",))
        t.units, t.standard_name = "days since 2020-01-01", "time"
        t[:] = [0.0]
        for name, values in (("x", x), ("y", y)):
            v = nc.createVariable(name, "f8", (name,))
            v.units, v.standard_name, v.axis = "km" if km else "m", f"projection_{name}_coordinate", name.upper()
            v[:] = values / 1000 if km else values
        crs = nc.createVariable("crs", "i4", ())
        for k, v in POLAR.items():
            crs.setncattr(k, v)
        sic = nc.createVariable("sic", "f4", ("time", "y", "x"))
        sic.units, sic.grid_mapping, sic.long_name = "1", "crs", "sea-ice-like pattern"
        sic[0] = pattern(lat, lon)
    publish([path], folder.name)
    return path


#: The curvilinear grid: lon = lon0 + a·i + b·j, lat = lat0 + c·j + d·i over ny × nx cells.
CURV = {"lon0": 60.0, "a": 1.5, "b": 0.4, "lat0": -20.0, "c": 1.2, "d": -0.3, "ny": 40, "nx": 40}


def curv_lonlat(j: np.ndarray, i: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return longitude and latitude of the curvilinear grid at (fractional) row j, column i."""
    return (CURV["lon0"] + CURV["a"] * i + CURV["b"] * j, CURV["lat0"] + CURV["c"] * j + CURV["d"] * i)


def curv_index(lon: float, lat: float) -> tuple[float, float]:
    """Return the fractional (row j, column i) of a place on the curvilinear grid (the affine map inverted)."""
    m = np.array([[CURV["b"], CURV["a"]], [CURV["c"], CURV["d"]]])
    j, i = np.linalg.solve(m, np.array([lon - CURV["lon0"], lat - CURV["lat0"]]))
    return float(j), float(i)


def write_curv(folder: Path) -> Path:
    folder.mkdir(parents=True)
    j, i = np.meshgrid(np.arange(CURV["ny"], dtype=float), np.arange(CURV["nx"], dtype=float), indexing="ij")
    lon, lat = curv_lonlat(j, i)
    path = folder / "curv.nc"
    with netCDF4.Dataset(path, "w") as nc:
        nc.createDimension("time_counter", 2)
        nc.createDimension("y", CURV["ny"])
        nc.createDimension("x", CURV["nx"])
        t = nc.createVariable("time_counter", "f8", ("time_counter",))
        t.units, t.standard_name = "days since 1990-01-01", "time"
        t[:] = [0.0, 31.0]
        for name, values, std, units in (("nav_lat", lat, "latitude", "degrees_north"),
                                         ("nav_lon", lon, "longitude", "degrees_east")):
            v = nc.createVariable(name, "f8", ("y", "x"))
            v.standard_name, v.units = std, units
            v[:] = values
        sst = nc.createVariable("sst", "f4", ("time_counter", "y", "x"))
        sst.units, sst.coordinates = "degC", "nav_lat nav_lon"
        sst[0] = pattern(lat, lon)
        sst[1] = pattern(lat, lon) + 1.0
    publish([path], "curv")
    return path


def write_stations(folder: Path) -> Path:
    folder.mkdir(parents=True)
    counts = [3, 1, 4]
    path = folder / "stations.nc"
    with netCDF4.Dataset(path, "w") as nc:
        nc.featureType = "timeSeries"
        nc.createDimension("station", 3)
        nc.createDimension("obs", sum(counts))
        nc.createDimension("name_strlen", 8)
        name = nc.createVariable("station_name", "S1", ("station", "name_strlen"))
        name.cf_role = "timeseries_id"
        name[:] = netCDF4.stringtochar(np.array(list(STATIONS), dtype="S8"))
        lat = nc.createVariable("lat", "f4", ("station",))
        lat.standard_name, lat.units = "latitude", "degrees_north"
        lat[:] = [p[0] for p in STATIONS.values()]
        lon = nc.createVariable("lon", "f4", ("station",))
        lon.standard_name, lon.units = "longitude", "degrees_east"
        lon[:] = [p[1] for p in STATIONS.values()]
        row = nc.createVariable("row_size", "i4", ("station",))
        row.sample_dimension = "obs"
        row[:] = counts
        t = nc.createVariable("time", "f8", ("obs",))
        t.units, t.standard_name = "hours since 2021-01-01", "time"
        t[:] = [0, 1, 2, 0, 0, 1, 2, 3]
        temp = nc.createVariable("temp", "f4", ("obs",))
        temp.units, temp.coordinates = "degC", "time lat lon station_name"
        temp[:] = [-30, -31, -29, 2, 20, 21, 22, 23]
    publish([path], "stations")
    return path


def write_mesh(folder: Path) -> Path:
    files = ugrid_split(folder)
    publish(files, "mesh")
    return files[1]


def write_all(root: Path) -> dict[str, Path]:
    """Write the six datasets under ``root``; return each one's file (the mesh's data file)."""
    return {"rect": write_rect(root / "rect"), "rot": write_rot(root / "rot"), "polar": write_polar(root / "polar"),
            "curv": write_curv(root / "curv"), "stations": write_stations(root / "stations"),
            "mesh": write_mesh(root / "mesh")}


def expected_colour(value: float, vmin: float, vmax: float, colormap: str = "viridis") -> np.ndarray:
    """Return the RGBA bytes matplotlib gives ``value`` under ``colormap`` from vmin to vmax."""
    from matplotlib import colormaps
    from matplotlib.colors import Normalize

    return np.asarray(colormaps[colormap](Normalize(vmin, vmax)(value), bytes=True))


def web_mercator_lonlat(z: int, x: int, y: int, col: float, row: float) -> tuple[float, float]:
    """Return the longitude and latitude of point (col, row) of XYZ tile z/x/y, by pyproj (EPSG:3857 → 4326)."""
    import pyproj

    half = pyproj.Transformer.from_crs("EPSG:4326", "EPSG:3857", always_xy=True).transform(180.0, 0.0)[0]
    span = 2 * half / 2**z
    mx, my = -half + (x + col / 256) * span, half - (y + row / 256) * span
    lon, lat = pyproj.Transformer.from_crs("EPSG:3857", "EPSG:4326", always_xy=True).transform(mx, my)
    return float(lon), float(lat)

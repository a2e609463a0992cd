"""Builders of small netCDF files with the edge cases the suite needs.

Each builder writes real netCDF files (netCDF3 or netCDF4) with netCDF4-python
directly, so the files do not depend on dstp's own writer (samples) at all.
"""

from __future__ import annotations

from pathlib import Path

import netCDF4
import numpy as np


def edge_station(folder: Path) -> list[Path]:
    """netCDF3 classic, standard calendar in hours, descending lat, scalar coordinate, fill values,
    a dimension without a coordinate variable, a CF bounds variable and a grid mapping."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "station.nc"
    rng = np.random.default_rng(11)
    with netCDF4.Dataset(path, "w", format="NETCDF3_CLASSIC") as nc:
        nc.title = "Edge cases: 2 m temperature and dew point"
        nc.summary = "Descending latitude, scalar height coordinate, fill values, index-only dimension."
        nc.license = "CC0-1.0"
        nc.createDimension("time", None)
        nc.createDimension("lat", 7)
        nc.createDimension("lon", 5)
        nc.createDimension("band", 3)
        nc.createDimension("bnds", 2)
        t = nc.createVariable("time", "f8", ("time",))
        t.units, t.calendar, t.standard_name = "hours since 2001-01-01 00:00:00", "standard", "time"
        t[:] = np.arange(0, 24 * 10, 6.0)  # 40 steps, 6-hourly
        lat = nc.createVariable("lat", "f4", ("lat",))
        lat.units, lat.standard_name, lat.bounds = "degrees_north", "latitude", "lat_bnds"
        lat[:] = np.linspace(60, 30, 7)  # descending
        lb = nc.createVariable("lat_bnds", "f4", ("lat", "bnds"))
        lb[:] = np.stack([np.linspace(62.5, 32.5, 7), np.linspace(57.5, 27.5, 7)], axis=1)
        lon = nc.createVariable("lon", "f4", ("lon",))
        lon.units, lon.standard_name = "degrees_east", "longitude"
        lon[:] = np.array([-10.0, -5.0, 0.0, 5.0, 10.0])
        h = nc.createVariable("height", "f8", ())
        h.units, h.standard_name, h.axis, h.positive = "m", "height", "Z", "up"
        h.assignValue(2.0)
        crs = nc.createVariable("crs", "i4", ())
        crs.grid_mapping_name = "latitude_longitude"
        shape = (40, 7, 5)
        t2m = nc.createVariable("t2m", "f4", ("time", "lat", "lon"), fill_value=np.float32(-999.0))
        t2m.units, t2m.standard_name, t2m.coordinates, t2m.grid_mapping = "K", "air_temperature", "height", "crs"
        d2m = nc.createVariable("d2m", "f4", ("time", "lat", "lon"), fill_value=np.float32(-999.0))
        d2m.units, d2m.standard_name, d2m.coordinates = "K", "dew_point_temperature", "height"
        temp = 280 + rng.normal(0, 5, shape)
        dew = temp - np.abs(rng.normal(2, 2, shape))
        temp[rng.random(shape) < 0.05] = -999.0
        dew[rng.random(shape) < 0.05] = -999.0
        t2m[:] = temp.astype(np.float32)
        d2m[:] = dew.astype(np.float32)
        spec = nc.createVariable("spectrum", "f8", ("time", "band"))
        spec.units = "W m-2"
        spec[:] = rng.random((40, 3))
    return [path]


def edge_axes(folder: Path) -> list[Path]:
    """netCDF4 with coordinates named unusually: latitude(y) labels dim y, xc(xc) known by axis only,
    model time on a 360_day calendar, two files to aggregate, written out of name order."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for k, (name, start) in enumerate((("b_second.nc", 6), ("a_first.nc", 0))):
        path = folder / name
        with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
            nc.title = "Edge cases: axes by attribute"
            nc.createDimension("step", None)
            nc.createDimension("y", 4)
            nc.createDimension("xc", 6)
            t = nc.createVariable("step", "i4", ("step",))
            t.units, t.calendar, t.axis = "days since 1850-01-01", "360_day", "T"
            t[:] = np.arange(start, start + 6) * 10 + 25  # crosses day 30 of Feb etc.
            y = nc.createVariable("latitude", "f8", ("y",))
            y.units = "degrees_north"
            y[:] = [-30.0, -10.0, 10.0, 30.0]
            x = nc.createVariable("xc", "f8", ("xc",))
            x.axis = "X"
            x.units = "km"
            x[:] = np.arange(6) * 100.0
            v = nc.createVariable("sst", "i2", ("step", "y", "xc"), fill_value=np.int16(-1))
            v.scale_factor, v.add_offset = np.float64(0.01), np.float64(0.0)
            v.units, v.standard_name = "degC", "sea_surface_temperature"
            raw = (np.arange(6 * 4 * 6).reshape(6, 4, 6) * 37 + start * 11) % 3000
            raw[:, 0, 0] = -1
            v[:] = raw.astype(np.int16)
        paths.append(path)
    return paths


def truncated_copy(source: Path, target: Path, keep: float = 0.6) -> Path:
    """Write the first ``keep`` fraction of ``source`` to ``target``."""
    data = source.read_bytes()
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data[: int(len(data) * keep)])
    return target

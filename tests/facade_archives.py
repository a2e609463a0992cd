"""Archives laid out as model and reanalysis output is, for the facade tests (ERDDAP, xarray backend, STAC, nc).

Each file is written with netCDF4 the way such files come: per-file time epochs, a calendar (standard,
noleap, 360_day), longitudes on 0…360 or −180…180, latitudes north to south, a grid-mapping variable with a
value, a scalar ``forecast_reference_time``, a non-aggregated ``date(date)`` dimension, and variable
attributes CF does not define (``history``, ``source``, ``original_units``). The tests compare every answer
with xarray (or netCDF4) reading these same files.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

import cftime
import netCDF4
import numpy as np

__all__ = ["Layout", "model_archive", "recent_series"]


@dataclass(frozen=True)
class Layout:
    """How an archive is laid out."""

    calendar: str = "360_day"
    #: "east" 0…360, "west" −180…180 (both regional unless ``global_lon``).
    lon: str = "east"
    descending_lat: bool = True
    files: int = 2
    steps: int = 3
    nlat: int = 5
    nlon: int = 6
    #: First longitude (east of Greenwich on 0…360, so 0…360 files really use values past 180).
    lon0: float = 200.0
    dlon: float = 2.5
    lat0: float = 60.0
    dlat: float = 2.0
    seed: int = 11
    #: Whether a data variable (``rank(date)``) uses the ``date`` dimension; else only its coordinate does.
    rank: bool = True


def model_archive(folder: Path, layout: Layout, name: str = "model") -> list[Path]:
    """Write ``layout.files`` files of daily fields ``tas(time, lat, lon)`` and ``rank(date)``; return them.

    Each file counts its times from its own first day (``days since <first day>``) on ``layout.calendar``.
    """
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(layout.seed)
    lat = layout.lat0 + layout.dlat * np.arange(layout.nlat)
    if layout.descending_lat:
        lat = lat[::-1]
    lon = layout.lon0 + layout.dlon * np.arange(layout.nlon)
    if layout.lon == "west":
        lon = ((lon + 180.0) % 360.0) - 180.0
    paths = []
    cal = layout.calendar
    start = cftime.datetime(2000, 2, 27, calendar=cal)  # crosses the end of February
    for f in range(layout.files):
        first = start + dt.timedelta(days=f * layout.steps)
        units = f"days since {first.strftime('%Y-%m-%d')}"
        days = np.arange(layout.steps, dtype="f8") + 0.5
        path = folder / f"{name}_{f:02d}.nc"
        with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
            nc.title = f"Facade archive ({cal}, lon {layout.lon})"
            nc.institution = "dstp tests"
            nc.history = "written by tests/facade_archives.py"
            nc.Conventions = "CF-1.8"
            nc.createDimension("time", None)
            nc.createDimension("lat", lat.size)
            nc.createDimension("lon", lon.size)
            nc.createDimension("date", 2)
            t = nc.createVariable("time", "f8", ("time",))
            t.units, t.calendar, t.standard_name, t.axis = units, cal, "time", "T"
            t[:] = days
            frt = nc.createVariable("forecast_reference_time", "f8", ())
            frt.units, frt.calendar, frt.standard_name = units, cal, "forecast_reference_time"
            frt.assignValue(-1.0 - f * layout.steps)  # the day before the archive's first day, in every file
            y = nc.createVariable("lat", "f8", ("lat",))
            y.units, y.standard_name, y.axis = "degrees_north", "latitude", "Y"
            y[:] = lat
            x = nc.createVariable("lon", "f8", ("lon",))
            x.units, x.standard_name, x.axis = "degrees_east", "longitude", "X"
            x[:] = lon
            d = nc.createVariable("date", "i4", ("date",))
            d.long_name, d.units = "reference date", "1"
            d[:] = [20000101, 20000201]
            crs = nc.createVariable("crs", "i4", ())
            crs.grid_mapping_name = "latitude_longitude"
            crs.semi_major_axis, crs.inverse_flattening = 6378137.0, 298.257223563
            crs.assignValue(7)
            tas = nc.createVariable("tas", "f4", ("time", "lat", "lon"), fill_value=np.float32(1e20))
            tas.units, tas.standard_name, tas.grid_mapping = "K", "air_temperature", "crs"
            tas.coordinates = "forecast_reference_time"
            tas.history, tas.source, tas.original_units = "regridded bilinearly", "model run r1i1p1", "degC"
            values = (270 + 10 * np.cos(np.deg2rad(lat))[None, :, None] + np.sin(np.deg2rad(lon))[None, None, :]
                      + rng.normal(0, 1, (layout.steps, lat.size, lon.size))).astype("f4")
            values[rng.random(values.shape) < 0.1] = np.float32(1e20)
            tas[:] = values
            if layout.rank:
                rank = nc.createVariable("rank", "i4", ("date",))
                rank.long_name, rank.comment = "rank of the reference date", "not on the time axis"
                rank[:] = [1 + f, 2 + f]
        paths.append(path)
    return paths


def recent_series(folder: Path, now: dt.datetime, *, days: int = 10) -> list[Path]:
    """Write an hourly series from ``now - days`` to ``now + days`` (standard calendar), for ``now`` selectors."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "recent.nc"
    first = now.replace(minute=0, second=0, microsecond=0, tzinfo=None) - dt.timedelta(days=days)
    hours = np.arange(2 * days * 24, dtype="f8")
    with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        nc.title = "An hourly series around the time the test runs"
        nc.createDimension("time", hours.size)
        t = nc.createVariable("time", "f8", ("time",))
        t.units, t.calendar, t.standard_name, t.axis = f"hours since {first:%Y-%m-%d %H:%M:%S}", "standard", "time", "T"
        t[:] = hours
        v = nc.createVariable("level", "f8", ("time",))
        v.units = "m"
        v[:] = np.sin(hours / 10.0)
    return [path]

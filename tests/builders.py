"""Builders of small netCDF files with the edge cases the suite needs.

Each builder writes real netCDF files (netCDF3 or netCDF4) with netCDF4-python
directly, so the files do not depend on dstp's own writer (samples) at all.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Sequence

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


def buoys(folder: Path, *, stations: int = 12, per_station: int = 30, seed: int = 5, start: str = "1990-01-01",
          days: float = 330.0, west: bool = True, name: str = "buoys.nc") -> list[Path]:
    """A CF timeSeries of moored buoys as a contiguous ragged array (standard calendar, hours since ``start``).

    Longitudes are −180…180 when ``west`` (the grids of the samples use 0…360), times are irregular
    (every buoy reports on its own schedule), and some temperatures are missing.
    """
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    rng = np.random.default_rng(seed)
    counts = rng.integers(per_station // 2, per_station + 1, stations)
    lat = np.round(rng.uniform(-80, 80, stations), 3)
    lon = np.round(rng.uniform(-180, 180, stations) if west else rng.uniform(0, 360, stations), 3)
    with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        nc.featureType = "timeSeries"
        nc.Conventions = "CF-1.8"
        nc.title = "Synthetic moored buoys"
        nc.createDimension("station", stations)
        nc.createDimension("obs", int(counts.sum()))
        nc.createDimension("name_strlen", 8)
        rs = nc.createVariable("row_size", "i4", ("station",))
        rs.sample_dimension = "obs"
        rs[:] = counts
        v = nc.createVariable("lat", "f8", ("station",))
        v.units, v.standard_name = "degrees_north", "latitude"
        v[:] = lat
        v = nc.createVariable("lon", "f8", ("station",))
        v.units, v.standard_name = "degrees_east", "longitude"
        v[:] = lon
        sn = nc.createVariable("station_name", "S1", ("station", "name_strlen"))
        sn.cf_role = "timeseries_id"
        sn[:] = netCDF4.stringtochar(np.array([f"B{k:03d}" for k in range(stations)], dtype="S8"))
        t = nc.createVariable("time", "f8", ("obs",))
        t.units, t.calendar, t.standard_name = f"hours since {start}", "standard", "time"
        t[:] = np.concatenate([np.sort(rng.uniform(0, days * 24, c)) for c in counts]).round(2)
        sst = nc.createVariable("sst", "f4", ("obs",), fill_value=np.float32(-999.0))
        sst.units, sst.standard_name = "K", "sea_surface_temperature"
        sst.coordinates = "time lat lon station_name"
        values = (280 + rng.normal(0, 5, int(counts.sum()))).astype(np.float32)
        values[rng.random(values.size) < 0.05] = -999.0
        sst[:] = values
    return [path]


def calendar_series(folder: Path, calendar: str, *, steps: int = 120, seed: int = 3, every_hours: float = 30.0,
                    start: str = "1999-12-01") -> list[Path]:
    """One station's time series on ``calendar`` (hours since ``start``), crossing 29/30 February.

    ``x`` is float64 with some values missing, so bucket means compare exactly.
    """
    import cftime

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"series_{calendar}.nc"
    rng = np.random.default_rng(seed)
    hours = np.cumsum(rng.uniform(0.5, 2 * every_hours, steps)).round(1)
    with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        nc.title = f"A series on the {calendar} calendar"
        nc.createDimension("time", steps)
        t = nc.createVariable("time", "f8", ("time",))
        t.units, t.calendar, t.standard_name, t.axis = f"hours since {start}", calendar, "time", "T"
        t[:] = hours
        x = nc.createVariable("x", "f8", ("time",), fill_value=-999.0)
        x.units = "1"
        values = rng.normal(10, 3, steps)
        values[rng.random(steps) < 0.1] = -999.0
        x[:] = values
    cftime.num2date(hours[:1], f"hours since {start}", calendar=calendar)  # fail here, not in a test, if unknown
    return [path]


def model_grid(folder: Path, *, calendar: str = "noleap", years: tuple[int, ...] = (2000, 2001, 2002),
               lon_west: bool = False, time_unit: str = "days", lev_units: str = "hPa", seed: int = 7,
               nlat: int = 6, nlon: int = 8, name: str = "grid") -> list[Path]:
    """A monthly model grid (time, lev, lat, lon), one file per year, each file with its own time epoch.

    Longitudes are 0…360 (or −180…180 when ``lon_west``), levels in ``lev_units`` (the same pressures),
    times ``<time_unit> since <year>-01-01`` on ``calendar`` at mid-month, some values missing.
    """
    import cftime

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    step = 360.0 / nlon
    lon = np.arange(nlon) * step - (180.0 if lon_west else 0.0)
    lat = np.linspace(-75.0, 75.0, nlat)
    lev_hpa = np.array([850.0, 500.0, 250.0])
    lev = lev_hpa * {"hPa": 1.0, "Pa": 100.0}[lev_units]
    paths = []
    for year in years:
        path = folder / f"{name}_{year}.nc"
        units = f"{time_unit} since {year}-01-01"
        dates = [cftime.datetime(year, m, 15, calendar=calendar) for m in range(1, 13)]
        times = cftime.date2num(dates, units, calendar=calendar)
        with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
            nc.title = f"Synthetic model grid ({calendar})"
            nc.createDimension("time", None)
            nc.createDimension("lev", lev.size)
            nc.createDimension("lat", nlat)
            nc.createDimension("lon", nlon)
            t = nc.createVariable("time", "f8", ("time",))
            t.units, t.calendar, t.standard_name, t.axis = units, calendar, "time", "T"
            t[:] = np.asarray(times, dtype=np.float64)
            z = nc.createVariable("lev", "f8", ("lev",))
            z.units, z.standard_name, z.positive, z.axis = lev_units, "air_pressure", "down", "Z"
            z[:] = lev
            y = nc.createVariable("lat", "f8", ("lat",))
            y.units, y.standard_name = "degrees_north", "latitude"
            y[:] = lat
            x = nc.createVariable("lon", "f8", ("lon",))
            x.units, x.standard_name = "degrees_east", "longitude"
            x[:] = lon
            shape = (12, lev.size, nlat, nlon)
            month = np.arange(12).reshape(12, 1, 1, 1)
            east = np.mod(lon, 360.0).reshape(1, 1, 1, nlon)  # the field depends on the place, not its convention
            values = (250 + 20 * np.cos(np.deg2rad(lat)).reshape(1, 1, nlat, 1) + 5 * np.sin(month / 12 * 2 * np.pi)
                      + np.sin(np.deg2rad(east)) + rng.normal(0, 1, shape) + lev_hpa.reshape(1, -1, 1, 1) / 100)
            values[rng.random(shape) < 0.05] = np.nan
            v = nc.createVariable("ta", "f8", ("time", "lev", "lat", "lon"), fill_value=-999.0)
            v.units, v.standard_name = "K", "air_temperature"
            v[:] = np.where(np.isnan(values), -999.0, values)
        paths.append(path)
    return paths


#: EUR-11's rotated pole (CORDEX).
ROTATED_POLE = {"grid_mapping_name": "rotated_latitude_longitude",
                "grid_north_pole_latitude": 39.25, "grid_north_pole_longitude": -162.0}


def rotated_pole(path: Path, name: str, values: Callable[[np.ndarray, np.ndarray], np.ndarray], *,
                 rlat: np.ndarray, rlon: np.ndarray, times: Sequence[float],
                 time_units: str = "days since 2001-01-01", calendar: str | None = None, units: str = "K",
                 standard_name: str | None = None, fill_value: float | None = None) -> Path:
    """Write a CORDEX-like file: ``name(time, rlat, rlon)`` with 2-D lat/lon and a rotated-pole grid mapping.

    ``values(lat, lon)`` returns the (time, rlat, rlon) data from the grid's geographic coordinates.
    """
    import pyproj

    gx, gy = np.meshgrid(rlon, rlat)
    lon, lat = pyproj.Transformer.from_crs(pyproj.CRS.from_cf(ROTATED_POLE), "EPSG:4326",
                                           always_xy=True).transform(gx, gy)
    with netCDF4.Dataset(path, "w") as nc:
        nc.createDimension("time", None)
        nc.createDimension("rlat", len(rlat))
        nc.createDimension("rlon", len(rlon))
        t = nc.createVariable("time", "f8", ("time",))
        t.units, t.standard_name = time_units, "time"
        if calendar is not None:
            t.calendar = calendar
        t[:] = np.asarray(times, dtype=np.float64)
        for dim, coords, std in (("rlat", rlat, "grid_latitude"), ("rlon", rlon, "grid_longitude")):
            v = nc.createVariable(dim, "f8", (dim,))
            v.units, v.standard_name, v.axis = "degrees", std, "Y" if dim == "rlat" else "X"
            v[:] = coords
        for aux, coords, std, aux_units in (("lat", lat, "latitude", "degrees_north"),
                                            ("lon", lon, "longitude", "degrees_east")):
            v = nc.createVariable(aux, "f8", ("rlat", "rlon"))
            v.standard_name, v.units = std, aux_units
            v[:] = coords
        gm = nc.createVariable("rotated_pole", "i4", ())
        for k, v in ROTATED_POLE.items():
            gm.setncattr(k, v)
        var = nc.createVariable(name, "f4", ("time", "rlat", "rlon"),
                                fill_value=None if fill_value is None else np.float32(fill_value))
        var.units, var.coordinates, var.grid_mapping = units, "lat lon", "rotated_pole"
        if standard_name is not None:
            var.standard_name = standard_name
        var[:] = np.asarray(values(lat, lon), dtype=np.float32)
    return path


#: Argo's dimensions of a GDAC ``*_prof.nc`` file besides N_PROF and N_LEVELS (user manual 3.1, §2.2).
_ARGO_STRINGS = {"DATE_TIME": 14, "STRING256": 256, "STRING64": 64, "STRING32": 32, "STRING16": 16, "STRING8": 8,
                 "STRING4": 4, "STRING2": 2}


def argo_profiles(path: Path, *, modes: str = "DRA", levels: Sequence[int] = (5, 4, 2), n_levels: int = 5,
                  history: int = 0, seed: int = 0) -> Path:
    """Write an Argo GDAC multi-profile file (``R6901234_prof.nc``) as the Argo user manual 3.1 lays it out.

    netCDF-3 classic; ``N_PROF`` profiles of ``N_LEVELS`` levels, profile k holding ``levels[k]`` of them (the rest
    99999. and blank flags: padding); string dimensions; an unlimited ``N_HISTORY`` of ``history`` records (0 in
    a file fresh from a DAC); per-level char flags ``TEMP_QC(N_PROF, N_LEVELS)``; ``DATA_MODE(N_PROF)`` one char
    per profile; ``*_ADJUSTED`` variables all 99999. in real-time profiles (mode R). ``PRES`` and ``PRES_ADJUSTED``
    both say ``axis = "Z"``, as in GDAC files.
    """
    n_prof = len(modes)
    rng = np.random.default_rng(seed)
    with netCDF4.Dataset(path, "w", format="NETCDF3_CLASSIC") as nc:
        nc.title = "Argo float vertical profile"
        nc.institution = "AOML"
        nc.source = "Argo float"
        nc.history = "2021-03-04T10:11:12Z creation"
        nc.references = "http://www.argodatamgt.org/Documentation"
        nc.user_manual_version = "3.1"
        nc.Conventions = "Argo-3.1 CF-1.6"
        nc.featureType = "trajectoryProfile"
        for name, size in _ARGO_STRINGS.items():
            nc.createDimension(name, size)
        nc.createDimension("N_PROF", n_prof)
        nc.createDimension("N_PARAM", 3)
        nc.createDimension("N_LEVELS", n_levels)
        nc.createDimension("N_CALIB", 1)
        nc.createDimension("N_HISTORY", None)

        def chars(name: str, dims: tuple[str, ...], text: object, **attrs: str) -> netCDF4.Variable:
            v = nc.createVariable(name, "S1", dims, fill_value=b" ")
            v.setncatts(attrs)
            width = len(nc.dimensions[dims[-1]])
            v[:] = netCDF4.stringtochar(np.array(text, dtype=f"S{width}"))
            return v

        chars("DATA_TYPE", ("STRING16",), "Argo profile", long_name="Data type", conventions="Argo reference table 1")
        chars("FORMAT_VERSION", ("STRING4",), "3.1", long_name="File format version")
        chars("HANDBOOK_VERSION", ("STRING4",), "1.2", long_name="Data handbook version")
        chars("REFERENCE_DATE_TIME", ("DATE_TIME",), "19500101000000", long_name="Date of reference for Julian days",
              conventions="YYYYMMDDHHMISS")
        chars("DATE_CREATION", ("DATE_TIME",), "20210304101112", long_name="Date of file creation",
              conventions="YYYYMMDDHHMISS")
        chars("PLATFORM_NUMBER", ("N_PROF", "STRING8"), ["6901234"] * n_prof, long_name="Float unique identifier",
              conventions="WMO float identifier : A9IIIII")
        chars("PROJECT_NAME", ("N_PROF", "STRING64"), ["ARGO-FRANCE"] * n_prof, long_name="Name of the project")
        chars("STATION_PARAMETERS", ("N_PROF", "N_PARAM", "STRING16"), [["PRES", "TEMP", "PSAL"]] * n_prof,
              long_name="List of available parameters for the station", conventions="Argo reference table 3")
        cycle = nc.createVariable("CYCLE_NUMBER", "i4", ("N_PROF",), fill_value=np.int32(99999))
        cycle.long_name = "Float cycle number"
        cycle.conventions = "0...N, 0 : launch cycle (if exists), 1 : first complete cycle"
        cycle[:] = np.arange(1, n_prof + 1)
        for name, values, attrs in (
            ("DIRECTION", "A" * n_prof, {"long_name": "Direction of the station profiles",
                                         "conventions": "A: ascending profiles, D: descending profiles"}),
            ("DATA_MODE", modes, {"long_name": "Delayed mode or real time data",
                                  "conventions": "R : real time; D : delayed mode; A : real time with adjustment"}),
            ("JULD_QC", "1" * n_prof, {"long_name": "Quality on date and time", "conventions": "Argo reference table 2"}),
            ("POSITION_QC", "1" * (n_prof - 1) + "4", {"long_name": "Quality on position (latitude and longitude)",
                                                       "conventions": "Argo reference table 2"}),
        ):
            v = nc.createVariable(name, "S1", ("N_PROF",), fill_value=b" ")
            v.setncatts(attrs)
            v[:] = np.array([c.encode() for c in values], dtype="S1")
        juld = nc.createVariable("JULD", "f8", ("N_PROF",), fill_value=999999.0)
        juld.long_name = "Julian day (UTC) of the station relative to REFERENCE_DATE_TIME"
        juld.standard_name = "time"
        juld.units = "days since 1950-01-01 00:00:00 UTC"
        juld.conventions = "Relative julian days with decimal part (as parts of day)"
        juld.resolution = 1e-5
        juld.axis = "T"
        juld[:] = 25630.0 + 10.0 * np.arange(n_prof) + np.floor(rng.random(n_prof) * 8) / 8  # exact in binary
        for name, std, units, axis, centre in (("LATITUDE", "latitude", "degree_north", "Y", 40.0),
                                               ("LONGITUDE", "longitude", "degree_east", "X", -30.0)):
            v = nc.createVariable(name, "f8", ("N_PROF",), fill_value=99999.0)
            v.long_name = f"{name.title()} of the station, best estimate"
            v.standard_name, v.units, v.axis = std, units, axis
            v.valid_min, v.valid_max = (-90.0, 90.0) if axis == "Y" else (-180.0, 180.0)
            v[:] = centre + np.cumsum(rng.random(n_prof) * 0.3)
        depth = np.sort(rng.random((n_prof, n_levels)) * 2000.0, axis=1)
        physical = {
            "PRES": ("sea_water_pressure", "decibar", "Sea water pressure, equals 0 at sea-level", depth),
            "TEMP": ("sea_water_temperature", "degree_Celsius", "Sea temperature in-situ ITS-90 scale",
                     25.0 - depth / 100.0 + rng.random((n_prof, n_levels))),
            "PSAL": ("sea_water_salinity", "psu", "Practical salinity", 34.0 + 2.0 * rng.random((n_prof, n_levels))),
        }
        pad = np.arange(n_levels)[None, :] >= np.asarray(levels)[:, None]
        realtime = np.array([m == "R" for m in modes])
        for name, (std, units, long_name, values) in physical.items():
            for suffix in ("", "_ADJUSTED", "_ADJUSTED_ERROR"):
                v = nc.createVariable(name + suffix, "f4", ("N_PROF", "N_LEVELS"), fill_value=np.float32(99999.0))
                v.long_name = long_name if not suffix else f"{long_name} ({suffix[1:].lower().replace('_', ' ')})"
                if suffix != "_ADJUSTED_ERROR":
                    v.standard_name = std
                v.units = units
                v.C_format, v.FORTRAN_format, v.resolution = "%9.3f", "F9.3", np.float32(0.001)
                if name == "PRES" and suffix != "_ADJUSTED_ERROR":
                    v.axis = "Z"
                data = np.full((n_prof, n_levels), 0.01) if suffix == "_ADJUSTED_ERROR" else values
                data = np.where(pad | (realtime[:, None] & (suffix != "")), 99999.0, data).astype(np.float32)
                v[:] = data
                if suffix == "_ADJUSTED_ERROR":
                    continue
                q = nc.createVariable(name + suffix + "_QC", "S1", ("N_PROF", "N_LEVELS"), fill_value=b" ")
                q.long_name, q.conventions = "quality flag", "Argo reference table 2"
                flags = rng.choice(np.array([b"1", b"2", b"3", b"4"], dtype="S1"), size=(n_prof, n_levels))
                q[:] = np.where(pad | (realtime[:, None] & (suffix != "")), b" ", flags)
        profile_qc = nc.createVariable("PROFILE_TEMP_QC", "S1", ("N_PROF",), fill_value=b" ")
        profile_qc.long_name = "Global quality flag of TEMP profile"
        profile_qc.conventions = "Argo reference table 2a"
        profile_qc[:] = np.array([b"A"] * n_prof, dtype="S1")
        chars("PARAMETER", ("N_PROF", "N_CALIB", "N_PARAM", "STRING16"), [[["PRES", "TEMP", "PSAL"]]] * n_prof,
              long_name="List of parameters with calibration information", conventions="Argo reference table 3")
        chars("SCIENTIFIC_CALIB_COMMENT", ("N_PROF", "N_CALIB", "N_PARAM", "STRING256"),
              [[["none", "none", "none"]]] * n_prof, long_name="Comment applying to this parameter calibration")
        for name, dims, long_name in (("HISTORY_INSTITUTION", ("N_HISTORY", "N_PROF", "STRING4"),
                                       "Institution which performed action"),
                                      ("HISTORY_STEP", ("N_HISTORY", "N_PROF", "STRING4"), "Step in data processing"),
                                      ("HISTORY_DATE", ("N_HISTORY", "N_PROF", "DATE_TIME"),
                                       "Date the history record was created")):
            v = nc.createVariable(name, "S1", dims, fill_value=b" ")
            v.long_name = long_name
            if history:
                v[:history] = netCDF4.stringtochar(np.array([["IF"] * n_prof] * history,
                                                            dtype=f"S{len(nc.dimensions[dims[-1]])}"))
        start = nc.createVariable("HISTORY_START_PRES", "f4", ("N_HISTORY", "N_PROF"), fill_value=np.float32(99999.0))
        start.long_name, start.units = "Start pressure action applied on", "decibar"
        if history:
            start[:history] = np.full((history, n_prof), 5.0, np.float32)
    return path


def split_by_variable(folder: Path, *, steps: int = 6, splits: dict[str, Sequence[int]] | None = None,
                      fx: Sequence[str] = ("areacella",), nlat: int = 3, nlon: int = 3, calendar: str = "noleap",
                      seed: int = 0) -> list[Path]:
    """Write a CMIP-style archive split by variable: ``<var>_Amon_MODEL_historical_r1i1p1f1_gn_<start>.nc`` files,
    each variable's ``steps`` monthly times cut into files of ``splits[var]`` lengths, and one fx file
    (``areacella`` and/or ``sftlf`` on lat × lon, no time) that the data name in ``cell_measures``."""
    folder.mkdir(parents=True, exist_ok=True)
    splits = splits if splits is not None else {"tas": (4, steps - 4), "pr": (steps,)}
    lat = np.linspace(-60.0, 60.0, nlat) if nlat > 1 else np.array([10.0])
    lon = np.arange(nlon) * (360.0 / nlon)
    rng = np.random.default_rng(seed)

    def grid(nc: netCDF4.Dataset) -> None:
        nc.Conventions = "CF-1.7 CMIP-6.2"
        nc.source_id, nc.experiment_id, nc.variant_label = "MODEL", "historical", "r1i1p1f1"
        nc.createDimension("lat", nlat)
        nc.createDimension("lon", nlon)
        nc.createDimension("bnds", 2)
        v = nc.createVariable("lat", "f8", ("lat",))
        v.units, v.standard_name, v.axis, v.bounds = "degrees_north", "latitude", "Y", "lat_bnds"
        v[:] = lat
        nc.createVariable("lat_bnds", "f8", ("lat", "bnds"))[:] = np.stack([lat - 1.0, lat + 1.0], axis=1)
        v = nc.createVariable("lon", "f8", ("lon",))
        v.units, v.standard_name, v.axis = "degrees_east", "longitude", "X"
        v[:] = lon

    units = {"tas": ("K", "air_temperature"), "pr": ("kg m-2 s-1", "precipitation_flux"),
             "psl": ("Pa", "air_pressure_at_mean_sea_level")}
    paths: list[Path] = []
    for name, lengths in splits.items():
        assert sum(lengths) == steps, (name, lengths)
        start = 0
        for n in lengths:
            path = folder / f"{name}_Amon_MODEL_historical_r1i1p1f1_gn_{start:04d}.nc"
            with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
                grid(nc)
                nc.createDimension("time", None)
                t = nc.createVariable("time", "f8", ("time",))
                t.units, t.calendar, t.standard_name, t.axis, t.bounds = \
                    "days since 1850-01-01", calendar, "time", "T", "time_bnds"
                days = np.arange(start, start + n) * 30.0
                t[:] = days + 15.0
                nc.createVariable("time_bnds", "f8", ("time", "bnds"))[:] = np.stack([days, days + 30.0], axis=1)
                v = nc.createVariable(name, "f4", ("time", "lat", "lon"), fill_value=np.float32(1e20))
                v.units, v.standard_name = units.get(name, ("1", name))
                v.cell_measures, v.cell_methods = "area: areacella", "area: time: mean"
                if name == "tas":  # CMIP's scalar coordinate, in the tas files only
                    h = nc.createVariable("height", "f8", ())
                    h.units, h.axis, h.positive, h.standard_name = "m", "Z", "up", "height"
                    h.assignValue(2.0)
                    v.coordinates = "height"
                values = (250.0 + 50.0 * rng.random((n, nlat, nlon))).astype(np.float32)
                values[rng.random(values.shape) < 0.1] = np.float32(1e20)
                v[:] = values
            paths.append(path)
            start += n
    if fx:
        path = folder / "fx_MODEL_historical_r1i1p1f1_gn.nc"
        with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
            grid(nc)
            for name in fx:
                v = nc.createVariable(name, "f4", ("lat", "lon"))
                v.units, v.standard_name = ("m2", "cell_area") if name == "areacella" else ("%", "land_area_fraction")
                v[:] = (1e10 * np.cos(np.deg2rad(lat))[:, None] * np.ones(nlon) if name == "areacella"
                        else 100.0 * rng.random((nlat, nlon))).astype(np.float32)
        paths.append(path)
    return paths


def ugrid_split(folder: Path, *, nodes: int = 6, steps: int = 3, seed: int = 1, grid_time: bool = False) -> list[Path]:
    """Write a UGRID mesh file ``grid.nc`` (topology with a value, node and face coordinates, face-node
    connectivity) and a data file ``v1.nc`` with values on the mesh's nodes over time. ``grid_time``: the mesh
    file declares an unlimited ``time`` too, that nothing in it uses (as model mesh files often do)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    faces = nodes - 2
    with netCDF4.Dataset(folder / "grid.nc", "w") as nc:
        nc.Conventions = "CF-1.8 UGRID-1.0"
        nc.createDimension("nMesh2_node", nodes)
        nc.createDimension("nMesh2_face", faces)
        nc.createDimension("nMaxMesh2_face_nodes", 3)
        if grid_time:
            nc.createDimension("time", None)
        m = nc.createVariable("Mesh2", "i4")
        m.cf_role, m.long_name, m.topology_dimension = "mesh_topology", "Topology data of 2D unstructured mesh", 2
        m.node_coordinates, m.face_node_connectivity = "Mesh2_node_x Mesh2_node_y", "Mesh2_face_nodes"
        m.face_coordinates = "Mesh2_face_x Mesh2_face_y"
        m.assignValue(0)
        for name, std, units, size in (("Mesh2_node_x", "longitude", "degrees_east", nodes),
                                       ("Mesh2_node_y", "latitude", "degrees_north", nodes),
                                       ("Mesh2_face_x", "longitude", "degrees_east", faces),
                                       ("Mesh2_face_y", "latitude", "degrees_north", faces)):
            v = nc.createVariable(name, "f8", ("nMesh2_node" if "node" in name else "nMesh2_face",))
            v.standard_name, v.units = std, units
            v[:] = rng.random(size) * 20.0
        c = nc.createVariable("Mesh2_face_nodes", "i4", ("nMesh2_face", "nMaxMesh2_face_nodes"))
        c.cf_role, c.start_index = "face_node_connectivity", 0
        c[:] = np.stack([np.arange(faces), np.arange(faces) + 1, np.arange(faces) + 2], axis=1)
    with netCDF4.Dataset(folder / "v1.nc", "w") as nc:
        nc.Conventions = "CF-1.8 UGRID-1.0"
        nc.createDimension("time", None)
        nc.createDimension("nMesh2_node", nodes)
        t = nc.createVariable("time", "f8", ("time",))
        t.units, t.standard_name = "hours since 2020-01-01", "time"
        t[:] = np.arange(steps) * 6.0
        v = nc.createVariable("v1", "f4", ("time", "nMesh2_node"), fill_value=np.float32(-999.0))
        v.mesh, v.location, v.units, v.standard_name = "Mesh2", "node", "m", "sea_surface_height_above_geoid"
        v.coordinates = "Mesh2_node_x Mesh2_node_y"
        v[:] = rng.random((steps, nodes)).astype(np.float32)
    return [folder / "grid.nc", folder / "v1.nc"]


def daily(path: Path, day: int, *, steps: int = 1, seed: int | None = None, lat: int = 3, lon: int = 4,
          compress: bool = True, into_place: bool = True) -> Path:
    """One file of a daily archive: ``steps`` records from day ``day`` (days since 2000-01-01) on a lat × lon
    grid, ``t2m`` packed as int16 with this file's own scale and offset, some values missing (_FillValue).

    Written beside ``path`` under a temporary name and renamed into place (how an archive is fed), unless
    ``into_place`` is False. Values depend on ``seed`` (default: the day), so a replacement differs.
    """
    rng = np.random.default_rng(day if seed is None else seed)
    target = path if not into_place else path.with_name(f".{path.name}.part")
    path.parent.mkdir(parents=True, exist_ok=True)
    with netCDF4.Dataset(target, "w") as nc:
        nc.createDimension("time", None)
        nc.createDimension("lat", lat)
        nc.createDimension("lon", lon)
        t = nc.createVariable("time", "f8", ("time",))
        t.units, t.calendar, t.standard_name, t.axis = "days since 2000-01-01", "standard", "time", "T"
        la = nc.createVariable("lat", "f4", ("lat",))
        la.units, la.standard_name = "degrees_north", "latitude"
        la[:] = np.linspace(-60, 60, lat)
        lo = nc.createVariable("lon", "f4", ("lon",))
        lo.units, lo.standard_name = "degrees_east", "longitude"
        lo[:] = np.arange(lon) * 90.0
        v = nc.createVariable("t2m", "i2", ("time", "lat", "lon"), fill_value=np.int16(-32767), zlib=compress,
                              chunksizes=(1, lat, lon) if compress else None)
        v.units, v.standard_name = "K", "air_temperature"
        v.scale_factor, v.add_offset = np.float32(0.01 * (1 + day % 3)), np.float32(250 + day % 5)
        v.set_auto_maskandscale(False)
        t[:] = day + np.arange(steps) / steps
        raw = rng.integers(-3000, 3000, size=(steps, lat, lon)).astype(np.int16)
        raw[rng.random(raw.shape) < 0.1] = -32767
        v[:] = raw
    if into_place:
        os.replace(target, path)
    return path


def append_day(path: Path, steps: int, *, seed: int = 99) -> None:
    """Grow a :func:`daily` file in place along its unlimited time dimension by ``steps`` records."""
    rng = np.random.default_rng(seed)
    with netCDF4.Dataset(path, "a") as nc:
        t, v = nc["time"], nc["t2m"]
        v.set_auto_maskandscale(False)
        n = len(t)
        last = float(t[n - 1])
        t[n:n + steps] = last + (np.arange(steps) + 1) / (n + steps)
        v[n:n + steps] = rng.integers(-3000, 3000, size=(steps, *v.shape[1:])).astype(np.int16)

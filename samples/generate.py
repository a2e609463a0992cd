"""Deterministic, realistic sample datasets: ``dstp samples DIR --size small|medium|large``.

Two datasets, generated at run time (never committed), each in its own folder
with a descriptor drafted by :func:`dstp.catalog.publish.publish`:

``ccm3`` — atmosphere, like NCAR CCM3 monthly history files: netCDF4/HDF5,
  chunked and zlib-compressed, split along ``time`` over several files,
  ``noleap`` calendar, dimensions time × lev × lat × lon. Variables keep the
  model's names (T, RELHUM, CLOUD, PS, PRECT) and the descriptor maps them to
  the columns ``temperature`` (K), ``humidity`` (%), ``cloud``, ``pressure``
  (Pa) and ``precipitation`` (mm/day). RELHUM is packed as int16 with
  scale_factor/add_offset and is _FillValue below ground, where the level's
  pressure exceeds the surface pressure (mountains). Gaussian weights ``gw``
  ride along on (lat).

``ocean`` — an ocean model on another grid: netCDF3 64-bit offset,
  ``360_day`` calendar, depth (positive down) × descending latitude ×
  0–360 longitude. ``thetao`` is packed int16 with a land _FillValue, ``so``
  uses ``missing_value``, ``zos`` is 2-D in space.

Values come from smooth climatological fields plus seeded noise; the same
size always writes the same numbers. ``medium`` is sized so that
``select temperature, time from ccm3 where humidity > 50`` returns more than
1,000,000 records; ``large`` writes more than 2 GB.
"""

from __future__ import annotations

import hashlib
import math
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import netCDF4
import numpy as np

from dstp.catalog.publish import publish

__all__ = ["SIZES", "SampleSize", "generate_samples", "ensure_samples"]

MARKER = ".dstp-samples-complete"
SAMPLES_VERSION = 2


@dataclass(frozen=True, slots=True)
class SampleSize:
    """Grid sizes of one sample size."""

    ccm3_time: int
    ccm3_steps_per_file: int
    ccm3_lev: int
    ccm3_lat: int
    ccm3_lon: int
    ocean_time: int
    ocean_steps_per_file: int
    ocean_depth: int
    ocean_lat: int
    ocean_lon: int
    complevel: int


SIZES: dict[str, SampleSize] = {
    "small": SampleSize(12, 4, 8, 32, 64, 12, 6, 6, 36, 72, 4),
    "medium": SampleSize(36, 6, 18, 64, 128, 24, 12, 10, 90, 180, 4),
    "large": SampleSize(540, 30, 18, 128, 256, 48, 12, 20, 180, 360, 1),
}

_LEVELS = np.array([3.5, 7.4, 13.9, 23.9, 37.2, 53.1, 70.1, 85.4, 100.5, 118.3, 139.1, 163.7,
                    192.5, 226.5, 266.5, 313.5, 368.8, 433.9, 510.5, 600.5, 691.4, 774.9,
                    846.7, 901.0, 939.8, 970.0, 992.6])
_DEPTHS = np.array([5.0, 15, 25, 35, 50, 75, 100, 150, 200, 300, 400, 500, 700, 1000, 1500,
                    2000, 2500, 3000, 4000, 5000])


def _levels(n: int) -> np.ndarray:
    idx = np.round(np.linspace(0, len(_LEVELS) - 1, n)).astype(int)
    return _LEVELS[np.unique(idx)] if n <= len(_LEVELS) else np.linspace(3.5, 992.6, n)


def _topography_ps(lat: np.ndarray, lon: np.ndarray) -> np.ndarray:
    """Return climatological surface pressure (hPa) with a few mountain ranges."""
    la, lo = np.meshgrid(lat, lon, indexing="ij")
    ps = np.full(la.shape, 1012.0)
    for clat, clon, width, drop in ((32, 88, 12, 420), (40, 255, 10, 250), (-20, 292, 8, 330),
                                    (-80, 60, 25, 350), (72, 318, 8, 300), (46, 10, 4, 150)):
        dlon = (lo - clon + 180) % 360 - 180
        ps -= drop * np.exp(-(((la - clat) / width) ** 2 + (dlon / (width * 1.5)) ** 2))
    return ps


def _land(lat: np.ndarray, lon: np.ndarray) -> np.ndarray:
    """Return a crude land mask: a few continental blobs."""
    la, lo = np.meshgrid(lat, lon, indexing="ij")
    land = np.zeros(la.shape, bool)
    for clat, clon, hw_lat, hw_lon in ((45, 100, 25, 60), (10, 20, 30, 25), (45, 260, 20, 35),
                                       (-15, 300, 25, 20), (-25, 135, 12, 20), (-80, 0, 12, 400)):
        dlon = (lo - clon + 180) % 360 - 180
        land |= ((la - clat) / hw_lat) ** 2 + (dlon / hw_lon) ** 2 < 1
    return land


def _ccm3_fields(size: SampleSize) -> Callable[[int], dict[str, np.ndarray]]:
    lev = _levels(size.ccm3_lev)
    lat = np.linspace(-87.86, 87.86, size.ccm3_lat)
    lon = np.arange(size.ccm3_lon) * (360.0 / size.ccm3_lon)
    ps_clim = _topography_ps(lat, lon)
    rad = np.deg2rad(lat)[:, None]
    lonr = np.deg2rad(lon)[None, :]
    z = -7.0 * np.log(lev / 1000.0)  # km, scale height 7 km

    def fields(t: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng([SAMPLES_VERSION, 3, t])
        season = math.cos(2 * math.pi * ((t % 12) - 6.5) / 12.0)
        tsurf = 300.0 - 48.0 * np.sin(rad) ** 2 + 12.0 * season * np.sin(rad) + 3 * np.cos(2 * lonr + t / 3)
        temp = tsurf[None] - 6.5 * np.minimum(z, 15.0)[:, None, None]
        temp = np.maximum(temp, 205.0 + 5 * np.cos(rad)[None]) + rng.normal(0, 1.8, (len(lev), *tsurf.shape))
        wet = 70.0 * np.exp(-(rad / 0.35) ** 2) + 45.0 * np.exp(-((np.abs(rad) - 1.0) / 0.3) ** 2) + 35
        rh = wet[None] * np.exp(-((1000.0 - lev) / 1200.0))[:, None, None] + 18 * np.sin(3 * lonr + t)[None]
        rh = np.clip(rh + rng.normal(0, 12.0, rh.shape), 0.0, 100.0)
        ps = ps_clim + 6 * season * np.cos(rad) + rng.normal(0, 2.5, ps_clim.shape)
        below = lev[:, None, None] > ps[None]
        precip = rng.gamma(0.6, 1.0, ps.shape) * (1.5 + 6 * np.exp(-(rad / 0.25) ** 2))
        cloud = np.clip(rh / 100.0 + rng.normal(0, 0.15, rh.shape) - 0.35, 0, 1)
        return {
            "T": temp.astype(np.float32),
            "RELHUM": np.where(below, np.nan, rh),
            "CLOUD": cloud.astype(np.float32),
            "PS": (ps * 100.0).astype(np.float32),
            "PRECT": precip.astype(np.float32),
        }

    return fields


def _write_ccm3(folder: Path, size: SampleSize) -> list[Path]:
    lev = _levels(size.ccm3_lev)
    lat = np.linspace(-87.86, 87.86, size.ccm3_lat)
    lon = np.arange(size.ccm3_lon) * (360.0 / size.ccm3_lon)
    gw = np.cos(np.deg2rad(lat)) * (2.0 / np.cos(np.deg2rad(lat)).sum())
    fields = _ccm3_fields(size)
    paths = []
    for first in range(0, size.ccm3_time, size.ccm3_steps_per_file):
        steps = range(first, min(first + size.ccm3_steps_per_file, size.ccm3_time))
        year, month = 1990 + first // 12, first % 12 + 1
        path = folder / f"ccm3_{year:04d}-{month:02d}.nc"
        with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
            nc.title = "CCM3 sample: monthly atmospheric state (synthetic)"
            nc.summary = ("Synthetic monthly means shaped like NCAR Community Climate Model 3 history "
                          "output: temperature, relative humidity, cloud, surface pressure, precipitation.")
            nc.source = "dstp samples generator (CCM3-like)"
            nc.institution = "dstp"
            nc.license = "CC0-1.0"
            nc.keywords = "atmosphere, air temperature, relative humidity, precipitation, climate model"
            nc.Conventions = "CF-1.8, ACDD-1.3"
            nc.case = "dstp-sample"
            nc.createDimension("time", None)
            nc.createDimension("lev", len(lev))
            nc.createDimension("lat", len(lat))
            nc.createDimension("lon", len(lon))
            nc.createDimension("nbnd", 2)
            t = nc.createVariable("time", "f8", ("time",))
            t.units, t.calendar, t.standard_name, t.long_name = "days since 1990-01-01 00:00:00", "noleap", "time", "time"
            t.axis, t.bounds = "T", "time_bnds"
            tb = nc.createVariable("time_bnds", "f8", ("time", "nbnd"))
            v = nc.createVariable("lev", "f8", ("lev",))
            v.units, v.positive, v.long_name, v.standard_name = "hPa", "down", "pressure level", "air_pressure"
            v.axis = "Z"
            v[:] = lev
            v = nc.createVariable("lat", "f8", ("lat",))
            v.units, v.standard_name, v.long_name = "degrees_north", "latitude", "latitude"
            v[:] = lat
            v = nc.createVariable("lon", "f8", ("lon",))
            v.units, v.standard_name, v.long_name = "degrees_east", "longitude", "longitude"
            v[:] = lon
            v = nc.createVariable("gw", "f8", ("lat",))
            v.long_name = "gauss weights"
            v[:] = gw
            chunks4 = (1, len(lev), len(lat), len(lon))
            chunks3 = (1, len(lat), len(lon))
            kw: dict[str, Any] = dict(zlib=True, complevel=size.complevel, shuffle=True)
            vT = nc.createVariable("T", "f4", ("time", "lev", "lat", "lon"), chunksizes=chunks4, **kw)  # type: ignore[call-overload]
            vT.units, vT.long_name, vT.standard_name = "K", "Temperature", "air_temperature"
            vT.cell_methods = "time: mean"
            vR = nc.createVariable("RELHUM", "i2", ("time", "lev", "lat", "lon"),  # type: ignore[call-overload]
                                   chunksizes=chunks4, fill_value=np.int16(-32767), **kw)
            vR.units, vR.long_name, vR.standard_name = "%", "Relative humidity", "relative_humidity"
            vR.scale_factor, vR.add_offset = np.float32(0.002), np.float32(50.0)
            vR.cell_methods = "time: mean"
            vR.comment = "_FillValue below ground (level pressure above surface pressure)"
            vC = nc.createVariable("CLOUD", "f4", ("time", "lev", "lat", "lon"), chunksizes=chunks4, **kw)  # type: ignore[call-overload]
            vC.units, vC.long_name, vC.standard_name = "1", "Cloud fraction", "cloud_area_fraction_in_atmosphere_layer"
            vP = nc.createVariable("PS", "f4", ("time", "lat", "lon"), chunksizes=chunks3, **kw)  # type: ignore[call-overload]
            vP.units, vP.long_name, vP.standard_name = "Pa", "Surface pressure", "surface_air_pressure"
            vQ = nc.createVariable("PRECT", "f4", ("time", "lat", "lon"), chunksizes=chunks3, **kw)  # type: ignore[call-overload]
            vQ.units, vQ.long_name, vQ.standard_name = "mm/day", "Total precipitation rate", "lwe_precipitation_rate"
            vR.set_auto_maskandscale(False)
            for i, step in enumerate(steps):
                start = (step // 12) * 365.0 + np.cumsum([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30])[step % 12]
                length = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][step % 12]
                t[i] = start + length / 2.0
                tb[i, :] = [start, start + length]
                f = fields(step)
                vT[i] = f["T"]
                packed = np.round((f["RELHUM"] - 50.0) / 0.002)
                vR[i] = np.where(np.isnan(packed), -32767, packed).astype(np.int16)
                vC[i] = f["CLOUD"]
                vP[i] = f["PS"]
                vQ[i] = f["PRECT"]
        paths.append(path)
    return paths


def _write_ocean(folder: Path, size: SampleSize) -> list[Path]:
    depth = _DEPTHS[: size.ocean_depth]
    dlat = 180.0 / size.ocean_lat
    lat = 90.0 - dlat / 2 - np.arange(size.ocean_lat) * dlat  # north to south: descending
    lon = (np.arange(size.ocean_lon) + 0.5) * (360.0 / size.ocean_lon)
    land = _land(lat, lon)
    rad = np.deg2rad(lat)[:, None]
    paths = []
    for first in range(0, size.ocean_time, size.ocean_steps_per_file):
        steps = range(first, min(first + size.ocean_steps_per_file, size.ocean_time))
        path = folder / f"ocean_{2000 + first // 12:04d}-{first % 12 + 1:02d}.nc"
        with netCDF4.Dataset(path, "w", format="NETCDF3_64BIT_OFFSET") as nc:
            nc.title = "Ocean model sample: monthly potential temperature, salinity and sea surface height"
            nc.summary = "Synthetic ocean model output on a 360-day calendar, land masked."
            nc.source = "dstp samples generator (ocean model)"
            nc.license = "CC0-1.0"
            nc.keywords = "ocean, sea water temperature, salinity, sea surface height"
            nc.Conventions = "CF-1.8, ACDD-1.3"
            nc.createDimension("time", None)
            nc.createDimension("depth", len(depth))
            nc.createDimension("lat", len(lat))
            nc.createDimension("lon", len(lon))
            t = nc.createVariable("time", "f8", ("time",))
            t.units, t.calendar, t.standard_name, t.axis = "days since 2000-01-01", "360_day", "time", "T"
            v = nc.createVariable("depth", "f4", ("depth",))
            v.units, v.positive, v.standard_name, v.axis = "m", "down", "depth", "Z"
            v[:] = depth
            v = nc.createVariable("lat", "f4", ("lat",))
            v.units, v.standard_name = "degrees_north", "latitude"
            v[:] = lat
            v = nc.createVariable("lon", "f4", ("lon",))
            v.units, v.standard_name = "degrees_east", "longitude"
            v[:] = lon
            vt = nc.createVariable("thetao", "i2", ("time", "depth", "lat", "lon"), fill_value=np.int16(-32768))
            vt.units, vt.standard_name, vt.long_name = "degC", "sea_water_potential_temperature", "Potential temperature"
            vt.scale_factor, vt.add_offset = np.float32(0.001), np.float32(15.0)
            vs = nc.createVariable("so", "f4", ("time", "depth", "lat", "lon"))
            vs.units, vs.standard_name, vs.long_name = "0.001", "sea_water_salinity", "Salinity"
            vs.missing_value = np.float32(1e20)
            vz = nc.createVariable("zos", "f4", ("time", "lat", "lon"), fill_value=np.float32(1e20))
            vz.units, vz.standard_name, vz.long_name = "m", "sea_surface_height_above_geoid", "Sea surface height"
            vt.set_auto_maskandscale(False)
            vs.set_auto_maskandscale(False)
            vz.set_auto_maskandscale(False)
            for i, step in enumerate(steps):
                rng = np.random.default_rng([SAMPLES_VERSION, 7, step])
                t[i] = step * 30.0 + 15.0
                season = math.cos(2 * math.pi * (step % 12) / 12.0)
                sst = 28.0 * np.cos(rad) ** 2 - 1.0 + 2.5 * season * np.sin(rad)
                theta = sst[None] * np.exp(-depth / 600.0)[:, None, None] + 2.0
                theta = theta + rng.normal(0, 0.3, (len(depth), len(lat), len(lon)))
                packed = np.round((theta - 15.0) / 0.001).astype(np.int16)
                vt[i] = np.where(land[None], np.int16(-32768), packed)
                sal = 35.0 + 1.2 * np.cos(2 * rad)[None] - 0.4 * np.exp(-depth / 300.0)[:, None, None]
                sal = (sal + rng.normal(0, 0.05, theta.shape)).astype(np.float32)
                vs[i] = np.where(land[None], np.float32(1e20), sal)
                ssh = (0.6 * np.cos(2 * rad) + 0.1 * season + rng.normal(0, 0.02, land.shape)).astype(np.float32)
                vz[i] = np.where(land, np.float32(1e20), ssh)
        paths.append(path)
    return paths


def generate_samples(directory: Path, size: str = "small", progress: Callable[[str], None] | None = None) -> Path:
    """Write the sample datasets of ``size`` into ``directory`` (replacing earlier samples); return it."""
    if size not in SIZES:
        raise ValueError(f"unknown sample size {size!r}; choose one of {', '.join(SIZES)}")
    spec = SIZES[size]
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    say = progress or (lambda _msg: None)
    for name, writer, rename in (
        ("ccm3", _write_ccm3, {"T": "temperature", "RELHUM": "humidity", "CLOUD": "cloud",
                               "PS": "pressure", "PRECT": "precipitation"}),
        ("ocean", _write_ocean, {"thetao": "temperature", "so": "salinity", "zos": "sea_surface_height"}),
    ):
        folder = directory / name
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir()
        say(f"writing {name} ({size}) into {folder}")
        files = writer(folder, spec)
        publish(files, name, rename=rename)
    (directory / MARKER).write_text(f"{SAMPLES_VERSION} {size}\n")
    return directory


def ensure_samples(cache_dir: Path, size: str = "small", progress: Callable[[str], None] | None = None) -> Path:
    """Return a folder holding the samples of ``size``, generating them on first use."""
    spec = SIZES[size]
    digest = hashlib.sha1(repr(spec).encode()).hexdigest()[:8]  # a new spec never reuses old files
    target = Path(cache_dir) / f"samples-{size}-v{SAMPLES_VERSION}-{digest}"
    marker = target / MARKER
    if marker.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".samples-{size}-", dir=target.parent))
    try:
        generate_samples(staging, size, progress)
        # Descriptors locate files relative to themselves, so the folder can move as a whole.
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target

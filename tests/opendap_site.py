"""Archives and the oracle for the OPeNDAP tests: xarray on the files, each decoded on its own, then concatenated.

Each dataset aggregates 3 files written by tests/facade_archives.py (per-file time epochs, a calendar,
latitudes north to south, longitudes on 0…360 or −180…180) plus ``pr``: int16 packed with a different
``scale_factor`` in every file and a ``_FillValue`` where a value is missing, so a server that decoded
with the first file's packing, or served the packed numbers with one file's attributes, fails. ``grp``
holds its variables in a netCDF-4 group.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any, Sequence

import netCDF4
import numpy as np
import pytest
import xarray as xr

from facade_archives import Layout, model_archive

__all__ = ["DATASETS", "CALENDARS", "write_site", "local", "labels", "same", "tool", "run", "group_archive"]

CALENDARS = {"std": "standard", "nol": "noleap", "d360": "360_day"}
#: (name, calendar key, longitudes): 0…360 on two calendars, −180…180 on the third.
DATASETS = ["std_east", "nol_west", "d360_east"]
CFTIME = xr.coders.CFDatetimeCoder(use_cftime=True)


def _add_packed(paths: Sequence[Path], seed: int) -> None:
    rng = np.random.default_rng(seed)
    for i, path in enumerate(paths):
        with netCDF4.Dataset(path, "a") as nc:
            v = nc.createVariable("pr", "i2", ("time", "lat", "lon"), fill_value=np.int16(-32767))
            v.scale_factor, v.add_offset = np.float32(0.01 * (i + 1)), np.float32(-5.0 * i)
            v.units, v.long_name = "mm day-1", "precipitation"
            packed = np.round((rng.uniform(0, 50, v.shape) + 5.0 * i) / (0.01 * (i + 1))).astype("i2")
            packed[rng.random(v.shape) < 0.15] = -32767
            v.set_auto_maskandscale(False)
            v[:] = packed


def group_archive(folder: Path) -> list[Path]:
    """One file whose variables sit in the group ``Grid`` (as GPM's and SMAP's do)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "grp.nc"
    with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        nc.title = "A grid in a group"
        g = nc.createGroup("Grid")
        g.createDimension("lat", 4)
        g.createDimension("lon", 5)
        y = g.createVariable("lat", "f8", ("lat",))
        y.units, y.standard_name = "degrees_north", "latitude"
        y[:] = [-15.0, -5.0, 5.0, 15.0]
        x = g.createVariable("lon", "f8", ("lon",))
        x.units, x.standard_name = "degrees_east", "longitude"
        x[:] = [100.0, 110.0, 120.0, 130.0, 140.0]
        p = g.createVariable("precip", "f4", ("lat", "lon"), fill_value=np.float32(-9999.9))
        p.units = "mm"
        values = np.arange(20, dtype="f4").reshape(4, 5) / 4
        values[1, 2] = -9999.9
        p[:] = values
    return [path]


def write_site(root: Path) -> None:
    from dstp.catalog.publish import publish

    for i, name in enumerate(DATASETS):
        cal, lon = name.split("_")
        paths = model_archive(root / name, Layout(calendar=CALENDARS[cal], lon=lon, files=3, steps=4,
                                                  seed=17 + i))
        _add_packed(paths, 5 + i)
        publish(paths, name)
    publish(group_archive(root / "grp"), "grp")


_local: dict[tuple[str, str], xr.Dataset] = {}


def local(root: Path, name: str) -> xr.Dataset:
    """The oracle: xarray opens each file of ``name`` on its own (CF-decoded, cftime dates), then concatenates."""
    key = (str(root), name)
    if key not in _local:
        files = sorted((root / name).glob("*.nc"))
        group = "Grid" if name == "grp" else None
        parts = [xr.open_dataset(f, decode_times=CFTIME, group=group).load() for f in files]
        for p in parts:
            p.close()
        _local[key] = parts[0] if len(parts) == 1 else xr.concat(
            parts, dim="time", data_vars="minimal", coords="minimal", compat="override")
    return _local[key]


def labels(values: Any) -> list[str]:
    return [v.strftime("%Y-%m-%dT%H:%M:%S") for v in np.asarray(values, dtype=object).reshape(-1)]


def same(got: Any, want: Any) -> None:
    """Assert equal values, NaN where NaN, in the oracle's type."""
    got = np.ma.filled(np.ma.asarray(got).astype("f8"), np.nan) if np.ma.isMaskedArray(got) else np.asarray(got)
    want = np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_array_equal(np.asarray(got, dtype=want.dtype), want)


def tool(name: str) -> str:
    """Return the path of a command-line client; fail (never skip) when it is not installed."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: ./dev installs it (Debian netcdf-bin, nco, cdo, r-cran-ncdf4)")
    return path


def run(*args: str, timeout: float = 120) -> str:
    result = subprocess.run([tool(args[0]), *args[1:]], capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{' '.join(args)}: {result.stderr}{result.stdout[-2000:]}"
    return result.stdout


def serve(root: Path, **changes: Any) -> Any:
    """Return a started server over ``root`` with HTTP on a free loopback port (the caller stops it)."""
    from dstp.server import DstpServer
    from dstp.settings import Settings

    srv = DstpServer(Settings(catalog_root=root, port=0, http_port=0, data_port=-1, udt_port=-1,
                              batch_rows=4096).replace(**changes))
    srv.start()
    return srv

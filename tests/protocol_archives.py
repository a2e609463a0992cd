"""Archives the protocol doors (Zarr, EDR) are tested on, written as real archives vary.

- :func:`model_360_day`: a 360_day model in three monthly files, ``tas`` packed in int16 with ``_FillValue``
  (5 % missing), latitudes north to south, longitudes 0…337.5;
- :func:`noleap_units_per_file`: noleap files whose time units restart each month.
"""

from __future__ import annotations

from pathlib import Path

import netCDF4
import numpy as np
import xarray as xr

from dstp.catalog.publish import publish


def model_360_day(folder: Path) -> None:
    """360_day monthly files: tas packed in int16 with _FillValue, lat north to south, lon 0…357.5."""
    folder.mkdir()
    rng = np.random.default_rng(7)
    lat, lon = np.linspace(60.0, -60.0, 13), np.arange(0.0, 360.0, 22.5)
    files = []
    for m in range(3):
        path = folder / f"model_{m:02d}.nc"
        with netCDF4.Dataset(path, "w") as nc:
            nc.createDimension("time", None)
            nc.createDimension("lat", lat.size)
            nc.createDimension("lon", lon.size)
            t = nc.createVariable("time", "f8", ("time",))
            t.units, t.calendar, t.standard_name, t.axis = "days since 2000-01-01", "360_day", "time", "T"
            t[:] = np.arange(30) + 30 * m + 0.5
            y = nc.createVariable("lat", "f4", ("lat",))
            y.units, y.standard_name = "degrees_north", "latitude"
            y[:] = lat
            x = nc.createVariable("lon", "f4", ("lon",))
            x.units, x.standard_name = "degrees_east", "longitude"
            x[:] = lon
            v = nc.createVariable("tas", "i2", ("time", "lat", "lon"), fill_value=np.int16(-32767))
            v.scale_factor, v.add_offset, v.units, v.long_name = np.float32(0.01), np.float32(280.0), "K", "tas"
            values = rng.normal(0, 10, (30, lat.size, lon.size))
            values[rng.random(values.shape) < 0.05] = np.nan
            v[:] = np.ma.masked_array(np.nan_to_num(values), mask=np.isnan(values))
        files.append(path)
    publish(files, "model")


def noleap_units_per_file(folder: Path) -> None:
    """noleap files whose time units restart each month (days since the month's first day)."""
    folder.mkdir()
    for m, first in enumerate(("2001-01-01", "2001-02-01", "2001-03-01")):
        ds = xr.Dataset({"pr": (("time", "y"), np.arange(3 * 5, dtype="f8").reshape(3, 5) * (m + 1),
                                {"units": "mm/day"})},
                        coords={"time": ("time", [0.0, 1.0, 2.0], {"units": f"days since {first}",
                                                                   "calendar": "noleap", "standard_name": "time"}),
                                "y": ("y", np.arange(5.0), {"units": "m"})})
        ds.to_netcdf(folder / f"monthly_{m}.nc")
    publish(sorted(folder.glob("monthly_*.nc")), "monthly")


#: How the archives here are published: folder, files glob, aggregation dimension, renamed variables.
SPECS: dict[str, dict] = {
    "model": {"folder": "model", "glob": "model_*.nc", "agg": "time", "rename": {}},
    "monthly": {"folder": "monthly", "glob": "monthly_*.nc", "agg": "time", "rename": {}},
}


def restricted_copy(source: Path, target: Path, dataset_id: str, new_id: str) -> None:
    """Copy a published dataset's folder under a new id, readable only by the group ``polar``."""
    import shutil

    shutil.copytree(source, target)
    xml = next(target.glob("*.dstp.xml"))
    text = xml.read_text().replace(f'id="{dataset_id}"', f'id="{new_id}"')
    assert '<access policy="public"/>' in text
    xml.write_text(text.replace('<access policy="public"/>', '<access policy="restricted" groups="polar"/>'))


def open_local(root: Path, spec: dict) -> xr.Dataset:
    """The oracle: each file opened by xarray on its own (times as cftime), concatenated, with dstp's names."""
    parts = []
    for f in sorted((root / spec["folder"]).glob(spec["glob"])):
        with xr.open_dataset(f, decode_times=xr.coders.CFDatetimeCoder(use_cftime=True)) as part:
            parts.append(part.load())
    ds = parts[0] if len(parts) == 1 else xr.concat(parts, dim=spec["agg"], data_vars="minimal", coords="minimal",
                                                     compat="override")
    return ds.sortby(spec["agg"]).rename(spec["rename"]) if spec["agg"] else ds.rename(spec["rename"])


def assert_same(got: xr.DataArray, want: xr.DataArray, what: str) -> None:
    """Assert equal shapes and values (floats compared as float64, NaN equal to NaN)."""
    g, w = np.asarray(got.values), np.asarray(want.values)
    assert g.shape == w.shape, (what, g.shape, w.shape)
    if w.dtype.kind == "f":
        np.testing.assert_array_equal(g.astype("f8"), w.astype("f8"), err_msg=what)
    else:
        assert g.tolist() == w.tolist(), what

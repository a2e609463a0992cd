"""``dstp catalog validate`` warns when real values of a packed variable pack to its ``_FillValue``.

Packing by hand puts the minimum on the fill value easily (``add_offset = (max + min) / 2``,
``scale_factor = (max - min) / 65534`` sends the minimum to -32767), or keeps ``_FillValue = 0`` where
``add_offset = 0`` packs every zero to 0: the records read as missing, in dstp as in xarray (the oracle
here shows it), and nothing said so. A packing that keeps clear of its fill value is not warned about.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import netCDF4
import numpy as np
import pytest
import xarray as xr

from dstp.catalog.publish import publish


def _packed(path: Path, name: str, values: np.ndarray, *, scale: float, offset: float, fill: int,
            units: str, **attrs: object) -> Path:
    """Write ``values`` packed to int16 as a careless packer does: round((v - offset) / scale), fill as given."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with netCDF4.Dataset(path, "w") as nc:
        nc.title = f"{name} packed by hand"
        nc.createDimension("time", values.shape[0])
        nc.createDimension("lat", values.shape[1])
        t = nc.createVariable("time", "f8", ("time",))
        t.units, t.standard_name = "days since 2000-01-01", "time"
        t[:] = np.arange(values.shape[0])
        lat = nc.createVariable("lat", "f8", ("lat",))
        lat.units, lat.standard_name = "degrees_north", "latitude"
        lat[:] = np.linspace(-60, 60, values.shape[1])
        v = nc.createVariable(name, "i2", ("time", "lat"), fill_value=np.int16(fill))
        v.set_auto_maskandscale(False)
        v.scale_factor, v.add_offset, v.units = scale, offset, units
        for key, value in attrs.items():
            v.setncattr(key, value)
        v[:] = np.round((values - offset) / scale).astype("i2")
    return path


def _validate(root: Path) -> list[str]:
    proc = subprocess.run([sys.executable, "-m", "dstp.cli", "catalog", "validate", str(root)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [line for line in proc.stdout.splitlines() if line.startswith("warning")]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("packing")
    rng = np.random.default_rng(7)
    t2m = rng.uniform(220.0, 310.0, (6, 5))
    lo, hi = t2m.min(), t2m.max()
    publish([_packed(root / "minimum" / "t2m.nc", "t2m", t2m, scale=(hi - lo) / 65534, offset=(hi + lo) / 2,
                     fill=-32767, units="K")], "minimum")
    anomaly = np.round(rng.uniform(-5.0, 5.0, (6, 5)), 2)
    anomaly[0, 0] = 0.0
    publish([_packed(root / "zero" / "anomaly.nc", "anomaly", anomaly, scale=0.01, offset=0.0, fill=0, units="K")],
            "zero")
    # Packed clear of its fill value: -32768 reserved, the data on -32767…32767.
    publish([_packed(root / "clear" / "t2m.nc", "t2m", t2m, scale=(hi - lo) / 65534, offset=(hi + lo) / 2,
                     fill=-32768, units="K")], "clear")
    publish([_packed(root / "declared" / "rh.nc", "rh", rng.uniform(1.0, 100.0, (6, 5)), scale=0.01, offset=0.0,
                     fill=-1, units="%", valid_range=np.array([-100, 10000], dtype="i2"))], "declared")
    return root


def test_a_minimum_packed_onto_the_fill_value_is_warned_about(root: Path) -> None:
    with xr.open_dataset(root / "minimum" / "t2m.nc", mask_and_scale=False) as ds:
        raw = ds["t2m"]
        minimum = -32767 * float(raw.attrs["scale_factor"]) + float(raw.attrs["add_offset"])
    with xr.open_dataset(root / "minimum" / "t2m.nc") as ds:
        assert int(ds["t2m"].isnull().sum()) == 1  # the oracle too reads the minimum as missing
    [warning] = [w for w in _validate(root) if w.split()[1] == "minimum"]
    assert ("'t2m' (t2m in t2m.nc): its packed values reach 32767 and its _FillValue -32767 is the other end of "
            f"that span (-32767 unpacks to {minimum:.6g} K): packing centred on add_offset put the data's minimum on "
            "-32767, where it reads as missing; pack to ±32766, or use _FillValue -32768") in warning, warning


def test_a_fill_value_amid_the_packed_values_is_warned_about(root: Path) -> None:
    with xr.open_dataset(root / "zero" / "anomaly.nc") as ds:
        assert bool(ds["anomaly"].isnull()[0, 0])  # a real 0.0 K anomaly, read as missing
    [warning] = [w for w in _validate(root) if w.split()[1] == "zero"]
    assert "'anomaly' (anomaly in anomaly.nc): its packed values run from -" in warning
    assert "around its _FillValue 0 (0 unpacks to 0 K): every value packed to 0 reads as missing" in warning


def test_a_valid_range_that_holds_the_fill_value_is_warned_about(root: Path) -> None:
    [warning] = [w for w in _validate(root) if w.split()[1] == "declared"]
    assert "'rh' (rh in rh.nc): its _FillValue -1 is inside its valid range [-100, 10000]" in warning


def test_a_packing_clear_of_its_fill_value_is_not_warned_about(root: Path) -> None:
    with xr.open_dataset(root / "clear" / "t2m.nc") as ds:
        assert int(ds["t2m"].isnull().sum()) == 0
    assert not [w for w in _validate(root) if w.split()[1] == "clear"]

"""Units compared as units (UDUNITS-2 through cf-units), and CF attributes read in any case.

Two-file archives that differ only in how they write a unit, against xarray reading each file
on its own and concatenating along time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import netCDF4
import numpy as np
import pyarrow as pa
import pytest
import xarray as xr

from oracle import assert_same_records, run_sql

from dstp.catalog.publish import publish
from dstp.catalog.registry import Catalog
from dstp.errors import CatalogError
from dstp.query.execute import QueryExecution, prepare_query
from dstp.settings import Settings

SETTINGS = Settings(batch_rows=5)


def answer(catalog: Catalog, sql: str) -> pa.Table:
    prepared = prepare_query(sql, catalog, SETTINGS)
    return pa.Table.from_batches(list(QueryExecution(prepared, SETTINGS).batches()), schema=prepared.schema)


def write_pair(folder: Path, lev_units: tuple[str, str] = ("hPa", "hPa"), temp_units: tuple[str, str] = ("K", "K"),
               lev_values: tuple[list[float], list[float]] = ([1000.0, 500.0], [1000.0, 500.0])) -> list[Path]:
    """Write two monthly files of temp(time, lev) whose lev and temp units are given per file."""
    paths = []
    for k in range(2):
        path = folder / f"model_{k}.nc"
        with netCDF4.Dataset(path, "w") as nc:
            nc.createDimension("time", None)
            nc.createDimension("lev", 2)
            t = nc.createVariable("time", "f8", ("time",))
            t.units, t.standard_name = "days since 2000-01-01", "time"
            t[:] = [k * 2.0, k * 2.0 + 1.0]
            lev = nc.createVariable("lev", "f8", ("lev",))
            lev.units, lev.long_name, lev.positive = lev_units[k], "hybrid level", "down"
            lev[:] = lev_values[k]
            temp = nc.createVariable("temp", "f4", ("time", "lev"), fill_value=np.float32(1e20))
            temp.units = temp_units[k]
            temp[:] = 270.0 + np.arange(4, dtype=np.float32).reshape(2, 2) + 10 * k
        paths.append(path)
    return paths


def concat(paths: list[Path]) -> xr.Dataset:
    parts = [xr.open_dataset(p).load() for p in paths]
    return xr.concat(parts, dim="time", data_vars="minimal", coords="minimal", compat="override", join="override")


@pytest.mark.parametrize("lev_units, temp_units, warned", [
    (("level", "hybrid_sigma_pressure"), ("K", "K"), True),   # the archive: labels, not units
    (("hPa", "mbar"), ("K", "kelvin"), False),                 # one unit, two spellings
    (("1", "1"), ("m s-1", "m/s"), False),
])
def test_units_spelled_two_ways_aggregate_as_one_dataset(tmp_path: Path, lev_units: tuple[str, str],
                                                          temp_units: tuple[str, str], warned: bool) -> None:
    paths = write_pair(tmp_path, lev_units, temp_units)
    publish(paths, "model")
    catalog = Catalog.scan(tmp_path)
    try:
        assert not catalog.problems, catalog.problems
        frame = concat(paths)[["temp"]].to_dataframe(dim_order=["time", "lev"]).reset_index()
        frame["time"] = frame["time"].to_numpy().astype("datetime64[us]")
        sql = "select time, lev, temp from model"
        assert_same_records(answer(catalog, sql), run_sql(frame, sql, "model"))
        warnings = " ".join(catalog.get("model").warnings)
        assert ("not physical units, and its values are the same in every file" in warnings) == warned, warnings
        if warned:
            assert f"'{lev_units[1]}' in model_1.nc but '{lev_units[0]}' in model_0.nc" in warnings
    finally:
        catalog.close()


@pytest.mark.parametrize("lev_units, temp_units, lev_values, words", [
    (("hPa", "hPa"), ("K", "degC"), None, ["model_1.nc", "'temp'", "'degC'", "'K'", "convert into each other"]),
    (("m", "km"), ("K", "K"), None, ["model_1.nc", "'lev'", "'km'", "'m'", "convert into each other"]),
    (("hPa", "K"), ("K", "K"), None, ["'lev'", "different physical quantities"]),
    (("level", "hybrid_sigma_pressure"), ("K", "K"), ([1000.0, 500.0], [1000.0, 400.0]),
     ["model_1.nc", "'lev'", "differs", "index 1"]),
], ids=["K-degC", "m-km-coordinate", "pressure-temperature", "labels-with-other-values"])
def test_units_that_differ_are_refused_naming_file_variable_and_units(
        tmp_path: Path, lev_units: tuple[str, str], temp_units: tuple[str, str],
        lev_values: tuple[list[float], list[float]] | None, words: list[str]) -> None:
    paths = write_pair(tmp_path, lev_units, temp_units, lev_values or ([1000.0, 500.0], [1000.0, 500.0]))
    with pytest.raises(CatalogError) as info:
        publish(paths, "model")
    for word in words:
        assert word in str(info.value), str(info.value)


def _variant_file(path: Path, attrs: dict[str, Any], raw: np.ndarray, dtype: str = "i2") -> None:
    with netCDF4.Dataset(path, "w") as nc:
        nc.createDimension("time", None)
        t = nc.createVariable("time", "f8", ("time",))
        t.setncattr("Units", "days since 2000-01-01")  # as some HDF-derived files spell it
        t[:] = np.arange(len(raw))
        v = nc.createVariable("sst", dtype, ("time",))
        v.set_auto_maskandscale(False)
        for key, value in attrs.items():
            v.setncattr(key, value)
        v[:] = raw


def test_case_variant_cf_attributes_are_read_as_cf_names_where_the_cf_name_is_absent(tmp_path: Path) -> None:
    raw = np.array([100, -9999, 250, 300], dtype=np.int16)
    attrs = {"UNITS": "degC", "_fillvalue": np.int16(-9999), "Scale_Factor": np.float32(0.01),
             "Add_Offset": np.float32(20.0), "Long_Name": "sea surface temperature", "long_name": "SST"}
    _variant_file(tmp_path / "sst.nc", attrs, raw)
    publish([tmp_path / "sst.nc"], "sst")
    catalog = Catalog.scan(tmp_path)
    try:
        ds = catalog.get("sst")
        column = ds.attributes["sst"]
        assert column.spec.units == "degC" and column.spec.description == "SST"  # long_name itself wins
        assert ds.coordinates["time"].decoding.time_units == "days since 2000-01-01"
        warnings = " ".join(ds.warnings)
        assert "'_fillvalue' as '_FillValue' (sst)" in warnings and "'UNITS' as 'units' (sst)" in warnings, warnings
        # The oracle: xarray on the same file with the variants renamed to CF's names (what dstp documents).
        with xr.open_dataset(tmp_path / "sst.nc", decode_cf=False) as undecoded:
            renamed = undecoded.load()
        renamed["sst"].attrs = {({"_fillvalue": "_FillValue", "Scale_Factor": "scale_factor",
                                  "Add_Offset": "add_offset", "UNITS": "units"}.get(k, k)): v
                                for k, v in renamed["sst"].attrs.items() if k != "Long_Name"}
        renamed["time"].attrs = {"units": renamed["time"].attrs["Units"]}
        truth = xr.decode_cf(renamed)
        frame = truth[["sst"]].to_dataframe().reset_index()
        frame["time"] = frame["time"].to_numpy().astype("datetime64[us]")
        sql = "select time, sst from sst"
        want = run_sql(frame, sql, "sst")
        assert want.column("sst").null_count == 1
        assert_same_records(answer(catalog, sql), want)
        with xr.open_dataset(tmp_path / "sst.nc") as plain:  # xarray alone: no mask, no unpacking
            assert int(plain["sst"].values[1]) == -9999
    finally:
        catalog.close()


def test_case_variants_that_disagree_are_not_guessed_between(tmp_path: Path) -> None:
    _variant_file(tmp_path / "sst.nc", {"Units": "degC", "UNITS": "K"}, np.array([1, 2], dtype=np.int16))
    publish([tmp_path / "sst.nc"], "sst")
    catalog = Catalog.scan(tmp_path)
    try:
        assert catalog.get("sst").attributes["sst"].spec.units is None
    finally:
        catalog.close()

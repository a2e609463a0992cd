"""Multi-file archives as real producers write them, against xarray decoding each file on its own.

Hypothesis generates small archives of 1–4 netCDF files that vary what real
monthly files vary: each file's own packing (int16 with float32 or float64
factors, float32, float64, and netCDF-3's unsigned bytes and shorts: signed
types with ``_Unsigned = "true"``), its own fill values (``_FillValue``,
``missing_value``, NaN, a ``missing_value`` the type cannot hold, or none at
all with unwritten elements reading back as netCDF's default fill), its own
time units and epoch, packed times, the calendar's alias
(``gregorian``/``standard``, ``noleap``/``365_day``), ascending or descending
latitudes, a variable missing from one file, gaps between files, file names
out of time order and a file with no records yet.

The oracle is independent of dstp's reader: xarray opens each file by itself
(``mask_and_scale``, cftime times), a variable a file lacks becomes NaN, the
parts are concatenated along time with ``xarray.concat``, and DuckDB runs the
same SQL over the oracle's records. Time bounds carry no units of their own
(CF 7.1): each file's are read with that file's time units, as xarray does. The one convention added to xarray's is
netCDF4-python's: an element equal to the default fill of its type, in a
variable with no ``_FillValue``, is missing, and so is one equal to the
``missing_value`` of an ``_Unsigned`` variable (docs/query-language.md).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cftime
import netCDF4
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oracle import _times, assert_same_records, run_sql

from dstp.catalog.publish import publish
from dstp.catalog.registry import Catalog
from dstp.errors import DataFileError
from dstp.query.execute import QueryExecution, prepare_query
from dstp.settings import Settings

SETTINGS = Settings(batch_rows=7)  # tiny batches: blocks cross file boundaries
CALENDARS = {
    "standard": ["standard", "gregorian", None],
    "proleptic_gregorian": ["proleptic_gregorian"],
    "noleap": ["noleap", "365_day"],
    "360_day": ["360_day"],
    "all_leap": ["all_leap", "366_day"],
    "julian": ["julian"],
}
EPOCHS = ["1970-01-01", "2000-01-01", "1999-11-20", "2001-03-01 06:00:00"]
UNITS = ["days", "hours", "minutes"]
ENCODINGS = ["int16_f32", "int16_f64", "int16_offset_only", "float32", "float64", "int32", "uint8_unsigned",
             "uint16_unsigned"]
#: wide_missing_value: a missing_value the variable's type cannot hold (-9.99e33 on integers, a double on floats)
FILLS = ["fill_attr", "missing_value", "nan", "default_fill", "wide_missing_value"]


@dataclass(frozen=True)
class FileSpec:
    steps: int
    units: str
    epoch: str
    float_time: bool
    calendar_name: str | None
    encoding: str
    fill: str
    has_humid: bool
    seed: int
    #: 0 stored plain, 1 deflate, 2 shuffle + deflate (read by the chunk reader when direct_chunks is on)
    deflate: int = 0
    #: time stored as int32 with its own scale_factor and add_offset
    packed_time: bool = False


@dataclass(frozen=True)
class ArchiveSpec:
    calendar: str
    lat_descending: bool
    nlat: int
    nlon: int
    gaps: tuple[int, ...]
    files: tuple[FileSpec, ...]
    direct_chunks: bool = False
    #: file k is named arch_{names[k]}: name order is not time order
    names: tuple[int, ...] = ()
    #: one more file, created with no time records yet, named at this place among the others (-1: none)
    empty_at: int = -1


@st.composite
def archives(draw: st.DrawFn) -> ArchiveSpec:
    calendar = draw(st.sampled_from(sorted(CALENDARS)))
    n = draw(st.integers(1, 4))
    missing = draw(st.integers(-1, n - 1)) if n > 1 else -1
    files = []
    for k in range(n):
        units = draw(st.sampled_from(UNITS))
        epoch = draw(st.sampled_from(EPOCHS if units != "days" else EPOCHS[:3]))
        files.append(FileSpec(
            steps=draw(st.integers(1, 4)),
            units=units,
            epoch=epoch,
            float_time=draw(st.booleans()),
            calendar_name=draw(st.sampled_from(CALENDARS[calendar])),
            encoding=draw(st.sampled_from(ENCODINGS)),
            fill=draw(st.sampled_from(FILLS)),
            has_humid=k != missing,
            seed=draw(st.integers(0, 2**16)),
            deflate=draw(st.integers(0, 2)),
            packed_time=draw(st.booleans()),
        ))
    return ArchiveSpec(
        calendar=calendar,
        lat_descending=draw(st.booleans()),
        nlat=draw(st.integers(1, 4)),
        nlon=draw(st.integers(1, 3)),
        gaps=tuple(draw(st.integers(0, 3)) for _ in range(n)),
        files=tuple(files),
        direct_chunks=draw(st.booleans()),
        names=tuple(draw(st.permutations(range(n)))),
        empty_at=draw(st.integers(-1, n)),
    )


def write_archive(spec: ArchiveSpec, folder: Path) -> list[Path]:
    """Write the archive's files; return their paths in time order (their names need not be)."""
    lat = np.linspace(-45.0, 45.0, spec.nlat) if spec.nlat > 1 else np.array([10.0])
    if spec.lat_descending:
        lat = lat[::-1]
    lon = np.arange(spec.nlon) * 90.0
    day = 0
    paths = []
    for k, f in enumerate(spec.files):
        day += spec.gaps[k]
        days = np.arange(day, day + f.steps)
        day += f.steps
        dates = [cftime.datetime(2000, 1, 1, calendar=spec.calendar) + pd.Timedelta(days=int(d)).to_pytimedelta()
                 for d in days]
        units = f"{f.units} since {f.epoch}"
        numbers = cftime.date2num(dates, units, calendar=spec.calendar)
        path = folder / f"arch_{spec.names[k] if spec.names else k:02d}.nc"
        rng = np.random.default_rng(f.seed)
        with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
            nc.createDimension("time", None)
            nc.createDimension("lat", spec.nlat)
            nc.createDimension("lon", spec.nlon)
            if f.packed_time:  # CF 8.1: any variable may be packed; this file's own factor and offset
                t = nc.createVariable("time", "i4", ("time",))
                t.set_auto_maskandscale(False)
                t.scale_factor, t.add_offset = 0.25, float(np.floor(numbers.min())) - 8.0
                packed = (numbers - t.add_offset) / t.scale_factor
                assert np.array_equal(np.rint(packed) * 0.25 + t.add_offset, numbers)
            else:
                t = nc.createVariable("time", "f8" if f.float_time or f.units == "days" and ":" in f.epoch else "i4",
                                      ("time",))
            t.units = units
            if f.calendar_name is not None:
                t.calendar = f.calendar_name
            t.standard_name = "time"
            t.bounds = "time_bnds"  # no units of its own: CF 7.1 gives it this file's time units
            t[:] = np.rint(packed).astype(np.int32) if f.packed_time else numbers
            nc.createDimension("nv", 2)
            ends = [d + pd.Timedelta(hours=18).to_pytimedelta() for d in dates]
            nc.createVariable("time_bnds", "f8", ("time", "nv"))[:] = np.stack(
                [numbers, cftime.date2num(ends, units, calendar=spec.calendar)], axis=1)
            la = nc.createVariable("lat", "f4", ("lat",))
            la.units, la.standard_name = "degrees_north", "latitude"
            la[:] = lat
            lo = nc.createVariable("lon", "f8", ("lon",))
            lo.units, lo.standard_name = "degrees_east", "longitude"
            lo[:] = lon
            gw = nc.createVariable("gw", "f8", ("lat",))
            gw.units = "1"
            gw[:] = np.cos(np.deg2rad(lat))
            shape = (f.steps, spec.nlat, spec.nlon)
            physical = 250.0 + 40.0 * rng.random(shape) + 10.0 * k
            _write_temp(nc, f, physical, rng)
            if f.has_humid:
                h = nc.createVariable("humid", "f4", ("time", "lat", "lon"), fill_value=np.float32(-1.0),
                                      **_compression(f))
                h.units = "%"
                values = (100 * rng.random(shape)).astype(np.float32)
                values[rng.random(shape) < 0.2] = -1.0
                h[:] = values
        paths.append(path)
    if spec.empty_at >= 0:
        _write_empty(folder / f"arch_{spec.empty_at:02d}a.nc", spec, lat, lon)
    return paths


def _write_empty(path: Path, spec: ArchiveSpec, lat: np.ndarray, lon: np.ndarray) -> None:
    """Write a file of the archive with no time records yet (a month created, not yet filled)."""
    with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        nc.createDimension("time", None)
        nc.createDimension("lat", len(lat))
        nc.createDimension("lon", len(lon))
        nc.createDimension("nv", 2)
        t = nc.createVariable("time", "f8", ("time",))
        t.units, t.standard_name, t.bounds = "days since 2000-01-01", "time", "time_bnds"
        t.calendar = spec.files[0].calendar_name or "standard"
        nc.createVariable("time_bnds", "f8", ("time", "nv"))
        for name, values, units in (("lat", lat, "degrees_north"), ("lon", lon, "degrees_east")):
            v = nc.createVariable(name, "f4" if name == "lat" else "f8", (name,))
            v.units, v.standard_name = units, "latitude" if name == "lat" else "longitude"
            v[:] = values
        gw = nc.createVariable("gw", "f8", ("lat",))
        gw.units = "1"
        gw[:] = np.cos(np.deg2rad(lat))
        nc.createVariable("temp", "f4", ("time", "lat", "lon"), fill_value=np.float32(1e20)).units = "K"
        nc.createVariable("humid", "f4", ("time", "lat", "lon"), fill_value=np.float32(-1.0)).units = "%"


def _compression(f: FileSpec) -> dict[str, Any]:
    return {"zlib": True, "complevel": 1, "shuffle": f.deflate == 2} if f.deflate else {}


def _write_temp(nc: netCDF4.Dataset, f: FileSpec, physical: np.ndarray, rng: np.random.Generator) -> None:
    """Write ``temp`` with the file's own encoding and fill convention."""
    holes = rng.random(physical.shape) < 0.15
    dims = ("time", "lat", "lon")
    unsigned = f.encoding.endswith("_unsigned")
    if unsigned:  # netCDF-3's unsigned data: a signed type whose bits are unsigned, fill -1 (all bits set)
        dtype = np.int8 if f.encoding.startswith("uint8") else np.int16
        fill_raw = dtype(-1)
    elif f.encoding.startswith("int16"):
        dtype, fill_raw = np.int16, np.int16(-32768)
    elif f.encoding == "int32":
        dtype, fill_raw = np.int32, np.int32(-99)
    else:
        dtype = np.float32 if f.encoding == "float32" else np.float64
        fill_raw = dtype(1e20) if f.fill != "nan" else dtype(np.nan)
    kwargs = {"fill_value": fill_raw} if f.fill in ("fill_attr", "nan") and not (
        f.fill == "nan" and np.dtype(dtype).kind != "f") else {}
    var = nc.createVariable("temp", dtype, dims, **kwargs, **_compression(f))
    var.units = "K"
    var.set_auto_maskandscale(False)
    if f.fill == "missing_value":
        var.missing_value = fill_raw
    if f.fill == "wide_missing_value":  # no element can equal it: it masks nothing (xarray, netCDF4-python)
        var.setncattr("missing_value", np.float64(-9.99e33))  # (attribute assignment would cast it)
        if np.dtype(dtype).kind == "f":
            fill_raw = dtype(-9.99e33)  # a float32 hole is not the double; a float64 one is
    if unsigned:
        var._Unsigned = "true"
        top = float(np.iinfo(np.dtype(dtype).str.replace("i", "u")).max) - 1
        lo, hi = float(physical.min()), float(physical.max())
        scale, offset = np.float32((hi - lo) / top if hi > lo else 1.0), np.float32(lo)
        var.scale_factor, var.add_offset = scale, offset
        codes = np.clip(np.round((physical - offset) / scale), 0, top)
        raw = codes.astype(np.dtype(dtype).str.replace("i", "u")).view(dtype)
    elif f.encoding.startswith("int16"):
        lo, hi = float(physical.min()), float(physical.max())
        ftype = np.float64 if f.encoding in ("int16_f64", "int16_offset_only") else np.float32
        if f.encoding == "int16_offset_only":
            offset = ftype(np.floor(lo))
            var.add_offset = offset
            raw = np.round(physical - offset).astype(np.int16)
        else:
            scale = ftype((hi - lo) / 60000.0 if hi > lo else 1.0)
            offset = ftype((hi + lo) / 2.0)
            var.scale_factor, var.add_offset = scale, offset
            raw = np.round((physical - offset) / scale).astype(np.int16)
    elif f.encoding == "int32":
        raw = np.round(physical * 100).astype(np.int32)
    else:
        raw = physical.astype(dtype)
    if f.fill == "default_fill":
        # Leave the last time step unwritten: it reads back as netCDF's default fill.
        if raw.shape[0] > 1:
            var[: raw.shape[0] - 1] = raw[:-1]
        else:
            var[0, : max(0, raw.shape[1] - 1)] = raw[0, :-1]
        return
    raw = raw.copy()
    raw[holes] = fill_raw
    var[:] = raw


# ------------------------------------------------------------------------- oracle


def _mask_default_fill(decoded: xr.Dataset, raw: xr.Dataset) -> xr.Dataset:
    """Mask elements equal to netCDF's default fill in variables without a _FillValue (netCDF4-python's rule)."""
    for name in decoded.data_vars:
        var = raw[name]
        if "_FillValue" in var.encoding or "_FillValue" in var.attrs or var.dtype.itemsize == 1:
            continue
        default = netCDF4.default_fillvals[var.dtype.str[1:]]
        hit = var.values == default
        if hit.any():
            decoded[name] = decoded[name].where(~hit)
    return decoded


def _mask_unsigned_missing(decoded: xr.Dataset, raw: xr.Dataset) -> xr.Dataset:
    """Mask elements equal to a ``missing_value`` of an ``_Unsigned`` variable (netCDF4-python's and netCDF-Java's
    rule: its bits are the unsigned fill, as ``_FillValue``'s are; xarray converts only ``_FillValue``)."""
    for name in decoded.data_vars:
        attrs = raw[name].attrs
        if str(attrs.get("_Unsigned", "")).lower() == "true" and "missing_value" in attrs:
            hit = np.isin(raw[name].values, np.atleast_1d(attrs["missing_value"]))
            if hit.any():
                decoded[name] = decoded[name].where(~hit)
    return decoded


def oracle_dataset(paths: list[Path]) -> xr.Dataset:
    coder = xr.coders.CFDatetimeCoder(use_cftime=True)
    parts = []
    for p in paths:
        with xr.open_dataset(p, decode_times=coder, mask_and_scale=True) as d, \
                xr.open_dataset(p, decode_times=False, mask_and_scale=False) as raw:
            part = _mask_unsigned_missing(_mask_default_fill(d.load(), raw.load()), raw)
        if "humid" not in part:
            part["humid"] = xr.full_like(part["temp"], np.nan, dtype=np.float32)
        parts.append(part)
    if len(parts) == 1:
        return parts[0]
    return xr.concat(parts, dim="time", data_vars="minimal", coords="minimal", compat="override", join="exact")


def oracle_records(ds: xr.Dataset, names: list[str], dims: list[str]) -> pd.DataFrame:
    frame = ds[names].to_dataframe(dim_order=dims).reset_index()
    if "time" in frame and len(frame):
        calendar = ds["time"].values.reshape(-1)[0].calendar
        frame["time"] = _times(frame["time"].to_numpy(), calendar)
    return frame


def dstp_answer(catalog: Catalog, sql: str) -> pa.Table:
    prepared = prepare_query(sql, catalog, SETTINGS)
    return pa.Table.from_batches(list(QueryExecution(prepared, SETTINGS).batches()), schema=prepared.schema)


def _literal(value: float) -> str:
    return repr(float(value))


def _iso(value: object) -> str:
    if isinstance(value, np.datetime64):
        return str(value.astype("datetime64[s]"))
    return str(value)[:19]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=archives(), pick=st.randoms(use_true_random=False))
def test_multi_file_archives_answer_as_xarray_per_file(spec: ArchiveSpec, pick: object) -> None:
    with tempfile.TemporaryDirectory(prefix="dstp-arch-") as tmp:
        folder = Path(tmp)
        paths = write_archive(spec, folder)
        publish(sorted(folder.glob("arch_*.nc")), "arch")  # the empty file too
        catalog = Catalog.scan(folder, direct_chunks=spec.direct_chunks)
        try:
            assert not catalog.problems, catalog.problems
            truth = oracle_dataset(paths)
            records = oracle_records(truth, ["temp", "humid"], ["time", "lat", "lon"])
            queries = ["select time, lat, lon, temp, humid from arch"]
            temps = records["temp"].dropna().to_numpy()
            if temps.size:
                queries.append(f"select time, temp from arch where temp > {_literal(pick.choice(list(temps)))}")
            times = sorted(set(records["time"]))
            t = _iso(pick.choice(times))
            queries.append(f"select time, lat, humid from arch where time >= '{t}'")
            queries.append(f"select lon, time, temp from arch where time < '{t}' and lat <= {_literal(pick.choice(list(records['lat'])))}")
            queries.append("select time, temp from arch where humid is null order by time desc, temp")
            for sql in queries:
                got = dstp_answer(catalog, sql)
                want = run_sql(records, sql, "arch")
                assert_same_records(got, want, ordered="order by" in sql)
            bounds = pd.DataFrame({"time": truth["time"].values, "time_lower": truth["time_bnds"].values[:, 0],
                                   "time_upper": truth["time_bnds"].values[:, 1]})
            for column in bounds:
                bounds[column] = _times(bounds[column].to_numpy(), spec.calendar)
            assert_same_records(dstp_answer(catalog, "select distinct time, time_lower, time_upper from arch"),
                                pa.Table.from_pandas(bounds, preserve_index=False))
            weights = oracle_records(truth, ["gw"], ["lat"])
            assert_same_records(dstp_answer(catalog, "select lat, gw from arch"),
                                run_sql(weights, "select lat, gw from arch", "arch"))
            # describe says which files lack a variable
            humid = catalog.get("arch").attributes["humid"]
            lacking = {p.name for p, f in zip(paths, spec.files) if not f.has_humid}
            assert set(catalog.get("arch").missing_from(humid)) == lacking
            if spec.direct_chunks and any(f.deflate and f.has_humid for f in spec.files):  # chunk reader answered
                assert catalog.handles.chunks is not None and catalog.handles.chunks.reads > 0
        finally:
            catalog.close()


# ------------------------------------------------------------- refusals, named


def _pair(folder: Path, second: dict[str, object], *, dims2: tuple[str, ...] = ("time", "lat")) -> None:
    for k, attrs in enumerate(({}, second)):
        with netCDF4.Dataset(folder / f"part_{k}.nc", "w") as nc:
            nc.createDimension("time", None)
            nc.createDimension("lat", 2)
            t = nc.createVariable("time", "f8", ("time",))
            t.units = str(attrs.get("time_units", "days since 2000-01-01"))
            t.calendar = str(attrs.get("calendar", "standard"))
            t[:] = [k * 2, k * 2 + 1]
            la = nc.createVariable("lat", "f4", ("lat",))
            la.units = "degrees_north"
            la[:] = attrs.get("lat", [0.0, 1.0])
            dims = dims2 if k else ("time", "lat")
            v = nc.createVariable("temp", "f4", dims)
            v.units = str(attrs.get("units", "K"))
            v[:] = np.ones([2 if d in ("time", "lat") else 1 for d in dims])
            if dims2 != ("time", "lat"):
                nc.createDimension("lev", 1)


@pytest.mark.parametrize(
    "second, words",
    [
        ({"calendar": "360_day"}, ["'time'", "calendar changes", "part_1.nc (days since 2000-01-01; 360_day)"]),
        ({"units": "degC"}, ["part_1.nc", "'temp'", "'degC'", "'K'"]),
        ({"lat": [0.0, 1.5]}, ["part_1.nc", "'lat'", "differs"]),
    ],
    ids=["calendar", "units", "coordinates"],
)
def test_files_that_cannot_be_reconciled_refuse_the_dataset_naming_file_and_variable(
    tmp_path: Path, second: dict[str, object], words: list[str]
) -> None:
    _pair(tmp_path, second)
    (tmp_path / "pair.dstp.xml").write_bytes(_descriptor())
    catalog = Catalog.scan(tmp_path)
    assert "pair" not in catalog
    message = " ".join(str(p) for p in catalog.problems)
    for word in words:
        assert word in message, message


def test_a_variable_that_changes_dimensions_refuses_the_dataset(tmp_path: Path) -> None:
    for k, dims in enumerate((("time", "lat"), ("lat", "time"))):
        with netCDF4.Dataset(tmp_path / f"part_{k}.nc", "w") as nc:
            nc.createDimension("time", 2)
            nc.createDimension("lat", 2)
            t = nc.createVariable("time", "f8", ("time",))
            t.units = "days since 2000-01-01"
            t[:] = [k * 2, k * 2 + 1]
            la = nc.createVariable("lat", "f4", ("lat",))
            la[:] = [0.0, 1.0]
            nc.createVariable("temp", "f4", dims)[:] = np.ones((2, 2))
    (tmp_path / "pair.dstp.xml").write_bytes(_descriptor())
    with pytest.raises(DataFileError, match=r"part_1\.nc: variable 'temp' has dimensions \(lat, time\)"):
        from dstp.catalog.dataset import GriddedDataset
        from dstp.catalog.descriptor import read_descriptor

        GriddedDataset.open(read_descriptor(tmp_path / "pair.dstp.xml"))


def test_time_units_that_change_between_files_label_each_file_by_its_own_epoch(tmp_path: Path) -> None:
    # The real-model case: the second file counts from 1978-09-01, the first from 1980-01-01.
    for k, (units, value) in enumerate((("days since 1980-01-01", 1126.0), ("days since 1978-09-01", 1622.0))):
        with netCDF4.Dataset(tmp_path / f"part_{k}.nc", "w") as nc:
            nc.createDimension("time", None)
            nc.createDimension("lat", 2)
            t = nc.createVariable("time", "f8", ("time",))
            t.units = units
            t[:] = [value]
            nc.createVariable("lat", "f4", ("lat",))[:] = [0.0, 1.0]
            nc.createVariable("temp", "f4", ("time", "lat"))[:] = np.full((1, 2), float(k))
    (tmp_path / "pair.dstp.xml").write_bytes(_descriptor())
    catalog = Catalog.scan(tmp_path)
    got = dstp_answer(catalog, "select time, temp from pair where lat = 0 order by time")
    truth = oracle_dataset(sorted(tmp_path.glob("part_*.nc")))
    want = [str(d)[:10] for d in truth["time"].values]
    assert [str(v)[:10] for v in got.column("time").to_pylist()] == want == ["1983-01-31", "1983-02-09"]
    catalog.close()


def _descriptor() -> bytes:
    return b"""<?xml version="1.0"?>
<dataset xmlns="urn:dstp:descriptor:1" id="pair" version="1">
  <title>pair</title>
  <files glob="part_*.nc" aggregate="time"/>
  <coordinates>
    <coordinate name="time" dimension="time" axis="T"/>
    <coordinate name="lat" dimension="lat" axis="Y"/>
  </coordinates>
  <attributes default-grid="time lat">
    <attribute name="temp" dimensions="time lat"/>
  </attributes>
</dataset>
"""


def test_a_missing_month_is_reported_as_a_gap_with_the_coverage_around_it(tmp_path: Path) -> None:
    for month, days in ((1, 31), (2, 28), (4, 30)):  # March is missing
        with netCDF4.Dataset(tmp_path / f"part_{month:02d}.nc", "w") as nc:
            nc.createDimension("time", None)
            nc.createDimension("lat", 2)
            t = nc.createVariable("time", "i4", ("time",))
            t.units = f"hours since 2021-{month:02d}-01"
            t[:] = np.arange(days) * 24
            nc.createVariable("lat", "f4", ("lat",))[:] = [0.0, 1.0]
            nc.createVariable("temp", "f4", ("time", "lat"))[:] = np.ones((days, 2))
    (tmp_path / "pair.dstp.xml").write_bytes(_descriptor())
    catalog = Catalog.scan(tmp_path)
    ds = catalog.get("pair")
    assert ds.coverage == ((0, 59), (59, 89))
    assert len(ds.warnings) == 1 and "2021-02-28T00:00:00 → 2021-04-01T00:00:00" in ds.warnings[0]
    from dstp.metadata import dataset_details

    details = dataset_details(ds)
    assert [(r.first, r.last) for r in details.coverage] == [
        ("2021-01-01T00:00:00", "2021-02-28T00:00:00"), ("2021-04-01T00:00:00", "2021-04-30T00:00:00")]
    assert [(f.name, f.first, f.last) for f in details.files][1] == (
        "part_02.nc", "2021-02-01T00:00:00", "2021-02-28T00:00:00")
    catalog.close()


def test_catalog_validate_prints_refusals_gaps_and_missing_variables(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from dstp.cli import main

    good, bad = tmp_path / "good", tmp_path / "bad"
    for folder in (good, bad):
        folder.mkdir()
    spec = ArchiveSpec("standard", False, 2, 1, (0, 3), (
        FileSpec(2, "days", "2000-01-01", True, "standard", "float32", "nan", True, 1),
        FileSpec(2, "hours", "1970-01-01", True, "gregorian", "int16_f32", "fill_attr", False, 2),
    ))
    paths = write_archive(spec, good)
    publish(paths, "arch")
    _pair(bad, {"units": "degC"})
    (bad / "pair.dstp.xml").write_bytes(_descriptor())
    assert main(["catalog", "validate", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "ok      arch" in out
    assert "'humid' is NULL on the records of arch_01.nc" in out
    assert "warning arch" in out and "1 gap(s) along 'time'" in out
    assert "ERROR" in out and "part_1.nc: variable 'temp' has units 'degC' but part_0.nc has 'K'" in out


def test_times_in_nanoseconds_decode_as_xarray_decodes_them(tmp_path: Path) -> None:
    # cftime takes no nanoseconds; xarray (numpy datetime64[ns]) does, and so must dstp, to the microsecond.
    for k, (units, values) in enumerate((("nanoseconds since 1970-01-01", [946_684_800_000_000_000,
                                                                            946_771_200_123_456_000]),
                                         ("days since 2000-01-03", [0.0, 1.5]))):
        with netCDF4.Dataset(tmp_path / f"part_{k}.nc", "w") as nc:
            nc.createDimension("time", None)
            nc.createDimension("lat", 2)
            t = nc.createVariable("time", "i8" if k == 0 else "f8", ("time",))
            t.units, t.calendar = units, "standard"
            t[:] = values
            nc.createVariable("lat", "f4", ("lat",))[:] = [0.0, 1.0]
            nc.createVariable("temp", "f4", ("time", "lat"))[:] = np.full((2, 2), float(k))
    (tmp_path / "pair.dstp.xml").write_bytes(_descriptor())
    catalog = Catalog.scan(tmp_path)
    try:
        got = dstp_answer(catalog, "select time from pair where lat = 0 order by time")
        want = np.concatenate([xr.open_dataset(p)["time"].values for p in sorted(tmp_path.glob("part_*.nc"))])
        assert got.column("time").to_numpy().tolist() == want.astype("datetime64[us]").tolist()
    finally:
        catalog.close()


@pytest.mark.parametrize("units, calendar, values, words", [
    ("nanoseconds since 1970-01-01", "standard", [1, 2], ["part_0.nc", "'time'", "not a whole number of microseconds"]),
    ("days since 1500-02-28", "standard", [0, 1], ["part_0.nc", "'time'", "1500-02-29", "Julian"]),
    ("months since 2000-01-01", "noleap", [0, 1], ["part_0.nc", "'time'", "months since", "noleap"]),
], ids=["sub-microsecond", "julian-only-date", "months-on-noleap"])
def test_times_dstp_cannot_show_are_refused_naming_file_variable_and_value(
    tmp_path: Path, units: str, calendar: str, values: list[float], words: list[str]
) -> None:
    with netCDF4.Dataset(tmp_path / "part_0.nc", "w") as nc:
        nc.createDimension("time", None)
        nc.createDimension("lat", 2)
        t = nc.createVariable("time", "f8", ("time",))
        t.units, t.calendar = units, calendar
        t[:] = values
        nc.createVariable("lat", "f4", ("lat",))[:] = [0.0, 1.0]
        nc.createVariable("temp", "f4", ("time", "lat"))[:] = np.ones((2, 2))
    with pytest.raises(DataFileError) as info:
        publish([tmp_path / "part_0.nc"], "pair")
    for word in words:
        assert word in str(info.value), str(info.value)

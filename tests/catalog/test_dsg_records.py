"""Record-dimension report files, text columns and text times; what publish and the server refuse, and why.

An hourly pair of old-style report files (``report`` unlimited, char-array
station ids, ISO 8601 text times, ``lat``/``lon`` with missing values, and a
variable set that changes from one file to the next) is compared with xarray
reading each file on its own. The refusals are checked by their messages: a
scientist must learn from them which file, which variable, and what to do.
"""

from __future__ import annotations

from pathlib import Path

import netCDF4
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import xarray as xr

from oracle import assert_same_records, run_sql

from dstp.catalog.dataset import GriddedDataset
from dstp.catalog.descriptor import read_descriptor
from dstp.catalog.publish import draft_descriptor, publish
from dstp.catalog.registry import Catalog
from dstp.errors import CatalogError, DataFileError
from dstp.metadata import dataset_details, dataset_summary
from dstp.query.execute import QueryExecution, prepare_query
from dstp.settings import Settings

SETTINGS = Settings(batch_rows=4)
STATIONS = ["KJFK", "EGLL", "LFPG", "RJTT", "YSSY"]


def answer(catalog: Catalog, sql: str) -> tuple[pa.Table, QueryExecution]:
    prepared = prepare_query(sql, catalog, SETTINGS)
    execution = QueryExecution(prepared, SETTINGS)
    return pa.Table.from_batches(list(execution.batches()), schema=prepared.schema), execution


def _chars(nc: netCDF4.Dataset, name: str, dim: str, texts: list[str], width: int) -> netCDF4.Variable:
    if f"{name}_len" not in nc.dimensions:
        nc.createDimension(f"{name}_len", width)
    var = nc.createVariable(name, "S1", (dim, f"{name}_len"))
    var[:] = netCDF4.stringtochar(np.array(texts, dtype=f"S{width}"))
    return var


def write_reports(folder: Path) -> list[Path]:
    """Write two hourly report files as old decoders did; the second drops wind and adds visibility."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(4)
    paths = []
    for k, hour in enumerate((12, 13)):
        path = folder / f"metar_20210301_{hour}00.nc"
        n = 5 + k
        with netCDF4.Dataset(path, "w", format="NETCDF3_64BIT_OFFSET") as nc:
            nc.title = "Hourly surface reports"
            nc.createDimension("report", None)
            ids = [STATIONS[i % 5] for i in range(n)]
            _chars(nc, "station_id", "report", ids, 5 + k).long_name = "ICAO station identifier"
            minutes = rng.integers(0, 60, n)
            times = [f"2021-03-01T{hour:02d}:{m:02d}:00Z" for m in minutes]
            times[1] = f"2021-03-01 {hour + 1:02d}:{minutes[1]:02d}+01:00"  # an offset, a blank: the same instant kind
            _chars(nc, "time_obs", "report", times, 24).long_name = "time of observation"
            lat = nc.createVariable("lat", "f4", ("report",), fill_value=np.float32(-99999.0))
            lat.units, lat.long_name = "degrees_north", "latitude"
            lat[:] = np.ma.masked_array(rng.uniform(-40, 60, n), mask=[i == 2 for i in range(n)])
            lon = nc.createVariable("lon", "f4", ("report",), fill_value=np.float32(-99999.0))
            lon.units = "degrees_east"
            lon[:] = np.ma.masked_array(rng.uniform(-120, 150, n), mask=[i == 2 and k == 1 for i in range(n)])
            t = nc.createVariable("T", "f4", ("report",), fill_value=np.float32(-9999.0))
            t.units, t.long_name = "K", "air temperature"
            t[:] = np.ma.masked_array(rng.uniform(260, 300, n), mask=[i == 3 for i in range(n)])
            weather = ["RA", "", "BR", "SN", "", "FG"][:n]
            _chars(nc, "weather", "report", weather, 4).long_name = "present weather"
            if k == 0:
                w = nc.createVariable("wind_speed", "i2", ("report",), fill_value=np.int16(-1))
                w.units, w.scale_factor = "m s-1", np.float32(0.1)
                w[:] = rng.integers(0, 200, n).astype(np.int16)
            else:
                v = nc.createVariable("visibility", "f8", ("report",))
                v.units = "m"
                v[:] = rng.uniform(100, 10000, n)
        paths.append(path)
    return paths


def report_oracle(paths: list[Path]) -> pd.DataFrame:
    """Return the reports as one table: xarray per file, text stripped and parsed here, absent variables NaN."""
    frames = []
    for path in paths:
        with xr.open_dataset(path) as ds:
            frame = ds.load().to_dataframe().reset_index(drop=True)
        for name in ("station_id", "weather"):
            texts = [v.decode().rstrip("\x00 ") for v in frame[name]]
            frame[name] = [t or None for t in texts]
        frame["time_obs"] = pd.to_datetime(
            pd.Series([v.decode() for v in frame["time_obs"]]), utc=True, format="ISO8601"
        ).dt.tz_convert(None).astype("datetime64[us]")
        frames.append(frame)
    table = pd.concat(frames, ignore_index=True)
    return table.rename(columns={"T": "T"})


def test_a_pair_of_report_files_with_char_ids_and_text_times_is_one_table(tmp_path: Path) -> None:
    paths = write_reports(tmp_path / "metar")
    truth = report_oracle(paths)  # read before dstp opens the files
    truth["wind_speed"] = truth["wind_speed"].astype("float32")
    publish(paths, "metar")
    desc = read_descriptor(tmp_path / "metar" / "metar.dstp.xml")
    coords = {c.name: c for c in desc.coordinates}
    assert coords["lat"].dimensions == ("report",) and coords["time_obs"].time_format == "iso8601"
    assert desc.aggregate == "report"
    catalog = Catalog.scan(tmp_path)
    try:
        assert not catalog.problems, catalog.problems
        queries = [
            "select station_id, time_obs, lat, lon, T, weather, wind_speed, visibility from metar",
            "select station_id, time_obs, T from metar where time_obs >= '2021-03-01T12:30' and station_id = 'EGLL'",
            "select station_id, lat, lon from metar where lat is null or lon is null",
            "select station_id, wind_speed, visibility from metar where wind_speed is null",
            "select weather, T from metar where weather is not null and T > 270",
        ]
        for sql in queries:
            got, _ = answer(catalog, sql)
            want = run_sql(truth, sql, "metar")
            assert want.num_rows > 0, sql
            assert_same_records(got, want)
        got, _ = answer(catalog, "select station_id, lat from metar where lat is null")
        assert got.num_rows == 2  # one report in each file had no position
        star, _ = answer(catalog, "select * from metar limit 1")
        assert star.column_names[:4] == ["report", "time_obs", "lat", "lon"]
        assert star.schema.field("time_obs").type == pa.timestamp("us")
        assert star.schema.field("station_id").type == pa.string()
        details = dataset_details(catalog.get("metar"))
        columns = {c.name: c for c in (*details.coordinates, *details.attributes)}
        assert columns["lat"].role == "auxiliary" and columns["lat"].nullable
        assert columns["weather"].arrow_type == "string"
        assert columns["visibility"].missing_from == (paths[0].name,)
        assert columns["wind_speed"].missing_from == (paths[1].name,)
    finally:
        catalog.close()


def test_one_report_file_lists_where_and_when_its_reports_are(tmp_path: Path) -> None:
    first, second = write_reports(tmp_path / "metar")
    second.unlink()
    paths = [first]
    truth = report_oracle(paths)
    publish(paths, "metar")  # one file: positions and times are held in memory
    catalog = Catalog.scan(tmp_path)
    try:
        summary = dataset_summary(catalog.get("metar"))
        assert summary.time_start == str(truth["time_obs"].min().to_datetime64().astype("datetime64[s]"))
        assert summary.time_end == str(truth["time_obs"].max().to_datetime64().astype("datetime64[s]"))
        assert summary.bbox == pytest.approx((truth["lat"].min(), truth["lat"].max(),
                                              truth["lon"].min(), truth["lon"].max()))
    finally:
        catalog.close()


def test_text_that_cf_calls_a_time_must_parse_or_publish_refuses_naming_file_and_value(tmp_path: Path) -> None:
    path = tmp_path / "obs.nc"
    with netCDF4.Dataset(path, "w") as nc:
        nc.createDimension("obs", 3)
        t = _chars(nc, "when", "obs", ["2021-03-01T12:00:00Z", "2021-03-01T13:00:00Z", "yesterday noon"], 20)
        t.standard_name = "time"
        nc.createVariable("temp", "f4", ("obs",))[:] = [1.0, 2.0, 3.0]
    with pytest.raises(CatalogError) as caught:
        publish([path], "obs")
    message = str(caught.value)
    assert "obs.nc" in message and "'when'" in message and "'yesterday noon'" in message
    assert "ISO 8601" in message and "correct that value" in message
    assert not (tmp_path / "obs.dstp.xml").exists()


def test_a_name_that_only_hints_at_a_time_stays_text_unless_its_values_parse(tmp_path: Path) -> None:
    path = tmp_path / "log.nc"
    with netCDF4.Dataset(path, "w") as nc:
        nc.createDimension("entry", 2)
        _chars(nc, "date_comment", "entry", ["calm day", "gusty"], 10)  # a "date" word, no dates
        _chars(nc, "obs_date", "entry", ["2021-03-01", "20210302T0600Z"], 16)  # basic ISO 8601 too
        nc.createVariable("value", "f4", ("entry",))[:] = [1.0, 2.0]
    publish([path], "log")
    catalog = Catalog.scan(tmp_path)
    try:
        got, _ = answer(catalog, "select date_comment, obs_date, value from log")
        assert got.schema.field("date_comment").type == pa.string()
        assert got.column("date_comment").to_pylist() == ["calm day", "gusty"]
        assert got.column("obs_date").to_pylist() == [pd.Timestamp("2021-03-01"), pd.Timestamp("2021-03-02 06:00")]
    finally:
        catalog.close()


def test_a_time_with_one_broken_value_refuses_and_the_server_refuses_a_hand_written_one(tmp_path: Path) -> None:
    path = tmp_path / "mixed.nc"
    with netCDF4.Dataset(path, "w") as nc:
        nc.createDimension("obs", 2)
        _chars(nc, "time_obs", "obs", ["2021-03-01T12:00Z", "2021-02-30T12:00Z"], 20)
        nc.createVariable("temp", "f4", ("obs",))[:] = [1.0, 2.0]
    with pytest.raises(CatalogError, match=r"mixed\.nc: variable 'time_obs' holds times .* '2021-02-30T12:00Z'"):
        publish([path], "mixed")
    # A descriptor written by hand that says so anyway is refused by the server, naming file and value.
    (tmp_path / "mixed.dstp.xml").write_text("""<?xml version="1.0"?>
<dataset xmlns="urn:dstp:descriptor:1" id="mixed" version="1">
  <title>mixed</title>
  <files glob="mixed.nc"/>
  <coordinates><coordinate name="obs" dimension="obs"/></coordinates>
  <attributes default-grid="obs">
    <attribute name="time_obs" dimensions="obs" time-format="iso8601"/>
    <attribute name="temp" dimensions="obs"/>
  </attributes>
</dataset>
""")
    with pytest.raises(DataFileError) as caught:
        GriddedDataset.open(read_descriptor(tmp_path / "mixed.dstp.xml"))
    message = str(caught.value)
    assert message.startswith("mixed.nc: variable 'time_obs': '2021-02-30T12:00Z' is not a valid date-time")
    assert 'remove time-format="iso8601"' in message


def _ragged(path: Path, counts: list[int], obs: int, *, indexed: bool = False) -> None:
    with netCDF4.Dataset(path, "w") as nc:
        nc.featureType = "timeSeries"
        nc.createDimension("station", len(counts))
        nc.createDimension("obs", obs)
        if indexed:
            idx = nc.createVariable("station_index", "i4", ("obs",))
            idx.instance_dimension = "station"
            idx[:] = np.repeat(np.arange(len(counts)), counts)[:obs] + (5 if obs > 1 else 0)
        else:
            rs = nc.createVariable("row_size", "i4", ("station",))
            rs.sample_dimension = "obs"
            rs[:] = counts
        name = nc.createVariable("station_name", str, ("station",))
        name.cf_role = "timeseries_id"
        name[:] = np.array([f"S{i}" for i in range(len(counts))], dtype=object)
        t = nc.createVariable("time", "f8", ("obs",))
        t.units, t.standard_name = "hours since 2021-01-01", "time"
        t[:] = np.arange(obs)
        v = nc.createVariable("temp", "f4", ("obs",))
        v.coordinates = "time station_name"
        v[:] = np.arange(obs)


def test_broken_ragged_arrays_are_refused_naming_file_and_variable(tmp_path: Path) -> None:
    # counts that add up to more observations than the file has
    over = tmp_path / "over"
    over.mkdir()
    _ragged(over / "a.nc", [3, 4], 5)
    with pytest.raises(CatalogError, match=r"a\.nc: count variable 'row_size' adds up to 7 elements but dimension "
                                           r"'obs' has 5"):
        publish([over / "a.nc"], "over")
    assert not (over / "over.dstp.xml").exists()
    # two files whose ragged layouts differ cannot be one dataset
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    _ragged(mixed / "a_1.nc", [2, 1], 3)
    _ragged(mixed / "a_2.nc", [2, 1], 3, indexed=True)
    with pytest.raises(CatalogError, match=r"a_2\.nc: its ragged-array layout \(station_index: station → obs\) "
                                           r"differs from a_1\.nc's \(row_size: station → obs\)"):
        publish([mixed / "a_1.nc", mixed / "a_2.nc"], "mixed")
    # an index beyond the stations is refused when read, naming file and variable
    bad = tmp_path / "bad"
    bad.mkdir()
    _ragged(bad / "b.nc", [2, 1], 3, indexed=True)
    (bad / "bad.dstp.xml").write_bytes(b"""<?xml version="1.0"?>
<dataset xmlns="urn:dstp:descriptor:1" id="bad" version="1">
  <title>bad</title>
  <files glob="b.nc"/>
  <coordinates>
    <coordinate name="obs" dimension="obs"/>
    <coordinate name="station_name" dimensions="station"/>
  </coordinates>
  <attributes default-grid="obs"><attribute name="temp" dimensions="obs"/></attributes>
</dataset>
""")
    catalog = Catalog.scan(bad)  # index variables are checked when the dataset opens
    assert "bad" not in catalog
    assert "b.nc: index variable 'station_index' says 5 at obs 0, but dimension 'station' has 2 elements" \
        in str(catalog.problems[0])
    catalog.close()
    with pytest.raises(CatalogError, match=r"b\.nc: index variable 'station_index' says 5"):
        publish([bad / "b.nc"], "bad2")


def test_publish_never_writes_what_the_server_refuses(tmp_path: Path) -> None:
    # Two report files whose temperatures are in different units: the server would refuse them together.
    for k, units in enumerate(("K", "degC")):
        with netCDF4.Dataset(tmp_path / f"r_{k}.nc", "w") as nc:
            nc.createDimension("report", None)
            _chars(nc, "station_id", "report", ["A", "B"], 4)
            t = nc.createVariable("T", "f4", ("report",))
            t.units = units
            t[:] = [1.0, 2.0]
    files = sorted(tmp_path.glob("r_*.nc"))
    draft_descriptor(files, "r")  # drafting alone does not open the files as the server would
    with pytest.raises(CatalogError) as caught:
        publish(files, "r")
    message = str(caught.value)
    assert "the server would refuse these files as one dataset" in message
    assert "r_1.nc: variable 'T' has units 'degC' but r_0.nc has 'K'" in message
    assert "publish them as separate datasets" in message
    assert not (tmp_path / "r.dstp.xml").exists()


def test_a_hand_written_descriptor_that_makes_an_instance_dimension_a_grid_is_refused(tmp_path: Path) -> None:
    _ragged(tmp_path / "a.nc", [2, 1], 3)
    (tmp_path / "a.dstp.xml").write_bytes(b"""<?xml version="1.0"?>
<dataset xmlns="urn:dstp:descriptor:1" id="a" version="1">
  <title>a</title>
  <files glob="a.nc"/>
  <coordinates>
    <coordinate name="station_name" variable="station_name" dimension="station"/>
  </coordinates>
  <attributes default-grid="obs"><attribute name="temp" dimensions="obs"/></attributes>
</dataset>
""")
    with pytest.raises(CatalogError, match=r"coordinate 'station_name' labels 'station', an instance dimension of "
                                           r"the ragged arrays along 'obs'; write dimensions=\"station\""):
        GriddedDataset.open(read_descriptor(tmp_path / "a.dstp.xml"))


def test_a_single_station_with_a_scalar_char_id_and_station_pruning_in_an_orthogonal_file(tmp_path: Path) -> None:
    single, many = tmp_path / "single", tmp_path / "many"
    single.mkdir()
    many.mkdir()
    with netCDF4.Dataset(single / "s.nc", "w", format="NETCDF3_CLASSIC") as nc:  # CF H.2.3: one time series
        nc.featureType = "timeSeries"
        nc.createDimension("time", 4)
        nc.createDimension("name_strlen", 8)
        name = nc.createVariable("station_name", "S1", ("name_strlen",))
        name.cf_role = "timeseries_id"
        name[:] = netCDF4.stringtochar(np.array(["Mace"], dtype="S8"))
        t = nc.createVariable("time", "f8", ("time",))
        t.units, t.standard_name = "days since 2021-01-01", "time"
        t[:] = np.arange(4)
        v = nc.createVariable("temp", "f4", ("time",))
        v.coordinates = "station_name"
        v[:] = np.arange(4.0)
    n_station, n_time = 40, 6
    with netCDF4.Dataset(many / "m.nc", "w") as nc:  # orthogonal: temp(station, time), ids held in memory
        nc.featureType = "timeSeries"
        nc.createDimension("station", n_station)
        nc.createDimension("time", n_time)
        name = nc.createVariable("station", str, ("station",))  # text named like its dimension (CF H.14 does)
        name.cf_role = "timeseries_id"
        name[:] = np.array([f"ST{i:02d}" for i in range(n_station)], dtype=object)
        t = nc.createVariable("time", "f8", ("time",))
        t.units, t.standard_name = "days since 2021-01-01", "time"
        t[:] = np.arange(n_time)
        v = nc.createVariable("temp", "f4", ("station", "time"))
        v.coordinates = "station"
        v[:] = np.arange(n_station * n_time, dtype=np.float32).reshape(n_station, n_time)
    publish([single / "s.nc"], "single")
    publish([many / "m.nc"], "many")
    catalog = Catalog.scan(tmp_path)
    try:
        got, _ = answer(catalog, "select station_name, time, temp from single where temp >= 2")
        assert got.column("station_name").to_pylist() == ["Mace", "Mace"]
        got, execution = answer(catalog, "select station, time, temp from many where station = 'ST17'")
        assert got.column("temp").to_pylist() == [float(17 * n_time + j) for j in range(n_time)]
        assert execution.summary.stats.elements == n_time  # one station's row read, not the table
        # text cannot label a dimension: the ids are a column `station`, the dimension's index `station_index`
        star, _ = answer(catalog, "select * from many where station_index = 3")
        assert star.column_names == ["station_index", "time", "station", "temp"]
        assert star.column("station").to_pylist() == ["ST03"] * n_time
        details = dataset_details(catalog.get("many"))
        assert details.feature_type == "timeSeries" and "orthogonal multidimensional array" in details.layout

    finally:
        catalog.close()


def test_only_the_feature_time_marks_padding_not_another_time_with_gaps(tmp_path: Path) -> None:
    """An incomplete multidimensional file: records are where `time` is; a missing forecast time is just NULL."""
    path = tmp_path / "fc.nc"
    with netCDF4.Dataset(path, "w") as nc:
        nc.featureType = "timeSeries"
        nc.createDimension("station", 2)
        nc.createDimension("obs", 3)
        t = nc.createVariable("time", "f8", ("station", "obs"), fill_value=-1.0)
        t.standard_name, t.units = "time", "hours since 2021-01-01"
        t[:] = np.ma.masked_array([[0, 1, 2], [5, 6, -1]], mask=[[0, 0, 0], [0, 0, 1]])
        frt = nc.createVariable("forecast_reference_time", "f8", ("station", "obs"), fill_value=-1.0)
        frt.standard_name, frt.units = "forecast_reference_time", "hours since 2021-01-01"
        frt[:] = np.ma.masked_array([[0, -1, 0], [0, 0, -1]], mask=[[0, 1, 0], [0, 0, 1]])
        v = nc.createVariable("temp", "f4", ("station", "obs"), fill_value=np.float32(-999))
        v.coordinates = "time forecast_reference_time"
        v[:] = np.arange(6, dtype=np.float32).reshape(2, 3)
    with xr.open_dataset(path) as ds:  # the oracle: every cell whose time is there, before dstp opens the file
        frame = ds.load()[["temp"]].reset_coords().to_dataframe().reset_index()
    frame = frame[frame["time"].notna()][["time", "forecast_reference_time", "temp"]]
    for column in ("time", "forecast_reference_time"):
        frame[column] = frame[column].astype("datetime64[us]")
    publish([path], "fc")
    catalog = Catalog.scan(tmp_path)
    try:
        sql = "select time, forecast_reference_time, temp from fc"
        got, _ = answer(catalog, sql)
        want = run_sql(frame, sql, "fc")
        assert want.num_rows == 5 and want.column("forecast_reference_time").null_count == 1
        # (oracle.assert_same_records compares NaT with ==, which never holds: compare as frames)
        pd.testing.assert_frame_equal(got.to_pandas().sort_values("temp", ignore_index=True),
                                      want.to_pandas().sort_values("temp", ignore_index=True))
        assert catalog.get("fc").presence == (("time",),)
    finally:
        catalog.close()

"""Variables on different dimension sets in one file, against xarray on the same file.

An Argo GDAC profile file (``*_prof.nc``, written by :func:`builders.argo_profiles` in the
user manual's layout) holds per-profile variables on ``N_PROF``, per-level ones on
``N_PROF × N_LEVELS``, per-level char flags ``TEMP_QC(N_PROF, N_LEVELS)``, string dimensions
and an unlimited ``N_HISTORY`` that is empty in a file fresh from a data centre. A query's
grid is the dimensions of the columns it reads; a level is a record where ``PRES`` or
``PRES_ADJUSTED`` locates it (the padding of profiles shorter than ``N_LEVELS`` is not, CF §9.3.2);
char arrays split into values as xarray splits them (``conventions.decode_cf_variables``: the last
dimension is a string length only when nothing else uses it).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import xarray as xr

from builders import argo_profiles
from oracle import assert_same_records, run_sql

from dstp.catalog.publish import publish
from dstp.catalog.registry import Catalog
from dstp.errors import QueryError
from dstp.query.execute import QueryExecution, prepare_query
from dstp.settings import Settings

SETTINGS = Settings(batch_rows=4)


def answer(catalog: Catalog, sql: str) -> pa.Table:
    prepared = prepare_query(sql, catalog, SETTINGS)
    return pa.Table.from_batches(list(QueryExecution(prepared, SETTINGS).batches()), schema=prepared.schema)


def texts(values: np.ndarray) -> list[str | None]:
    """Return xarray's char values as dstp serves text: str, trailing NULs and blanks stripped, empty → NULL."""
    out: list[str | None] = []
    for v in values.reshape(-1):
        text = v.decode("utf-8").rstrip("\x00 ") if isinstance(v, bytes) else None
        out.append(text or None)
    return out


def argo_records(path: Path, names: list[str]) -> pd.DataFrame:
    """Return xarray's records of ``names`` on N_PROF × N_LEVELS, without the padding no PRES locates."""
    with xr.open_dataset(path) as ds:
        ds = ds.load()
    frame = ds[[*names, "PRES_ADJUSTED"]].to_dataframe(dim_order=["N_PROF", "N_LEVELS"]).reset_index()
    frame = frame[frame["PRES"].notna() | frame["PRES_ADJUSTED"].notna()].drop(columns="PRES_ADJUSTED")
    for name in names:
        if ds[name].dtype.kind in "SO":
            frame[name] = texts(frame[name].to_numpy())
        elif ds[name].dtype.kind == "M":
            frame[name] = frame[name].to_numpy().astype("datetime64[us]")
    return frame.reset_index(drop=True)


@pytest.fixture()
def argo(tmp_path: Path) -> tuple[Catalog, Path]:
    # Three profiles: delayed mode, real time (PRES_ADJUSTED all 99999.), adjusted; 5, 4 and 2 levels of 5.
    path = argo_profiles(tmp_path / "R6901234_prof.nc", modes="DRA", levels=(5, 4, 2))
    publish([path], "argo")
    catalog = Catalog.scan(tmp_path)
    assert not catalog.problems, catalog.problems
    yield catalog, path
    catalog.close()


def test_profile_by_level_variables_of_an_argo_file_answer_as_xarray(argo: tuple[Catalog, Path]) -> None:
    catalog, path = argo
    names = ["PRES", "TEMP", "TEMP_QC", "PSAL_ADJUSTED", "DATA_MODE", "CYCLE_NUMBER", "LATITUDE", "JULD"]
    records = argo_records(path, names)
    assert len(records) == 11  # 5 + 4 + 2 levels hold data; the real-time profile's 4 too
    sql = f"select N_PROF, N_LEVELS, {', '.join(names)} from argo"
    assert_same_records(answer(catalog, sql), run_sql(records, sql, "argo"), ordered=True)
    # the queries: the first three temperatures, the records a threshold matches, a count over levels
    for sql in ("select TEMP from argo limit 3",
                f"select N_PROF, N_LEVELS, TEMP from argo where TEMP > {float(records['TEMP'].median())!r}",
                "select count(*) as n from argo where N_LEVELS >= 0",
                "select DATA_MODE, count(*) as n from argo where TEMP_QC = '1' group by DATA_MODE"):
        got, want = answer(catalog, sql), run_sql(records, sql, "argo")
        assert want.num_rows > 0, sql
        assert_same_records(got, want, ordered="limit" in sql)


def test_per_level_char_flags_are_one_value_per_level(argo: tuple[Catalog, Path]) -> None:
    catalog, path = argo
    ds = catalog.get("argo")
    assert ds.attributes["TEMP_QC"].dimensions == ("N_PROF", "N_LEVELS")
    assert ds.attributes["DATA_MODE"].dimensions == ("N_PROF",)
    assert ds.attributes["STATION_PARAMETERS"].dimensions == ("N_PROF", "N_PARAM")  # STRING16 is a length
    got = answer(catalog, "select N_PROF, DATA_MODE, PLATFORM_NUMBER from argo")
    with xr.open_dataset(path) as truth:
        assert got.column("DATA_MODE").to_pylist() == texts(truth["DATA_MODE"].values) == ["D", "R", "A"]
        assert got.column("PLATFORM_NUMBER").to_pylist() == texts(truth["PLATFORM_NUMBER"].values)
        params = answer(catalog, "select N_PROF, N_PARAM, STATION_PARAMETERS from argo")
        assert params.column("STATION_PARAMETERS").to_pylist() == texts(truth["STATION_PARAMETERS"].values)


def test_a_query_that_an_empty_dimension_would_empty_is_refused_naming_the_columns(
        argo: tuple[Catalog, Path]) -> None:
    catalog, _ = argo
    for sql, on, lacking in (("select TEMP, HISTORY_START_PRES from argo", "HISTORY_START_PRES", "TEMP"),
                             ("select count(*) from argo where HISTORY_START_PRES > 0", "HISTORY_START_PRES", "*"),
                             ("select N_HISTORY, LATITUDE from argo", "N_HISTORY", "LATITUDE")):
        with pytest.raises(QueryError) as info:
            answer(catalog, sql)
        message = str(info.value)
        assert f"{on} is on dimension 'N_HISTORY' of argo, which has no points" in message, message
        assert f"read with {lacking}, which is not on 'N_HISTORY'" in message, message
    # the empty dimension alone answers truthfully: no history records
    assert answer(catalog, "select N_PROF, HISTORY_START_PRES, HISTORY_STEP from argo").num_rows == 0


def test_history_records_once_written_combine_as_xarray_broadcasts(tmp_path: Path) -> None:
    path = argo_profiles(tmp_path / "R6901234_prof.nc", modes="DD", levels=(3, 2), n_levels=3, history=2)
    publish([path], "argo")
    catalog = Catalog.scan(tmp_path)
    try:
        with xr.open_dataset(path) as ds:
            frame = ds[["HISTORY_START_PRES", "HISTORY_STEP", "CYCLE_NUMBER"]].load().to_dataframe(
                dim_order=["N_PROF", "N_HISTORY"]).reset_index()
        frame["HISTORY_STEP"] = texts(frame["HISTORY_STEP"].to_numpy())
        sql = "select N_HISTORY, N_PROF, HISTORY_START_PRES, HISTORY_STEP, CYCLE_NUMBER from argo"
        assert_same_records(answer(catalog, sql), run_sql(frame, sql, "argo"))
        assert len(frame) == 4
    finally:
        catalog.close()

"""WHERE conjuncts the hyperslab proves are left out of DuckDB's SQL, and every answer stays xarray's.

Hypothesis generates multi-file archives (the generator of ``test_aggregation_oracle``: per-file packing,
fill values, time units and calendars — 360_day and julian times as text —, ascending or descending
latitudes, gaps, file names out of time order, an empty file) and WHERE clauses of 1–3 conjuncts:
``between``, ``=``, ``<``, ``<=``, ``>``, ``>=`` on time, lat and lon, with values on the grid points,
halfway between them, outside the grid, and a hair (1e-7, 1e-13) off a grid point; some with an OR or a
condition on a data variable, which must stay. Each answer must equal DuckDB's over xarray's records of
each file decoded on its own. And the optimisation must fire: a plain coordinate conjunct whose
literals sit on, between or outside the grid points (never a hair off one, where pushdown's float
widening may read a neighbour) is dropped exactly when the conjuncts on its coordinate, evaluated on
xarray's coordinate values, select some index.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parents[1] / "catalog"))

from oracle import assert_same_records, run_sql  # noqa: E402
from test_aggregation_oracle import (SETTINGS, ArchiveSpec, _iso, archives, dstp_answer,  # noqa: E402
                                     oracle_dataset, oracle_records, write_archive)

from dstp.catalog.publish import publish  # noqa: E402
from dstp.catalog.registry import Catalog  # noqa: E402
from dstp.query.execute import prepare_query  # noqa: E402

OPS = ["between", "=", "<", "<=", ">", ">="]
KINDS = ["on", "between", "outside", "near"]
SELECTS = ["time, lat, lon, temp, humid", "temp, humid", "lat, temp", "count(*) as n"]


def _literal(coord: str, values: list[Any], kind: str, pick: Any) -> str:
    """Return a SQL literal for ``coord``: on a grid value, halfway between two, outside them, or a hair off one."""
    if coord == "time":
        texts = sorted(_iso(v) for v in values)
        if kind == "outside":
            return "'" + pick.choice(["1999-06-01T00:00:00", "2001-06-01T00:00:00"]) + "'"
        text = pick.choice(texts)
        if kind == "between":  # the grid's times are at midnight, one day or more apart
            text = text[:11] + "12:00:00"
        return f"'{text}'"
    numbers = sorted(float(v) for v in values)
    if kind == "outside":
        return repr(pick.choice([numbers[0] - 10.0, numbers[-1] + 10.0]))
    if kind == "between" and len(numbers) > 1:
        i = pick.randrange(len(numbers) - 1)
        return repr((numbers[i] + numbers[i + 1]) / 2)
    value = pick.choice(numbers)
    if kind == "near":
        value += pick.choice([-1e-7, 1e-7, -1e-13, 1e-13]) * max(1.0, abs(value))
    return repr(value)


@st.composite
def wheres(draw: st.DrawFn) -> list[tuple[str, str, str]]:
    """Return (coordinate or '', op, kind) per conjunct; '' is an OR or a data condition."""
    n = draw(st.integers(1, 3))
    return [(draw(st.sampled_from(["time", "lat", "lon", "time", "lat", "lon", ""])), draw(st.sampled_from(OPS)),
             draw(st.sampled_from(KINDS))) for _ in range(n)]


def _conjunct(coord: str, op: str, kind: str, grid: dict[str, list[Any]], temps: list[float], pick: Any) -> str:
    if not coord:
        if temps and pick.random() < 0.5:
            return f"temp > {pick.choice(temps)!r}"
        a, b = pick.sample(["time", "lat", "lon"], 2)
        return (f"({a} {op if op != 'between' else '<='} {_literal(a, grid[a], kind, pick)} "
                f"or {b} >= {_literal(b, grid[b], kind, pick)})")
    if op == "between":
        lo, hi = _literal(coord, grid[coord], kind, pick), _literal(coord, grid[coord], kind, pick)
        return f"{coord} between {lo} and {hi}"
    return f"{coord} {op} {_literal(coord, grid[coord], kind, pick)}"


def _selects_some(coord: str, values: list[Any], conditions: list[str]) -> bool:
    """Return whether the conjuncts on ``coord``, evaluated by DuckDB on xarray's coordinate values, hold at
    some index (the oracle's view of the range pushdown reads)."""
    con = duckdb.connect()
    try:
        con.register("axis", pa.Table.from_pandas(pd.DataFrame({coord: values}), preserve_index=False))
        row = con.execute(f"select count(*) from axis where {' and '.join(conditions)}").fetchone()
        return bool(row and row[0])
    finally:
        con.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=archives(), clauses=st.lists(wheres(), min_size=5, max_size=5), pick=st.randoms(use_true_random=False))
def test_conjuncts_the_hyperslab_proves_are_dropped_and_answers_equal_xarray_per_file(
        spec: ArchiveSpec, clauses: list[list[tuple[str, str, str]]], pick: Any) -> None:
    with tempfile.TemporaryDirectory(prefix="dstp-exact-") as tmp:
        folder = Path(tmp)
        paths = write_archive(spec, folder)
        publish(sorted(folder.glob("arch_*.nc")), "arch")
        catalog = Catalog.scan(folder, direct_chunks=spec.direct_chunks)
        try:
            assert not catalog.problems, catalog.problems
            truth = oracle_dataset(paths)
            records = oracle_records(truth, ["temp", "humid"], ["time", "lat", "lon"])
            axes = {c: pd.Series(records[c].unique()) for c in ("time", "lat", "lon")}
            grid = {c: list(axes[c]) for c in axes}
            temps = [float(v) for v in records["temp"].dropna()]
            for clause in clauses:
                texts = [_conjunct(c, op, kind, grid, temps, pick) for c, op, kind in clause]
                sql = f"select {pick.choice(SELECTS)} from arch where {' and '.join(texts)}"
                got = dstp_answer(catalog, sql)
                assert_same_records(got, run_sql(records, sql, "arch"))
                plan = prepare_query(sql, catalog, SETTINGS).plan.explain()["scans"][0]
                dropped = plan.get("pushdown_exact", [])
                assert not any(" OR " in d or "temp" in d for d in dropped), (sql, plan)  # never an OR, a data one
                for coord in ("time", "lat", "lon"):
                    mine = [(t, kind) for (c, _, kind), t in zip(clause, texts) if c == coord]
                    if any(kind == "near" for _, kind in mine):
                        continue  # pushdown may widen a float range by rounding: no claim either way
                    want = len(mine) if mine and _selects_some(coord, axes[coord].to_numpy(), [t for t, _ in mine]) else 0
                    assert sum(_column(d) == coord for d in dropped) == want, (sql, coord, plan)
        finally:
            catalog.close()


def _column(sql: str) -> str:
    name = sql.split()[0].strip('"()')
    assert name in ("time", "lat", "lon"), sql
    return name


def test_an_or_a_data_condition_and_a_non_coordinate_stay_in_the_sql(tmp_path: Path) -> None:
    # Fixed, readable cases next to the property: what stays, what goes.
    import netCDF4

    with netCDF4.Dataset(tmp_path / "one.nc", "w") as nc:
        nc.createDimension("time", None)
        nc.createDimension("lat", 3)
        t = nc.createVariable("time", "f8", ("time",))
        t.units, t.calendar, t.standard_name = "days since 2000-01-01", "360_day", "time"
        t[:] = [0, 1, 2]
        la = nc.createVariable("lat", "f4", ("lat",))
        la.units, la.standard_name = "degrees_north", "latitude"
        la[:] = [30.0, 0.0, -30.0]
        v = nc.createVariable("temp", "f4", ("time", "lat"))
        v.units = "K"
        v[:] = np.arange(9, dtype=np.float32).reshape(3, 3)
    publish([tmp_path / "one.nc"], "one")
    catalog = Catalog.scan(tmp_path)
    try:
        cases = {
            "select temp from one where lat between -10 and 40 and time >= '2000-01-02T00:00:00'":
                (["\"lat\" BETWEEN -10 AND 40", "\"time\" >= '2000-01-02T00:00:00'"], None),
            "select temp from one where (lat = 0 or lat = 30) and temp > 3":
                ([], "(\"one\".\"lat\" = 0 OR \"one\".\"lat\" = 30) AND \"one\".\"temp\" > 3"),
            "select temp from one where lat > 5 and temp > 3":
                (["\"lat\" > 5"], "\"one\".\"temp\" > 3"),
        }
        for sql, (dropped, where) in cases.items():
            plan = prepare_query(sql, catalog, SETTINGS).plan
            assert plan.explain()["scans"][0].get("pushdown_exact", []) == dropped, sql
            assert (plan.sql.split(" WHERE ", 1)[1] if " WHERE " in plan.sql else None) == where, plan.sql
    finally:
        catalog.close()

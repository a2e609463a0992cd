"""Property tests: files with several dimension sets, against xarray on the same files.

Hypothesis writes netCDF-4 files as real archives lay them out: variables on different subsets
of up to four dimensions (in any order), unlimited dimensions that may have no records yet,
dimensions with and without a coordinate variable, char arrays of several ranks -- some with a
string-length dimension (``name(station, strlen)``), some whose last dimension is a grid
dimension (Argo's ``TEMP_QC(N_PROF, N_LEVELS)``: one character per point) -- and datasets split by
variable (a CMIP-style series per variable, cut into files differently, beside an fx file).

The oracle is xarray alone: ``open_dataset`` (which decides by itself which char dimensions are
string lengths) or ``open_mfdataset(combine="by_coords")``, records from ``to_dataframe``, and DuckDB
running the same SQL on them. dstp must answer the same records, or -- where a dimension with no
points would empty a query whose other columns have values -- refuse naming the columns.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import netCDF4
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import xarray as xr
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from builders import split_by_variable
from oracle import _times, assert_same_records, run_sql

from dstp.catalog.publish import publish
from dstp.catalog.registry import Catalog
from dstp.errors import QueryError
from dstp.query.execute import QueryExecution, prepare_query
from dstp.settings import Settings

SETTINGS = Settings(batch_rows=3)  # tiny batches: blocks split inside every dimension
DIMS = ("d0", "d1", "d2", "d3")
FILL = np.float32(-999.0)


@dataclass(frozen=True)
class Variable:
    name: str
    dims: tuple[str, ...]
    #: "f4" (with _FillValue, some elements missing), "i2" (no fill), "text" (char array ending in a string
    #: length), "flag" (char array ending in a grid dimension: one character per point)
    kind: str
    seed: int


@dataclass(frozen=True)
class Layout:
    sizes: tuple[int, ...]
    unlimited: tuple[bool, ...]
    #: dimensions labelled by a coordinate variable of their name
    labelled: tuple[bool, ...]
    strlen: int
    variables: tuple[Variable, ...]


@st.composite
def layouts(draw: st.DrawFn) -> Layout:
    n = draw(st.integers(1, 4))
    unlimited = tuple(draw(st.booleans()) for _ in range(n))
    sizes = tuple(draw(st.integers(0 if u else 1, 3)) for u in unlimited)
    labelled = tuple(draw(st.booleans()) for _ in range(n))
    dims = DIMS[:n]
    variables = []
    for k in range(draw(st.integers(1, 4))):
        subset = draw(st.lists(st.sampled_from(dims), min_size=1, max_size=n, unique=True))
        kind = draw(st.sampled_from(["f4", "f4", "i2", "text", "flag"]))
        variables.append(Variable(f"v{k}", tuple(subset), kind, draw(st.integers(0, 2**16))))
    # A flag's last dimension is a grid dimension only if a numeric variable uses it (else xarray, rightly, reads
    # it as a string length): give it one when the draw did not.
    numeric_dims = {d for v in variables if v.kind in ("f4", "i2") for d in v.dims}
    for v in [v for v in variables if v.kind == "flag" and v.dims[-1] not in numeric_dims]:
        variables.append(Variable(f"n{len(variables)}", (v.dims[-1],), "f4", v.seed + 1))
        numeric_dims.add(v.dims[-1])
    return Layout(sizes, unlimited, labelled, draw(st.integers(1, 4)), tuple(variables))


def write_layout(layout: Layout, path: Path) -> None:
    dims = DIMS[: len(layout.sizes)]
    size = dict(zip(dims, layout.sizes))
    with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        for d, s, u in zip(dims, layout.sizes, layout.unlimited):
            nc.createDimension(d, None if u else s)
        nc.createDimension("strlen", layout.strlen)
        for d, labelled in zip(dims, layout.labelled):
            if labelled:
                c = nc.createVariable(d, "f8", (d,))
                c.units = "m"
                if size[d]:
                    c[:] = 10.0 * np.arange(size[d]) + 0.5
        for v in layout.variables:
            shape = tuple(size[d] for d in v.dims)
            rng = np.random.default_rng(v.seed)
            if v.kind == "f4":
                var = nc.createVariable(v.name, "f4", v.dims, fill_value=FILL)
                var.units = "K"
                values = (rng.random(shape) * 100).astype(np.float32)
                values[rng.random(shape) < 0.2] = FILL
            elif v.kind == "i2":
                var = nc.createVariable(v.name, "i2", v.dims)
                values = rng.integers(-50, 50, shape).astype(np.int16)
            elif v.kind == "text":
                var = nc.createVariable(v.name, "S1", (*v.dims, "strlen"), fill_value=b" ")
                words = np.array(["", "a", "bc", "K2", "xyz9"], dtype=f"S{layout.strlen}")
                values = netCDF4.stringtochar(rng.choice(words, shape)) if all(shape) else \
                    np.zeros((*shape, layout.strlen), "S1")
            else:
                var = nc.createVariable(v.name, "S1", v.dims, fill_value=b" ")
                values = rng.choice(np.array([b"1", b"2", b"4", b" "], dtype="S1"), shape)
            if all(shape):
                var[:] = values


def oracle_records(path: Path, names: list[str], grid: list[str]) -> pd.DataFrame:
    with xr.open_dataset(path) as ds:
        ds = ds.load()
    frame = ds[names].to_dataframe(dim_order=grid).reset_index()
    for name in list(frame.columns):
        if name not in ds.coords and frame[name].dtype == object:
            frame[name] = [(v.decode().rstrip("\x00 ") or None) if isinstance(v, bytes) else None
                           for v in frame[name]]
    for d in grid:  # a dimension without a coordinate variable is a column of its indices
        if d in frame and d not in ds.variables:
            frame[d] = frame[d].astype(np.int64)
    return frame


def dstp_answer(catalog: Catalog, sql: str) -> pa.Table:
    prepared = prepare_query(sql, catalog, SETTINGS)
    return pa.Table.from_batches(list(QueryExecution(prepared, SETTINGS).batches()), schema=prepared.schema)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layout=layouts(), pick=st.randoms(use_true_random=False))
def test_variables_on_several_dimension_sets_answer_as_xarray(layout: Layout, pick: object) -> None:
    with tempfile.TemporaryDirectory(prefix="dstp-dims-") as tmp:
        path = Path(tmp) / "layout.nc"
        write_layout(layout, path)
        publish([path], "lay")
        catalog = Catalog.scan(Path(tmp))
        try:
            assert not catalog.problems, catalog.problems
            ds = catalog.get("lay")
            names = [v.name for v in layout.variables]
            for kind in sorted({v.kind for v in layout.variables}):
                event(f"variable kind {kind}")
            for v in layout.variables:  # char arrays split as xarray splits them
                assert ds.attributes[v.name].dimensions == v.dims, (v, ds.attributes[v.name].dimensions)
            for _ in range(3):
                chosen = pick.sample(names, pick.randint(1, min(3, len(names))))  # type: ignore[attr-defined]
                grid = [d for d in DIMS if any(d in ds.attributes[n].dimensions for n in chosen)]
                sql = f"select {', '.join([*grid, *chosen])} from lay"
                size = dict(zip(DIMS, layout.sizes))
                empty = [d for d in grid if size[d] == 0]
                lacking = [n for n in chosen for d in empty if d not in ds.attributes[n].dimensions
                           and all(size[e] for e in ds.attributes[n].dimensions)]
                event("refused: an empty dimension" if lacking else "records" if all(size[d] for d in grid)
                      else "no records: every column on the empty dimension")
                if lacking:
                    with pytest.raises(QueryError, match="which has no points in its files"):
                        dstp_answer(catalog, sql)
                    continue
                want = run_sql(oracle_records(path, chosen, grid), sql, "lay")
                assert_same_records(dstp_answer(catalog, sql), want)
        finally:
            catalog.close()


@dataclass(frozen=True)
class Split:
    steps: int
    cuts: dict[str, tuple[int, ...]]
    fx: tuple[str, ...]
    nlat: int
    nlon: int
    seed: int


@st.composite
def splits(draw: st.DrawFn) -> Split:
    steps = draw(st.integers(1, 6))

    def cut() -> tuple[int, ...]:
        points = sorted(draw(st.sets(st.integers(1, steps - 1), max_size=2))) if steps > 1 else []
        edges = [0, *points, steps]
        return tuple(b - a for a, b in zip(edges, edges[1:]))

    names = draw(st.lists(st.sampled_from(["tas", "pr", "psl"]), min_size=1, max_size=3, unique=True))
    fx = tuple(draw(st.lists(st.sampled_from(["areacella", "sftlf"]), max_size=2, unique=True)))
    if len(names) == 1 and not fx:
        fx = ("areacella",)  # at least two parts
    return Split(steps, {n: cut() for n in names}, fx, draw(st.integers(1, 3)), draw(st.integers(1, 3)),
                 draw(st.integers(0, 2**16)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=splits(), pick=st.randoms(use_true_random=False))
def test_datasets_split_by_variable_answer_as_xarray_combine_by_coords(spec: Split, pick: object) -> None:
    with tempfile.TemporaryDirectory(prefix="dstp-split-") as tmp:
        folder = Path(tmp)
        paths = split_by_variable(folder, steps=spec.steps, splits=spec.cuts, fx=spec.fx, nlat=spec.nlat,
                                  nlon=spec.nlon, seed=spec.seed)
        publish(paths, "cmip")
        catalog = Catalog.scan(folder)
        try:
            assert not catalog.problems, catalog.problems
            coder = xr.coders.CFDatetimeCoder(use_cftime=True)
            with xr.open_mfdataset(paths, decode_times=coder, combine="by_coords", data_vars="minimal",
                                   coords="minimal", compat="equals", join="exact") as truth:
                names = [*spec.cuts, *spec.fx]
                frame = truth[names].load().to_dataframe(dim_order=["time", "lat", "lon"]).reset_index()
                frame["time"] = _times(frame["time"].to_numpy(), "noleap")
            chosen = pick.sample(names, pick.randint(1, len(names)))  # type: ignore[attr-defined]
            queries = [f"select time, lat, lon, {', '.join(chosen)} from cmip"]
            first = spec.cuts and next(iter(spec.cuts))
            if first:
                threshold = float(np.nanmedian(frame[first])) if frame[first].notna().any() else 0.0
                queries.append(f"select time, lon, {first} from cmip where {first} > {threshold!r} and lat >= 0")
            if spec.fx:
                queries.append(f"select lat, lon, {spec.fx[0]} from cmip where time = (select min(time) from cmip)")
            for sql in queries:
                assert_same_records(dstp_answer(catalog, sql), run_sql(frame, sql, "cmip"))
        finally:
            catalog.close()

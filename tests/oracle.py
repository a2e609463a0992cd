"""The independent oracle: xarray reads the same files, DuckDB runs the same SQL on its table.

Nothing here imports dstp's reader, planner or decoder. The only knowledge
shared with dstp is the published mapping of variables to column names,
spelled out again below, and the documented representation of times
(Gregorian-like calendars as timestamps of their labels, others as ISO text).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Sequence

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import xarray as xr

# variable -> column, per dataset; files glob and aggregation dimension
DATASETS: dict[str, dict] = {
    "ccm3": {"folder": "ccm3", "glob": "ccm3_*.nc", "agg": "time",
             "rename": {"T": "temperature", "RELHUM": "humidity", "CLOUD": "cloud", "PS": "pressure",
                        "PRECT": "precipitation"}},
    "ocean": {"folder": "ocean", "glob": "ocean_*.nc", "agg": "time",
              "rename": {"thetao": "temperature", "so": "salinity", "zos": "sea_surface_height"}},
    "station": {"folder": "station", "glob": "station.nc", "agg": None, "rename": {}},
    "axes": {"folder": "axes", "glob": "*.nc", "agg": "step", "rename": {}},
}
TIMESTAMP_CALENDARS = {"standard", "gregorian", "proleptic_gregorian", "noleap", "365_day"}


@functools.lru_cache(maxsize=16)
def open_dataset(root: Path, dataset_id: str) -> xr.Dataset:
    """Return the dataset as xarray sees it (CF-decoded, times as cftime objects), columns renamed."""
    spec = DATASETS[dataset_id]
    files = sorted((root / spec["folder"]).glob(spec["glob"]))
    coder = xr.coders.CFDatetimeCoder(use_cftime=True)
    parts = [xr.open_dataset(f, decode_times=coder, mask_and_scale=True).load() for f in files]
    for p in parts:
        p.close()
    ds = parts[0] if len(parts) == 1 else xr.concat(parts, dim=spec["agg"], data_vars="minimal",
                                                     coords="minimal", compat="override")
    if spec["agg"]:
        ds = ds.sortby(spec["agg"])
    return ds.rename(spec["rename"])


def _times(values: np.ndarray, calendar: str) -> np.ndarray:
    if calendar in TIMESTAMP_CALENDARS:
        return np.array(
            [f"{d.year:04d}-{d.month:02d}-{d.day:02d}T{d.hour:02d}:{d.minute:02d}:{d.second:02d}" for d in values],
            dtype="datetime64[us]",
        )
    return np.array(
        [f"{d.year:04d}-{d.month:02d}-{d.day:02d}T{d.hour:02d}:{d.minute:02d}:{d.second:02d}" for d in values],
        dtype=object,
    )


def frame(root: Path, dataset_id: str, attributes: Sequence[str], extra_dims: Sequence[str] = ()) -> pd.DataFrame:
    """Return xarray's records of ``attributes`` broadcast over the union of their dimensions.

    ``extra_dims`` adds dimensions to the grid (a query that names a coordinate
    of a dimension its attributes lack).
    """
    ds = open_dataset(root, dataset_id)
    sub = ds[list(attributes)] if attributes else ds[[]]
    for dim in extra_dims:
        if dim not in sub.dims:
            sub = sub.expand_dims({dim: ds[dim].values if dim in ds.variables else np.arange(ds.sizes[dim])})
    # C order over the dimensions as the files lay them out (the attribute with most dimensions first).
    order: list[str] = []
    for name in sorted(attributes, key=lambda a: -len(ds[a].dims)):
        order += [d for d in ds[name].dims if d not in order]
    order += [d for d in sub.dims if d not in order]
    df = sub.to_dataframe(dim_order=order).reset_index()
    for name in list(df.columns):
        if name in ds.variables and ds[name].size and len(df) and _is_cftime(df[name]):
            calendar = ds[name].values.reshape(-1)[0].calendar
            df[name] = _times(df[name].to_numpy(), calendar)
    return df


def _is_cftime(series: pd.Series) -> bool:
    first = series.iloc[0]
    return type(first).__module__.startswith("cftime")


def run_sql(df: pd.DataFrame, sql: str, dataset_id: str) -> pa.Table:
    """Return DuckDB's answer to ``sql`` over ``df`` registered as the dataset's table."""
    table = pa.Table.from_pandas(df, preserve_index=False)  # NaN becomes NULL, as in dstp
    con = duckdb.connect()
    try:
        con.register(dataset_id, table)
        return con.sql(sql).to_arrow_table()
    finally:
        con.close()


def assert_same_records(got: pa.Table, want: pa.Table, *, ordered: bool = False) -> None:
    """Assert two tables hold the same records (same columns, values; order if ``ordered``)."""
    assert got.column_names == want.column_names, (got.column_names, want.column_names)
    g, w = got.to_pandas(), want.to_pandas()
    assert len(g) == len(w), f"{len(g)} records, oracle has {len(w)}"
    if not ordered and len(g):
        keys = list(g.columns)
        g = g.sort_values(keys, kind="mergesort").reset_index(drop=True)
        w = w.sort_values(keys, kind="mergesort").reset_index(drop=True)
    for col in g.columns:
        a, b = g[col].to_numpy(), w[col].to_numpy()
        if a.dtype.kind == "f" or b.dtype.kind == "f":
            np.testing.assert_array_equal(np.asarray(a, dtype="f8"), np.asarray(b, dtype="f8"), err_msg=col)
        else:
            assert pd.Series(a).equals(pd.Series(b)) or list(a) == list(b), f"column {col} differs"


def daily_records(paths: Sequence[Path]) -> pa.Table:
    """Return the (time, lat, lon, t2m) records of daily archive files (``builders.daily``) as xarray decodes
    each file on its own (NaN where missing), in file name order."""
    frames = []
    for path in sorted(paths):
        with xr.open_dataset(path, mask_and_scale=True) as ds:
            frames.append(ds["t2m"].load().to_dataframe().reset_index()[["time", "lat", "lon", "t2m"]])
    df = pd.concat(frames, ignore_index=True)
    df["time"] = df["time"].astype("datetime64[us]")
    return pa.Table.from_pandas(df, preserve_index=False)

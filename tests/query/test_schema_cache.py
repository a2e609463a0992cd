"""A repeated query reuses the result types DuckDB bound, and never across datasets whose types changed."""

from __future__ import annotations

from pathlib import Path

import netCDF4
import numpy as np
import pyarrow as pa

from dstp.catalog.publish import publish
from dstp.catalog.registry import Catalog
from dstp.query.execute import QueryExecution, prepare_query
from dstp.settings import Settings

SQL = "select v * 2 as w, sum(v) over () as total from grid where x < 3"


def write_grid(folder: Path, dtype: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*"):
        old.unlink()
    with netCDF4.Dataset(folder / "grid.nc", "w") as nc:
        nc.createDimension("x", 5)
        x = nc.createVariable("x", "f8", ("x",))
        x[:] = np.arange(5.0)
        v = nc.createVariable("v", dtype, ("x",))
        v[:] = np.arange(5).astype(dtype) + (0.5 if dtype.startswith("f") else 0)
    publish([folder / "grid.nc"], "grid", overwrite=True)


def answer(root: Path) -> tuple[pa.Schema, pa.Table]:
    catalog = Catalog.scan(root)
    settings = Settings(catalog_root=root)
    prepared = prepare_query(SQL, catalog, settings)
    table = pa.Table.from_batches(list(QueryExecution(prepared, settings).batches()), schema=prepared.schema)
    return prepared.schema, table


def test_the_same_sql_over_a_dataset_whose_type_changed_gets_the_new_types(tmp_path: Path) -> None:
    write_grid(tmp_path / "grid", "i2")
    first, table = answer(tmp_path)
    again, _ = answer(tmp_path)
    assert again.equals(first, check_metadata=True)  # the repeated query: same types, units, plan metadata
    assert pa.types.is_integer(first.field("w").type) and table.column("w").to_pylist() == [0, 2, 4]
    # The same SQL text, now over float64 values: a schema remembered by SQL text alone would be int.
    write_grid(tmp_path / "grid", "f8")
    changed, table = answer(tmp_path)
    assert changed.field("w").type == pa.float64() and changed.field("total").type == pa.float64()
    assert table.column("w").to_pylist() == [1.0, 3.0, 5.0]
    assert table.column("total").to_pylist() == [4.5] * 3

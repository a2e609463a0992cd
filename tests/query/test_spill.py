"""Bounded memory: a group-by with more groups than DuckDB's memory limit holds spills to the capped folder.

The memory limit is tiny (16 MB) and the group-by has one group per grid point
of the small ccm3 sample (196,608 groups, each with four aggregates), so its
hash table cannot stay in memory. Without spill space the query fails with
LimitExceededError; with it, it completes and equals pandas. (DuckDB 2.0 does
not enforce a ``max_temp_directory_size`` of a few hundred KiB against this
query's ~6 MB of spill, so the cap itself is not asserted here.) One DuckDB thread: with two, a fresh-clone
CI run once failed the spilling query too ("could not allocate block of size 256.0 KiB (15.2 MiB/15.2 MiB
used)") — 16 MB is far below what DuckDB's out-of-memory guide expects per thread, and its first advice is
fewer threads; 24 runs here with two threads, half of them beside a busy core, all passed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import oracle

from dstp.catalog.registry import Catalog
from dstp.errors import LimitExceededError
from dstp.query.execute import QueryExecution, prepare_query, spill_folder
from dstp.settings import Settings

SQL = ("select time, lev, lat, lon, count(*) as n, avg(temperature) as t, max(humidity) as h, min(cloud) as c "
       "from ccm3 group by all")


def run(catalog: Catalog, settings: Settings) -> pa.Table:
    prepared = prepare_query(SQL, catalog, settings)
    return pa.Table.from_batches(list(QueryExecution(prepared, settings).batches()), schema=prepared.schema)


@pytest.fixture(scope="module")
def catalog(catalog_root: Path):
    cat = Catalog.scan(catalog_root)
    yield cat
    cat.close()


def tiny(folder: Path, cap: int) -> Settings:
    return Settings(duckdb_memory_limit="16MB", spill_dir=folder, spill_max_bytes=cap, duckdb_threads=1,
                    batch_rows=20_000)


def test_group_by_bigger_than_memory_spills_and_completes(catalog, catalog_root: Path, tmp_path: Path) -> None:
    with pytest.raises(LimitExceededError):
        run(catalog, tiny(tmp_path / "none", 0))
    settings = tiny(tmp_path / "spill", 2**30)
    got = run(catalog, settings).to_pandas()
    assert spill_folder(settings).is_dir()  # DuckDB's temporary files went where the settings say
    assert str(spill_folder(settings)).startswith(str(tmp_path / "spill"))
    records = oracle.frame(catalog_root, "ccm3", ["temperature", "humidity", "cloud"])
    assert len(got) == len(records) == 196_608
    keys = ["time", "lev", "lat", "lon"]
    got = got.sort_values(keys).reset_index(drop=True)
    records = records.sort_values(keys).reset_index(drop=True)
    np.testing.assert_array_equal(got["n"].to_numpy(), np.ones(len(records)))
    np.testing.assert_allclose(got["t"].to_numpy(dtype=float), records["temperature"].to_numpy(dtype=float))
    np.testing.assert_array_equal(got["h"].to_numpy(dtype=float), records["humidity"].to_numpy(dtype=float))
    np.testing.assert_array_equal(got["c"].to_numpy(dtype=float), records["cloud"].to_numpy(dtype=float))

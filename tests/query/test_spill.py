"""Bounded memory: a group-by with far more groups than DuckDB's memory limit holds spills to the capped folder.

The dataset is a synthetic 12 × 360 × 720 grid (3,110,400 grid points, one
group each, with four aggregates). Its hash table needs more than 256 MB (a
256 MB limit fails without spill space), so under a 64 MB limit it cannot stay
in memory: without spill space the query fails with LimitExceededError; with
it, it completes and equals xarray. The margins are deliberate: an earlier
version of this test ran the 196,608-group ccm3 sample under 16 MB, which is
below what DuckDB needs per thread besides the hash table, and it failed in
two fresh-clone CI runs even with spill space (24 MB already fit without
spilling). (DuckDB 2.0 does not enforce a ``max_temp_directory_size`` of a few
hundred KiB against a few MB of spill, so the cap itself is not asserted here.)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import xarray as xr

from dstp.catalog.publish import publish
from dstp.catalog.registry import Catalog
from dstp.errors import LimitExceededError
from dstp.query.execute import QueryExecution, prepare_query, spill_folder
from dstp.settings import Settings

SQL = "select time, lat, lon, count(*) as n, avg(tas) as t, max(tas) as h, min(tas) as c from grid group by all"
SHAPE = (12, 360, 720)


def run(catalog: Catalog, settings: Settings) -> pa.Table:
    prepared = prepare_query(SQL, catalog, settings)
    return pa.Table.from_batches(list(QueryExecution(prepared, settings).batches()), schema=prepared.schema)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("spill")
    nt, ny, nx = SHAPE
    values = np.random.default_rng(7).normal(280.0, 10.0, SHAPE).astype("f4")
    ds = xr.Dataset(
        {"tas": (("time", "lat", "lon"), values, {"units": "K", "long_name": "air temperature"})},
        coords={"time": ("time", np.arange(nt, dtype="f8"), {"units": "days since 2000-01-01", "calendar": "standard"}),
                "lat": ("lat", np.linspace(-89.75, 89.75, ny), {"units": "degrees_north"}),
                "lon": ("lon", np.linspace(0.25, 359.75, nx), {"units": "degrees_east"})})
    (root / "grid").mkdir()
    ds.to_netcdf(root / "grid" / "grid_2000.nc")
    publish([root / "grid" / "grid_2000.nc"], "grid")
    return root


@pytest.fixture(scope="module")
def catalog(root: Path):
    cat = Catalog.scan(root)
    yield cat
    cat.close()


def limited(folder: Path, cap: int) -> Settings:
    return Settings(duckdb_memory_limit="64MB", spill_dir=folder, spill_max_bytes=cap, duckdb_threads=2,
                    batch_rows=100_000)


def test_group_by_bigger_than_memory_spills_and_completes(catalog, root: Path, tmp_path: Path) -> None:
    with pytest.raises(LimitExceededError, match="narrow it with WHERE"):
        run(catalog, limited(tmp_path / "none", 0))
    settings = limited(tmp_path / "spill", 2**30)
    got = run(catalog, settings).to_pandas()
    assert spill_folder(settings).is_dir()  # DuckDB's temporary files went where the settings say
    assert str(spill_folder(settings)).startswith(str(tmp_path / "spill"))
    with xr.open_dataset(root / "grid" / "grid_2000.nc") as ds:  # the oracle: xarray, CF-decoded
        records = ds["tas"].to_dataframe().reset_index()
    assert len(got) == len(records) == int(np.prod(SHAPE))
    keys = ["time", "lat", "lon"]
    got = got.sort_values(keys).reset_index(drop=True)
    records = records.sort_values(keys).reset_index(drop=True)
    np.testing.assert_array_equal(got["time"].to_numpy().astype("datetime64[us]"),
                                  records["time"].to_numpy().astype("datetime64[us]"))
    np.testing.assert_array_equal(got["lat"].to_numpy(), records["lat"].to_numpy())
    np.testing.assert_array_equal(got["n"].to_numpy(), np.ones(len(records)))
    expected = records["tas"].to_numpy(dtype=float)
    np.testing.assert_allclose(got["t"].to_numpy(dtype=float), expected)
    np.testing.assert_array_equal(got["h"].to_numpy(dtype=float), expected)
    np.testing.assert_array_equal(got["c"].to_numpy(dtype=float), expected)


def test_spill_folders_left_by_ended_processes_are_removed_and_running_ones_kept(tmp_path: Path) -> None:
    import fcntl
    import os
    import subprocess
    import sys

    from dstp.query.execute import _claim_spill_folder

    base = tmp_path / "spill"
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone_pid = int(ended.stdout)  # a process that has ended
    left_locked = base / "process-1001"  # with a lock file nobody holds: its process ended
    left_locked.mkdir(parents=True)
    (left_locked / ".lock").touch()
    (left_locked / "duckdb_temp_block-1.block").write_bytes(b"x" * 10)
    left_old = base / f"process-{gone_pid}"  # left by a dstp before the locks: its process is gone
    left_old.mkdir()
    running_old = base / f"process-{os.getppid()}"  # no lock, but its process runs
    running_old.mkdir()
    running = base / "process-1002"  # its lock is held: a server that runs
    running.mkdir()
    with open(running / ".lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        mine = base / f"process-{os.getpid()}-test"
        _claim_spill_folder(mine)
        assert sorted(p.name for p in base.iterdir()) == sorted([mine.name, running.name, running_old.name])
        assert (mine / ".lock").exists()

"""Files appended at the end of a served dataset: grown without a rebuild, and exactly what a cold build gives.

A sequence of changes — days appended (one or two at once, after a gap or not, with another packing, time
units or type), inserted before the end, replaced, removed — goes through the live catalog (refresh, files
settled on an injected clock). After each one, the dataset served equals the one a cold build of the folder
makes (files and their places, dimensions, coordinate values, every column's type and per-file decodings,
coverage and warnings), its records equal xarray's decoding of each file on its own, and a restart on the
index (kept snapshot plus kept appends) gives that dataset again.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import netCDF4
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clock import Clock
from oracle import assert_same_records
from oracle import daily_records as oracle

from dstp.catalog.changes import describe_change
from dstp.catalog.dataset import GriddedDataset
from dstp.catalog.descriptor import read_descriptor
from dstp.catalog.publish import publish
from dstp.catalog.registry import Catalog
from dstp.query.execute import QueryExecution, prepare_query
from dstp.settings import Settings

SQL = "select time, lat, lon, t2m from daily"
SETTINGS = Settings(scan_threads=1)
SETTLE_S = 10.0
#: How a day's file is written: the usual packing, time in hours since another epoch, unpacked doubles.
KINDS = ("packed", "hours", "double")


def write_day(path: Path, day: int, *, kind: str = "packed", seed: int | None = None, steps: int = 1) -> Path:
    """One day's file (days since 2000-01-01), written aside and renamed into place; packing per day."""
    rng = np.random.default_rng(day if seed is None else seed)
    part = path.with_name(f".{path.name}.part")
    path.parent.mkdir(parents=True, exist_ok=True)
    with netCDF4.Dataset(part, "w") as nc:
        nc.createDimension("time", None)
        nc.createDimension("lat", 3)
        nc.createDimension("lon", 4)
        t = nc.createVariable("time", "f8", ("time",))
        t.calendar, t.standard_name, t.axis = "standard", "time", "T"
        if kind == "hours":
            t.units = "hours since 1999-12-31 00:00:00"
            t[:] = (day + 1 + np.arange(steps) / steps) * 24
        else:
            t.units = "days since 2000-01-01"
            t[:] = day + np.arange(steps) / steps
        la = nc.createVariable("lat", "f4", ("lat",))
        la.units, la.standard_name = "degrees_north", "latitude"
        la[:] = np.linspace(-60, 60, 3)
        lo = nc.createVariable("lon", "f4", ("lon",))
        lo.units, lo.standard_name = "degrees_east", "longitude"
        lo[:] = np.arange(4) * 90.0
        raw = rng.integers(-3000, 3000, size=(steps, 3, 4))
        missing = rng.random(raw.shape) < 0.1
        if kind == "double":
            v = nc.createVariable("t2m", "f8", ("time", "lat", "lon"), fill_value=-1e30)
            v.units, v.standard_name = "K", "air_temperature"
            values = 250 + raw * 0.01
            values[missing] = -1e30
            v[:] = values
        else:
            v = nc.createVariable("t2m", "i2", ("time", "lat", "lon"), fill_value=np.int16(-32767))
            v.units, v.standard_name = "K", "air_temperature"
            v.scale_factor, v.add_offset = np.float32(0.01 * (1 + day % 3)), np.float32(250 + day % 5)
            v.set_auto_maskandscale(False)
            raw = raw.astype(np.int16)
            raw[missing] = -32767
            v[:] = raw
    os.replace(part, path)
    return path


def name(day: int) -> str:
    return f"d_{day:04d}.nc"


def state(ds: GriddedDataset) -> dict[str, Any]:
    """Return everything a query reads of a dataset (not its version), comparable with ==."""
    columns = {}
    for n, c in [*ds.attributes.items(), *ds.auxiliaries.items()]:
        columns[n] = (str(c.arrow_type), c.role, c.file_decodings, c.decoding, dict(c.attrs),
                      None if c.values is None else (c.values.dtype.str, c.values.tobytes()),
                      None if c.mask is None else c.mask.tobytes())
    return {"identity": ds.identity, "files": [(f.path, f.size, f.start, f.count, f.format, f.part, f.identity)
                                               for f in ds.files],
            "dimensions": [(d.name, d.size, d.coordinate.name if d.coordinate else None, d.home)
                           for d in ds.dimensions.values()],
            "coordinates": {n: (str(c.arrow_type), c.monotonic, c.decoding, c.file_decodings, dict(c.attrs),
                                c.values.dtype.str, c.values.tobytes()) for n, c in ds.coordinates.items()},
            "columns": columns, "coverage": ds.coverage, "warnings": ds.warnings,
            "grid_mappings": ds.grid_mappings, "global_attrs": dict(ds.global_attrs)}


def cold(folder: Path) -> GriddedDataset:
    return GriddedDataset.open(read_descriptor(folder / "daily.dstp.xml"))


def answer(catalog: Catalog) -> pa.Table:
    prepared = prepare_query(SQL, catalog.snapshot(), SETTINGS)
    table = pa.Table.from_batches(list(QueryExecution(prepared, SETTINGS).batches()), schema=prepared.schema)
    return table.cast(pa.schema([f.remove_metadata() for f in table.schema])).replace_schema_metadata(None)


def settle(catalog: Catalog, clock: Clock) -> None:
    catalog.refresh()
    clock.advance(SETTLE_S)
    catalog.refresh()


def check(root: Path, folder: Path, catalog: Catalog) -> None:
    """The served dataset is the cold build's, and its records are xarray's."""
    assert not catalog.problems and not catalog.held_back, (catalog.problems, catalog.held_back)
    assert state(catalog.get("daily")) == state(cold(folder))
    assert_same_records(answer(catalog), oracle(sorted(folder.glob("d_*.nc"))))


@pytest.fixture()
def served(tmp_path: Path):
    """Three daily files published as ``daily``, served by a live catalog with an index and a clock."""
    root = tmp_path / "root"
    folder = root / "daily"
    publish([write_day(folder / name(day), day) for day in (0, 1, 2)], "daily")
    clock = Clock()
    index = tmp_path / "index.sqlite"
    catalog = Catalog.scan(root, index=index, settle_s=SETTLE_S, clock=clock)
    try:
        yield root, folder, index, catalog, clock
    finally:
        catalog.close()


def test_a_day_appended_is_kept_as_an_append_not_a_new_snapshot(served) -> None:
    root, folder, index, catalog, clock = served
    counts = catalog._index.counts  # type: ignore[union-attr]
    kept = counts.get("datasets kept", 0)
    before = catalog.get("daily")
    version = before.version
    write_day(folder / name(3), 3)
    settle(catalog, clock)
    assert counts.get("appends kept") == 1 and counts.get("datasets kept", 0) == kept
    assert catalog.get("daily").version == version + 1
    change = catalog.changes(0).changes[-1]
    assert change.files_added == (f"daily/{name(3)}",) and change.first.startswith("2000-01-04")
    # what the change says is what comparing every file of both versions says
    assert {k: getattr(change, k) for k in describe_change(before, before, root, False)} == \
        describe_change(before, catalog.get("daily"), root.resolve(), False)
    check(root, folder, catalog)
    catalog.close()
    again = Catalog.scan(root, index=index, settle_s=SETTLE_S, clock=clock)
    try:
        assert again._index.counts.get("appends applied") == 1  # type: ignore[union-attr]
        assert again.get("daily").version == version + 1
        check(root, folder, again)
    finally:
        again.close()


def test_a_day_inserted_before_the_last_is_a_rebuild(served) -> None:
    root, folder, index, catalog, clock = served
    (folder / name(1)).unlink()
    settle(catalog, clock)
    counts = catalog._index.counts  # type: ignore[union-attr]
    kept = counts.get("datasets kept", 0)
    write_day(folder / name(1), 1)
    settle(catalog, clock)
    assert counts.get("appends kept", 0) == 0 and counts.get("datasets kept", 0) == kept + 1
    check(root, folder, catalog)


#: One change: (what, day offset or file index, kind of file).
CHANGE = st.tuples(st.sampled_from(["append", "append2", "gap", "insert", "replace", "remove"]),
                   st.integers(0, 50), st.sampled_from(KINDS))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=st.lists(CHANGE, min_size=1, max_size=6))
def test_any_sequence_of_changes_serves_what_a_cold_build_does(tmp_path_factory, changes) -> None:
    base = tmp_path_factory.mktemp("seq")
    root, folder = base / "root", base / "root" / "daily"
    publish([write_day(folder / name(day), day) for day in (0, 1, 2)], "daily")
    clock = Clock()
    index = base / "index.sqlite"
    catalog = Catalog.scan(root, index=index, settle_s=SETTLE_S, clock=clock)
    try:
        for what, at, kind in changes:
            days = sorted(int(p.name[2:6]) for p in folder.glob("d_*.nc"))
            if what in ("append", "append2", "gap"):
                first = days[-1] + (3 if what == "gap" else 1)
                for day in range(first, first + (2 if what == "append2" else 1)):
                    write_day(folder / name(day), day, kind=kind)
            elif what == "insert":
                free = [d for d in range(days[-1]) if d not in days]
                if not free:
                    continue
                write_day(folder / name(free[at % len(free)]), free[at % len(free)], kind=kind)
            elif what == "replace":
                day = days[at % len(days)]
                write_day(folder / name(day), day, kind=kind, seed=1000 + at)
            elif what == "remove":
                if len(days) <= 2:
                    continue
                (folder / name(days[at % len(days)])).unlink()
            settle(catalog, clock)
            check(root, folder, catalog)
        catalog.close()
        catalog = Catalog.scan(root, index=index, settle_s=SETTLE_S, clock=clock)
        check(root, folder, catalog)
    finally:
        catalog.close()


def test_every_few_appends_the_snapshot_is_written_whole_and_a_restart_reads_it_back(served, monkeypatch) -> None:
    from dstp.catalog import index as index_module

    monkeypatch.setattr(index_module, "APPENDS_KEPT", 2)
    root, folder, index, catalog, clock = served
    counts = catalog._index.counts  # type: ignore[union-attr]
    kept = counts.get("datasets kept", 0)
    for day in (3, 4, 5, 6):
        write_day(folder / name(day), day)
        settle(catalog, clock)
        check(root, folder, catalog)
    # appends 1 and 2 kept beside the snapshot; the 3rd wrote the snapshot whole; the 4th is beside it
    assert counts.get("datasets kept", 0) == kept + 1 and counts.get("appends kept") == 3
    catalog.close()
    again = Catalog.scan(root, index=index, settle_s=SETTLE_S, clock=clock)
    try:
        assert again._index.counts.get("appends applied") == 1  # type: ignore[union-attr]
        check(root, folder, again)
    finally:
        again.close()

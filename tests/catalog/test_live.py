"""A catalog kept current while it is served: files added, replaced, grown, removed and renamed; snapshots.

Each change is made while a query streams. The running query answers from the
catalog snapshot it started on — every record equal to the oracle's (xarray on
each file as it was, decoded on its own) — or, if the file it still had to read
is no longer that version, stops with an error naming it; it never mixes two
versions. The next query sees the change and equals the oracle on the files as
they are now. Rescans and settling run on an injected clock: nothing sleeps.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from builders import daily
from clock import Clock
from oracle import assert_same_records
from oracle import daily_records as oracle

from dstp.catalog.publish import publish
from dstp.catalog.registry import Catalog
from dstp.errors import DataFileError
from dstp.query.execute import QueryExecution, prepare_query
from dstp.settings import Settings

SQL = "select time, lat, lon, t2m from daily"
SETTLE_S = 10.0
#: One batch per file (3 × 4 grid points a day), read only when asked for: the query is "in flight" between.
SETTINGS = Settings(batch_rows=12, scan_threads=1)


def records(batches: list[pa.RecordBatch], schema: pa.Schema) -> pa.Table:
    table = pa.Table.from_batches(batches, schema=schema)
    return table.cast(pa.schema([f.remove_metadata() for f in table.schema])).replace_schema_metadata(None)


def answer(catalog: Catalog) -> pa.Table:
    prepared = prepare_query(SQL, catalog.snapshot(), SETTINGS)
    return records(list(QueryExecution(prepared, SETTINGS).batches()), prepared.schema)


@pytest.fixture()
def archive(tmp_path: Path):
    """Five daily files published as ``daily``, served by a live catalog with an index and a clock."""
    folder = tmp_path / "root" / "daily"
    files = [daily(folder / f"d_{day:04d}.nc", day) for day in range(5)]
    publish(files, "daily")
    clock = Clock()
    catalog = Catalog.scan(tmp_path / "root", index=tmp_path / "index.sqlite", settle_s=SETTLE_S, clock=clock)
    assert not catalog.problems and not catalog.held_back, (catalog.problems, catalog.held_back)
    try:
        yield folder, catalog, clock
    finally:
        catalog.close()


def settle(catalog: Catalog, clock: Clock) -> list:
    """Look twice, SETTLE_S apart: what changed is published."""
    first = catalog.refresh()
    clock.advance(SETTLE_S)
    return first + catalog.refresh()


def _add(folder: Path) -> None:
    daily(folder / "d_0005.nc", 5)


def _replace_ahead(folder: Path) -> None:
    daily(folder / "d_0003.nc", 3, seed=1234)  # renamed over the published one


def _replace_behind(folder: Path) -> None:
    daily(folder / "d_0000.nc", 0, seed=1234)


def grow(path: Path, steps: int) -> None:
    """Append ``steps`` records to ``path`` in place, from another process as an archive's writer would.

    HDF5 locks a file a process holds open (the server does): a writer appending in place with HDF5's file
    locking on is refused, so writers that grow files while they are served run without it (docs/archive.md).
    """
    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parents[1])!r}); from pathlib import Path; "
            f"from builders import append_day; append_day(Path({str(path)!r}), {steps})")
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "HDF5_USE_FILE_LOCKING": "FALSE"})


def _append(folder: Path) -> None:
    grow(folder / "d_0004.nc", 2)


def _remove(folder: Path) -> None:
    (folder / "d_0002.nc").unlink()


def _rename(folder: Path) -> None:
    os.rename(folder / "d_0001.nc", folder / "d_0001b.nc")


#: change, and the file the running query (one file read) meets changed: None when it finishes on its snapshot.
CHANGES = {
    "add": (_add, None),
    "replace-ahead": (_replace_ahead, "d_0003.nc"),
    "replace-behind": (_replace_behind, None),
    "append": (_append, "d_0004.nc"),
    "remove": (_remove, "d_0002.nc"),
    "rename": (_rename, "d_0001.nc"),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_running_query_keeps_its_snapshot_and_the_next_one_sees_the_change(archive, change: str) -> None:
    folder, catalog, clock = archive
    make, meets = CHANGES[change]
    before = oracle(sorted(folder.glob("d_*.nc")))
    version = catalog.get("daily").version
    prepared = prepare_query(SQL, catalog.snapshot(), SETTINGS)
    stream = QueryExecution(prepared, SETTINGS).batches()
    got = [next(stream)]  # the first file is read; the query is in flight
    make(folder)
    changes = settle(catalog, clock)
    assert [c.dataset for c in changes] == ["daily"] and catalog.get("daily").version == version + 1
    error = None
    try:
        got += list(stream)
    except DataFileError as exc:
        error = exc
    seen = records(got, prepared.schema)
    if meets is None:
        assert error is None
        assert_same_records(seen, before)  # all of it from the snapshot the query started on
    else:
        assert error is not None and meets in str(error), error
        # what it delivered before it stopped is the snapshot's, record for record: no mixture
        assert_same_records(seen, before.slice(0, seen.num_rows), ordered=True)
    after = answer(catalog)
    assert_same_records(after, oracle(sorted(folder.glob("d_*.nc"))))
    if change != "rename":
        assert not after.equals(before)


def test_a_file_still_being_written_is_not_served_until_it_settles(archive, caplog) -> None:
    folder, catalog, clock = archive
    before = answer(catalog)
    growing = daily(folder / "d_0007.nc", 7, into_place=False)  # written in place, where the glob sees it
    assert catalog.refresh() == []
    assert [h.path for h in catalog.held_back] == [growing]
    clock.advance(SETTLE_S / 2)
    grow(growing, 3)  # still growing at the next look
    with caplog.at_level(logging.WARNING, logger="dstp.catalog"):
        clock.advance(SETTLE_S)
        assert catalog.refresh() == []
    assert "still being written" in caplog.text and "d_0007.nc" in caplog.text
    assert_same_records(answer(catalog), before)  # never served half
    clock.advance(SETTLE_S)
    [change] = catalog.refresh()  # unchanged for SETTLE_S: published whole
    assert change.files_added == ("daily/d_0007.nc",) and not catalog.held_back
    assert_same_records(answer(catalog), oracle(sorted(folder.glob("d_*.nc"))))


def test_a_file_that_cannot_be_opened_is_held_back_until_it_is_fixed(archive) -> None:
    folder, catalog, clock = archive
    before = answer(catalog)
    broken = folder / "d_0006.nc"
    broken.write_bytes(b"CDF\x01" + b"\x00" * 20)  # a netCDF header cut short
    assert settle(catalog, clock) == []
    [held] = catalog.held_back
    assert held.path == broken and "cannot be opened" in held.reason
    assert_same_records(answer(catalog), before)
    clock.advance(1.0)
    assert catalog.refresh() == [] and catalog.held_back  # not tried again while it is unchanged
    daily(broken, 6)  # fixed: copied again
    [change] = settle(catalog, clock)
    assert change.files_added == ("daily/d_0006.nc",) and not catalog.held_back
    assert_same_records(answer(catalog), oracle(sorted(folder.glob("d_*.nc"))))


def test_versions_count_every_change_and_survive_a_restart(archive, tmp_path: Path) -> None:
    folder, catalog, clock = archive
    assert catalog.get("daily").version == 1
    _add(folder)
    settle(catalog, clock)
    _replace_behind(folder)
    settle(catalog, clock)
    assert catalog.get("daily").version == 3 and catalog.version == 3
    prepared = prepare_query(SQL, catalog.snapshot(), SETTINGS)
    assert prepared.schema.metadata[b"dstp:version"] == b"3"
    catalog.close()
    again = Catalog.scan(tmp_path / "root", index=tmp_path / "index.sqlite", settle_s=SETTLE_S, clock=clock)
    try:
        assert again.get("daily").version == 3 and again.version == 3  # nothing changed: no new version
        assert again.refresh() == []
        _remove(folder)
        [change] = settle(again, clock)
        assert (change.seq, change.version) == (4, 4)
    finally:
        again.close()


def test_a_change_made_while_the_server_was_down_is_a_change_at_the_next_start(archive, tmp_path: Path) -> None:
    folder, catalog, clock = archive
    catalog.close()
    _add(folder)
    again = Catalog.scan(tmp_path / "root", index=tmp_path / "index.sqlite", settle_s=SETTLE_S, clock=clock)
    try:
        assert again.get("daily").version == 2
        [change] = again.changes(since=1).changes
        assert change.files_added == ("daily/d_0005.nc",) and change.kind == "changed"
        assert_same_records(answer(again), oracle(sorted(folder.glob("d_*.nc"))))
    finally:
        again.close()


def test_the_change_feed_says_which_files_columns_and_time_range_changed(archive) -> None:
    folder, catalog, clock = archive
    start = catalog.version
    _add(folder)
    settle(catalog, clock)
    _remove(folder)
    settle(catalog, clock)
    _rename(folder)
    settle(catalog, clock)
    feed = catalog.changes(since=start)
    assert feed.complete and feed.version == start + 3 and feed.epoch == catalog.epoch
    added, removed, renamed = feed.changes
    assert [c.seq for c in feed.changes] == [start + 1, start + 2, start + 3]
    assert added.files_added == ("daily/d_0005.nc",) and not added.files_removed
    assert (added.axis, added.first, added.last) == ("time", "2000-01-06T00:00:00", "2000-01-06T00:00:00")
    assert {"t2m", "time"} <= set(added.columns) and "lat" not in added.columns
    assert removed.files_removed == ("daily/d_0002.nc",)
    assert (removed.first, removed.last) == ("2000-01-03T00:00:00", "2000-01-03T00:00:00")
    assert renamed.files_renamed == (("daily/d_0001.nc", "daily/d_0001b.nc"),)
    assert not renamed.files_added and not renamed.files_removed
    assert catalog.changes(since=start + 2).changes == (renamed,)
    assert catalog.changes(since=catalog.version).changes == ()
    assert not catalog.changes(since=0, epoch="another index").complete


def test_a_descriptor_edit_republishes_that_dataset_only(archive, tmp_path: Path) -> None:
    folder, catalog, clock = archive
    other = tmp_path / "root" / "other"
    publish([daily(other / "o_0000.nc", 0)], "other")
    assert catalog.refresh() == [] and "other" not in catalog  # its file is settling: not a problem, not yet served
    assert not catalog.problems
    clock.advance(SETTLE_S)
    [added] = catalog.refresh()
    assert added.dataset == "other" and added.kind == "added"
    untouched = catalog.get("other")
    descriptor = folder / "daily.dstp.xml"
    descriptor.write_text(descriptor.read_text().replace("<title>", "<title>Edited: "))
    [change] = catalog.refresh()  # a descriptor is read when it changes; it is not a data file to settle
    assert (change.dataset, change.descriptor, change.version) == ("daily", True, 2)
    assert catalog.get("daily").descriptor.title.startswith("Edited: ")
    assert catalog.get("other") is untouched and untouched.version == 1


def test_a_change_the_files_cannot_take_keeps_the_dataset_served_as_it_was(archive) -> None:
    folder, catalog, clock = archive
    before = answer(catalog)
    daily(folder / "d_0008.nc", 8, lat=5)  # another grid: the files no longer make one dataset
    assert settle(catalog, clock) == []
    [problem] = catalog.problems
    assert "d_0008.nc" in problem.message and "served as it was (version 1)" in problem.message
    assert catalog.get("daily").version == 1
    assert_same_records(answer(catalog), before)
    (folder / "d_0008.nc").unlink()
    assert catalog.refresh() == [] and not catalog.problems


def test_a_removed_descriptor_removes_its_dataset(archive) -> None:
    folder, catalog, clock = archive
    (folder / "daily.dstp.xml").unlink()
    [change] = catalog.refresh()
    assert (change.kind, change.dataset) == ("removed", "daily") and "daily" not in catalog
    files = {f.path for f in catalog.snapshot()}  # nothing served
    assert not files


def test_a_file_whose_latitudes_differ_is_named_among_files_that_share_theirs(tmp_path: Path) -> None:
    """Files with the same coordinate bytes are compared once; the one that differs is still found and named."""
    import netCDF4

    folder = tmp_path / "root" / "daily"
    files = [daily(folder / f"d_{d:04d}.nc", d) for d in range(6)]
    publish(files, "daily")
    with netCDF4.Dataset(files[4], "a") as nc:
        nc["lat"][1] = 1.5  # one latitude moved in one file
    catalog = Catalog.scan(tmp_path / "root")
    try:
        [problem] = catalog.problems
        assert "d_0004.nc: coordinate 'lat' differs from d_0000.nc (index 1" in problem.message, problem.message
    finally:
        catalog.close()


def test_files_decoded_together_equal_each_file_decoded_alone(tmp_path: Path) -> None:
    """A block over many files that share a decoding is decoded at once; the records are xarray's, per file."""
    folder = tmp_path / "root" / "daily"
    # days 0, 3, 6, … share scale and offset (day % 3, day % 5 in builders.daily): runs of equal decodings
    files = [daily(folder / f"d_{d:04d}.nc", d) for d in range(0, 60, 15)] + \
        [daily(folder / f"d_{d:04d}.nc", d) for d in (61, 62, 63)]
    publish(files, "daily")
    catalog = Catalog.scan(tmp_path / "root")
    try:
        decodings = catalog.get("daily").attributes["t2m"].file_decodings
        assert decodings[0] is decodings[1] is decodings[2] is decodings[3]  # one object: decoded together
        assert decodings[4] is not decodings[3]
        assert_same_records(answer(catalog), oracle(files))
    finally:
        catalog.close()


def test_a_page_of_the_catalog_is_listed_from_memory_by_id_and_search_words(tmp_path: Path) -> None:
    root = tmp_path / "root"
    titles = {"sst_b": "Sea surface temperature", "t2m_a": "Air temperature at 2 m", "pr_c": "Precipitation",
              "sst_a": "Sea surface temperature, daily", "wind": "Wind speed"}
    for dataset_id, title in titles.items():
        publish([daily(root / dataset_id / f"{dataset_id}_0.nc", 0)], dataset_id, title=title)
    catalog = Catalog.scan(root, index=tmp_path / "index.sqlite")
    try:
        every = catalog.page(0, 100)
        assert [d.id for d in every.datasets] == sorted(titles) and every.total == 5
        assert every.version == catalog.version == 5  # five datasets added
        second = catalog.page(2, 2)
        assert [d.id for d in second.datasets] == sorted(titles)[2:4] and (second.total, second.offset) == (5, 2)
        assert [d.id for d in catalog.page(0, 10, q="SEA temperature").datasets] == ["sst_a", "sst_b"]
        assert [d.id for d in catalog.page(0, 10, q="temperature daily").datasets] == ["sst_a"]
        assert catalog.page(0, 10, q="snow").total == 0
        only = catalog.page(0, 10, where=lambda d: d.id != "sst_a", q="sea")
        assert [d.id for d in only.datasets] == ["sst_b"] and only.total == 1
        assert catalog.page(10, 5).datasets == () and catalog.page(10, 5).total == 5
    finally:
        catalog.close()

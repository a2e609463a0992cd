"""The catalog index: a restart on an unchanged archive reads no data file; a bad index is rebuilt, with a warning.

Files are counted where they are opened: every netCDF open in the process (``netCDF4.Dataset``, whoever calls
it) and every file the handle cache opens (:attr:`FileHandles.opened`, raw descriptors included).
"""

from __future__ import annotations

import logging
import pickle
import sqlite3
from pathlib import Path

import netCDF4
import numpy as np
import pyarrow as pa
import pytest

import builders
from builders import daily
from in_process import answer_table
from test_hdfeos import mls_swath, write_he5

from dstp.catalog import _stored
from dstp.catalog.index import INDEX_FORMAT
from dstp.catalog.publish import publish
from dstp.catalog.registry import Catalog
from dstp.samples import generate_samples
from dstp.settings import Settings

SETTINGS = Settings(batch_rows=4096)


@pytest.fixture()
def opens(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every netCDF file opened in this process from now on."""
    opened: list[str] = []
    real = netCDF4.Dataset

    def counting(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        opened.append(str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(netCDF4, "Dataset", counting)
    return opened


def archive(root: Path) -> Path:
    """Every kind of dataset the catalog serves, one folder each, published by ``dstp publish``."""
    generate_samples(root, "small")  # ccm3 (netCDF-4, compressed), ocean (netCDF-3)
    publish(builders.edge_station(root / "station"), "station")
    publish(builders.edge_axes(root / "axes"), "axes")
    publish(builders.buoys(root / "buoys"), "buoys")  # ragged array (discrete sampling geometry)
    (root / "argo").mkdir()
    publish([builders.argo_profiles(root / "argo" / "R6901234_prof.nc")], "argo")
    publish(builders.model_grid(root / "model"), "model")  # noleap, one epoch per file
    publish(builders.split_by_variable(root / "cmip"), "cmip")  # <part>s
    publish(builders.ugrid_split(root / "mesh"), "mesh")
    rlat, rlon = np.linspace(-5, 5, 6), np.linspace(-8, 8, 7)
    (root / "rotated").mkdir()
    tas = builders.rotated_pole(root / "rotated" / "tas.nc", "tas", lambda a, b: np.stack([280 + a, 270 + b]),
                                rlat=rlat, rlon=rlon, times=[0.0, 1.0])
    publish([tas], "rotated")  # derived lat/lon, grid mapping
    he5 = root / "swath" / "mls.he5"
    he5.parent.mkdir(parents=True)
    write_he5(he5, swaths=[mls_swath("O3", 5, 4, seed=1)])  # HDF-EOS5
    publish([he5], "swath")
    return root


def first_rows(catalog: Catalog, dataset_id: str) -> pa.Table:
    return answer_table(catalog, f"select * from {dataset_id} limit 40", SETTINGS)


def test_every_kind_of_dataset_comes_back_from_the_index_without_a_file_read(tmp_path: Path, opens) -> None:
    root = archive(tmp_path / "root")
    index = tmp_path / "index.sqlite"
    cold = Catalog.scan(root, index=index)
    try:
        assert not cold.problems and len(cold) == 11, cold.problems
        built = {ds.id: (ds.identity, ds.version, first_rows(cold, ds.id)) for ds in cold}
    finally:
        cold.close()
    opens.clear()
    warm = Catalog.scan(root, index=index)
    try:
        assert opens == [] and warm.handles.opened == 0  # a restart with nothing changed reads no data file
        assert warm.index is not None and warm.index.counts.get("datasets loaded") == len(built)
        assert not warm.problems
        for ds in warm:
            identity, version, rows = built[ds.id]
            assert (ds.identity, ds.version) == (identity, version), ds.id
            assert first_rows(warm, ds.id).equals(rows), ds.id  # and it answers as it did
    finally:
        warm.close()


def test_a_restart_after_a_file_was_added_reads_only_that_file(tmp_path: Path, opens) -> None:
    folder = tmp_path / "root" / "daily"
    publish([daily(folder / f"d_{d:04d}.nc", d) for d in range(6)], "daily")
    Catalog.scan(tmp_path / "root", index=tmp_path / "index.sqlite").close()
    added = daily(folder / "d_0006.nc", 6)
    opens.clear()
    again = Catalog.scan(tmp_path / "root", index=tmp_path / "index.sqlite")
    try:
        assert len(opens) == 1 and again.handles.opened == 1  # one netCDF open, of the file added
        assert again.handles.identity(added) is not None
        assert len(again.get("daily").files) == 7
    finally:
        again.close()


def _damage_header(path: Path) -> None:
    path.write_bytes(b"this is not a database" + path.read_bytes()[22:])


def _damage_pages(path: Path) -> None:
    data = bytearray(path.read_bytes())
    page = 4096
    for start in range(2 * page, len(data), page):  # every page but the first two: the tables' contents
        data[start:start + page] = b"\xff" * min(page, len(data) - start)
    path.write_bytes(bytes(data))


def _delete(path: Path) -> None:
    path.unlink()


def _older_format(path: Path) -> None:
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version = {INDEX_FORMAT - 1}")


def _other_dstp(path: Path) -> None:
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value = 'written by dstp 0.0.1' WHERE key = 'code'")


@pytest.mark.parametrize("spoil, words", [
    (_delete, "there is none yet (or it was deleted)"),
    (_damage_header, "damaged"),
    (_damage_pages, "damaged"),
    (_older_format, f"index format {INDEX_FORMAT - 1}"),
    (_other_dstp, "another dstp or library version"),
])
def test_a_missing_damaged_or_foreign_index_is_rebuilt_from_the_files_with_a_warning(
        tmp_path: Path, caplog, spoil, words: str) -> None:
    folder = tmp_path / "root" / "daily"
    publish([daily(folder / f"d_{d:04d}.nc", d) for d in range(4)], "daily")
    index = tmp_path / "index.sqlite"
    first = Catalog.scan(tmp_path / "root", index=index)
    want = first_rows(first, "daily")
    first.close()
    for suffix in ("-wal", "-shm"):  # checkpointed at close: the file holds everything
        assert not Path(str(index) + suffix).exists()
    spoil(index)
    with caplog.at_level(logging.WARNING, logger="dstp.catalog"):
        again = Catalog.scan(tmp_path / "root", index=index)
    try:
        assert words in caplog.text and "built again from the files" in caplog.text \
            or words in caplog.text and "building it from the files" in caplog.text, caplog.text
        assert not again.problems and again.handles.opened == 4  # rebuilt: every file read once
        assert first_rows(again, "daily").equals(want)
    finally:
        again.close()
    third = Catalog.scan(tmp_path / "root", index=index)  # and the rebuilt index serves the next start
    try:
        assert third.handles.opened == 0
    finally:
        third.close()


def test_a_kept_dataset_naming_anything_else_than_catalog_values_is_not_loaded(tmp_path: Path, caplog) -> None:
    folder = tmp_path / "root" / "daily"
    publish([daily(folder / f"d_{d:04d}.nc", d) for d in range(2)], "daily")
    index = tmp_path / "index.sqlite"
    first = Catalog.scan(tmp_path / "root", index=index)
    want = first_rows(first, "daily")
    first.close()
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):  # type: ignore[no-untyped-def]
            return (Path.touch, (marker,))

    with sqlite3.connect(index) as db:
        db.execute("UPDATE entries SET snapshot = ?", (_stored.pack(pickle.dumps(Evil())),))
    with caplog.at_level(logging.WARNING, logger="dstp.catalog"):
        again = Catalog.scan(tmp_path / "root", index=index)
    try:
        assert not marker.exists()  # nothing it names was called
        assert "pathlib.Path.touch is not among the names a catalog index may hold" in caplog.text
        assert again.handles.opened == 0  # rebuilt from the facts kept of its files
        assert first_rows(again, "daily").equals(want)
    finally:
        again.close()


def test_chunk_listings_are_kept_for_the_next_start(tmp_path: Path) -> None:
    folder = tmp_path / "root" / "daily"
    publish([daily(folder / f"d_{d:04d}.nc", d, lat=40, lon=50) for d in range(3)], "daily")
    index = tmp_path / "index.sqlite"
    sql = "select t2m from daily"
    first = Catalog.scan(tmp_path / "root", index=index)
    try:
        want = answer_table(first, sql, SETTINGS)
        assert first.handles.chunks is not None and first.handles.chunks.listed == 3  # one per file
    finally:
        first.close()
    again = Catalog.scan(tmp_path / "root", index=index)
    try:
        assert answer_table(again, sql, SETTINGS).equals(want)
        chunks = again.handles.chunks
        assert chunks is not None and chunks.reads >= 3 and chunks.listed == 0  # read directly, listed by none
    finally:
        again.close()


def test_a_second_process_on_the_same_index_reads_it_and_writes_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "root" / "daily"
    publish([daily(folder / f"d_{d:04d}.nc", d) for d in range(2)], "daily")
    index = tmp_path / "index.sqlite"
    writer = Catalog.scan(tmp_path / "root", index=index)
    try:
        reader = Catalog.scan(tmp_path / "root", index=index, settle_s=0)  # a second lock: as another process
        try:
            assert reader.index is not None and not reader.index.writable
            assert reader.handles.opened == 0 and reader.get("daily").version == 1
            daily(folder / "d_0002.nc", 2)
            [change] = reader.refresh()
            assert change.version == 2
        finally:
            reader.close()
        assert writer.index is not None and writer.index.version_of("daily")[0] == 1  # nothing written by it
    finally:
        writer.close()


def test_facts_read_by_helper_processes_are_those_read_here(tmp_path: Path) -> None:
    from dstp.catalog.facts import POOL_MIN_FILES, FileFacts, Headers, Prefetch, gather_many
    from dstp.catalog.netcdf4_ import FileHandles

    paths = [daily(tmp_path / f"d_{d:04d}.nc", d, lat=2, lon=3) for d in range(POOL_MIN_FILES + 5)]
    wanted = [(p, Prefetch(frozenset({"time", "lat", "lon"}), frozenset({"t2m"}))) for p in paths]
    found: dict[int, dict[Path, FileFacts]] = {}
    for processes in (1, 2):
        handles = FileHandles()
        try:
            got = gather_many(handles, wanted, Headers(), processes)
            found[processes] = {f.path: f for f in got if isinstance(f, FileFacts)}
            assert handles.opened == (len(paths) if processes == 1 else 0)  # helpers opened them, not this process
        finally:
            handles.close()
    assert found[1].keys() == found[2].keys() == set(paths)
    for path in paths:
        here, there = found[1][path], found[2][path]
        assert (here.identity, here.meta, here.header_key) == (there.identity, there.meta, there.header_key)
        assert here.values.keys() == there.values.keys() == {"time", "lat", "lon"}
        for name in here.values:
            assert np.array_equal(here.values[name], there.values[name])

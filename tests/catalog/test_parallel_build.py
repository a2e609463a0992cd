"""A cold index build whose headers helper processes read holds the same facts as one that reads them here.

The catalog reads headers in helper processes when many files must be read
(``catalog_build_processes``; from :data:`~dstp.catalog.facts.POOL_MIN_FILES`
files on). Here that threshold is lowered to one file and batches to a few
files, so that small archives take the parallel path, and each archive is built
cold twice — serially and with two helpers — into two index files. Both must
serve the same datasets (everything a query reads of them) and problems, and
their indexes must hold the same facts: every file's version, header, values
and span, the headers and values stored once, each descriptor's digests and
dataset, versions and the change log.
"""

from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from test_aggregation_oracle import ArchiveSpec, archives, write_archive
from test_index import archive

from dstp.catalog import facts
from dstp.catalog.dataset import GriddedDataset
from dstp.catalog.publish import publish
from dstp.catalog.registry import Catalog

#: The index tables a cold build fills, each read in a total order (every column sorted on).
TABLES = {
    "files": "SELECT path, real, device, inode, size, mtime_ns, ctime_ns, header, vals, unreadable, first, last "
             "FROM files ORDER BY path",
    "blobs": "SELECT key, data FROM blobs ORDER BY key",
    "entries": "SELECT descriptor, sha, glob, content, dataset, problem, snapshot IS NOT NULL FROM entries "
               "ORDER BY descriptor",
    "versions": "SELECT dataset, version, content FROM versions ORDER BY dataset",
    "changes": "SELECT seq, record FROM changes ORDER BY seq",
}


def _array(values: np.ndarray | None) -> Any:
    if values is None:
        return None
    return (values.dtype.str, values.shape, values.tolist() if values.dtype.kind == "O" else values.tobytes())


def state(ds: GriddedDataset) -> dict[str, Any]:
    """Return everything a query reads of a dataset, comparable with == (text values as text, not pointers)."""
    columns = {n: (str(c.arrow_type), c.role, c.file_decodings, c.decoding, dict(c.attrs), _array(c.values),
                   _array(c.mask)) for n, c in [*ds.attributes.items(), *ds.auxiliaries.items()]}
    return {"identity": ds.identity, "version": ds.version,
            "files": [(f.path, f.size, f.start, f.count, f.format, f.part, f.identity) for f in ds.files],
            "dimensions": [(d.name, d.size, d.coordinate.name if d.coordinate else None, d.home)
                           for d in ds.dimensions.values()],
            "coordinates": {n: (str(c.arrow_type), c.monotonic, c.decoding, c.file_decodings, dict(c.attrs),
                                _array(c.values)) for n, c in ds.coordinates.items()},
            "columns": columns, "coverage": ds.coverage, "warnings": ds.warnings,
            "grid_mappings": ds.grid_mappings, "global_attrs": repr(dict(ds.global_attrs))}


def built(root: Path, index: Path, processes: int) -> tuple[dict[str, Any], list[str], dict[str, list[Any]]]:
    """Return (state of each dataset, problems, index tables) of a cold build of ``root`` into ``index``."""
    catalog = Catalog.scan(root, index=index, processes=processes, wall=lambda: 1.0e9)
    try:
        datasets = {ds.id: state(ds) for ds in catalog}
        problems = sorted(str(p) for p in catalog.problems)
        assert catalog.index is not None and catalog.index.reason  # it was built cold
    finally:
        catalog.close()
    with sqlite3.connect(index) as db:
        tables = {name: db.execute(sql).fetchall() for name, sql in TABLES.items()}
    return datasets, problems, tables


def assert_same_builds(root: Path, scratch: Path) -> dict[str, list[Any]]:
    serial = built(root, scratch / "serial.sqlite", 1)
    parallel = built(root, scratch / "parallel.sqlite", 2)
    assert serial[0].keys() == parallel[0].keys()
    for dataset_id in serial[0]:  # as text: a NaN fill value is never == another NaN
        for part in serial[0][dataset_id]:
            assert repr(serial[0][dataset_id][part]) == repr(parallel[0][dataset_id][part]), (dataset_id, part)
    assert serial[1] == parallel[1]
    for name in TABLES:
        assert serial[2][name] == parallel[2][name], name
    return serial[2]


@pytest.fixture()
def every_file_in_helpers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(facts, "POOL_MIN_FILES", 1)
    monkeypatch.setattr(facts, "POOL_BATCH", 3)


def test_every_kind_of_dataset_is_indexed_alike_by_helpers_and_here(tmp_path: Path, every_file_in_helpers) -> None:
    root = archive(tmp_path / "root")
    broken = root / "ccm3" / "ccm3_broken.nc"  # matched by the glob, not a netCDF file: held back alike
    broken.write_bytes(b"CDF\x01" + b"\x00" * 20)
    (root / "ccm3" / "ccm3.dstp.xml").write_text(
        (root / "ccm3" / "ccm3.dstp.xml").read_text().replace('glob="ccm3.nc"', 'glob="ccm3*.nc"'))
    tables = assert_same_builds(root, tmp_path)
    assert len(tables["files"]) > 11 and any(row[9] for row in tables["files"])  # one file held back as unreadable


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(spec=archives())
def test_generated_archives_are_indexed_alike_by_helpers_and_here(spec: ArchiveSpec, every_file_in_helpers) -> None:
    with tempfile.TemporaryDirectory(prefix="dstp-parallel-") as tmp:
        root = Path(tmp) / "root"
        folder = root / "arch"
        folder.mkdir(parents=True)
        write_archive(spec, folder)
        publish(sorted(folder.glob("arch_*.nc")), "arch")
        tables = assert_same_builds(root, Path(tmp))
        assert len(tables["files"]) == len(list(folder.glob("arch_*.nc")))

"""How a cold build's helper processes read a file: once, outside the handle cache (:meth:`FileHandles.read_once`).

Each file is opened the careful way (its real path, O_NOFOLLOW, the descriptor's version), its header read and
its coordinates read whole from that one open, and closed at once. The header must be the one the server's own
path reads (through the cache), the values those netCDF4-python reads (the oracle), and values are kept only if
the file is still the version read once they are read.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import netCDF4
import numpy as np
import pytest

from test_index import archive

from dstp.catalog._stored import dumps
from dstp.catalog.facts import FileFacts, Headers, Prefetch, Unreadable, gather, gather_once
from dstp.catalog.netcdf4_ import FileHandles, FileIdentity
from dstp.errors import DataFileError

EVERY_SMALL = Prefetch(frozenset(), frozenset())


def _oracle(path: Path, name: str) -> np.ndarray:
    with netCDF4.Dataset(path) as ds:
        ds.set_auto_maskandscale(False)
        ds.set_always_mask(False)
        ds.set_auto_chartostring(False)
        return np.asarray(ds[name][...] if "/" in name else ds.variables[name][...])


def test_each_file_reads_as_the_cache_reads_it_and_its_values_as_netcdf4(tmp_path: Path) -> None:
    root = archive(tmp_path / "root")
    paths = sorted(p for p in root.rglob("*") if p.suffix in (".nc", ".he5"))
    assert len(paths) > 10
    compared = 0
    for path in paths:
        once, cached = FileHandles(direct_chunks=False), FileHandles(direct_chunks=False)
        try:
            found = once.read_once(path, lambda meta, identity: EVERY_SMALL.variables(meta, identity.size))
            served = gather(cached, path, EVERY_SMALL, Headers())
        finally:
            once.close()
            cached.close()
        assert found is not None and isinstance(served, FileFacts)
        meta, identity, values = found
        assert identity == FileIdentity.of(os.path.realpath(path), os.stat(path))
        assert dumps(meta) == dumps(served.meta), path
        assert sorted(values) == sorted(served.values), path
        for name, got in values.items():
            if name.startswith("HDFEOS/GRIDS/") and name.rsplit("/", 1)[1] in ("lat", "lon"):
                continue  # computed from the grid's definition, not in the file (compared with the cache's above)
            want = _oracle(path, name)
            assert (got.dtype, got.shape) == (want.dtype, want.shape), (path, name)
            assert got.tobytes() == want.tobytes(), (path, name)
            compared += 1
        assert len(once) == 0  # nothing left open
    assert compared > 30


def test_a_file_rewritten_while_it_is_read_keeps_its_header_but_no_values(tmp_path: Path) -> None:
    root = archive(tmp_path / "root")
    path = next(root.glob("ccm3/*.nc"))
    before = os.stat(path)
    handles = FileHandles(direct_chunks=False)

    def rewrite_then_want(meta, identity):  # type: ignore[no-untyped-def]
        with open(path, "r+b") as f:  # the same inode, written in place between the header and the values
            f.seek(0, os.SEEK_END)
            f.write(b"\0" * 16)
        return EVERY_SMALL.variables(meta, identity.size)

    found = handles.read_once(path, rewrite_then_want)
    assert found is not None
    meta, identity, values = found
    assert identity.inode == before.st_ino and identity.size == before.st_size  # the version that was read
    assert meta.variables and values == {}
    untouched = next(root.glob("ocean/*.nc"))
    kept = handles.read_once(untouched, lambda meta, identity: EVERY_SMALL.variables(meta, identity.size))
    assert kept is not None and kept[2]  # the check does not drop the values of a file left alone


def test_what_is_not_a_local_netcdf_file(tmp_path: Path) -> None:
    handles = FileHandles(direct_chunks=False)
    folder = tmp_path / "folder.nc"
    folder.mkdir()
    with pytest.raises(DataFileError, match="not a regular file"):
        handles.read_once(folder, lambda meta, identity: ())
    reference = tmp_path / "refs.json"
    reference.write_text("{}")
    assert handles.read_once(reference, lambda meta, identity: ()) is None  # a reference file: read by zarr-python
    gone = tmp_path / "gone.nc"
    assert gather_once(handles, gone, None, Headers()) is None
    bad = tmp_path / "bad.nc"
    bad.write_bytes(b"CDF\x01" + b"\0" * 20)
    unreadable = gather_once(handles, bad, None, Headers())
    assert isinstance(unreadable, Unreadable)
    assert unreadable.identity == FileIdentity.of(os.path.realpath(bad), os.stat(bad))


def test_a_header_reading_helper_loads_no_registry_nor_query_columns() -> None:
    """A helper imports the header rules and netCDF-C, not the whole catalog package (its start is paid at every
    cold build, once per helper)."""
    code = ("import sys; from dstp.catalog.facts import serve_gathering; "
            "print(sorted(m for m in ('dstp.catalog.registry', 'dstp.catalog.dataset', 'dstp.catalog.publish', "
            "'dstp.catalog.index', 'dstp.catalog.binding', 'dstp.catalog.descriptor') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"

"""A tmpfs catalog for the bulk benchmark: one published dataset of random-byte netCDF files.

``dstp get`` serves only files of published datasets, so the payload is a real
netCDF-4 file: small coordinate variables and one contiguous ``u1`` variable
``noise(time, y, x)`` filled with pseudo-random bytes (incompressible, 1 MiB per
time step). The files of one dataset continue each other along ``time``, as
``dstp publish`` expects of an aggregation.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import netCDF4
import numpy as np

from dstp.catalog.publish import publish
from dstp.transport.wire.crc import crc32c_of_file

__all__ = ["BulkCatalog", "DATASET", "make_catalog"]

DATASET = "bulk"
STEP_BYTES = 1024 * 1024  # one time step of noise(time, y=1024, x=1024) in u1


@dataclass(frozen=True, slots=True)
class BulkFile:
    """One published payload file: name in the dataset, path on tmpfs, size and CRC-32C."""

    label: str
    name: str
    path: Path
    size: int
    crc32c: int


@dataclass(frozen=True, slots=True)
class BulkCatalog:
    """The catalog root (on tmpfs) and its files, smallest first."""

    root: Path
    files: tuple[BulkFile, ...]

    def file(self, label: str) -> BulkFile:
        """Return the file labelled ``label`` (e.g. ``"1GiB"``)."""
        for f in self.files:
            if f.label == label:
                return f
        raise KeyError(label)

    def remove(self) -> None:
        """Delete the catalog (it lives in RAM)."""
        shutil.rmtree(self.root, ignore_errors=True)


def _label(mib: int) -> str:
    return f"{mib // 1024}GiB" if mib % 1024 == 0 else f"{mib}MiB"


def _write(path: Path, first_step: int, steps: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        nc.title = "dstp bulk-transfer benchmark payload (random bytes)"
        nc.createDimension("time", steps)
        nc.createDimension("y", 1024)
        nc.createDimension("x", 1024)
        t = nc.createVariable("time", "f8", ("time",))
        t.units, t.calendar, t.standard_name = "hours since 2000-01-01", "standard", "time"
        t[:] = np.arange(first_step, first_step + steps, dtype="f8")
        for axis in ("y", "x"):
            v = nc.createVariable(axis, "f4", (axis,))
            v.units = "m"
            v[:] = np.arange(1024, dtype="f4")
        noise = nc.createVariable("noise", "u1", ("time", "y", "x"), contiguous=True)
        noise.units, noise.long_name = "1", "random bytes"
        for i in range(steps):
            noise[i] = np.frombuffer(rng.bytes(STEP_BYTES), dtype=np.uint8).reshape(1024, 1024)


def make_catalog(root: Path, sizes_mib: tuple[int, ...]) -> BulkCatalog:
    """Return a fresh catalog under ``root`` (emptied first) with one file per size in MiB, published as ``bulk``."""
    shutil.rmtree(root, ignore_errors=True)
    folder = root / DATASET
    folder.mkdir(parents=True)
    paths, step = [], 0
    for i, mib in enumerate(sorted(sizes_mib)):
        path = folder / f"{DATASET}_{mib:05d}MiB.nc"
        _write(path, step, mib, seed=1000 + i)
        step += mib
        paths.append((mib, path))
    publish([p for _, p in paths], DATASET, title="bulk transfer payload")
    files = tuple(BulkFile(_label(mib), p.name, p, p.stat().st_size, crc32c_of_file(p)) for mib, p in paths)
    return BulkCatalog(root, files)

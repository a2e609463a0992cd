"""The catalog: every dataset published under one root folder.

``Catalog.scan(root)`` finds every ``*.dstp.xml`` below ``root``, validates
it, and opens its files. A broken descriptor, a missing file or an unreadable
netCDF file becomes a :class:`Problem` in ``catalog.problems`` (logged by the
server, listed by ``dstp catalog validate``) and never stops the other
datasets from being served.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from dstp.catalog.dataset import GriddedDataset
from dstp.catalog.descriptor import DESCRIPTOR_SUFFIX, read_descriptor
from dstp.catalog.netcdf4_ import FileHandles
from dstp.errors import CatalogError, DatasetNotFoundError, FileNotPublishedError

__all__ = ["Catalog", "Problem"]

log = logging.getLogger("dstp.catalog")


@dataclass(frozen=True, slots=True)
class Problem:
    """Why one descriptor was not published."""

    path: Path
    message: str

    def __str__(self) -> str:
        return self.message if self.message.startswith(str(self.path)) else f"{self.path}: {self.message}"


class Catalog:
    """The datasets served from one root, by id."""

    def __init__(self, root: Path, datasets: dict[str, GriddedDataset], problems: list[Problem]) -> None:
        self.root = root
        self._datasets = datasets
        self.problems = problems

    @classmethod
    def scan(cls, root: Path, open_files: int = 32, chunk_cache_bytes: int = 8 * 2**20) -> "Catalog":
        """Return the catalog of ``root``; problems are collected, never raised."""
        root = Path(root).resolve()
        handles = FileHandles(open_files, chunk_cache_bytes)
        datasets: dict[str, GriddedDataset] = {}
        problems: list[Problem] = []
        if not root.is_dir():
            problems.append(Problem(root, "catalog root is not a directory"))
            return cls(root, datasets, problems)
        for path in sorted(root.rglob("*" + DESCRIPTOR_SUFFIX)):
            try:
                desc = read_descriptor(path)
                if desc.id in datasets:
                    other = datasets[desc.id].descriptor.path
                    raise CatalogError(f"dataset id {desc.id!r} is already published by {other}")
                datasets[desc.id] = GriddedDataset.open(desc, handles)
            except CatalogError as exc:
                problems.append(Problem(path, str(exc)))
                log.warning("skipped %s: %s", path, exc)
        return cls(root, datasets, problems)

    def __iter__(self) -> Iterator[GriddedDataset]:
        return iter(self._datasets.values())

    def __len__(self) -> int:
        return len(self._datasets)

    def __contains__(self, dataset_id: object) -> bool:
        return dataset_id in self._datasets

    def get(self, dataset_id: str) -> GriddedDataset:
        """Return the dataset ``dataset_id``; raise DatasetNotFoundError naming what exists."""
        try:
            return self._datasets[dataset_id]
        except KeyError:
            known = ", ".join(sorted(self._datasets)) or "none"
            raise DatasetNotFoundError(
                f"no dataset {dataset_id!r} in this catalog (published: {known})"
            ) from None

    def published_file(self, dataset_id: str, name: str) -> Path:
        """Return the path of file ``name`` of a dataset; only its own files, never a path outside."""
        ds = self.get(dataset_id)
        for f in ds.files:
            if name in (f.path.name, str(f.path.relative_to(self.root))):
                return f.path
        names = ", ".join(f.path.name for f in ds.files)
        raise FileNotPublishedError(f"{name!r} is not a file of dataset {dataset_id!r} (its files: {names})")

    def close(self) -> None:
        for ds in self._datasets.values():
            ds.close()

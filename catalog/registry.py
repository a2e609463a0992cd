"""The catalog: every dataset published under one root folder.

``Catalog.scan(root)`` finds every ``*.dstp.xml`` below ``root``, validates
it, and opens its files. A broken descriptor, a missing file or an unreadable
netCDF file becomes a :class:`Problem` in ``catalog.problems`` (logged by the
server, listed by ``dstp catalog validate``) and never stops the other
datasets from being served.

A descriptor with ``<remote server=… dataset=…/>`` publishes a dataset of
another dstp server (:mod:`.remote`): it is kept apart from the local datasets
(``catalog.remotes``), queries reach it through the :class:`RemoteSource` the
server attaches (:meth:`Catalog.attach_remote_source`), and :meth:`Catalog.resolve`
finds either kind.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from dstp.catalog.dataset import GriddedDataset
from dstp.catalog.descriptor import DESCRIPTOR_SUFFIX, Descriptor, read_descriptor
from dstp.catalog.netcdf4_ import FileHandles
from dstp.catalog.remote import RemoteDataset, RemoteSource
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

    def __init__(self, root: Path, datasets: dict[str, GriddedDataset], problems: list[Problem],
                 remotes: dict[str, RemoteDataset] | None = None, handles: FileHandles | None = None) -> None:
        self.root = root
        #: The open files of its datasets (one cache, so no file is opened twice; see FileHandles.inspect).
        self.handles = handles if handles is not None else FileHandles()
        self._datasets = datasets
        self.problems = problems
        #: Datasets of other dstp servers published here (``<remote>`` descriptors), by id.
        self.remotes: dict[str, RemoteDataset] = remotes or {}

    @classmethod
    def scan(cls, root: Path, open_files: int = 32, chunk_cache_bytes: int = 8 * 2**20,
             direct_chunks: bool = True, decoded_chunk_cache_bytes: int | None = None) -> "Catalog":
        """Return the catalog of ``root``; problems are collected, never raised."""
        root = Path(root).resolve()
        handles = FileHandles(open_files, chunk_cache_bytes, direct_chunks, decoded_chunk_cache_bytes)
        datasets: dict[str, GriddedDataset] = {}
        remotes: dict[str, RemoteDataset] = {}
        problems: list[Problem] = []
        if not root.is_dir():
            problems.append(Problem(root, "catalog root is not a directory"))
            return cls(root, datasets, problems, handles=handles)
        for path in sorted(root.rglob("*" + DESCRIPTOR_SUFFIX)):
            try:
                desc = read_descriptor(path)
                if desc.id in datasets or desc.id in remotes:
                    known = datasets.get(desc.id) or remotes[desc.id]
                    raise CatalogError(f"dataset id {desc.id!r} is already published by {known.descriptor.path}")
                if desc.remote is not None:
                    remotes[desc.id] = RemoteDataset(desc)
                    continue
                datasets[desc.id] = GriddedDataset.open(desc, handles)
            except CatalogError as exc:
                problems.append(Problem(path, str(exc)))
                log.warning("skipped %s: %s", path, exc)
            except Exception as exc:  # noqa: BLE001 - one dataset's files must never stop the others being served
                problems.append(Problem(path, f"this dataset could not be opened ({type(exc).__name__}: {exc}); "
                                              "the server log has the details — please report it"))
                log.exception("skipped %s: unexpected failure while opening it", path)
        return cls(root, datasets, problems, remotes, handles)

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
            if dataset_id in self.remotes:
                raise DatasetNotFoundError(
                    f"dataset {dataset_id!r} is served by {self.remotes[dataset_id].server}; query it here, or "
                    "describe it on that server") from None
            known = ", ".join(sorted(self._datasets)) or "none"
            raise DatasetNotFoundError(
                f"no dataset {dataset_id!r} in this catalog (published: {known})"
            ) from None

    def resolve(self, dataset_id: str) -> GriddedDataset | RemoteDataset:
        """Return the local or remote dataset ``dataset_id`` (what a query may name)."""
        if dataset_id in self.remotes:
            return self.remotes[dataset_id]
        try:
            return self._datasets[dataset_id]
        except KeyError:
            known = ", ".join(sorted(self.every_id())) or "none"
            raise DatasetNotFoundError(f"no dataset {dataset_id!r} in this catalog (published: {known})") from None

    def every_id(self) -> list[str]:
        """Return the ids of every dataset a query may name, local and remote."""
        return [*self._datasets, *self.remotes]

    def descriptor(self, dataset_id: str) -> Descriptor:
        """Return the descriptor of a local or remote dataset (its access policy, for one)."""
        return self.resolve(dataset_id).descriptor

    def attach_remote_source(self, source: RemoteSource) -> None:
        """Let queries reach the remote datasets through ``source`` (the server assembly calls this)."""
        for remote in self.remotes.values():
            remote.source = source

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

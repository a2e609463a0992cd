"""The catalog: every dataset published under one root folder, kept current while it is served.

``Catalog.scan(root)`` finds every ``*.dstp.xml`` below ``root``, validates
it, and opens its files. A broken descriptor, a missing file or a dataset whose
files disagree becomes a :class:`Problem` in ``catalog.problems`` (logged by
the server, listed by ``dstp catalog validate``) and never stops the other
datasets from being served; a file that cannot be opened is *held back*
(``catalog.held_back``) and the dataset served without it.

With an index (:mod:`.index`, one SQLite file per catalog in the server's
state folder) a restart on an unchanged archive reads no data file.
:meth:`Catalog.refresh` looks again (stat only where nothing changed,
:mod:`.rescan`) and publishes what changed: new, replaced, grown, removed and
renamed files, edited descriptors. What the catalog serves is one immutable
:class:`~dstp.catalog.rescan.CatalogState`, replaced whole: a query plans on
:meth:`Catalog.snapshot` and keeps it to its end, the next one sees the
change, never a mixture. Every change bumps the dataset's version and is
logged: :meth:`Catalog.changes` says which files, columns and time range.

A descriptor with ``<remote server=… dataset=…/>`` publishes a dataset of
another dstp server (:mod:`.remote`): it is kept apart from the local datasets
(``catalog.remotes``), queries reach it through the :class:`RemoteSource` the
server gives :meth:`Catalog.scan` (``remote_source=``), and :meth:`Catalog.resolve`
finds either kind.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Mapping

from dstp.catalog.changes import Change, ChangeFeed
from dstp.catalog.dataset import GriddedDataset
from dstp.catalog.descriptor import Descriptor
from dstp.catalog.index import CatalogIndex
from dstp.catalog.netcdf4_ import FileHandles
from dstp.catalog.objects import ObjectFiles
from dstp.catalog.remote import RemoteDataset, RemoteSource
from dstp.catalog.rescan import CatalogState, HeldBack, Problem, Rescanner
from dstp.errors import DatasetNotFoundError, FileNotPublishedError

__all__ = ["Catalog", "CatalogPage", "HeldBack", "Problem"]

log = logging.getLogger("dstp.catalog")


@dataclass(frozen=True, slots=True)
class CatalogPage:
    """One page of a catalog listing (:meth:`Catalog.page`)."""

    #: Datasets matching the search, local and remote, in all pages.
    total: int
    offset: int
    datasets: tuple[GriddedDataset | RemoteDataset, ...]
    #: The catalog version the page was taken from.
    version: int


class Catalog:
    """The datasets served from one root, by id.

    A catalog built by :meth:`scan` is *live*: :meth:`refresh` replaces what it serves. One made from a
    mapping of datasets (a view a service narrows for a principal, a test's) serves those, and only those.
    """

    def __init__(self, root: Path, datasets: Mapping[str, GriddedDataset],
                 problems: list[Problem] | tuple[Problem, ...], remotes: Mapping[str, RemoteDataset] | None = None, handles: FileHandles | None = None, *,
                 state: CatalogState | None = None) -> None:
        self.root = root
        #: The open files of its datasets (one cache, so no file is opened twice; see FileHandles.inspect).
        self.handles = handles if handles is not None else FileHandles()
        self._state = state if state is not None else \
            CatalogState(dict(datasets), dict(remotes or {}), tuple(problems))
        self._rescanner: Rescanner | None = None
        self._index: CatalogIndex | None = None
        self._refreshing = threading.Lock()
        self._remote_source: RemoteSource | None = None
        #: Called with the changes of each refresh that published some (the server's file watch logs them).
        self.on_change: list[Callable[[list[Change]], None]] = []

    @classmethod
    def scan(cls, root: Path, open_files: int = 32, chunk_cache_bytes: int = 8 * 2**20, direct_chunks: bool = True,
             *, index: Path | None = None, processes: int = 1, settle_s: float = 1.0,
             decoded_chunk_cache_bytes: int | None = None,
             clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time,
             objects: ObjectFiles | None = None, remote_source: RemoteSource | None = None,
             store_reads: int = 4) -> "Catalog":
        """Return the catalog of ``root``; problems are collected, never raised.

        ``index`` is the catalog index file (None: kept in memory, for this process only); ``processes`` read
        file headers in parallel when many must be read; ``settle_s`` is how long a new or changed file must
        keep its size and times before :meth:`refresh` publishes it, by ``clock``; changes are stamped with
        ``wall`` time; ``decoded_chunk_cache_bytes`` sizes the direct reader's cache (None: from memory).
        ``objects`` reads the files of descriptors that name a store (:mod:`.objects`). ``remote_source`` is how
        queries reach the datasets of other servers (``<remote>`` descriptors, also those published by a later
        refresh); without one they are listed but refused when used. ``store_reads``: how many store objects' headers
        are fetched at once when several must be read (1: one after another).
        """
        root = Path(root).resolve()
        if not root.is_dir():
            return cls(root, {}, [Problem(root, "catalog root is not a directory")],
                       handles=FileHandles(open_files, chunk_cache_bytes, direct_chunks))
        store = CatalogIndex.open(index, root)
        handles = FileHandles(open_files, chunk_cache_bytes, direct_chunks, layouts=store,
                              decoded_chunk_cache_bytes=decoded_chunk_cache_bytes, objects=objects)
        rescanner = Rescanner(root, handles, store, settle_s=settle_s, clock=clock, wall=wall,
                              processes=max(1, processes), store_reads=max(1, store_reads))
        state, _ = rescanner.look(None)
        catalog = cls(root, {}, (), handles=handles, state=state)
        catalog._rescanner, catalog._index = rescanner, store
        catalog._remote_source = remote_source
        catalog._reach_remotes(state)
        return catalog

    # -- what it serves now ---------------------------------------------------------------------------------

    def snapshot(self) -> "Catalog":
        """Return the catalog as it is now, fixed: what a query plans on and keeps to its end."""
        view = Catalog(self.root, {}, (), handles=self.handles, state=self._state)
        view._index = self._index
        return view

    @property
    def problems(self) -> list[Problem]:
        return list(self._state.problems)

    @property
    def remotes(self) -> Mapping[str, RemoteDataset]:
        """Datasets of other dstp servers published here (``<remote>`` descriptors), by id."""
        return self._state.remotes

    @property
    def held_back(self) -> tuple[HeldBack, ...]:
        """Files matched by a descriptor but not served as they are on disk (being written, unreadable)."""
        return self._state.held

    @property
    def version(self) -> int:
        """The catalog version: the number of its last change (0 before any)."""
        return self._state.version

    @property
    def epoch(self) -> str:
        """Which index numbers the versions (a rebuilt index starts a new epoch); "" without one."""
        return self._index.epoch if self._index is not None else ""

    @property
    def index(self) -> CatalogIndex | None:
        """The catalog index (None for a catalog made from datasets)."""
        return self._index

    def __iter__(self) -> Iterator[GriddedDataset]:
        return iter(self._state.datasets.values())

    def __len__(self) -> int:
        return len(self._state.datasets)

    def __contains__(self, dataset_id: object) -> bool:
        return dataset_id in self._state.datasets

    def get(self, dataset_id: str) -> GriddedDataset:
        """Return the dataset ``dataset_id``; raise DatasetNotFoundError naming what exists."""
        state = self._state
        try:
            return state.datasets[dataset_id]
        except KeyError:
            if dataset_id in state.remotes:
                raise DatasetNotFoundError(
                    f"dataset {dataset_id!r} is served by {state.remotes[dataset_id].server}; query it here, or "
                    "describe it on that server") from None
            known = ", ".join(sorted(state.datasets)) or "none"
            raise DatasetNotFoundError(
                f"no dataset {dataset_id!r} in this catalog (published: {known})"
            ) from None

    def resolve(self, dataset_id: str) -> GriddedDataset | RemoteDataset:
        """Return the local or remote dataset ``dataset_id`` (what a query may name)."""
        state = self._state
        if dataset_id in state.remotes:
            return state.remotes[dataset_id]
        try:
            return state.datasets[dataset_id]
        except KeyError:
            known = ", ".join(sorted([*state.datasets, *state.remotes])) or "none"
            raise DatasetNotFoundError(f"no dataset {dataset_id!r} in this catalog (published: {known})") from None

    def every_id(self) -> list[str]:
        """Return the ids of every dataset a query may name, local and remote."""
        state = self._state
        return [*state.datasets, *state.remotes]

    def descriptor(self, dataset_id: str) -> Descriptor:
        """Return the descriptor of a local or remote dataset (its access policy, for one)."""
        return self.resolve(dataset_id).descriptor

    def page(self, offset: int = 0, limit: int = 100, q: str = "",
             where: Callable[[Descriptor], bool] | None = None) -> CatalogPage:
        """Return ``limit`` datasets from ``offset``, by id, of those whose id, title, summary or keywords contain
        every word of ``q`` (case-insensitive) and whose descriptor ``where`` accepts; served from memory."""
        state = self._state
        words = q.lower().split()
        found: list[GriddedDataset | RemoteDataset] = []
        for dataset_id in sorted([*state.datasets, *state.remotes]):
            ds = state.remotes.get(dataset_id) or state.datasets[dataset_id]
            d = ds.descriptor
            if where is not None and not where(d):
                continue
            if words:
                text = " ".join([d.id, d.title, d.summary or "", *d.keywords]).lower()
                if not all(w in text for w in words):
                    continue
            found.append(ds)
        offset, limit = max(0, offset), max(0, limit)
        return CatalogPage(len(found), offset, tuple(found[offset:offset + limit]), state.version)

    def published_file(self, dataset_id: str, name: str) -> Path:
        """Return the path of file ``name`` of a dataset; only its own files, never a path outside."""
        ds = self.get(dataset_id)
        for f in ds.files:
            if name in (f.path.name, str(f.path.relative_to(self.root))):
                return f.path
        names = ", ".join(f.path.name for f in ds.files)
        raise FileNotPublishedError(f"{name!r} is not a file of dataset {dataset_id!r} (its files: {names})")

    # -- keeping it current -----------------------------------------------------------------------------------

    def refresh(self) -> list[Change]:
        """Look at the root again and publish what changed; return the changes (none for a catalog not built by
        :meth:`scan`). One refresh runs at a time; queries go on meanwhile, on the state they started on."""
        if self._rescanner is None:
            return []
        with self._refreshing:
            state, changes = self._rescanner.look(self._state)
            self._reach_remotes(state)
            self._state = state  # one assignment: a reader sees the old state or the new one, whole
        if changes:
            for listener in list(self.on_change):
                listener(changes)
        return changes

    def _reach_remotes(self, state: CatalogState) -> None:
        """Give the remote datasets of ``state`` the catalog's remote source (none: they stay unreachable)."""
        if self._remote_source is not None:
            for remote in state.remotes.values():
                remote.source = self._remote_source

    def due(self) -> float | None:
        """Return when a file held back may have settled, or a store's listing is due again (the scan's clock), for
        the next refresh; None if neither."""
        if self._rescanner is None:
            return None
        times = [t for t in (self._rescanner.due(), self.handles.objects.due() if self.handles.objects else None)
                 if t is not None]
        return min(times) if times else None

    def changes(self, since: int = 0, epoch: str | None = None, limit: int = 10_000) -> ChangeFeed:
        """Return what changed after catalog version ``since``: which datasets, files, columns and ranges.

        With ``epoch`` (of an earlier feed), a feed of another index (rebuilt since) says it is incomplete.
        """
        if self._index is None:
            return ChangeFeed("", 0, (), complete=since == 0)
        return self._index.changes(since, epoch, limit)

    def close(self) -> None:
        for ds in self._state.datasets.values():
            ds.close()
        self.handles.close()
        if self._index is not None and self._rescanner is not None:
            self._index.close()

"""The change feed as one principal sees it, and the catalog listing in pages.

    feed.changes(principal, since, epoch, limit) -> FeedPage: what changed after catalog version ``since``
    feed.subscribe(wake)                         -> unsubscribe: ``wake()`` runs after each refresh that changed
    feed.page(principal, offset, limit, q)       -> CatalogPage: the datasets it may read, by id, from memory

Every door onto the feed (``GET /changes``, server-sent events, gRPC
``WatchCatalog``, webhooks) asks here, so a change to a dataset the principal
may not read is left out the same way everywhere (:func:`dstp.auth.can_read`,
with the dataset's descriptor). A dataset removed is judged by the last
descriptor this process saw it published with; one it never saw (removed while
the server was down, or before its index was rebuilt) is shown to no one — the
feed errs on the side of not telling.

A page of changes is numbered by catalog versions (``seq``): ``next`` is the
``since`` to ask with next time, past every change this page looked at,
including those it left out, so a reader of a filtered feed never asks for the
same hidden changes again. The core (:meth:`Catalog.changes
<dstp.catalog.registry.Catalog.changes>`) keeps the records; nothing here
opens a socket.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from dstp.auth import Principal, can_read
from dstp.catalog.changes import Change
from dstp.catalog.descriptor import Descriptor
from dstp.catalog.registry import Catalog, CatalogPage

__all__ = ["Feed", "FeedPage", "MAX_CHANGES_PER_PAGE", "MAX_PAGE", "change_json"]

#: Most changes one page of the feed holds (a reader asks again from ``next``).
MAX_CHANGES_PER_PAGE = 1_000
#: Most datasets one page of a listing holds.
MAX_PAGE = 1_000


def change_json(c: Change) -> dict[str, Any]:
    """Return one change as the JSON every door sends (``GET /changes``, server-sent events, webhooks): the core's
    record, with ``files_renamed`` as ``{"from", "to"}`` objects."""
    return {"seq": c.seq, "at": c.at, "dataset": c.dataset, "version": c.version, "kind": c.kind,
            "files_added": list(c.files_added), "files_removed": list(c.files_removed),
            "files_changed": list(c.files_changed),
            "files_renamed": [{"from": a, "to": b} for a, b in c.files_renamed], "columns": list(c.columns),
            "axis": c.axis, "first": c.first, "last": c.last, "descriptor": c.descriptor}


@dataclass(frozen=True, slots=True)
class FeedPage:
    """Changes after a catalog version that one principal may see."""

    #: Which index numbered the versions (a rebuilt index starts another epoch, numbering from 1 again).
    epoch: str
    #: The catalog version now.
    version: int
    #: The changes of this page the principal may see, oldest first.
    changes: tuple[Change, ...]
    #: The ``since`` of the next page: the last catalog version this page looked at.
    next: int
    #: Whether more changes follow ``next`` already (ask again at once).
    more: bool
    #: False when the changes asked for are no longer all kept (too old, or of another epoch): list the catalog
    #: again, then follow the feed from ``version``.
    complete: bool = True


class Feed:
    """What changed in one catalog, as each principal may see it, at the time ``clock`` says."""

    def __init__(self, catalog: Catalog, clock: Callable[[], float] = time.time) -> None:
        self.catalog = catalog
        self.clock = clock
        self._lock = threading.Lock()
        #: The last descriptor each dataset was published with (judges the changes of datasets since removed).
        self._known: dict[str, Descriptor] = {}
        self._listeners: list[Callable[[], None]] = []
        #: Set when the server stops: waiting readers end their streams.
        self.closed = False
        self._remember()
        catalog.on_change.append(self._changed)

    def _remember(self) -> None:
        state = self.catalog.snapshot()
        seen = {ds.id: ds.descriptor for ds in state}
        seen.update({i: r.descriptor for i, r in state.remotes.items()})
        with self._lock:
            self._known.update(seen)

    def _changed(self, changes: list[Change]) -> None:
        self._remember()
        with self._lock:
            listeners = list(self._listeners)
        for wake in listeners:
            wake()

    def subscribe(self, wake: Callable[[], None]) -> Callable[[], None]:
        """Run ``wake()`` (on the refreshing thread: keep it short) after every refresh that changed something;
        return the function that stops it."""
        with self._lock:
            self._listeners.append(wake)

        def unsubscribe() -> None:
            with self._lock:
                if wake in self._listeners:
                    self._listeners.remove(wake)

        return unsubscribe

    def close(self) -> None:
        """End every stream that follows the feed (the server is stopping): wake them, and say it is closed."""
        self.closed = True
        with self._lock:
            listeners = list(self._listeners)
        for wake in listeners:
            wake()

    @property
    def subscribers(self) -> int:
        """How many readers wait for changes now (a door that leaks them shows here)."""
        with self._lock:
            return len(self._listeners)

    def visible(self, principal: Principal, dataset_id: str, now: float | None = None,
                state: Catalog | None = None) -> bool:
        """Return whether ``principal`` may see the changes of ``dataset_id`` (of its descriptor now, or of the
        last one it was published with)."""
        state = state if state is not None else self.catalog.snapshot()
        if dataset_id in state:
            descriptor = state.get(dataset_id).descriptor
        elif dataset_id in state.remotes:
            descriptor = state.remotes[dataset_id].descriptor
        else:
            with self._lock:
                found = self._known.get(dataset_id)
            if found is None:
                return False
            descriptor = found
        return can_read(principal, descriptor, self.clock() if now is None else now)

    def changes(self, principal: Principal, since: int = 0, epoch: str | None = None,
                limit: int = MAX_CHANGES_PER_PAGE) -> FeedPage:
        """Return the changes after catalog version ``since`` that ``principal`` may see (at most ``limit``
        looked at); with the ``epoch`` of an earlier page, a feed of a rebuilt index says it is incomplete."""
        limit = max(1, min(limit, MAX_CHANGES_PER_PAGE))
        since = max(0, since)
        raw = self.catalog.changes(since, epoch, limit)
        now, state = self.clock(), self.catalog.snapshot()
        shown = tuple(c for c in raw.changes if self.visible(principal, c.dataset, now, state))
        if raw.changes:
            nxt = raw.changes[-1].seq
        elif raw.complete:
            nxt = since
        else:  # another epoch, or too old: follow from now on (after listing the catalog again)
            nxt = raw.version
        return FeedPage(raw.epoch, raw.version, shown, nxt, more=nxt < raw.version and raw.complete,
                        complete=raw.complete)

    def page(self, principal: Principal, offset: int = 0, limit: int = 100, q: str = "") -> CatalogPage:
        """Return ``limit`` datasets from ``offset`` (by id) that ``principal`` may read and whose id, title,
        summary or keywords contain every word of ``q``; from memory, never a file.

        Local datasets only, as :meth:`DstpService.datasets <dstp.service.DstpService.datasets>` lists them (a
        dataset of another server is described by that server)."""
        now = self.clock()
        return self.catalog.page(max(0, offset), max(0, min(limit, MAX_PAGE)), q,
                                 where=lambda d: d.remote is None and can_read(principal, d, now))

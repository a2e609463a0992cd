"""Prepared queries kept by their exact text, reused only while nothing their answer depends on changed.

Validating, binding and planning a query costs ~3.5 ms of the ~10 ms a small hyperslab query takes
on the server (ocean, one dask chunk of the xarray engine); a Dataset computed again, a dashboard's
refresh or a loop over the same request repeats that work for the same text. A hit returns the
:class:`PreparedQuery` the first preparation built, under these conditions, all checked on every hit:

* the same SQL text, byte for byte (no normalisation: a different text is prepared afresh);
* the same datasets and remote datasets visible to the caller, by id (the principal's view: an
  identity that may read more or fewer datasets never meets another's entry, and a dataset hidden
  since — an embargo that began, a policy that changed — is not found, as before);
* the very same dataset objects for every dataset the query reads: a refresh that published, changed
  or removed a file of one builds a new dataset object, so the entry is not reused;
* the same settings object.

Never kept: queries reading a remote dataset (its version is the other server's), queries with a
sample (``tablesample``/``sample()`` without a seed draws a new one per preparation), and queries
rewritten for scale-out (the rewrite runs after the cache, on every call).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from dstp.catalog.registry import Catalog
from dstp.query.execute import PreparedQuery
from dstp.settings import Settings

#: Prepared queries kept per service (least recently used dropped first).
PREPARED_CACHE_SIZE = 128

_Key = tuple[str, frozenset[str]]


@dataclass(frozen=True, slots=True)
class _Entry:
    settings: Settings
    #: (dataset id, the dataset object it was prepared against), for each dataset it reads.
    datasets: tuple[tuple[str, Any], ...]
    prepared: PreparedQuery


def cacheable(prepared: PreparedQuery) -> bool:
    """Return whether ``prepared`` may be reused for the same text: local scans only, no sample, no rewrite."""
    if prepared.combine is not None:
        return False
    return all(not scan.ref.remote and scan.ref.sampling is None for scan in prepared.plan.scans)


class PreparedQueries:
    """A bounded map of exact SQL text (and the caller's view) → prepared query; thread-safe."""

    def __init__(self, size: int = PREPARED_CACHE_SIZE) -> None:
        self.size = size
        self._entries: OrderedDict[_Key, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        #: Hits and misses since start (for tests and the log).
        self.hits = self.misses = 0

    @staticmethod
    def key(sql: str, view: Catalog) -> _Key:
        return sql, frozenset(view.every_id())

    def get(self, key: _Key, view: Catalog, settings: Settings) -> PreparedQuery | None:
        """Return the prepared query of ``key`` if every dataset it reads is still the one it was prepared on."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
        if entry is None or entry.settings is not settings or not all(
                dataset_id in view and view.get(dataset_id) is dataset for dataset_id, dataset in entry.datasets):
            self.misses += 1
            return None
        self.hits += 1
        return entry.prepared

    def put(self, key: _Key, view: Catalog, settings: Settings, prepared: PreparedQuery) -> None:
        """Keep ``prepared`` for ``key`` when it may be reused (:func:`cacheable`)."""
        if self.size <= 0 or not cacheable(prepared):
            return
        datasets = tuple((i, view.get(i)) for i in prepared.query.dataset_ids)
        with self._lock:
            self._entries[key] = _Entry(settings, datasets, prepared)
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)

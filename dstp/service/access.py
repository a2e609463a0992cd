"""Access: the service's one door to the access policy (:func:`dstp.auth.can_read`).

    access.catalog_for(principal)         the catalog as ``principal`` sees it: only what it may read
    access.require(principal, dataset_id) DatasetNotFoundError unless ``principal`` may read it
    access.check_query(principal, prepared)  every dataset a query reads (``query.dataset_ids``)

Everything the service answers goes through here: listings, search and
facets (built from listings), counts, describe, queries (planned against the
principal's catalog, then every dataset of ``dataset_ids`` checked again),
bulk files, quicklooks and snippets (which run and name queries). A dataset
the principal may not read is *not found*: the same error, with the same
message, as a dataset that does not exist — the message lists only what the
principal can see, so its existence does not leak.
"""

from __future__ import annotations

import time
from typing import Callable

from dstp.auth import Principal, can_read
from dstp.catalog.registry import Catalog
from dstp.query.execute import PreparedQuery

__all__ = ["Access"]


class Access:
    """Who may read which dataset of one catalog, at the time ``clock`` says."""

    def __init__(self, catalog: Catalog, clock: Callable[[], float] = time.time) -> None:
        self.catalog = catalog
        self.clock = clock

    def can_read(self, principal: Principal, dataset_id: str) -> bool:
        """Return whether ``principal`` may read dataset ``dataset_id`` now (False if there is none)."""
        if dataset_id not in self.catalog and dataset_id not in self.catalog.remotes:
            return False
        return can_read(principal, self.catalog.descriptor(dataset_id), self.clock())

    def catalog_for(self, principal: Principal) -> Catalog:
        """Return the catalog ``principal`` sees: a view holding only the datasets it may read, of the catalog
        as it is now (a refresh meanwhile changes the next view, never this one)."""
        now = self.clock()
        catalog = self.catalog.snapshot()
        readable = {ds.id: ds for ds in catalog if can_read(principal, ds.descriptor, now)}
        remotes = {i: r for i, r in catalog.remotes.items() if can_read(principal, r.descriptor, now)}
        if len(readable) == len(catalog) and len(remotes) == len(catalog.remotes):
            return catalog
        return Catalog(catalog.root, readable, catalog.problems, remotes, catalog.handles)

    def require(self, principal: Principal, dataset_id: str) -> None:
        """Raise DatasetNotFoundError (as for a dataset that does not exist) unless ``principal`` may read it."""
        if not self.can_read(principal, dataset_id):
            self.catalog_for(principal).resolve(dataset_id)  # raises, naming only what the principal sees

    def check_query(self, principal: Principal, prepared: PreparedQuery) -> None:
        """Raise DatasetNotFoundError unless ``principal`` may read every dataset the query reads."""
        for dataset_id in prepared.query.dataset_ids:
            self.require(principal, dataset_id)

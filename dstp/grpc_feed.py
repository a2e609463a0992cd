"""The gRPC door onto the change feed: ``WatchCatalog``, a server stream of what changed in the catalog.

It only translates (:class:`dstp.service.feed.Feed` decides what the caller may see): a first message with the
feed's epoch, the catalog version and whether the changes asked for are all kept, then one message per change.
A following stream waits for the next refresh on an event, set by the feed after each refresh that changed
something and by gRPC when the call ends (client gone, deadline, server stopping), so a waiting stream holds no
lock and ends as soon as its call does. Each following stream holds a gRPC worker thread while it waits: at most
:func:`max_watchers` of them run at once (RESOURCE_EXHAUSTED past that), so watchers never take every thread
queries need.
"""

from __future__ import annotations

import threading
from typing import Any, Iterator

from dstp.errors import LimitExceededError
from dstp.proto import dstp_pb2 as pb
from dstp.service import DstpService
from dstp.service.feed import FeedPage
from dstp.grpc_codec import change_pb

__all__ = ["KEEPALIVE_S", "Watchers", "max_watchers", "watch_catalog"]

#: Longest a following stream waits before it checks again that its call is still active.
KEEPALIVE_S = 15.0


def max_watchers(grpc_workers: int) -> int:
    """Return how many following WatchCatalog streams may run at once: a quarter of the gRPC threads."""
    return max(1, grpc_workers // 4)


class Watchers:
    """Counts the following streams of one server against their cap."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._slots = threading.BoundedSemaphore(cap)

    def take(self) -> None:
        if not self._slots.acquire(blocking=False):
            raise LimitExceededError(
                f"this server follows at most {self.cap} catalog watches at once (a quarter of its grpc_workers); "
                "try again later, or ask without follow and poll", retry_after_s=KEEPALIVE_S)

    def give(self) -> None:
        self._slots.release()


def _header(page: FeedPage) -> pb.WatchCatalogResponse:
    return pb.WatchCatalogResponse(epoch=page.epoch, version=page.version, complete=page.complete)


def watch_catalog(service: DstpService, request: pb.WatchCatalogRequest, context: Any, principal: Any,
                  watchers: Watchers) -> Iterator[pb.WatchCatalogResponse]:
    """Yield the WatchCatalog stream for ``request`` (errors are the caller's to translate, before the first
    message)."""
    wake = threading.Event()
    since = request.since if request.since >= 0 else service.catalog.version
    page = service.changes(since, request.epoch or None, principal=principal)
    if request.follow:
        watchers.take()
    try:
        context.add_callback(wake.set)  # the call ended: stop waiting
        unsubscribe = service.feed.subscribe(wake.set) if request.follow else (lambda: None)
        try:
            yield _header(page)
            epoch = page.epoch
            # an incomplete feed (another epoch, or too old) goes on from the version now, in this epoch
            since = page.next if page.complete else page.version
            if page.complete:
                for change in page.changes:
                    yield pb.WatchCatalogResponse(epoch=epoch, version=page.version, complete=True,
                                                  change=change_pb(change))
                if not page.more and not request.follow:
                    return
            while context.is_active() and not service.feed.closed:
                wake.clear()  # before asking: a change published meanwhile sets it again
                page = service.changes(since, epoch, principal=principal)
                for change in page.changes:
                    yield pb.WatchCatalogResponse(epoch=page.epoch, version=page.version, complete=page.complete,
                                                  change=change_pb(change))
                since = page.next
                if page.more:
                    continue
                if not request.follow:
                    return
                wake.wait(KEEPALIVE_S)
        finally:
            unsubscribe()
    finally:
        if request.follow:
            watchers.give()

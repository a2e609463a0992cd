"""Keeping a served catalog current: file events, periodic stat rescans, settling, and reload on demand.

:class:`CatalogWatch` runs one thread that calls :meth:`Catalog.refresh
<dstp.catalog.registry.Catalog.refresh>`:

* when the catalog folder changes — inotify through ``watchfiles`` (its Rust
  ``notify`` backend), where the platform and the file system offer it;
* every ``poll_s`` seconds when there is no file watch (it is off, the
  ``watchfiles`` package is missing, or the watch failed: a network file system,
  no inotify instances left), and every ``rescan_s`` seconds beside a working
  one (events can be lost: an inotify queue that overflowed);
* when a file held back may have settled (:meth:`Catalog.due`);
* at once on :meth:`reload` (``SIGHUP``, ``dstp catalog reload``).

A refresh is stat-only where nothing changed, so a look at a catalog of
100,000 files costs stats, not reads. Queries never wait for it.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from dstp.catalog.registry import Catalog

__all__ = ["CatalogWatch"]

log = logging.getLogger("dstp.catalog")

#: Milliseconds watchfiles gathers events before it reports them (one refresh for a burst of renames).
DEBOUNCE_MS = 200


class CatalogWatch:
    """The thread that keeps one catalog current; see the module's docstring."""

    def __init__(self, catalog: "Catalog", *, watch: bool = True, poll_s: float = 2.0, rescan_s: float = 300.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.catalog = catalog
        self.poll_s = poll_s
        self.rescan_s = rescan_s
        self.clock = clock
        self._want_watch = watch
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._done = threading.Condition()
        #: Refreshes made so far (tests and ``dstp catalog reload`` wait for the next one).
        self.refreshes = 0
        #: How changes are noticed: "inotify (watchfiles)" or "polling every N s".
        self.how = ""
        self._watching = False
        self._threads: list[threading.Thread] = []

    _relist = False

    def start(self) -> "CatalogWatch":
        """Start watching; return self."""
        if self._want_watch:
            self._watching = self._start_watch()
        self.how = "inotify (watchfiles)" + (f", and a stat rescan every {self.rescan_s:g} s" if self.rescan_s > 0
                                             else "") if self._watching else f"a stat rescan every {self.poll_s:g} s"
        thread = threading.Thread(target=self._run, name="dstp-catalog-watch", daemon=True)
        self._threads.append(thread)
        thread.start()
        log.info("catalog %s is kept current by %s", self.catalog.root, self.how)
        return self

    def _start_watch(self) -> bool:
        try:
            import watchfiles  # imported here: it pulls in anyio, which the core never needs
        except ImportError:
            log.warning("no file watch (the watchfiles package is not installed): the catalog is rescanned every "
                        "%g s", self.poll_s)
            return False
        def run() -> None:
            first = True
            try:
                for changes in watchfiles.watch(self.catalog.root, stop_event=self._stop, debounce=DEBOUNCE_MS,
                                                step=50, rust_timeout=500, yield_on_timeout=True,
                                                raise_interrupt=False):
                    if self._stop.is_set():
                        return
                    if changes or first:  # the first yield: the watch is set up; look once for what came before
                        self._wake.set()
                    first = False
            except Exception as exc:  # noqa: BLE001 - the watch is an optimisation: fall back to polling
                log.warning("the file watch of %s stopped (%s); the catalog is rescanned every %g s instead",
                            self.catalog.root, exc, self.poll_s)
                self._watching = False
                self._wake.set()

        thread = threading.Thread(target=run, name="dstp-catalog-inotify", daemon=True)
        self._threads.append(thread)
        thread.start()
        return True

    def reload(self) -> None:
        """Refresh the catalog now, listing its stores again (safe from a signal handler: it only wakes the
        thread)."""
        self._relist = True
        self._wake.set()

    def wait_refresh(self, after: int, timeout: float) -> bool:
        """Wait until more than ``after`` refreshes were made; False if ``timeout`` seconds passed first."""
        with self._done:
            return self._done.wait_for(lambda: self.refreshes > after, timeout)

    def _run(self) -> None:
        interval = self.rescan_s if self._watching else self.poll_s
        next_rescan = self.clock() + interval if interval > 0 else float("inf")
        while not self._stop.is_set():
            interval = self.rescan_s if self._watching else self.poll_s
            if interval > 0:  # the watch may have stopped since: poll from now on
                next_rescan = min(next_rescan, self.clock() + interval)
            due = self.catalog.due()
            wake_at = min(next_rescan, due if due is not None else float("inf"))
            timeout = None if wake_at == float("inf") else max(0.0, wake_at - self.clock())
            self._wake.wait(timeout)
            self._wake.clear()
            if self._stop.is_set():
                return
            objects = self.catalog.handles.objects
            if self._relist and objects is not None:
                objects.expire()  # a reload lists the stores now, however young their listings are
            self._relist = False
            try:
                self.catalog.refresh()
            except Exception:  # noqa: BLE001 - a failed look must not end the watch; the next one tries again
                log.exception("catalog refresh of %s failed", self.catalog.root)
            if interval > 0 and self.clock() >= next_rescan:
                next_rescan = self.clock() + interval
            elif interval <= 0:
                next_rescan = float("inf")
            with self._done:
                self.refreshes += 1
                self._done.notify_all()

    def stop(self) -> None:
        """Stop watching (the thread ends after the refresh it may be making)."""
        self._stop.set()
        self._wake.set()
        for thread in self._threads:
            thread.join(timeout=5.0)

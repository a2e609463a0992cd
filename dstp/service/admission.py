"""Admission: how many transfers run at once, and which queries are running now.

Every query execution and every file transfer holds one of
``max_concurrent_queries`` slots from its start to its end; one more is
refused at once with LimitExceededError (RESOURCE_EXHAUSTED, HTTP 429), never
queued. Running queries are registered by id, so the server can show them and
cancel them all when it stops.
"""

from __future__ import annotations

import threading
from typing import Protocol

from dstp.errors import LimitExceededError

__all__ = ["Admission", "Cancellable"]


class Cancellable(Protocol):
    """A running query as admission sees it: something to interrupt."""

    @property
    def cancel(self) -> threading.Event: ...


class Admission:
    """The transfer slots of one server, and the queries holding them."""

    def __init__(self, limit: int) -> None:
        self.limit = max(1, limit)
        self._slots = threading.BoundedSemaphore(self.limit)
        self._cond = threading.Condition()
        self._held = 0
        self._running: dict[str, Cancellable] = {}

    def acquire(self, what: str = "queries") -> None:
        """Take a slot or raise LimitExceededError (``what`` names the transfers in its message)."""
        if not self._slots.acquire(blocking=False):
            raise LimitExceededError(
                f"the server is running its maximum of {self.limit} {what}; try again in a moment")
        with self._cond:
            self._held += 1

    def release(self) -> None:
        """Give a slot back."""
        with self._cond:
            self._held -= 1
            self._cond.notify_all()
        self._slots.release()

    def register(self, query_id: str, execution: Cancellable) -> None:
        """Record a running query (it holds a slot)."""
        with self._cond:
            self._running[query_id] = execution

    def unregister(self, query_id: str) -> None:
        with self._cond:
            self._running.pop(query_id, None)

    def running(self) -> list[str]:
        """Return the ids of the queries executing now."""
        with self._cond:
            return list(self._running)

    def get(self, query_id: str) -> Cancellable | None:
        """Return the execution of ``query_id`` while it runs, else None."""
        with self._cond:
            return self._running.get(query_id)

    def cancel_all(self) -> None:
        """Interrupt every running query (server shutdown)."""
        with self._cond:
            running = list(self._running.values())
        for execution in running:
            execution.cancel.set()

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no slot is held (every transfer ended and was cleaned up); False if ``timeout`` passed."""
        with self._cond:
            return self._cond.wait_for(lambda: self._held == 0, timeout)

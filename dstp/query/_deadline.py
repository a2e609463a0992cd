"""The time limit around planning: a watchdog that interrupts DuckDB at a deadline.

Typing a query (running its SQL over empty scans) can take DuckDB long for a
big expression; it runs under the query's time limit like the execution does.
:class:`Watchdog` interrupts a DuckDB connection when ``time.monotonic()``
passes the deadline or ``cancel`` is set, and says afterwards which it was.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol

from dstp.errors import QueryTimeoutError

__all__ = ["Watchdog", "planning_timeout"]

#: How often the watchdog looks at the deadline and the cancel event (seconds).
INTERVAL_S = 0.05


class Interruptible(Protocol):
    """A DuckDB connection, as the watchdog sees it."""

    def interrupt(self) -> None: ...


class Watchdog:
    """Interrupts ``con`` at ``deadline`` (``time.monotonic()``) or once ``cancel`` is set; a context manager."""

    def __init__(self, con: Interruptible, deadline: float, cancel: threading.Event) -> None:
        self.con = con
        self.deadline = deadline
        self.cancel = cancel
        self.timed_out = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="dstp-plan-watchdog", daemon=True)

    def _watch(self) -> None:
        while not self._stop.is_set():
            if self.cancel.is_set():
                self.con.interrupt()
                return
            if time.monotonic() > self.deadline:
                self.timed_out = True
                self.cancel.set()
                self.con.interrupt()
                return
            self._stop.wait(INTERVAL_S)

    def __enter__(self) -> "Watchdog":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()  # alive at exit, it would keep its cursor past DuckDB's teardown


def planning_timeout(limit_s: float) -> QueryTimeoutError:
    """Return the error of a query whose planning outlived the time limit."""
    return QueryTimeoutError(
        f"the query took longer than {limit_s:g} s to plan and was stopped; simplify its expressions, or narrow "
        "it with WHERE on coordinates, stride() or tablesample"
    )

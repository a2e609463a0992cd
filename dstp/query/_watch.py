"""One watchdog thread for every running query: interrupts each at its deadline or once it is cancelled.

Each execution started a thread of its own for this (dstp/query/execute.py); starting and joining it
cost 0.7–1.5 ms per query on a loaded 2-core machine, a tenth of a small hyperslab query (one dask chunk
of the xarray engine). Here one daemon thread looks at every watched query each
:data:`~dstp.query._deadline.INTERVAL_S` seconds, as the per-query thread did, and sleeps while none runs.

:meth:`Watchdog.release` returns only once the thread no longer touches the connection: interrupting
and releasing hold one lock, so no interrupt reaches a connection after its query closed it.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from dstp.query._deadline import INTERVAL_S, Interruptible

__all__ = ["WATCHDOG", "Watched", "Watchdog"]


@dataclass(eq=False)
class Watched:
    """One query under watch; ``timed_out`` is set when the deadline (not a cancel) stopped it."""

    con: Interruptible
    deadline: float
    cancel: threading.Event
    timed_out: bool = False


class Watchdog:
    """The watcher of every running query of the process (lazily started, a daemon thread)."""

    def __init__(self, interval_s: float = INTERVAL_S) -> None:
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._watched: set[Watched] = set()
        self._thread: threading.Thread | None = None

    def watch(self, con: Interruptible, deadline: float, cancel: threading.Event) -> Watched:
        """Interrupt ``con`` once ``time.monotonic()`` passes ``deadline`` or ``cancel`` is set, until released."""
        watched = Watched(con, deadline, cancel)
        with self._lock:
            self._watched.add(watched)
            if self._thread is None or not self._thread.is_alive():  # first use, or in a forked child
                self._thread = threading.Thread(target=self._run, name="dstp-query-watchdog", daemon=True)
                self._thread.start()
            self._wake.notify()
        return watched

    def release(self, watched: Watched) -> None:
        """Stop watching; once this returns, the watchdog never touches ``watched.con`` again."""
        with self._lock:
            self._watched.discard(watched)

    def _run(self) -> None:
        with self._lock:
            while True:
                if not self._watched:
                    self._wake.wait()
                    continue
                now = time.monotonic()
                for w in list(self._watched):
                    if w.cancel.is_set():
                        w.con.interrupt()
                        self._watched.discard(w)
                    elif now > w.deadline:
                        w.timed_out = True
                        w.cancel.set()
                        w.con.interrupt()
                        self._watched.discard(w)
                self._wake.wait(self.interval_s)


#: The process's one watchdog.
WATCHDOG = Watchdog()

"""Repeated log records, rate-limited: a server at its descriptor limit must not also fill its disk.

At the file-descriptor limit every accept, every request and every file open
fails the same way, and each failure logged with its traceback grew one
server's log by 74 MB in 15 s. :class:`RepeatLimiter` lets the first
``burst`` records of a kind through in each ``window_s`` (a kind: the
logger, the level, the message template and the exception type), drops the
rest, and says how many it dropped when the kind shows up in a later window.
It never drops the audit log (``dstp.audit``).

:func:`limit_repeated_logs` puts one limiter on the loggers a server's
failures come from (dstp's own, uvicorn, asyncio, grpc); a logger's filter
sees what is logged on that logger itself, so each is named.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from typing import Callable

__all__ = ["SERVER_LOGGERS", "RepeatLimiter", "limit_repeated_logs"]

#: Where a server's repeated failures are logged.
SERVER_LOGGERS = ("dstp.server", "dstp.service", "dstp.incidents", "dstp.auth", "dstp.grpc", "dstp.http", "dstp.transport", "dstp.catalog",
                  "dstp.flight", "uvicorn", "uvicorn.error", "asyncio", "grpc", "grpc._server", "grpc._common",
                  "grpc._cython.cygrpc")

#: Kinds of record remembered at once (the least recent is forgotten first).
KINDS_KEPT = 1024


class RepeatLimiter(logging.Filter):
    """Passes at most ``burst`` records of one kind per ``window_s`` seconds; counts the rest."""

    def __init__(self, burst: int = 5, window_s: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.burst = burst
        self.window_s = window_s
        self.clock = clock
        self._lock = threading.Lock()
        self._kinds: OrderedDict[tuple[object, ...], list[float]] = OrderedDict()  # kind -> [window start, seen, dropped]
        self.dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.startswith("dstp.audit"):
            return True
        kind = (record.name, record.levelno, record.msg if isinstance(record.msg, str) else type(record.msg),
                record.exc_info[0] if record.exc_info else None)
        now = self.clock()
        with self._lock:
            entry = self._kinds.get(kind)
            if entry is None or now - entry[0] > self.window_s:
                dropped = int(entry[2]) if entry is not None else 0
                self._kinds[kind] = [now, 1, 0]
                self._kinds.move_to_end(kind)
                while len(self._kinds) > KINDS_KEPT:
                    self._kinds.popitem(last=False)
                if dropped:
                    record.msg = f"{record.msg} [{dropped} more like this in the last {self.window_s:g} s not logged]"
                return True
            entry[1] += 1
            if entry[1] <= self.burst:
                return True
            entry[2] += 1
            self.dropped += 1
            return False


def limit_repeated_logs(limiter: RepeatLimiter | None = None,
                        names: tuple[str, ...] = SERVER_LOGGERS) -> Callable[[], None]:
    """Put ``limiter`` (a new one by default) on the server's loggers; return what takes it off again."""
    limiter = limiter or RepeatLimiter()
    loggers = [logging.getLogger(name) for name in names]
    for logger in loggers:
        logger.addFilter(limiter)

    def remove() -> None:
        for logger in loggers:
            logger.removeFilter(limiter)

    return remove

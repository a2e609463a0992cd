"""The audit log: one JSON line per query and per download, however it ended.

Written to the ``dstp.audit`` logger; with the ``audit_log`` setting, to that
file too, and then nowhere else (:func:`open_audit_file`). One line is one
JSON object (SECURITY.md documents it):

    {"ts": "2026-11-23T10:15:02.123Z", "event": "query", "id": "q000042-1a2b3c4d",
     "principal": "alice", "credential": "token:7f3a…", "channel": "striped",
     "datasets": ["ccm3"], "sql": "select …", "rows": 1200, "bytes": 9600,
     "seconds": 0.214, "outcome": "ok"}

``event`` is ``query`` or ``file`` (then ``file`` and ``range`` replace ``sql``);
``outcome`` is ``ok``, ``truncated``, or the error code the request ended with
(``limit_exceeded`` when it was refused, ``timeout``, ``cancelled`` — also for a
stalled reader —, ``invalid_query`` …). A query refused or failing before it
ran has a line too (rows and bytes 0); a ticket never redeemed has none:
nothing was read.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any, Callable, Sequence

__all__ = ["AUDIT_LOGGER", "AuditLog", "open_audit_file"]

AUDIT_LOGGER = "dstp.audit"

#: Characters of a query's SQL kept in its line.
SQL_CHARS = 2000


class AuditLog:
    """Writes audit lines; ``clock`` gives their wall-clock time."""

    def __init__(self, clock: Callable[[], float] = time.time, logger: logging.Logger | None = None) -> None:
        self.clock = clock
        self.logger = logger or logging.getLogger(AUDIT_LOGGER)

    def record(
        self,
        event: str,
        request_id: str,
        *,
        principal: str,
        credential: str,
        channel: str,
        datasets: Sequence[str],
        outcome: str,
        rows: int = 0,
        sent: int = 0,
        seconds: float = 0.0,
        **detail: Any,
    ) -> None:
        """Write one line (``detail``: ``sql=…``, or ``file=…, range=…``)."""
        now = self.clock()
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z"
        if "sql" in detail:
            detail["sql"] = " ".join(str(detail["sql"]).split())[:SQL_CHARS]
        line = {"ts": stamp, "event": event, "id": request_id, "principal": principal, "credential": credential,
                "channel": channel, "datasets": list(datasets), **detail, "rows": rows, "bytes": sent,
                "seconds": round(seconds, 3), "outcome": outcome}
        self.logger.info("%s", json.dumps(line, separators=(",", ":"), default=str))


def open_audit_file(path: str | Path) -> logging.Handler:
    """Send the audit logger to ``path`` (appending, one JSON line per record) and only there; return the
    handler, to be removed with :func:`close_audit_file` when the server stops."""
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger = logging.getLogger(AUDIT_LOGGER)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return handler


def close_audit_file(handler: logging.Handler) -> None:
    """Undo :func:`open_audit_file`."""
    logger = logging.getLogger(AUDIT_LOGGER)
    logger.removeHandler(handler)
    handler.close()
    if not any(isinstance(h, logging.FileHandler) for h in logger.handlers):
        logger.propagate = True

"""Quotas: what one principal may use — slots at once, bytes per UTC day — and what it has used.

A principal is counted by its share key (``Principal.share_key``: one per token;
anonymous requests one per source address, ``"anonymous@127.0.0.1"``). Admission asks :meth:`Quotas.concurrency`
how many slots a key may hold and :meth:`Quotas.check_bytes` before it grants
one; a finished transfer adds what it sent (:meth:`Quotas.add_bytes`). Usage
is kept in memory from the server's start and resets at 00:00 UTC; a user sees
it through ``usage`` (HTTP ``/usage.json``, gRPC ``Usage``, ``dstp usage``).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from dstp.errors import LimitExceededError

__all__ = ["DAY_SECONDS", "Quota", "Quotas", "Usage"]

DAY_SECONDS = 86_400.0


@dataclass(frozen=True, slots=True)
class Quota:
    """What one principal may use; 0 means no limit of the principal's own (for concurrent queries, -1: half
    the server's slots, rounded up — so one principal never holds every slot)."""

    concurrent_queries: int = 0
    bytes_per_day: int = 0


@dataclass(frozen=True, slots=True)
class Usage:
    """What a principal uses now and today, against its quota."""

    principal: str
    running: int
    waiting: int
    concurrent_limit: int
    bytes_today: int
    bytes_per_day: int
    resets_at: float

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON shape of ``/usage.json`` (``bytes_per_day`` null: no quota)."""
        return {
            "principal": self.principal,
            "queries": {"running": self.running, "waiting": self.waiting, "limit": self.concurrent_limit},
            "bytes_today": {"used": self.bytes_today, "limit": self.bytes_per_day or None,
                            "resets_at_unix": self.resets_at},
        }


class Quotas:
    """The quota of every principal (one default for all today) and the bytes each fetched today."""

    def __init__(self, default: Quota, server_slots: int, clock: Callable[[], float] = time.time) -> None:
        self.default = default
        self.server_slots = max(1, server_slots)
        self.clock = clock
        self._lock = threading.Lock()
        self._day = self._today()
        self._bytes: dict[str, int] = {}

    def _today(self) -> int:
        return int(self.clock() // DAY_SECONDS)

    def quota(self, key: str) -> Quota:
        """Return the quota of principal ``key``."""
        return self.default

    def concurrency(self, key: str) -> int:
        """Return how many slots ``key`` may hold at once."""
        own = self.quota(key).concurrent_queries
        if own < 0:
            return max(1, -(-self.server_slots // 2))
        return min(own, self.server_slots) if own > 0 else self.server_slots

    def bytes_today(self, key: str) -> int:
        with self._lock:
            self._roll()
            return self._bytes.get(key, 0)

    def check_bytes(self, key: str) -> None:
        """Raise LimitExceededError (retry after the next UTC midnight) if ``key`` used its bytes for today."""
        limit = self.quota(key).bytes_per_day
        if limit <= 0:
            return
        used = self.bytes_today(key)
        if used >= limit:
            wait = self.resets_at() - self.clock()
            raise LimitExceededError(
                f"you fetched {used:,} bytes today, your quota of {limit:,} bytes a day; it resets at "
                f"00:00 UTC (in {wait / 3600:.1f} h) — narrow your queries meanwhile",
                retry_after_s=max(1.0, wait),
            )

    def add_bytes(self, key: str, sent: int) -> None:
        """Count ``sent`` bytes to ``key``'s day."""
        if sent <= 0:
            return
        with self._lock:
            self._roll()
            self._bytes[key] = self._bytes.get(key, 0) + sent

    def resets_at(self) -> float:
        """Return the Unix time the day's counts reset (the next 00:00 UTC)."""
        return (self._today() + 1) * DAY_SECONDS

    def _roll(self) -> None:
        today = self._today()
        if today != self._day:
            self._day = today
            self._bytes.clear()

"""Warm data connections: the stripes a client keeps open to a server between transfers.

A TCP connection that has carried a transfer knows its path — the congestion
window it grew and the round-trip time it measured — where a fresh one
starts in slow start, a round trip behind (its handshake). So a client that
asked for it (HELLO ``"keep": true``) and finished a transfer cleanly hands
its stripes back here instead of closing them:

    receiver sends ACK + BYE ─▶ server answers BYE (sealed in a sealed transfer) ─▶ pool.give(key, conn)
    next transfer: pool.take(key) ─▶ new HELLO (new ticket, new proof, attempt 0) on the same connection

Nothing of a transfer outlives it on the connection: both directions stop at
a frame boundary (the two BYEs), and the next transfer is found, proved and
sealed by its own ticket and key exactly as on a fresh connection. Keys name
what a connection is good for — the channel, the server's data endpoint, the
client's socket buffers and the sealing (``("striped", host, port, buffers,
cipher)``; UDT: ``("udt", host, port, RTT class, cipher)``) — so a plaintext
connection never carries a sealed transfer's HELLO, and no two clients share
a pool.

A pooled connection may have died while it waited (the server closes idle
ones after ``data_idle_timeout_s`` and caps how many it keeps; a network
drops them). :meth:`take` discards one whose peer has closed or that holds
unexpected bytes; one that dies at the moment it is reused is caught by the
receiver, which dials a fresh connection for that stripe without counting a
failure (transport/client/receiver.py). A pooled connection never fails a transfer.

Connections being handed back (their server BYE not yet in) are *pending*:
``take`` waits for them, briefly, rather than dialing a connection that would
start cold a moment before a warm one returns.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Callable

from dstp.transport.wire.frames import Conn

__all__ = ["ConnectionPool", "PoolStats"]

#: Longest ``take`` waits for a connection that is being handed back (seconds).
RETURN_WAIT_S = 2.0
#: A kept connection older than this is closed rather than reused (the server's idle expiry is usually sooner).
MAX_IDLE_S = 300.0
#: A pre-dialed connection that has not carried a HELLO within this is closed: the server gives a connection
#: ``hello_timeout_s`` (10 s by default) to send its HELLO.
MAX_PREDIALED_S = 5.0


@dataclass(slots=True)
class PoolStats:
    """What a pool did: connections handed back, reused, pre-dialed, found dead."""

    given: int = 0
    reused: int = 0
    predialed: int = 0
    discarded: int = 0


@dataclass(slots=True)
class _Idle:
    conn: Conn
    since: float
    #: Dialed ahead of a transfer and never used: it has not sent a HELLO yet.
    predialed: bool


class ConnectionPool:
    """Idle data connections by key; thread-safe. ``max_per_key`` caps each key's idle connections."""

    def __init__(self, max_per_key: int = 64, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_per_key = max(0, max_per_key)
        self.clock = clock
        self.stats = PoolStats()
        self._cond = threading.Condition()
        self._idle: dict[Hashable, list[_Idle]] = {}
        self._pending: dict[Hashable, int] = {}
        self._closed = False

    def idle(self, key: Hashable) -> int:
        """Return how many connections wait under ``key``."""
        with self._cond:
            return len(self._idle.get(key, ()))

    def expect(self, key: Hashable, count: int = 1) -> None:
        """Announce ``count`` connections about to be handed back under ``key`` (then give or forfeit each)."""
        with self._cond:
            self._pending[key] = self._pending.get(key, 0) + count

    def forfeit(self, key: Hashable, count: int = 1) -> None:
        """Say that ``count`` announced connections will not come back."""
        with self._cond:
            self._settle(key, count)
            self._cond.notify_all()

    def _settle(self, key: Hashable, count: int) -> None:
        left = self._pending.get(key, 0) - count
        if left > 0:
            self._pending[key] = left
        else:
            self._pending.pop(key, None)

    def give(self, key: Hashable, conn: Conn, *, announced: bool = True, predialed: bool = False) -> None:
        """Keep ``conn`` idle under ``key`` (closing it if the pool is closed or full)."""
        with self._cond:
            if announced:
                self._settle(key, 1)
            idle = self._idle.setdefault(key, [])
            keep = not self._closed and len(idle) < self.max_per_key
            if keep:
                idle.append(_Idle(conn, self.clock(), predialed))
                if predialed:
                    self.stats.predialed += 1
                else:
                    self.stats.given += 1
            self._cond.notify_all()
        if not keep:
            conn.close()

    def take(self, key: Hashable, *, wait_s: float = RETURN_WAIT_S) -> tuple[Conn, bool] | None:
        """Return (an idle connection of ``key``, whether it carried a transfer before), or None.

        Waits up to ``wait_s`` while connections of ``key`` are being handed back; closes the dead and stale
        ones it meets.
        """
        deadline = time.monotonic() + wait_s
        while True:
            with self._cond:
                idle = self._idle.get(key, [])
                while not idle and self._pending.get(key, 0) > 0 and not self._closed:
                    left = deadline - time.monotonic()
                    if left <= 0 or not self._cond.wait(left):
                        break
                    idle = self._idle.get(key, [])
                if not idle:
                    return None
                entry = idle.pop()  # the most recently used: its window is the freshest
            age = self.clock() - entry.since
            alive = getattr(entry.conn, "alive", None)
            if age > (MAX_PREDIALED_S if entry.predialed else MAX_IDLE_S) or (alive is not None and not alive()):
                entry.conn.close()
                with self._cond:
                    self.stats.discarded += 1
                continue
            with self._cond:
                self.stats.reused += not entry.predialed
            return entry.conn, not entry.predialed

    def settle(self, timeout: float = RETURN_WAIT_S) -> bool:
        """Wait until no connection is being handed back; return whether that happened within ``timeout``."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._pending, timeout)

    def close(self) -> None:
        """Close every idle connection; connections handed back later are closed too."""
        with self._cond:
            self._closed = True
            idle = [e.conn for entries in self._idle.values() for e in entries]
            self._idle.clear()
            self._cond.notify_all()
        for conn in idle:
            conn.close()

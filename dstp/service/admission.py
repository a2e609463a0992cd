"""Admission: who gets one of the server's slots, in what order, and for how long.

Every planning, query execution and file transfer holds one of
``max_concurrent_queries`` slots (a :class:`Slot`) from its start to its end.
A request asks for one *before* anything is parsed or planned, so a refused
request costs nothing.

    admission.acquire(key, what, label)  -> Slot, or LimitExceededError with retry_after_s

* **A fair queue per principal.** When every slot is taken, a request waits
  (at most ``admission_wait_s``, at most ``max_waiting`` requests at once);
  a freed slot goes to the waiting principal that holds the fewest slots,
  the earliest first among equals — one busy client cannot starve the others.
  A principal never holds more than its quota (``quota_concurrent_queries``),
  and one that used its bytes for the day is refused (:mod:`.quotas`).
* **Refusal says when to come back**: ``LimitExceededError.retry_after_s``
  (about the time slots are held lately), sent as gRPC metadata ``retry-after``
  and the HTTP ``Retry-After`` header.
* **A stalled reader loses its slot.** Whoever produces a slot's data marks
  when it waits on its consumer (:meth:`Slot.blocked`) and when the consumer
  took something (:meth:`Slot.unblocked`, :meth:`Slot.progressed`). A slot
  whose producer has waited ``stall_timeout_s`` — or is still waiting past
  the query's time limit — is reclaimed by a watcher thread: its abort
  callbacks run (cancel the gRPC call, fail the striped transfer, drop the
  HTTP response) and the slot is free again at once, whether or not the
  producing thread has woken up yet.

Durations are measured with the service's ``clock`` (tests advance it rather
than sleep); the wait in the queue uses real time. Running queries are also
registered by id, so the server can show them and cancel them all when it stops.
"""

from __future__ import annotations

import collections
import logging
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Protocol

from dstp.errors import CancelledError, DstpError, LimitExceededError, QueryTimeoutError
from dstp.service.quotas import Quota, Quotas, Usage

__all__ = ["ANONYMOUS_KEY", "Admission", "Cancellable", "Slot"]

log = logging.getLogger("dstp.service")

#: The key every request without a credential is counted under.
ANONYMOUS_KEY = "anonymous"

#: How often the watcher looks for stalled slots (real seconds).
WATCH_INTERVAL_S = 0.1

#: Bounds of the retry-after hint, in seconds.
RETRY_AFTER_MIN_S, RETRY_AFTER_MAX_S = 1.0, 60.0


class Cancellable(Protocol):
    """A running query as admission sees it: something to interrupt."""

    @property
    def cancel(self) -> threading.Event: ...


Abort = Callable[[DstpError], None]


class Slot:
    """One slot, held by one principal's request until :meth:`release`; watched for a stalled consumer."""

    def __init__(self, admission: "Admission", key: str, what: str, label: str, started: float) -> None:
        self.key = key
        self.what = what
        self.label = label
        self.started = started
        #: Clock time after which a producer still waiting on its consumer is stopped (the query's time limit).
        self.deadline = math.inf
        #: Why the slot was taken back before its owner released it (a stalled reader, the time limit).
        self.reclaimed: DstpError | None = None
        self._admission = admission
        self._blocked_since: float | None = None
        self._aborts: list[Abort] = []
        self._freed = False
        self._released = False
        #: Records and Arrow bytes the consumer took, when it says so (``count_delivery``): what the audit log
        #: and the day's quota count — a stalled reader's last batch, produced but never taken, is not.
        self.counts_delivery = False
        self.delivered_rows = 0
        self.delivered_bytes = 0

    # -- the producer's view of its consumer ------------------------------------------------

    def blocked(self) -> None:
        """The producer waits on its consumer from now (it handed data over and waits for it to be taken)."""
        if self._blocked_since is None:
            self._blocked_since = self._admission.clock()

    def unblocked(self) -> None:
        """The consumer took what it was handed; the producer goes on."""
        self._blocked_since = None

    def progressed(self) -> None:
        """The consumer took something but the producer still waits (an ACK): restart the stall timer."""
        if self._blocked_since is not None:
            self._blocked_since = self._admission.clock()

    def count_delivery(self) -> None:
        """Count what the consumer takes (``taken``) as what was sent, rather than what was produced."""
        self.counts_delivery = True

    def taken(self, rows: int, nbytes: int) -> None:
        """The consumer took ``rows`` records of ``nbytes`` Arrow bytes."""
        self.delivered_rows += rows
        self.delivered_bytes += nbytes

    def on_stall(self, abort: Abort) -> None:
        """Run ``abort(error)`` if the slot is reclaimed (at once if it already was)."""
        with self._admission._cond:
            if self.reclaimed is None:
                self._aborts.append(abort)
                return
            error = self.reclaimed
        abort(error)

    def stalled_for(self, now: float) -> float:
        """Return for how long the producer has waited on its consumer (0 when it does not wait)."""
        since = self._blocked_since
        return 0.0 if since is None else max(0.0, now - since)

    # -- ending ------------------------------------------------------------------------------

    def release(self, sent: int = 0) -> None:
        """Give the slot back (idempotent); ``sent`` bytes count to the principal's day."""
        if self._released:
            return
        self._released = True
        self._admission._quotas.add_bytes(self.key, sent)
        self._admission._free(self)

    def __repr__(self) -> str:
        return f"Slot({self.label or self.what!r}, {self.key!r})"


@dataclass(eq=False)
class _Waiter:
    key: str
    what: str
    label: str
    slot: Slot | None = None
    done: threading.Event = field(default_factory=threading.Event)


class Admission:
    """The slots of one server: a fair queue per principal, quotas, and a watcher for stalled readers."""

    def __init__(
        self,
        limit: int,
        *,
        quotas: Quotas | None = None,
        wait_s: float = 0.0,
        max_waiting: int = 64,
        stall_timeout_s: float = 60.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.limit = max(1, limit)
        self.wait_s = max(0.0, wait_s)
        self.max_waiting = max(0, max_waiting)
        self.stall_timeout_s = stall_timeout_s
        self.clock = clock
        self._quotas = quotas or Quotas(Quota(), self.limit, clock)
        self._cond = threading.Condition()
        self._held: set[Slot] = set()
        self._held_by: dict[str, int] = collections.Counter()
        self._queue: collections.deque[_Waiter] = collections.deque()
        self._running: dict[str, Cancellable] = {}
        self._hold_seconds = 1.0  # moving average of how long slots are held: the retry-after hint
        self._watcher: threading.Thread | None = None
        self._stopping = threading.Event()
        self.reclaimed = 0

    @property
    def quotas(self) -> Quotas:
        return self._quotas

    # -- taking a slot ---------------------------------------------------------------------------

    def acquire(self, key: str = ANONYMOUS_KEY, what: str = "queries", label: str = "") -> Slot:
        """Return a slot for principal ``key``, waiting in the fair queue at most ``wait_s`` seconds.

        Raises LimitExceededError (with ``retry_after_s``) when none is granted in time, when the
        queue is full, or when the principal used its bytes for the day.
        """
        self._quotas.check_bytes(key)
        self._watch()
        cap = self._quotas.concurrency(key)
        with self._cond:
            if len(self._held) < self.limit and self._held_by[key] < cap:
                return self._grant(key, what, label)
            if self.wait_s <= 0 or len(self._queue) >= self.max_waiting:
                raise self._refusal(key, what, cap, waited=False)
            waiter = _Waiter(key, what, label)
            self._queue.append(waiter)
        deadline = time.monotonic() + self.wait_s
        # Each waiter sleeps on its own event, set when a slot is handed to it: a freed slot wakes one thread,
        # not every waiter (64 waiting clients woke 64 threads per slot, and the 2 cores went to the GIL).
        while True:
            waiter.done.wait(max(0.0, deadline - time.monotonic()))
            with self._cond:
                if waiter.slot is not None:
                    return waiter.slot
                if time.monotonic() >= deadline:
                    self._queue.remove(waiter)
                    self._dispatch()
                    raise self._refusal(key, what, cap, waited=True)

    def _grant(self, key: str, what: str, label: str) -> Slot:
        slot = Slot(self, key, what, label, self.clock())
        self._held.add(slot)
        self._held_by[key] += 1
        return slot

    def _dispatch(self) -> None:
        """Hand free slots to waiters: the principal holding fewest first, the earliest among equals."""
        granted = False
        while len(self._held) < self.limit and self._queue:
            eligible = [w for w in self._queue if self._held_by[w.key] < self._quotas.concurrency(w.key)]
            if not eligible:
                break
            waiter = min(eligible, key=lambda w: self._held_by[w.key])  # min() keeps the earliest of equals
            self._queue.remove(waiter)
            waiter.slot = self._grant(waiter.key, waiter.what, waiter.label)
            waiter.done.set()
            granted = True
        if granted:
            self._cond.notify_all()  # wait_idle() and friends; waiters sleep on their own event

    def _refusal(self, key: str, what: str, cap: int, *, waited: bool) -> LimitExceededError:
        retry = min(RETRY_AFTER_MAX_S, max(RETRY_AFTER_MIN_S, math.ceil(self._hold_seconds)))
        after = f" (waited {self.wait_s:g} s)" if waited else ""
        if self._held_by[key] >= cap and cap < self.limit:
            message = (f"you are running your maximum of {cap} {what} at once{after}; let one finish, "
                       f"or try again in {retry:g} s")
        else:
            message = f"the server is running its maximum of {self.limit} {what}{after}; try again in {retry:g} s"
        return LimitExceededError(message, retry_after_s=retry)

    def _free(self, slot: Slot) -> None:
        with self._cond:
            if slot._freed:
                return
            slot._freed = True
            self._held.discard(slot)
            self._held_by[slot.key] -= 1
            if self._held_by[slot.key] <= 0:
                del self._held_by[slot.key]
            held = max(0.0, self.clock() - slot.started)
            self._hold_seconds = 0.8 * self._hold_seconds + 0.2 * held
            self._dispatch()
            self._cond.notify_all()

    # -- stalled readers ----------------------------------------------------------------------------

    def _watch(self) -> None:
        if self._watcher is None and self.stall_timeout_s > 0:
            with self._cond:
                if self._watcher is None:
                    self._watcher = threading.Thread(target=self._watch_loop, name="dstp-admission-watch",
                                                     daemon=True)
                    self._watcher.start()

    def _watch_loop(self) -> None:
        while not self._stopping.wait(WATCH_INTERVAL_S):
            self.reclaim_stalled()

    def reclaim_stalled(self) -> list[Slot]:
        """Take back every slot whose producer waited on its consumer too long; return them."""
        now = self.clock()
        found: list[tuple[Slot, DstpError]] = []
        with self._cond:
            for slot in list(self._held):
                waited = slot.stalled_for(now)
                if slot._blocked_since is None or slot.reclaimed is not None:
                    continue
                if waited > self.stall_timeout_s:
                    error: DstpError = CancelledError(
                        f"the transfer was stopped: the client took nothing for {waited:.0f} s "
                        f"(stall_timeout_s={self.stall_timeout_s:g}); read results as they arrive, or fetch "
                        "them to a file")
                elif now > slot.deadline:
                    error = QueryTimeoutError(
                        "the query ran longer than its time limit while its client was not reading, and was "
                        "stopped; narrow it with WHERE on coordinates, stride() or tablesample")
                else:
                    continue
                slot.reclaimed = error
                found.append((slot, error))
        for slot, error in found:
            log.info("%s of %s reclaimed: %s", slot.label or slot.what, slot.key, error.message)
            self.reclaimed += 1
            for abort in slot._aborts:
                try:
                    abort(error)
                except Exception:  # noqa: BLE001 - every abort must run, and the slot must come back
                    log.exception("aborting %s failed", slot.label or slot.what)
            self._free(slot)
        return [slot for slot, _ in found]

    def close(self) -> None:
        """Stop the watcher thread (the server is stopping)."""
        self._stopping.set()
        watcher = self._watcher
        if watcher is not None and watcher is not threading.current_thread():
            watcher.join(timeout=5.0)

    # -- what runs now ----------------------------------------------------------------------------

    def usage(self, key: str, name: str | None = None) -> Usage:
        """Return what principal ``key`` uses now and today."""
        quota = self._quotas.quota(key)
        with self._cond:
            running = self._held_by.get(key, 0)
            waiting = sum(1 for w in self._queue if w.key == key)
        return Usage(principal=name or key, running=running, waiting=waiting,
                     concurrent_limit=self._quotas.concurrency(key), bytes_today=self._quotas.bytes_today(key),
                     bytes_per_day=quota.bytes_per_day, resets_at=self._quotas.resets_at())

    def held(self) -> int:
        """Return how many slots are held now."""
        with self._cond:
            return len(self._held)

    def waiting_on_readers(self) -> dict[str, float]:
        """Return, by label, since when each slot whose producer waits on its reader has waited (clock time)."""
        with self._cond:
            return {s.label: s._blocked_since for s in self._held if s._blocked_since is not None}

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
            return self._cond.wait_for(lambda: not self._held, timeout)

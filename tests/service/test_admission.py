"""Admission: a fair queue per principal, bounded waits with a retry-after, quotas, stalled readers reclaimed.

The real Admission and Quotas, driven by a clock the tests move (no test sleeps out a timeout); the
waits of the fair queue are real but short, and each test releases what the waiter waits for.
"""

from __future__ import annotations

import threading
import time

import pytest

from clock import Clock
from dstp.errors import CancelledError, DstpError, LimitExceededError, QueryTimeoutError
from dstp.service.admission import Admission, Slot
from dstp.service.quotas import DAY_SECONDS, Quota, Quotas


def _admission(limit: int = 2, *, wait_s: float = 5.0, clock: Clock | None = None, quota: Quota = Quota(),
               stall_timeout_s: float = 30.0, max_waiting: int = 64) -> Admission:
    clock = clock or Clock()
    return Admission(limit, quotas=Quotas(quota, limit, clock), wait_s=wait_s, max_waiting=max_waiting,
                     stall_timeout_s=stall_timeout_s, clock=clock)


class Waiter(threading.Thread):
    """A request waiting for a slot on a thread of its own: ``slot`` or ``error`` once it is answered."""

    def __init__(self, admission: Admission, key: str) -> None:
        super().__init__(daemon=True)
        self.admission, self.key = admission, key
        self.slot: Slot | None = None
        self.error: DstpError | None = None
        self.start()

    def run(self) -> None:
        try:
            self.slot = self.admission.acquire(self.key, "queries")
        except DstpError as exc:
            self.error = exc


def _queued(admission: Admission, count: int) -> None:
    deadline = time.monotonic() + 10
    while sum(u.waiting for u in (admission.usage(k) for k in ("a", "b", "c"))) < count:
        assert time.monotonic() < deadline, "the requests never queued"
        time.sleep(0.005)


def test_a_freed_slot_goes_to_the_principal_holding_fewest_not_the_first_in_line() -> None:
    admission = _admission(2)
    held = [admission.acquire("a"), admission.acquire("a")]
    first = Waiter(admission, "a")  # a busy client queues first…
    _queued(admission, 1)
    second = Waiter(admission, "b")  # …then someone with nothing running
    _queued(admission, 2)
    held[0].release()
    second.join(5)
    assert second.slot is not None and second.slot.key == "b"
    assert first.slot is None and first.is_alive()  # still waiting: "a" holds one, "b" now one, no slot free
    held[1].release()
    first.join(5)
    assert first.slot is not None and first.slot.key == "a"
    for slot in (first.slot, second.slot):
        slot.release()
    assert admission.held() == 0


def test_a_bounded_wait_ends_in_resource_exhausted_with_a_retry_after() -> None:
    admission = _admission(1, wait_s=0.05)
    slot = admission.acquire("a")
    started = time.monotonic()
    with pytest.raises(LimitExceededError, match=r"maximum of 1 queries \(waited 0.05 s\)") as info:
        admission.acquire("b")
    assert time.monotonic() - started < 5
    assert info.value.retry_after_s is not None and info.value.retry_after_s >= 1
    slot.release()
    admission.acquire("b").release()  # and the queue is empty again


def test_a_full_queue_refuses_at_once() -> None:
    admission = _admission(1, wait_s=30.0, max_waiting=1)
    slot = admission.acquire("a")
    waiting = Waiter(admission, "b")
    _queued(admission, 1)
    started = time.monotonic()
    with pytest.raises(LimitExceededError, match="maximum of 1"):
        admission.acquire("c")
    assert time.monotonic() - started < 5  # not the 30 s wait
    slot.release()
    waiting.join(5)
    assert waiting.slot is not None
    waiting.slot.release()


def test_a_principal_never_holds_more_than_its_quota() -> None:
    admission = _admission(4, wait_s=0.0, quota=Quota(concurrent_queries=2))
    mine = [admission.acquire("a"), admission.acquire("a")]
    with pytest.raises(LimitExceededError, match="your maximum of 2") as info:
        admission.acquire("a")
    assert info.value.retry_after_s is not None
    theirs = admission.acquire("b")  # slots are left for everyone else
    usage = admission.usage("a", "alice").to_dict()
    assert usage["principal"] == "alice" and usage["queries"] == {"running": 2, "waiting": 0, "limit": 2}
    for slot in (*mine, theirs):
        slot.release()


def test_bytes_per_day_are_counted_refused_and_reset_at_midnight_utc() -> None:
    clock = Clock()
    clock.now = (clock.now // DAY_SECONDS) * DAY_SECONDS + 3600  # 01:00 UTC
    admission = _admission(2, clock=clock, quota=Quota(bytes_per_day=1000))
    admission.acquire("a").release(sent=600)
    admission.acquire("a").release(sent=600)  # what runs is never cut; the next request is refused
    with pytest.raises(LimitExceededError, match="1,200 bytes today") as info:
        admission.acquire("a")
    assert info.value.retry_after_s == pytest.approx(23 * 3600, abs=1)
    assert admission.usage("a").to_dict()["bytes_today"]["used"] == 1200
    admission.acquire("b").release()  # another principal's day is its own
    clock.advance(23 * 3600 + 1)
    admission.acquire("a").release()


def test_a_slot_whose_reader_stalls_is_reclaimed_and_its_abort_runs() -> None:
    clock = Clock()
    admission = _admission(1, clock=clock, stall_timeout_s=30.0, wait_s=0.0)
    slot = admission.acquire("a")
    aborted: list[DstpError] = []
    slot.on_stall(aborted.append)
    slot.blocked()
    clock.advance(29)
    assert admission.reclaim_stalled() == []
    slot.progressed()  # an ACK: the timer starts again
    clock.advance(29)
    assert admission.reclaim_stalled() == []
    clock.advance(2)
    assert admission.reclaim_stalled() == [slot]
    assert len(aborted) == 1 and isinstance(aborted[0], CancelledError) and "took nothing" in aborted[0].message
    assert admission.held() == 0
    other = admission.acquire("b")  # the slot is free at once, whatever its owner's thread does
    slot.release(sent=10)  # the owner, waking later, gives back nothing twice
    assert admission.held() == 1
    other.release()


def test_a_reader_that_keeps_up_is_never_reclaimed() -> None:
    clock = Clock()
    admission = _admission(1, clock=clock, stall_timeout_s=30.0)
    slot = admission.acquire("a")
    for _ in range(10):
        slot.blocked()
        clock.advance(20)
        slot.unblocked()
        assert admission.reclaim_stalled() == []
    clock.advance(3600)  # a slow query that produces nothing for an hour is not a stalled reader
    assert admission.reclaim_stalled() == []
    slot.release()


def test_a_producer_still_waiting_on_its_reader_past_the_time_limit_is_stopped() -> None:
    clock = Clock()
    admission = _admission(1, clock=clock, stall_timeout_s=3600.0)
    slot = admission.acquire("a")
    slot.deadline = slot.started + 10
    aborted: list[DstpError] = []
    slot.on_stall(aborted.append)
    slot.blocked()
    clock.advance(11)
    assert admission.reclaim_stalled() == [slot]
    assert isinstance(aborted[0], QueryTimeoutError)
    late: list[DstpError] = []
    slot.on_stall(late.append)  # registered after the fact: runs at once
    assert late == aborted

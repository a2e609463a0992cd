"""The one watchdog thread of every running query (dstp/query/_watch.py) interrupts each at its own deadline or
cancel, and says which; a query it no longer watches is left alone. Events, no sleeps: each wait is bounded."""

from __future__ import annotations

import threading
import time

from dstp.query._watch import Watchdog

WAIT_S = 10.0


class Con:
    """A connection as the watchdog sees it: records its interrupts."""

    def __init__(self) -> None:
        self.interrupted = threading.Event()
        self.count = 0

    def interrupt(self) -> None:
        self.count += 1
        self.interrupted.set()


def test_each_query_is_stopped_by_its_own_deadline_or_cancel() -> None:
    dog = Watchdog(interval_s=0.01)
    late, cancelled, running = Con(), Con(), Con()
    past = dog.watch(late, time.monotonic() - 1.0, threading.Event())
    stop = threading.Event()
    by_cancel = dog.watch(cancelled, time.monotonic() + 3600, stop)
    alive = dog.watch(running, time.monotonic() + 3600, threading.Event())
    assert late.interrupted.wait(WAIT_S)
    assert past.timed_out and past.cancel.is_set()
    stop.set()
    assert cancelled.interrupted.wait(WAIT_S)
    assert not by_cancel.timed_out  # a cancel is said as a cancel, not as the time limit
    # the third one, neither late nor cancelled, was looked at in every round and never interrupted
    assert running.count == 0 and not alive.timed_out
    dog.release(alive)
    assert late.count == 1 and cancelled.count == 1  # interrupted once, then no longer watched


def test_a_released_query_is_never_interrupted() -> None:
    dog = Watchdog(interval_s=0.01)
    con = Con()
    cancel = threading.Event()
    watched = dog.watch(con, time.monotonic() + 3600, cancel)
    dog.release(watched)
    cancel.set()
    other = Con()  # a second query: once it is interrupted, the watchdog has run a round after the release
    dog.watch(other, time.monotonic() - 1.0, threading.Event())
    assert other.interrupted.wait(WAIT_S)
    assert con.count == 0

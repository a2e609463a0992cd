"""A streamed partitioned query holds the coordinator's admission slot only until its tasks end — or
``query_time_limit_s``, whichever comes first: a task that never reports its end (stuck, or its report
lost) must not keep the coordinator full.

No Dask here: the futures are stand-ins with Dask's future interface, and the coordinator's timer seam
(``start_timer``) hands the overdue action to the test, which fires it itself — no waiting.
"""

from __future__ import annotations

from typing import Any, Callable

from dstp.auth import ANONYMOUS
from dstp.cluster.coordinator import ClusterQuery, Coordinator
from dstp.settings import Settings


class Future:
    def __init__(self) -> None:
        self.callbacks: list[Callable[[Any], None]] = []
        self.finished = self.cancelled = self.released = False

    def add_done_callback(self, fn: Callable[[Any], None]) -> None:
        self.callbacks.append(fn)

    def end(self) -> None:
        self.finished = True
        for fn in self.callbacks:
            fn(self)

    def done(self) -> bool:
        return self.finished or self.cancelled

    #: Like a Dask future whose client's event loop closed under it: an answer never comes, and a caller
    #: waits as long as it asked to (``waited_for``: None is for ever, which this stand-in does not do).
    unanswered = False
    waited_for: float | None = -1.0

    def result(self, timeout: float | None = None) -> Any:
        if self.unanswered:
            self.waited_for = timeout
            raise TimeoutError(f"no answer within {timeout} s")
        return type("Result", (), {"rows": 10, "bytes": 400, "seconds": 0.1})()

    def cancel(self) -> None:
        self.cancelled = True

    def release(self) -> None:
        self.released = True


class Slot:
    def __init__(self) -> None:
        self.releases = 0

    def release(self) -> None:
        self.releases += 1


class Audit:
    def __init__(self) -> None:
        self.outcomes: list[str] = []

    def record(self, event: str, query_id: str, *, outcome: str, **_: Any) -> None:
        self.outcomes.append(outcome)


class Timer:
    def __init__(self, seconds: float, action: Callable[[], None]) -> None:
        self.seconds, self.action, self.cancelled = seconds, action, False

    def cancel(self) -> None:
        self.cancelled = True


def _start(n: int) -> tuple[list[Future], Slot, Audit, Timer]:
    coordinator = Coordinator(Settings(query_time_limit_s=42.0), address="tcp://127.0.0.1:9")  # never started
    timers: list[Timer] = []
    coordinator.start_timer = lambda s, a: timers.append(Timer(s, a)) or timers[-1]  # type: ignore[method-assign]
    futures = [Future() for _ in range(n)]
    cq = ClusterQuery("q1", "select 1", ANONYMOUS, (), [], "none", 0.0, futures=list(futures))
    slot, audit = Slot(), Audit()
    service = type("Service", (), {"audit": audit})()
    coordinator._when_computed(service, cq, slot, {})  # type: ignore[arg-type]
    assert len(timers) == 1 and timers[0].seconds == 42.0
    return futures, slot, audit, timers[0]


def test_the_slot_is_given_back_when_every_task_has_ended() -> None:
    futures, slot, audit, timer = _start(3)
    futures[0].end()
    futures[1].end()
    assert slot.releases == 0  # one task still runs
    futures[2].end()
    assert slot.releases == 1 and audit.outcomes == ["ok"] and timer.cancelled
    assert all(f.released for f in futures)
    timer.action()  # a timer that fires anyway changes nothing
    assert slot.releases == 1 and audit.outcomes == ["ok"]


def test_a_task_that_never_reports_its_end_holds_the_slot_only_until_the_time_limit() -> None:
    futures, slot, audit, timer = _start(3)
    futures[0].end()
    futures[1].end()
    timer.action()  # query_time_limit_s after Query: the third task has still not ended
    assert slot.releases == 1 and audit.outcomes == ["timeout"]
    assert futures[2].cancelled and futures[2].released
    futures[2].end()  # its late report changes nothing
    assert slot.releases == 1 and audit.outcomes == ["timeout"]


def test_counts_that_never_come_end_the_wait_and_are_audited_as_an_error() -> None:
    # A server stopping as the last task ends: the Dask client's loop closes under the callback.
    futures, slot, audit, timer = _start(2)
    futures[1].unanswered = True
    futures[0].end()
    futures[1].end()  # the callback runs here, in the test's thread
    assert futures[1].waited_for is not None and futures[1].waited_for > 0  # a bounded wait, not for ever
    assert slot.releases == 1 and audit.outcomes == ["error"] and timer.cancelled

"""Following the catalog's change feed across dropped connections and server restarts (``Client.watch``).

A ``WatchCatalog`` stream ends when the server stops or the connection drops. :func:`follow` then connects again,
waiting ``first_s``, then twice as long each time up to ``most_s`` (:class:`Reconnect`), and asks for the changes
after the last one it delivered (``since``), in the epoch of its first answer. So no change is delivered twice
(a change at or below the last delivered ``seq`` is dropped) and none is skipped: the server's first answer
says whether it still holds every change after that point (``complete``); when it does not — its index was
rebuilt since, or more than the changes it keeps happened meanwhile — :class:`~dstp.errors.ChangesLostError`
says so, and the reader lists the catalog again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterator

from dstp.errors import CancelledError, ChangesLostError, ServerUnreachableError

if TYPE_CHECKING:
    from dstp.catalog.changes import Change
    from dstp.client._rpc import Rpc

__all__ = ["Reconnect", "follow"]


@dataclass(frozen=True, slots=True)
class Reconnect:
    """How :meth:`Client.watch <dstp.client.Client.watch>` connects again after its stream broke.

    It waits ``first_s``, then twice as long at each failed attempt, at most ``most_s``, then up to ``connect_s`` for
    the connection; it gives up (raising the last error) after ``attempts`` failed attempts in a row (None: never).
    ``wait(seconds)`` is how it waits: a program (or a test) may pass its own.
    """

    first_s: float = 0.5
    most_s: float = 30.0
    attempts: int | None = None
    wait: Callable[[float], None] = time.sleep
    #: After each wait, how long an attempt waits for the connection to the server to be made (it is made as soon
    #: as the server listens; until then an attempt fails).
    connect_s: float = 20.0

    def delay(self, failures: int) -> float:
        """Return how long to wait before the attempt after ``failures`` failed ones in a row (from 1)."""
        return min(self.most_s, self.first_s * 2.0 ** (failures - 1))


#: What a broken stream raises: the server went away (UNAVAILABLE), or it cancelled the stream as it stopped.
_DROPPED = (ServerUnreachableError, CancelledError)


def follow(rpc: "Rpc", since: int | None, epoch: str | None, reconnect: Reconnect | None) -> Iterator["Change"]:
    """Yield each change after catalog version ``since`` (None: from now on) as the server publishes it, connecting
    again as ``reconnect`` says when the stream breaks (None: the error is raised, as before)."""
    from dstp.client._codec import change_from_pb

    last = since  # the catalog version every change up to which was delivered (or, from now on, existed)
    failures = 0
    while True:
        try:
            messages = rpc.watch(-1 if last is None else last, epoch or "", follow=True)
            try:
                head = next(messages)  # the stream's first message: epoch, version, whether it holds all after `last`
                if last is not None and (not head.complete or (epoch and head.epoch != epoch)):
                    raise ChangesLostError(
                        f"the change feed cannot be followed on after catalog version {last}"
                        + (f" of epoch {epoch}" if epoch else "") + ": the server "
                        + ("rebuilt its catalog index since (its epoch is now "
                           f"{head.epoch})" if epoch and head.epoch != epoch else
                           "no longer keeps every change after it") +
                        f"; list the catalog again, then watch from its version {head.version}")
                epoch = head.epoch
                if last is None:
                    last = head.version  # from now on: a reconnection asks for what came after this
                failures = 0
                for m in messages:
                    change = change_from_pb(m.change)
                    if change.seq <= last:
                        continue  # delivered before the stream broke
                    last = change.seq
                    yield change
            finally:
                messages.close()
            dropped: Exception = ServerUnreachableError("the server ended the change feed's stream")
        except _DROPPED as exc:
            dropped = exc
        if reconnect is None or rpc.closed:  # the client was closed: the watch ends, as its stream did
            raise dropped
        failures += 1
        if reconnect.attempts is not None and failures > reconnect.attempts:
            raise dropped
        reconnect.wait(reconnect.delay(failures))
        if rpc.closed:
            raise dropped
        rpc.ready(reconnect.connect_s)

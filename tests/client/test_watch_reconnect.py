"""Client.watch follows the change feed across a server restart: every change once, in order, none skipped.

A real server is stopped and started again on the same port, with the same state folder (its catalog index, so
the same epoch), while a client watches from another thread. Files published before the stop, while the server is
down (the restarted server's first look publishes them) and after it are each delivered once, and in catalog
order. The waits between attempts go through ``Reconnect.wait``, the public seam: the test's own records each
delay and starts the server again — no timer is waited out. A server whose index was rebuilt meanwhile (another
epoch) cannot say what the watcher missed: ChangesLostError, naming the version to resume from.
"""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

import dstp
from builders import daily
from store_servers import free_port

from dstp.catalog.index import index_path
from dstp.catalog.publish import publish
from dstp.client import Reconnect
from dstp.errors import ChangesLostError, ServerUnreachableError
from dstp.server import DstpServer
from dstp.settings import Settings

#: The folder of the tests' helpers (builders), for the process that writes a day.
TESTS = str(Path(__file__).resolve().parents[1])
#: Longest the test waits for an event another thread delivers (never reached when the code works).
WAIT_S = 60.0


class Restarting:
    """A server on a fixed port that the test stops and starts again (same settings, same state folder)."""

    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path / "root"
        self.folder = self.root / "daily"
        publish([daily(self.folder / f"d_{d:04d}.nc", d) for d in range(2)], "daily")
        self.settings = Settings(catalog_root=self.root, port=free_port(), http_port=-1, data_port=-1, udt_port=-1,
                                 state_dir=tmp_path / "state", catalog_settle_s=0.0, catalog_watch=False,
                                 catalog_poll_s=0.0, catalog_rescan_s=0.0, allow_anonymous="true")
        self.server: DstpServer | None = None
        #: Set once a stop has finished (the port is free): a restart from the watcher's thread waits for it.
        self.stopped = threading.Event()
        self.stopped.set()  # none runs yet

    def start(self) -> DstpServer:
        assert self.stopped.wait(WAIT_S)
        self.stopped.clear()
        server = DstpServer(self.settings)
        server.__enter__()
        self.server = server
        return server

    def stop(self) -> None:
        server, self.server = self.server, None
        assert server is not None
        server.__exit__(None, None, None)
        self.stopped.set()

    def add_day(self, day: int) -> None:
        """Write a day in a process of its own: netCDF-C is not thread-safe, and in this process the server's
        threads may be reading or closing files (a restart from the watcher's thread raced a stop: a segfault)."""
        code = f"import sys; sys.path.insert(0, {TESTS!r}); from pathlib import Path; from builders import daily; " \
               f"daily(Path({str(self.folder / f'd_{day:04d}.nc')!r}), {day})"
        subprocess.run([sys.executable, "-c", code], check=True, timeout=WAIT_S)

    def refresh(self) -> list[Any]:
        assert self.server is not None and self.server.catalog is not None
        return self.server.catalog.refresh()


@pytest.fixture()
def restarting(tmp_path: Path) -> Iterator[Restarting]:
    served = Restarting(tmp_path)
    served.start()
    yield served
    if served.server is not None:
        served.stop()


def watching(client: dstp.Client, reconnect: Reconnect, since: int | None = None) -> tuple[queue.Queue[Any],
                                                                                           threading.Thread]:
    """Watch in a thread; every change (or the error that ended the watch) goes into the queue."""
    found: queue.Queue[Any] = queue.Queue()

    def run() -> None:
        try:
            for change in client.watch(since=since, reconnect=reconnect):
                found.put(change)
        except Exception as exc:  # noqa: BLE001 - handed to the test
            found.put(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return found, thread


def waiter(on_call: Callable[[int], None]) -> tuple[Reconnect, list[float]]:
    """A Reconnect whose waits are recorded, and call ``on_call(n)`` (the n-th wait, from 1) instead of sleeping."""
    delays: list[float] = []

    def wait(seconds: float) -> None:
        delays.append(seconds)
        on_call(len(delays))

    return Reconnect(first_s=0.5, most_s=4.0, wait=wait, connect_s=WAIT_S), delays


def test_watch_goes_on_after_a_restart_with_every_change_once(restarting: Restarting) -> None:
    restarted = threading.Event()

    def restart(n: int) -> None:
        if n == 1:  # the stream broke: the server is down; a day is published while it is, then it starts again
            restarting.add_day(2)
            restarting.start()
            restarted.set()
        else:  # the second break: the reader stops watching
            raise Stopped()

    reconnect, delays = waiter(restart)
    port = restarting.settings.port
    with dstp.connect(f"127.0.0.1:{port}") as client:
        found, thread = watching(client, reconnect, since=0)
        first = found.get(timeout=WAIT_S)  # the dataset's first publication (seq 1), kept in the index
        restarting.add_day(3)
        [published] = restarting.refresh()
        second = found.get(timeout=WAIT_S)
        assert (first.seq, second.seq) == (1, published.seq) and second.files_added == ("daily/d_0003.nc",)
        restarting.stop()
        assert restarted.wait(WAIT_S)
        third = found.get(timeout=WAIT_S)  # published by the restarted server's first look
        assert third.seq == second.seq + 1 and third.files_added == ("daily/d_0002.nc",)
        restarting.add_day(4)
        [later] = restarting.refresh()
        fourth = found.get(timeout=WAIT_S)
        assert fourth.seq == later.seq == third.seq + 1 and fourth.files_added == ("daily/d_0004.nc",)
        assert found.empty()  # none twice
        restarting.stop()
        assert isinstance(found.get(timeout=WAIT_S), Stopped) and found.empty()
        assert delays == [0.5, 0.5]  # the first wait after each break: a connection made starts the backoff again
    thread.join(WAIT_S)
    assert not thread.is_alive()


class Stopped(Exception):
    """Raised by a test's wait: the reader stops watching."""


def test_a_server_whose_index_was_rebuilt_says_the_changes_are_lost(restarting: Restarting) -> None:
    def rebuilt(n: int) -> None:
        if n == 1:  # while the server is down its index is deleted: it starts a new epoch
            index_path(restarting.settings.state_dir, restarting.root).unlink()
            restarting.start()

    reconnect, _ = waiter(rebuilt)
    with dstp.connect(f"127.0.0.1:{restarting.settings.port}") as client:
        found, thread = watching(client, reconnect, since=0)
        assert found.get(timeout=WAIT_S).seq == 1
        restarting.stop()
        error = found.get(timeout=WAIT_S)
        assert isinstance(error, ChangesLostError), error
        assert "after catalog version 1 of epoch" in str(error) and "rebuilt its catalog index" in str(error)
        assert "list the catalog again" in str(error)
    thread.join(WAIT_S)


def test_without_reconnect_a_restart_ends_the_watch_with_the_error(restarting: Restarting) -> None:
    with dstp.connect(f"127.0.0.1:{restarting.settings.port}") as client:
        found: queue.Queue[Any] = queue.Queue()

        def run() -> None:
            try:
                for change in client.watch(since=0, reconnect=None):
                    found.put(change)
            except Exception as exc:  # noqa: BLE001
                found.put(exc)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        assert found.get(timeout=WAIT_S).seq == 1
        restarting.stop()
        assert isinstance(found.get(timeout=WAIT_S), ServerUnreachableError)
    thread.join(WAIT_S)


def test_reconnect_waits_double_up_to_the_most() -> None:
    r = Reconnect(first_s=0.5, most_s=30.0)
    assert [r.delay(k) for k in range(1, 9)] == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]

"""Data connections before their HELLO, read by one thread with a selector — no thread per connection.

A data channel's TCP connections spend their first moments sending a HELLO
(and a kept connection, between transfers, waiting for the next one). Holding a
thread for each made a flood cheap: 32 source addresses x 16 pending HELLOs took
the server from 55 to 482 threads and filled the channel's only connection cap,
and 30 of 80 honest striped transfers failed with "too many data connections".
Here one thread (:class:`HelloReader`) watches all of them with
``selectors``; a connection costs a socket and a small buffer until its whole
HELLO has arrived, and only then is handed to the channel (``on_hello``), which
gives it a thread and one of its own slots — capacity a flood of unfinished
HELLOs never touches.

* **One deadline for the whole HELLO** (``hello_timeout``, by ``timer``): past it
  the connection gets an ERROR frame and is closed, however its bytes trickled.
* **Caps**: ``max_pending_per_address`` unfinished HELLOs per source address (a
  new one beyond closes that address's oldest) and ``max_pending`` in all (a new
  one beyond closes the oldest of the address holding the most, so a flood from
  many addresses evicts itself before anyone whose HELLO takes a round trip).
* **Frames are checked from their header**: anything but a HELLO, or a HELLO
  longer than a control frame, is refused before its payload is read.
* **Kept connections** (``add_idle``) wait here too, without a deadline (the
  channel expires them); their first bytes make them pending again, if the
  channel still counts them idle (``on_wake``).

Refusals send their ERROR frame without blocking, then read and drop what the
client still sends for at most ``DRAIN_S`` before closing (closing with input
unread makes the kernel reset the connection, and the client would see the
reset rather than the ERROR).
"""

from __future__ import annotations

import collections
import logging
import selectors
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from dstp.errors import DstpError, ProtocolError
from dstp.transport.wire.frames import HEADER, MAX_CONTROL_PAYLOAD, Conn, Kind, control_payload, recv_header, send_frame

__all__ = ["HelloReader", "selectable"]

log = logging.getLogger("dstp.transport")

#: How often deadlines are checked (real seconds).
TICK_S = 0.1
#: How long a refused connection's remaining input is read and dropped before it is closed (by timer).
DRAIN_S = 0.5


def selectable(conn: Conn) -> socket.socket | None:
    """Return the socket under ``conn`` if a selector can watch it (TCP), else None (UDT, in-memory)."""
    sock = getattr(conn, "sock", None)
    return sock if isinstance(sock, socket.socket) else None


@dataclass(eq=False)
class _Waiting:
    conn: Conn
    sock: socket.socket
    peer: str
    address: str
    since: float
    state: str = "hello"  # "hello": reading a HELLO; "idle": kept, waiting for one; "draining": refused
    buffer: bytearray = field(default_factory=bytearray)
    need: int = HEADER.size


class _Bytes:
    """What :func:`recv_header` reads a header from: bytes already received."""

    def __init__(self, data: bytes) -> None:
        self.data = memoryview(data)

    def recv_into(self, view: memoryview) -> int:
        n = min(view.nbytes, self.data.nbytes)
        view[:n] = self.data[:n]
        self.data = self.data[n:]
        return n


class HelloReader:
    """Reads the HELLOs of one data channel's TCP connections on one thread (see the module docstring)."""

    def __init__(self, name: str, *, on_hello: Callable[[Conn, str, bytes], None], on_wake: Callable[[Conn], bool],
                 on_gone: Callable[[Conn], None], hello_timeout: float, max_pending: int,
                 max_pending_per_address: int, timer: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self.on_hello, self.on_wake, self.on_gone = on_hello, on_wake, on_gone
        self.hello_timeout = hello_timeout
        self.max_pending = max(1, max_pending)
        self.max_pending_per_address = max(1, max_pending_per_address)
        self.timer = timer
        self._selector = selectors.DefaultSelector()
        self._waiting: dict[Conn, _Waiting] = {}  # only the reader thread touches these two
        self._pending: collections.OrderedDict[Conn, _Waiting] = collections.OrderedDict()  # oldest first
        self._ops: collections.deque[tuple[str, Conn, str, float]] = collections.deque()  # (what, conn, peer, when)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        #: Unfinished HELLOs closed for a cap, refused at their deadline, refused for what they sent.
        self.evicted = 0
        self.hello_timeouts = 0
        self.refused = 0

    # -- from other threads ------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"dstp-{self.name}-hellos", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._poke()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        for waiting in list(self._waiting.values()):
            waiting.conn.close()
        self._close_queued()  # handed over after the thread's last look
        self._waiting.clear()
        self._pending.clear()
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()

    def add(self, conn: Conn, peer: str) -> None:
        """Watch a new connection until its HELLO is whole."""
        self._ops.append(("hello", conn, peer, self.timer()))  # its deadline runs from its arrival
        self._poke()

    def add_idle(self, conn: Conn, peer: str) -> None:
        """Watch a kept connection until its next HELLO begins (or it closes)."""
        self._ops.append(("idle", conn, peer, self.timer()))
        self._poke()

    def drop(self, conn: Conn) -> None:
        """Close a connection watched here (a kept one the channel expired or evicted)."""
        self._ops.append(("drop", conn, "", 0.0))
        self._poke()

    def refuse(self, conn: Conn, peer: str, error: DstpError) -> None:
        """Refuse a connection ``on_hello`` cannot take (call it from ``on_hello``: the reader thread)."""
        sock = selectable(conn)
        assert sock is not None
        waiting = _Waiting(conn, sock, peer, peer.rsplit(":", 1)[0], self.timer())
        try:
            sock.setblocking(False)
            self._selector.register(sock, selectors.EVENT_READ, waiting)
        except (OSError, ValueError, KeyError):
            conn.close()
            return
        self._waiting[conn] = waiting
        self._refuse(waiting, error)

    def pending(self) -> int:
        """Return how many connections are still sending their HELLO."""
        return len(self._pending)

    def _close_queued(self) -> None:
        while True:
            try:
                self._ops.popleft()[1].close()
            except IndexError:
                return

    def _poke(self) -> None:
        if self._stopped.is_set():  # nobody will read the queue again
            self._close_queued()
            return
        try:
            self._wake_w.send(b"\0")
        except OSError:  # full (the reader is already awake) or closed (stopping)
            pass

    # -- the reader thread ----------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                events = self._selector.select(TICK_S)
            except OSError:
                if self._stopped.is_set():
                    return
                raise
            for key, _ in events:
                if key.data is None:
                    try:
                        while self._wake_r.recv(4096):
                            pass
                    except OSError:
                        pass
                else:
                    self._readable(key.data)
            self._apply_ops()
            self._expire()

    def _apply_ops(self) -> None:
        while self._ops:
            op, conn, peer, since = self._ops.popleft()
            if op == "drop":
                waiting = self._waiting.get(conn)
                if waiting is not None:
                    self._close(waiting)
                else:
                    conn.close()
                continue
            sock = selectable(conn)
            assert sock is not None
            waiting = _Waiting(conn, sock, peer, peer.rsplit(":", 1)[0], since, state=op)
            try:
                sock.setblocking(False)
                self._selector.register(sock, selectors.EVENT_READ, waiting)
            except (OSError, ValueError, KeyError):  # closed meanwhile
                conn.close()
                continue
            self._waiting[conn] = waiting
            if op == "hello":
                self._admit(waiting)

    def _admit(self, waiting: _Waiting) -> None:
        """Count ``waiting`` pending; close the oldest of its address, or of the biggest holder, past a cap."""
        same = [w for w in self._pending.values() if w.address == waiting.address]
        victim = same[0] if len(same) >= self.max_pending_per_address else None
        if victim is None and len(self._pending) >= self.max_pending:
            holders = collections.Counter(w.address for w in self._pending.values())
            biggest = max(holders, key=lambda a: holders[a])
            victim = next(w for w in self._pending.values() if w.address == biggest)
        if victim is not None:
            self.evicted += 1
            self._close(victim)
        self._pending[waiting.conn] = waiting

    def _readable(self, waiting: _Waiting) -> None:
        want = 65536 if waiting.state == "draining" else \
            HEADER.size if waiting.state == "idle" else waiting.need - len(waiting.buffer)
        try:
            data = waiting.sock.recv(want)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:  # the client closed (or broke) it
            if waiting.state == "idle":
                self.on_gone(waiting.conn)
            self._close(waiting)
            return
        if waiting.state == "draining":
            return
        if waiting.state == "idle":
            if not self.on_wake(waiting.conn):  # the channel closed it meanwhile (expired, over a cap)
                self._close(waiting)
                return
            waiting.state, waiting.since = "hello", self.timer()
            self._admit(waiting)
        if self.timer() - waiting.since > self.hello_timeout:  # one deadline, however the bytes trickle in
            self.hello_timeouts += 1
            self._refuse(waiting, ProtocolError(f"no whole HELLO within {self.hello_timeout:g} s"))
            return
        waiting.buffer += data
        if waiting.need == HEADER.size and len(waiting.buffer) == HEADER.size:
            try:
                header = recv_header(_Bytes(bytes(waiting.buffer)), max_payload=MAX_CONTROL_PAYLOAD)
                assert header is not None
                if header.kind != Kind.HELLO:  # refused before its payload is read
                    raise ProtocolError(f"expected HELLO, got {header.kind.name}")
            except DstpError as exc:
                self._refuse(waiting, exc)
                return
            waiting.need = HEADER.size + header.length
        if len(waiting.buffer) >= waiting.need:
            self._forget(waiting)
            waiting.sock.setblocking(True)
            self.on_hello(waiting.conn, waiting.peer, bytes(waiting.buffer))

    def _expire(self) -> None:
        now = self.timer()
        for waiting in list(self._waiting.values()):
            if waiting.state == "hello" and now - waiting.since > self.hello_timeout:
                self.hello_timeouts += 1
                self._refuse(waiting, ProtocolError(f"no whole HELLO within {self.hello_timeout:g} s"))
            elif waiting.state == "draining" and now - waiting.since > DRAIN_S:
                self._close(waiting)

    def _refuse(self, waiting: _Waiting, error: DstpError) -> None:
        """Send an ERROR frame without blocking, stop writing, and drop what still comes for DRAIN_S."""
        log.info("%s channel: refused %s: %s", self.name, waiting.peer, error.message)
        self.refused += 1
        self._pending.pop(waiting.conn, None)
        try:
            send_frame(waiting.conn, Kind.ERROR, 0, 0, 0, control_payload(
                {"code": error.code, "status": error.grpc_status, "message": error.message}))
            waiting.sock.shutdown(socket.SHUT_WR)
        except (DstpError, OSError):
            self._close(waiting)
            return
        waiting.state, waiting.since = "draining", self.timer()

    def _forget(self, waiting: _Waiting) -> None:
        self._pending.pop(waiting.conn, None)
        self._waiting.pop(waiting.conn, None)
        try:
            self._selector.unregister(waiting.sock)
        except (KeyError, ValueError, OSError):
            pass

    def _close(self, waiting: _Waiting) -> None:
        self._forget(waiting)
        waiting.conn.close()

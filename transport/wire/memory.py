"""In-process pipes: the real frames, transfers and receiver with no socket.

    listener = MemoryListener()                                   # dstp.transport.server.listeners
    channel_server = DataChannelServer("striped", listener, service.open_source)   # as over TCP
    channel_server.start()
    transfer = MemoryChannel(listener).open(ticket, streams=4)    # dstp.transport.client.channels

No socket and no port: each stripe is a :func:`pipe` — two bounded byte
queues, one per direction — so a transfer exercises exactly the code a TCP or
UDT transfer runs (HELLO, dealing, ACKs, resume, END) in milliseconds. The
channel conformance suite runs against it; so can anything that wants a data
channel without a network.

A pipe behaves like a stream socket where it matters: ``send_parts`` blocks
while the peer's queue is full (so the server's window and the client's ACKs
are exercised), ``close`` lets the peer read what was sent and then end of
stream, ``abort`` is a reset (both sides' next read or write fails), and a
read timeout raises TimeoutError.
"""

from __future__ import annotations

import threading

from dstp.errors import TransportError

__all__ = ["DEFAULT_CAPACITY", "MemoryConn", "pipe"]

#: Bytes a pipe holds before its writer waits (a socket's buffer, roughly).
DEFAULT_CAPACITY = 1 * 2**20


class _Queue:
    """One direction of a pipe: a bounded byte queue."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, capacity)
        self.data = bytearray()
        self.cond = threading.Condition()
        self.closed = False  # no more writes; reads drain what is left, then end of stream
        self.reset = False  # broken: reads and writes fail at once

    def write(self, views: list[memoryview]) -> None:
        for view in views:
            position = 0
            while position < view.nbytes:
                with self.cond:
                    while len(self.data) >= self.capacity and not (self.closed or self.reset):
                        self.cond.wait()
                    if self.reset or self.closed:
                        raise TransportError("in-memory data connection lost while sending: broken pipe")
                    take = min(view.nbytes - position, self.capacity - len(self.data))
                    self.data += view[position:position + take]
                    position += take
                    self.cond.notify_all()

    def read_into(self, view: memoryview, timeout: float | None) -> int:
        with self.cond:
            if not self.cond.wait_for(lambda: self.data or self.closed or self.reset, timeout):
                raise TimeoutError("in-memory receive timed out")
            if self.reset:
                raise TransportError("in-memory data connection lost while receiving: connection reset")
            n = min(view.nbytes, len(self.data))
            if n:
                view[:n] = self.data[:n]
                del self.data[:n]
                self.cond.notify_all()
            return n

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def break_(self) -> None:
        with self.cond:
            self.reset = True
            self.data.clear()
            self.cond.notify_all()


class MemoryConn:
    """One end of an in-memory pipe, speaking frames like a socket (the channel's ``Conn``)."""

    def __init__(self, incoming: _Queue, outgoing: _Queue) -> None:
        self._in = incoming
        self._out = outgoing
        self._timeout: float | None = None

    def send_parts(self, parts: list[memoryview | bytes]) -> None:
        self._out.write([memoryview(p) for p in parts])

    def recv_into(self, view: memoryview) -> int:
        return self._in.read_into(view, self._timeout)

    def settimeout(self, seconds: float | None) -> None:
        self._timeout = seconds

    def close(self) -> None:
        """Stop: the peer reads what was sent, then end of stream; a read blocked here returns 0."""
        self._out.close()
        self._in.close()

    def abort(self) -> None:
        """Reset the pipe: both ends' next read or write fails, as after a TCP reset."""
        self._out.break_()
        self._in.break_()


def pipe(capacity: int = DEFAULT_CAPACITY) -> tuple[MemoryConn, MemoryConn]:
    """Return the two connected ends of a new in-memory pipe."""
    forth, back = _Queue(capacity), _Queue(capacity)
    return MemoryConn(back, forth), MemoryConn(forth, back)

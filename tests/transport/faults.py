"""Faults injected through public seams: connections that misbehave, on either side of a data channel.

* :class:`FaultyChannel` wraps a client's :class:`~dstp.transport.client.channels.DataChannel`
  (any of them: TCP, UDT, in memory) and spoils the bytes one stripe receives —
  a reset, a flipped bit, a stream cut short — like tests/transport/proxy.py does
  on a real TCP path. ``dstp.Client(..., wrap_channel=...)`` takes one too.
* :class:`WrappedChannel` passes every connection of a channel through a
  wrapper of the test's own (a gate that holds it, say).
* :class:`FaultyListener` wraps a channel server's listener and spoils what the
  server sends: it resets a stripe just before a given message goes out, or
  corrupts that message's payload on the wire.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from dstp.errors import TransportError
from dstp.transport.client.channels import DataChannel, StripedChannel
from dstp.transport.wire.frames import HEADER, SEALED, Conn, Kind


@dataclass
class Fault:
    """What to do to the bytes a stripe receives: the ``stripe``'s first connection, or ``every_connection``."""

    stripe: int = 0
    every_connection: bool = False
    abort_at: int | None = None  # reset the connection once this many bytes arrived
    flip_at: int | None = None  # flip one bit of the byte at this position
    cut_at: int | None = None  # end the stream after this many bytes, as if the server had closed it
    #: What happened: "abort", "flip", "cut", one entry each time.
    fired: list[str] = field(default_factory=list)


class _ReceivingFault:
    """A client connection applying ``fault`` to what it receives."""

    def __init__(self, inner: Conn, fault: Fault) -> None:
        self.inner = inner
        self.fault = fault
        self.position = 0
        self.broken = False

    def recv_into(self, view: memoryview) -> int:
        fault = self.fault
        if self.broken:
            raise TransportError("data connection reset (injected fault)")
        if fault.cut_at is not None and self.position >= fault.cut_at:
            fault.fired.append("cut")
            self.inner.close()
            return 0
        limit = view.nbytes
        for trigger in (fault.abort_at, fault.cut_at):  # stop exactly at a trigger
            if trigger is not None and self.position < trigger:
                limit = min(limit, trigger - self.position)
        n = self.inner.recv_into(view[:limit])
        start, self.position = self.position, self.position + n
        if fault.flip_at is not None and start <= fault.flip_at < self.position:
            view[fault.flip_at - start] ^= 0x10
            fault.fired.append("flip")
        if fault.abort_at is not None and start < fault.abort_at <= self.position:
            fault.fired.append("abort")
            self.broken = True
            getattr(self.inner, "abort", self.inner.close)()
        return n

    def send_parts(self, parts: list[memoryview | bytes]) -> None:
        if self.broken:
            raise TransportError("data connection reset (injected fault)")
        self.inner.send_parts(parts)

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class FaultyChannel(StripedChannel):
    """A data channel whose stripes receive through ``fault`` (the wrapped channel makes the connections)."""

    def __init__(self, inner: DataChannel, fault: Fault) -> None:
        super().__init__(**getattr(inner, "receiver_options", {}))
        self.inner = inner
        self.fault = fault
        self._seen: set[int] = set()
        self._lock = threading.Lock()

    def connect(self, stripe: int) -> Conn:
        conn = self.inner.connect(stripe)
        with self._lock:
            first = stripe not in self._seen
            self._seen.add(stripe)
        if self.fault.every_connection or (first and stripe == self.fault.stripe):
            return _ReceivingFault(conn, self.fault)
        return conn


class WrappedChannel(StripedChannel):
    """A data channel whose every connection goes through ``wrap`` (the wrapped channel makes them)."""

    def __init__(self, inner: DataChannel, wrap: Callable[[Conn], Any]) -> None:
        super().__init__()
        self.inner, self.wrap = inner, wrap

    def connect(self, stripe: int) -> Any:
        return self.wrap(self.inner.connect(stripe))


@dataclass
class SendFault:
    """What to do when the server is about to send DATA message ``sequence`` (on whichever stripe)."""

    sequence: int
    action: str  # "abort": reset that stripe first; "corrupt": flip a payload byte on the wire
    #: The stripes it happened on.
    fired: list[int] = field(default_factory=list)


class _SendingFault:
    """A server connection applying its listener's fault to what it sends."""

    def __init__(self, inner: Conn, listener: "FaultyListener") -> None:
        self.inner = inner
        self.listener = listener

    def send_parts(self, parts: list[memoryview | bytes]) -> None:
        fault = self.listener.fault
        head = bytes(parts[0]) if parts else b""
        if fault is not None and len(head) == HEADER.size:
            _, _, kind, stripe, sequence, _, _, _ = HEADER.unpack(head)
            if kind & ~SEALED == Kind.DATA and sequence == fault.sequence and self.listener.claim(fault, stripe):
                if fault.action == "abort":
                    getattr(self.inner, "abort", self.inner.close)()
                else:
                    wire = bytearray(b"".join(bytes(memoryview(p)) for p in parts[1:]))
                    wire[len(wire) // 2] ^= 0x01
                    parts = [parts[0], memoryview(wire)]
        self.inner.send_parts(parts)

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class FaultyListener:
    """A channel server's listener whose connections send through ``fault`` (set it per test; fires once)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.fault: SendFault | None = None
        #: Called when the server configures a connection, i.e. between a HELLO's redemption and its attach.
        self.configuring: Any = None
        self._lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        return str(self.inner.endpoint)

    def claim(self, fault: SendFault, stripe: int) -> bool:
        """Return True the first time ``fault`` is due, recording the stripe (it fires once)."""
        with self._lock:
            if fault.fired:
                return False
            fault.fired.append(stripe)
            return True

    def accept(self) -> tuple[Any, str]:
        conn, peer = self.inner.accept()
        return _SendingFault(conn, self), peer

    def configure(self, conn: Any, options: dict[str, Any]) -> None:
        hook = self.configuring
        if hook is not None:
            hook()
        self.inner.configure(getattr(conn, "inner", conn), options)

    def close(self) -> None:
        self.inner.close()

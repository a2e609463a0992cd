"""The client end of a data channel: open a ticket's transfer, receive its messages, close.

    channel = TcpChannel(host, port)           # or UdtChannel(host, port, rtt_s=…), MemoryChannel(listener)
    transfer = channel.open(ticket, streams=4, key=offer.key, cipher=offer.cipher)  # HELLO sent on every stripe
    for sequence, offset, payload in transfer.messages():   # in order; ACKs as it goes
        ...                                                 # (a sink takes file blocks in place)
    transfer.summary()                          # the server's account and what arrived
    transfer.close()                            # early: stops the transfer (messages() ends it too)

Every implementation runs the same frames, HELLO/ACK/resume protocol and
receiver (:mod:`dstp.transport.wire.frames`, :mod:`dstp.transport.client.receiver`); what
differs is only ``connect`` — how one stripe's connection is made: a TCP
socket (:class:`TcpChannel`), a UDT socket
(:class:`~dstp.transport.client.udt_channel.UdtChannel`) or a pair of in-process pipes
(:class:`MemoryChannel`). A channel that wraps
another's connections — to inject faults, count bytes, go through a proxy —
subclasses :class:`StripedChannel` and overrides ``connect``.

A channel given a :class:`~dstp.transport.client.pool.ConnectionPool` keeps its
stripes warm between transfers: they come from the pool under
``(*pool_scope, cipher)`` and go back to it after a clean end (the server
permitting), so the next transfer to the same server starts on connections
whose congestion window and RTT estimate are already grown.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable
from typing import Any, Protocol

from dstp.transport.client.pool import ConnectionPool
from dstp.transport.client.receiver import MessageSink, StripedReceiver
from dstp.transport.wire.frames import Conn
from dstp.transport.wire.memory import DEFAULT_CAPACITY, MemoryConn, pipe
from dstp.transport.wire.tcp import TcpConn, connect

__all__ = ["Arrivals", "DataChannel", "MemoryChannel", "StripedChannel", "TcpChannel"]


class DataChannel(Protocol):
    """Where a ticket's messages come from on the client side."""

    def connect(self, stripe: int) -> Conn:
        """Return a new connection for ``stripe`` (its HELLO not yet sent)."""

    def open(self, ticket: bytes, streams: int, *, sink: MessageSink | None = None, key: bytes = b"",
             cipher: str = "") -> StripedReceiver:
        """Return the started transfer of ``ticket`` over ``streams`` stripes.

        ``key`` is the offer's ticket key (every HELLO proves it), ``cipher`` the offer's sealing ("" plaintext).
        """


class StripedChannel:
    """A data channel made of stripes: ``open`` over ``connect``, which subclasses provide.

    ``receiver_options`` go to every transfer's :class:`StripedReceiver`
    (``max_reconnects``, ``stall_timeout``, ``ack_every_bytes``). With a
    ``pool`` the stripes are kept between transfers (the module docstring);
    ``pool_scope`` says what a kept connection is good for (its server and
    socket options) and is set by the subclass that knows.
    """

    #: What a kept connection of this channel is good for; the transfer's cipher is added to make the key.
    pool_scope: tuple[Hashable, ...] = ()

    def __init__(self, *, pool: ConnectionPool | None = None, **receiver_options: Any) -> None:
        self.pool = pool
        self.receiver_options = receiver_options

    def connect(self, stripe: int) -> Conn:
        raise NotImplementedError

    def open(self, ticket: bytes, streams: int, *, sink: MessageSink | None = None, key: bytes = b"",
             cipher: str = "") -> StripedReceiver:
        receiver = StripedReceiver(ticket, streams, self.connect, sink=sink, key=key, cipher=cipher,
                                   pool=self.pool, pool_key=self.pool_key(cipher), **self.receiver_options)
        receiver.start()
        return receiver

    def pool_key(self, cipher: str = "") -> tuple[Hashable, ...]:
        """Return the key this channel's kept connections go under for a transfer sealed with ``cipher``."""
        return (*self.pool_scope, cipher)


class TcpChannel(StripedChannel):
    """Striped TCP: each stripe its own connection to ``host:port`` (buffers set before connecting)."""

    def __init__(self, host: str, port: int, *, timeout: float = 10.0, buffer_bytes: int = 0,
                 pool: ConnectionPool | None = None, **receiver_options: object) -> None:
        super().__init__(pool=pool, **receiver_options)
        self.host, self.port = host, port
        self.timeout = timeout
        self.buffer_bytes = buffer_bytes
        self.pool_scope = ("striped", host, port, buffer_bytes)

    def connect(self, stripe: int) -> TcpConn:
        return connect(self.host, self.port, timeout=self.timeout, buffer_bytes=self.buffer_bytes)


class Arrivals(Protocol):
    """Where a :class:`MemoryChannel`'s pipes arrive: a server's ``MemoryListener`` (never imported here)."""

    def deliver(self, conn: MemoryConn, peer: str) -> None:
        """Queue the server's end of a new pipe for the listener's ``accept``."""


class MemoryChannel(StripedChannel):
    """The client end of an in-memory data channel: each stripe a new pipe to ``listener``."""

    def __init__(self, listener: Arrivals, *, capacity: int = DEFAULT_CAPACITY,
                 **receiver_options: Any) -> None:
        super().__init__(**receiver_options)
        self.listener = listener
        self.capacity = capacity
        self._peers = itertools.count()

    def connect(self, stripe: int) -> MemoryConn:
        client, server = pipe(self.capacity)
        self.listener.deliver(server, f"memory:{next(self._peers)}")
        return client

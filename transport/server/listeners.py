"""Where the server's data channels accept connections: striped TCP and in-memory pipes.

A listener gives :class:`~dstp.transport.server.channel_server.DataChannelServer` each new
connection (``accept``) and sets the sender-side options a transfer negotiated
(``configure``); the connections are the wire's (:mod:`dstp.transport.wire.tcp`,
:mod:`dstp.transport.wire.memory`). UDT's listener is :mod:`.udt_listener`, imported only
when the UDT channel is served (loading libudt costs 0.1 s).
"""

from __future__ import annotations

import queue
import socket
import threading
from typing import Any

from dstp.errors import TransportError
from dstp.transport.wire.memory import MemoryConn
from dstp.transport.wire.tcp import TcpConn, set_congestion_control

__all__ = ["MemoryListener", "TcpListener"]


class TcpListener:
    """The striped channel's listening socket."""

    def __init__(self, host: str, port: int, backlog: int = 128) -> None:
        self.sock = socket.create_server((host, port), backlog=backlog)
        bound = self.sock.getsockname()
        shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
        self.endpoint = f"{shown}:{bound[1]}"

    def accept(self) -> tuple[TcpConn, str]:
        sock, addr = self.sock.accept()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return TcpConn(sock), f"{addr[0]}:{addr[1]}"

    def configure(self, conn: TcpConn, options: dict) -> None:  # type: ignore[type-arg]
        """Set the sender-side options a transfer negotiated (congestion control, send buffer)."""
        if options.get("congestion_control"):
            set_congestion_control(conn.sock, options["congestion_control"])
        if options.get("buffer_bytes"):
            conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, int(options["buffer_bytes"]))

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked in accept()
        except OSError:
            pass
        self.sock.close()


class MemoryListener:
    """Where in-memory connections arrive: the server side of a :class:`MemoryChannel`."""

    endpoint = "memory"

    def __init__(self) -> None:
        self._arrivals: queue.Queue[tuple[MemoryConn, str] | None] = queue.Queue()
        self._closed = threading.Event()

    def deliver(self, conn: MemoryConn, peer: str) -> None:
        """Queue a connection for ``accept`` (what a client's connect does)."""
        if self._closed.is_set():
            raise TransportError("cannot open an in-memory data connection: the listener is closed")
        self._arrivals.put((conn, peer))

    def accept(self) -> tuple[MemoryConn, str]:
        arrival = self._arrivals.get()
        if arrival is None or self._closed.is_set():
            self._arrivals.put(None)  # wake any other thread waiting here
            raise OSError("listener closed")
        return arrival

    def configure(self, conn: Any, options: dict[str, Any]) -> None:
        """Nothing to negotiate in memory."""

    def close(self) -> None:
        self._closed.set()
        self._arrivals.put(None)

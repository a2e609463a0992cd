"""A real TCP proxy for fault tests: forwards bytes, and can flip a bit or cut a connection."""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field


@dataclass
class Fault:
    """What to do to the server→client bytes of the ``connection``-th connection (0-based)."""

    connection: int = 0
    flip_at: int | None = None  # flip one bit of the byte at this position
    cut_at: int | None = None  # close both sides after this many bytes
    every_connection: bool = False


@dataclass
class Proxy:
    target: tuple[str, int]
    fault: Fault = field(default_factory=Fault)

    def __post_init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        self.flipped = 0
        self.cut = 0
        self._threads: list[threading.Thread] = []
        self._socks: list[socket.socket] = []
        self._stop = False
        t = threading.Thread(target=self._accept, daemon=True)
        t.start()
        self._threads.append(t)

    def _accept(self) -> None:
        while not self._stop:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            index = self.connections
            self.connections += 1
            server = socket.create_connection(self.target)
            self._socks += [client, server]
            faulty = self.fault.every_connection or index == self.fault.connection
            for src, dst, apply in ((client, server, False), (server, client, faulty)):
                t = threading.Thread(target=self._pump, args=(src, dst, apply), daemon=True)
                t.start()
                self._threads.append(t)

    def _pump(self, src: socket.socket, dst: socket.socket, apply: bool) -> None:
        seen = 0
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if apply and self.fault.cut_at is not None and seen + len(data) > self.fault.cut_at:
                    dst.sendall(data[: self.fault.cut_at - seen])
                    self.cut += 1
                    break
                if apply and self.fault.flip_at is not None and seen <= self.fault.flip_at < seen + len(data):
                    buf = bytearray(data)
                    buf[self.fault.flip_at - seen] ^= 0x10
                    data = bytes(buf)
                    self.flipped += 1
                seen += len(data)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._stop = True
        try:
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in accept()
        except OSError:
            pass
        self.listener.close()
        for s in self._socks:
            s.close()
        for t in self._threads:
            t.join(timeout=2)

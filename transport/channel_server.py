"""The server side of a data channel: accept connections, check tickets, run transfers.

Transport-neutral: it takes a :class:`Listener` (TCP in ``transport/tcp.py``,
UDT in ``transport/udt.py``, in-process pipes in ``transport/memory.py``) and
the service's ``open_source(ticket, kind, cancel)``, which redeems a ticket
and returns what to send (:class:`~dstp.transport.sources.MessageSource`).
Both are given at construction; nothing here calls back into the server
assembly. Every connection starts with a HELLO frame within
``hello_timeout`` seconds; a connection that sends anything else, random
bytes, a bad or expired ticket, gets an ERROR frame (when possible) and is
closed — and the server goes on serving everyone else.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Protocol

from dstp.errors import DstpError, ProtocolError, TicketExpiredError, TransportError
from dstp.transport.frames import MAX_CONTROL_PAYLOAD, Conn, Kind, control_payload, recv_frame, send_frame
from dstp.transport.sources import MessageSource
from dstp.transport.transfer import Transfer

__all__ = ["DataChannelServer", "Listener", "OpenSource"]

log = logging.getLogger("dstp.transport")

MAX_STRIPES = 256
MAX_HAVE = 1_000_000


class Listener(Protocol):
    """Where data connections arrive."""

    endpoint: str

    def accept(self) -> tuple[Conn, str]:
        """Return the next connection and its peer address; raise OSError once closed."""

    def configure(self, conn: Conn, options: dict[str, Any]) -> None:
        """Apply per-transfer options (congestion control…) to an accepted connection."""

    def close(self) -> None:
        """Stop accepting."""


#: Redeems a ticket for a channel kind and returns what to send (DstpService.open_source).
OpenSource = Callable[[bytes, str, threading.Event | None], MessageSource]


class DataChannelServer:
    """Runs one data channel (one listener) for a dstp server.

    ``kind`` is the channel whose tickets it redeems ("striped", "udt");
    ``clock`` gives wall-clock seconds, compared with tickets' expiry.
    """

    def __init__(
        self,
        kind: str,
        listener: Listener,
        open_source: OpenSource,
        *,
        window_bytes: int = 64 * 2**20,
        resume_timeout: float = 60.0,
        hello_timeout: float = 10.0,
        max_connections: int = 512,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.kind = kind
        self.listener = listener
        self.open_source = open_source
        self.window_bytes = window_bytes
        self.resume_timeout = resume_timeout
        self.hello_timeout = hello_timeout
        self.clock = clock
        self._slots = threading.BoundedSemaphore(max_connections)
        self._transfers: dict[bytes, Transfer] = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._threads: list[threading.Thread] = []
        self.rejected = 0

    @property
    def endpoint(self) -> str:
        return self.listener.endpoint

    def start(self) -> None:
        for target, name in ((self._accept_loop, "accept"), (self._janitor, "janitor")):
            t = threading.Thread(target=target, name=f"dstp-{self.kind}-{name}", daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        self._stopped.set()
        self.listener.close()
        with self._lock:
            transfers = list(self._transfers.values())
        for t in transfers:
            t.abandon("server stopping")
        for t in self._threads:
            t.join(timeout=5.0)

    def _accept_loop(self) -> None:
        while not self._stopped.is_set():
            try:
                conn, peer = self.listener.accept()
            except OSError:
                if self._stopped.is_set():
                    return
                log.exception("%s channel: accept failed", self.kind)
                time.sleep(0.1)
                continue
            if not self._slots.acquire(blocking=False):
                self._refuse(conn, TransportError("the server has too many data connections; try again"))
                continue
            threading.Thread(target=self._handle, args=(conn, peer), name=f"dstp-{self.kind}-conn",
                             daemon=True).start()

    def _refuse(self, conn: Conn, error: DstpError) -> None:
        self.rejected += 1
        try:
            send_frame(conn, Kind.ERROR, 0, 0, 0, control_payload(
                {"code": error.code, "status": error.grpc_status, "message": error.message}))
        except (DstpError, OSError):
            pass
        getattr(conn, "close_after_error", conn.close)()

    def _handle(self, conn: Conn, peer: str) -> None:
        try:
            transfer, stripe, generation = self._handshake(conn)
        except DstpError as exc:
            log.info("%s channel: refused %s: %s", self.kind, peer, exc)
            self._refuse(conn, exc)
            self._slots.release()
            return
        except Exception:  # noqa: BLE001 - one bad connection must not stop the channel
            log.exception("%s channel: handshake with %s failed", self.kind, peer)
            conn.close()
            self._slots.release()
            return
        try:
            transfer.serve(stripe, conn, generation)
        except Exception:  # noqa: BLE001
            log.exception("%s channel: stripe %d of %s failed", self.kind, stripe, transfer.label)
            transfer.detach(stripe, generation)
            conn.close()
        finally:
            self._slots.release()

    def _handshake(self, conn: Conn) -> tuple[Transfer, int, int]:
        settimeout = getattr(conn, "settimeout", None)
        if settimeout is not None:
            settimeout(self.hello_timeout)
        try:
            frame = recv_frame(conn, max_payload=MAX_CONTROL_PAYLOAD)
        except TimeoutError:
            raise ProtocolError(f"no HELLO within {self.hello_timeout:g} s") from None
        if frame is None:
            raise ProtocolError("the connection closed before HELLO")
        if frame.kind != Kind.HELLO:
            raise ProtocolError(f"expected HELLO, got {frame.kind.name}")
        hello = frame.json()
        if not isinstance(hello, dict):
            raise ProtocolError("HELLO payload must be a JSON object")
        try:
            ticket = bytes.fromhex(hello["ticket"])
            stripe = int(hello.get("stripe", 0))
            acked = int(hello.get("acked", 0))
            have = {int(s) for s in hello.get("have", [])}
        except (KeyError, TypeError, ValueError):
            raise ProtocolError("HELLO needs ticket (hex), stripe, acked and have") from None
        if not 0 <= stripe < MAX_STRIPES or acked < 0 or len(have) > MAX_HAVE:
            raise ProtocolError("HELLO fields out of range")
        if settimeout is not None:
            settimeout(None)
        with self._lock:
            transfer = self._transfers.get(ticket)
            if transfer is None:
                source = self.open_source(ticket, self.kind, None)
                transfer = Transfer(
                    ticket, source, expires_at=source.expires_at, window_bytes=self.window_bytes,
                    resume_timeout=self.resume_timeout, on_done=self._forget, label=source.label,
                )
                self._transfers[ticket] = transfer
                transfer.start()
            elif self.clock() > transfer.expires_at:
                raise TicketExpiredError("the ticket expired; the transfer cannot be resumed — run the query again")
        self.listener.configure(conn, {"congestion_control": transfer.source.congestion_control})
        generation = transfer.attach(stripe, conn, acked, have)
        return transfer, stripe, generation

    def _forget(self, transfer: Transfer) -> None:
        key: bytes = transfer.key
        with self._lock:
            if self._transfers.get(key) is transfer:
                del self._transfers[key]

    def _janitor(self) -> None:
        while not self._stopped.wait(1.0):
            with self._lock:
                transfers = list(self._transfers.values())
            now = self.clock()
            for t in transfers:
                idle = t.idle_for()
                if idle > self.resume_timeout or (idle > 0 and now > t.expires_at):
                    t.abandon(f"no stripe connected for {idle:.0f} s")

    def active_transfers(self) -> int:
        with self._lock:
            return len(self._transfers)

"""The server side of a data channel: accept connections, check tickets, run transfers.

Transport-neutral: it takes a :class:`Listener` (TCP in ``transport/wire/tcp.py``,
UDT in ``transport/wire/udt.py``, in-process pipes in ``transport/wire/memory.py``) and
the service's ``open_source(ticket, kind, cancel)``, which redeems a ticket
and returns what to send (:class:`~dstp.transport.server.sources.MessageSource`)
and the ticket's key. A redemption may wait for a transfer slot, so it runs
outside the server's lock: other HELLOs, stripe joins and resumes go on
meanwhile, and a second stripe of the same ticket waits for it (one pending
entry per ticket).
Both are given at construction; nothing here calls back into the server
assembly. Every connection starts with a HELLO frame, all of it within
``hello_timeout`` seconds of the connection's arrival (measured by ``timer``
and enforced by the janitor, however slowly its bytes trickle in); a
connection that sends anything else, random bytes, a bad or expired ticket,
gets an ERROR frame (when possible) and is closed — and the server goes on
serving everyone else. One source address holds at most
``max_pending_per_address`` connections that have not finished their HELLO:
a new one beyond that closes that address's oldest, so a flood from one host
cannot lock out the transfers of others (nor a fast client behind the same
address, whose HELLO is done in a round trip).

TCP connections are read by one thread until their HELLO is whole
(:class:`~dstp.transport.server.hellos.HelloReader`: ``max_pending`` of them at most,
the oldest of the biggest holder closed beyond that), and kept connections
wait there for their next HELLO: neither costs a thread. Only a whole HELLO
takes one of the ``max_connections`` slots (and a thread, for its transfer),
so a flood of unfinished HELLOs from many addresses never takes the capacity
of the clients that present a ticket. Connections a selector cannot watch
(UDT, in-memory) still have a thread each from their arrival, within
``max_connections``.

Every HELLO proves it comes from the client the ticket was issued to: its
``proof`` is an HMAC over the ticket, the stripe, an ``attempt`` number and
``acked``, keyed from the ticket key only that client received
(transport/server/tickets.py). The first HELLO's proof is checked by the service
before the ticket is redeemed; a later stripe's (or a resumed stripe's)
against the transfer's key before it touches the transfer, and its attempt
must exceed the last one of that stripe. A stranger holding only the ticket
gets an ERROR frame; the owner's transfer never notices. With ``sealed`` the
transfer's frames are sealed with AES-256-GCM (transport/wire/frames.py).

Warm connections (transport/client/pool.py). A HELLO with ``"keep": true`` asks the
server to keep its connection after a clean end: when the client's BYE has
arrived on it and the transfer sent nothing more, the server answers with a
BYE (sealed, in a sealed transfer) and waits on the connection for the next
HELLO — of any ticket the client holds, proved and checked exactly like a
first one; nothing of the finished transfer stays attached. An idle
connection's next HELLO, once its first bytes arrive, has ``hello_timeout``
to complete. The server keeps at most ``max_idle_per_address`` idle
connections per source address and ``max_idle_connections`` in all (past
either, the oldest idle one is closed) and closes any that stayed idle
longer than ``idle_timeout`` (by ``timer``); ``max_idle_connections=0`` turns
keeping off (a HELLO asking for it is then served as before and closed at
the end).
"""

from __future__ import annotations

import collections
import logging
import socket
import threading
import time
from typing import Any, Callable, Protocol

from dstp.errors import DstpError, ProtocolError, TicketError, TicketExpiredError, TransportError
from dstp.incidents import for_client
from dstp.transport.server.hellos import HelloReader, selectable
from dstp.transport.server.sources import MessageSource
from dstp.transport.server.transfer import Transfer
from dstp.transport.wire.frames import (
    HEADER,
    MAX_CONTROL_PAYLOAD,
    Conn,
    Frame,
    Kind,
    Seal,
    control_payload,
    recv_header,
    recv_payload,
    send_frame,
)
from dstp.transport.wire.proofs import check_proof, hello_proof, seal_key

__all__ = ["DataChannelServer", "Listener", "OpenSource"]

log = logging.getLogger("dstp.transport")

MAX_STRIPES = 256
#: How often the janitor checks HELLO deadlines and idle transfers (real seconds).
JANITOR_INTERVAL_S = 0.1
#: The janitor wakes a connection this long after its HELLO deadline: a handshake that is reading checks the
#: deadline itself before every read, so the janitor only catches one waiting on silence.
HELLO_GRACE_S = 0.5
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


class OpenSource(Protocol):
    """Redeems a ticket for a channel kind; returns what to send and the ticket's key (DstpService.open_source).

    ``proof(ticket key)`` says whether the HELLO proved the redeemer holds the ticket's key; the
    ticket is redeemed only if it does. The key returned is the one the proof was checked against:
    later stripes of the transfer prove themselves with it, and a sealed transfer is keyed from it.
    """

    def __call__(self, token: bytes, kind: str, cancel: threading.Event | None = None, *,
                 proof: Callable[[bytes], bool]) -> tuple[MessageSource, bytes]: ...


class _Redemption:
    """A ticket being redeemed by one HELLO, outside the server's lock (``open_source`` may wait for a slot).

    Other HELLOs of the same ticket queue here rather than on the lock, and attach in the order they
    arrived, each once the one before it is attached: a replay of a HELLO never overtakes the original
    it copies. Every other ticket's HELLO goes on. It ends with the transfer, or with nothing (the
    redemption failed: a waiter then tries for itself).
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queue: collections.deque[object] = collections.deque()
        self._finished = False
        self.transfer: Transfer | None = None

    def join(self) -> object:
        """Return this HELLO's place in the queue (call under the server's lock: arrival order)."""
        place = object()
        with self._cond:
            self._queue.append(place)
        return place

    def wait(self, place: object, stopped: threading.Event) -> Transfer | None:
        """Return the transfer once it is published and every HELLO queued earlier is attached."""
        with self._cond:
            while not (self._finished and self._queue[0] is place):
                if stopped.is_set():
                    self._queue.remove(place)
                    self._cond.notify_all()
                    raise TransportError("the server is stopping")
                self._cond.wait(JANITOR_INTERVAL_S)
            return self.transfer

    def leave(self, place: object) -> bool:
        """This HELLO is attached (or refused): the next in the queue may go. Return whether the queue is done
        (the transfer published and no HELLO left in it)."""
        with self._cond:
            self._queue.remove(place)
            self._cond.notify_all()
            return self._finished and not self._queue

    def idle(self) -> bool:
        """Return whether no HELLO is queued."""
        with self._cond:
            return not self._queue

    def finish(self, transfer: Transfer | None) -> None:
        with self._cond:
            self.transfer = transfer
            self._finished = True
            self._cond.notify_all()


#: What a stranger who presents someone else's ticket hears.
NOT_YOURS = ("this HELLO does not prove it comes from the client the ticket was issued to (its proof is missing "
             "or wrong); only that client can join the transfer")


class _Deadline:
    """A connection during its HELLO: every read checks the one deadline of the whole HELLO first."""

    def __init__(self, conn: Conn, deadline: float, clock: Callable[[], float]) -> None:
        self.conn = conn
        self.deadline = deadline
        self.clock = clock

    def recv_into(self, view: memoryview) -> int:
        if self.clock() > self.deadline:
            raise TimeoutError
        return self.conn.recv_into(view)

    def send_parts(self, parts: list[memoryview | bytes]) -> None:
        self.conn.send_parts(parts)

    def close(self) -> None:
        self.conn.close()


class _Prefixed:
    """A connection whose first bytes were already read (an idle connection's next HELLO): those come first."""

    def __init__(self, conn: Conn, first: bytes) -> None:
        self.conn = conn
        self.first = memoryview(first)

    def recv_into(self, view: memoryview) -> int:
        if self.first.nbytes:
            n = min(view.nbytes, self.first.nbytes)
            view[:n] = self.first[:n]
            self.first = self.first[n:]
            return n
        return self.conn.recv_into(view)

    def send_parts(self, parts: list[memoryview | bytes]) -> None:
        self.conn.send_parts(parts)

    def close(self) -> None:
        self.conn.close()


def _wake(conn: Conn) -> None:
    """Wake the handshake reading ``conn`` without closing its sending side (a TCP socket: shut reading
    down), so the ERROR frame still goes out; another kind of connection is closed."""
    sock = getattr(conn, "sock", None)
    if isinstance(sock, socket.socket):
        try:
            sock.shutdown(socket.SHUT_RD)
            return
        except OSError:
            pass
    conn.close()


class DataChannelServer:
    """Runs one data channel (one listener) for a dstp server.

    ``kind`` is the channel whose tickets it redeems ("striped", "udt");
    ``clock`` gives wall-clock seconds, compared with tickets' expiry;
    ``timer`` gives monotonic seconds, what the HELLO and idle deadlines are
    measured by (a step of the wall clock must not cut a connection).
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
        max_pending_per_address: int = 16,
        clock: Callable[[], float] = time.time,
        timer: Callable[[], float] = time.monotonic,
        sealed: bool = False,
        idle_timeout: float = 120.0,
        max_idle_connections: int = 256,
        max_idle_per_address: int = 64,
        max_pending: int = 256,
    ) -> None:
        self.kind = kind
        #: Whether transfers are sealed (AES-256-GCM): the offers of this channel say cipher "aes-256-gcm".
        self.sealed = sealed
        self.listener = listener
        self.open_source = open_source
        self.window_bytes = window_bytes
        self.resume_timeout = resume_timeout
        self.hello_timeout = hello_timeout
        self.max_pending_per_address = max(1, max_pending_per_address)
        self.clock, self.timer = clock, timer
        self._slots = threading.BoundedSemaphore(max_connections)
        # Connections still in their HELLO: conn -> (source address, clock time it arrived), oldest first.
        self._pending: dict[Conn, tuple[str, float]] = {}
        self._hello_timeouts = 0
        self._evicted = 0
        #: TCP connections until their HELLO is whole, and kept ones between transfers: one thread for all.
        self._hellos = HelloReader(kind, on_hello=self._hello_arrived, on_wake=self._idle_woke,
                                   on_gone=self._idle_gone, hello_timeout=hello_timeout, max_pending=max_pending,
                                   max_pending_per_address=max_pending_per_address, timer=timer)
        self._transfers: dict[bytes, Transfer] = {}
        #: Transfers that ended cleanly, by ticket, with when (timer): a stripe whose HELLO was still on its
        #: way is kept rather than refused, for as long as a HELLO may wait (hello_timeout + HELLO_GRACE_S).
        self._finished: dict[bytes, tuple[Transfer, float]] = {}
        #: Tickets whose first HELLO is being redeemed now (by ``open_source``, outside the lock).
        self._redeeming: dict[bytes, _Redemption] = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._threads: list[threading.Thread] = []
        self.rejected = 0
        self.idle_timeout = idle_timeout
        self.max_idle_connections = max(0, max_idle_connections)
        self.max_idle_per_address = max(1, max_idle_per_address)
        # Kept connections waiting for their next HELLO: conn -> (source address, clock time it went idle).
        self._idle: dict[Conn, tuple[str, float]] = {}
        #: Connections accepted, HELLOs served on kept connections, idle ones closed (expired, over a cap).
        self.accepted = 0
        self.reused = 0
        self.idle_expired = 0
        self.idle_evicted = 0

    @property
    def endpoint(self) -> str:
        return self.listener.endpoint

    @property
    def evicted(self) -> int:
        """Connections closed before their HELLO was whole because their address (or all) had too many."""
        return self._evicted + self._hellos.evicted

    @property
    def hello_timeouts(self) -> int:
        """Connections refused because their HELLO was not whole within hello_timeout."""
        return self._hello_timeouts + self._hellos.hello_timeouts

    def pending(self) -> int:
        """Return how many connections are still sending their HELLO."""
        with self._lock:
            return len(self._pending) + self._hellos.pending()

    def start(self) -> None:
        self._hellos.start()
        for target, name in ((self._accept_loop, "accept"), (self._janitor, "janitor")):
            t = threading.Thread(target=target, name=f"dstp-{self.kind}-{name}", daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        self._stopped.set()
        self.listener.close()
        with self._lock:
            transfers = list(self._transfers.values())
            idle = list(self._idle)
            self._idle.clear()
        for conn in idle:
            if selectable(conn) is None:
                conn.close()
        self._hellos.stop()  # closes what it watches: unfinished HELLOs, kept connections
        for t in transfers:
            t.abandon("server stopping")
        for t in self._threads:
            t.join(timeout=5.0)

    def _accept_loop(self) -> None:
        while not self._stopped.is_set():
            try:
                conn, peer = self.listener.accept()
            except OSError as exc:
                if self._stopped.is_set():
                    return
                # Out of descriptors, typically: wait for some to free, without a traceback per attempt.
                log.warning("%s channel: accept failed: %s", self.kind, exc)
                self._stopped.wait(0.5)
                continue
            self.accepted += 1
            if selectable(conn) is not None:
                self._hellos.add(conn, peer)  # no thread, no slot until its HELLO is whole
                continue
            if not self._slots.acquire(blocking=False):
                self._refuse(conn, TransportError("the server has too many data connections; try again"))
                continue
            self._admit_pending(conn, peer)
            threading.Thread(target=self._handle, args=(conn, peer), name=f"dstp-{self.kind}-conn",
                             daemon=True).start()

    def _hello_arrived(self, conn: Conn, peer: str, hello: bytes) -> None:
        """A TCP connection's HELLO is whole (on the HELLO reader's thread): give it a slot and a thread."""
        if not self._slots.acquire(blocking=False):
            self._hellos.refuse(conn, peer, TransportError("the server has too many data connections; try again"))
            return
        threading.Thread(target=self._handle, args=(conn, peer, hello), name=f"dstp-{self.kind}-conn",
                         daemon=True).start()

    def _idle_woke(self, conn: Conn) -> bool:
        """A kept connection's next HELLO began: return whether it was still kept (then it is no longer idle)."""
        with self._lock:
            kept = self._idle.pop(conn, None) is not None
        if kept:
            self.reused += 1
        return kept

    def _idle_gone(self, conn: Conn) -> None:
        with self._lock:
            self._idle.pop(conn, None)

    def _close_idle(self, conn: Conn) -> None:
        """Close a kept connection (expired, over a cap): through the HELLO reader if it watches it."""
        sock = selectable(conn)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # the client sees it closed now; the reader releases it
            except OSError:
                pass
            self._hellos.drop(conn)
        else:
            conn.close()  # its thread wakes from its idle wait and ends

    def _admit_pending(self, conn: Conn, peer: str) -> None:
        """Track a connection until its HELLO is done; at its address's cap, close that address's oldest."""
        address = peer.rsplit(":", 1)[0]
        with self._lock:
            same = [c for c, (a, _) in self._pending.items() if a == address]
            oldest = same[0] if len(same) >= self.max_pending_per_address else None
            if oldest is not None:
                del self._pending[oldest]
            self._pending[conn] = (address, self.timer())
        if oldest is not None:
            self._evicted += 1
            oldest.close()  # its handshake thread wakes, refuses it and frees its slot

    def _hello_done(self, conn: Conn) -> None:
        with self._lock:
            self._pending.pop(conn, None)

    def _pending_now(self) -> set[Conn]:
        with self._lock:
            return set(self._pending)

    def _refuse(self, conn: Conn, error: DstpError) -> None:
        self.rejected += 1
        try:
            send_frame(conn, Kind.ERROR, 0, 0, 0, control_payload(
                {"code": error.code, "status": error.grpc_status, "message": error.message}))
        except (DstpError, OSError):
            pass
        getattr(conn, "close_after_error", conn.close)()

    def _handle(self, conn: Conn, peer: str, first: bytes = b"") -> None:
        try:
            while True:
                if not self._serve_one(conn, peer, first):
                    return
                if selectable(conn) is not None:
                    self._hellos.add_idle(conn, peer)  # its next HELLO is awaited there, without this thread
                    return
                first = self._idle_wait(conn, peer)  # the first bytes of its next HELLO
                if not first:
                    conn.close()
                    return
                self.reused += 1
                self._admit_pending(conn, peer)
        finally:
            self._slots.release()

    def _serve_one(self, conn: Conn, peer: str, first: bytes) -> bool:
        """Run one HELLO and its transfer on ``conn``; return whether the connection was kept (BYE answered)."""
        try:
            try:
                transfer, stripe, generation = self._handshake(conn, first)
            finally:
                self._hello_done(conn)
        except Exception as exc:  # noqa: BLE001 - one bad connection must not stop the channel
            err = for_client(exc, f"{self.kind} channel, HELLO from {peer}")  # an incident is logged, by id
            log.info("%s channel: refused %s: %s", self.kind, peer, err)
            self._refuse(conn, err)
            return False
        try:
            kept = transfer.serve(stripe, conn, generation)
        except Exception:  # noqa: BLE001
            log.exception("%s channel: stripe %d of %s failed", self.kind, stripe, transfer.label)
            transfer.detach(stripe, generation)
            conn.close()
            return False
        if not kept:
            return False
        self._park(conn, peer)  # idle before the client can learn it is, so a count taken after the BYE holds
        try:
            send_frame(conn, Kind.BYE, stripe, 0, 0, seal=transfer.seal)
        except (DstpError, OSError):
            with self._lock:
                self._idle.pop(conn, None)
            conn.close()
            return False
        return True

    # -- kept connections ---------------------------------------------------------------

    def _park(self, conn: Conn, peer: str) -> None:
        """Count ``conn`` idle; past a cap (its address's, or the total), close the oldest idle connection."""
        address = peer.rsplit(":", 1)[0]
        with self._lock:
            self._idle[conn] = (address, self.timer())
            same = [c for c, (a, _) in self._idle.items() if a == address]
            over = same[:max(0, len(same) - self.max_idle_per_address)]
            rest = [c for c in self._idle if c not in over]
            over += rest[:max(0, len(rest) - self.max_idle_connections)]
            for c in over:
                del self._idle[c]
        for c in over:
            self.idle_evicted += 1
            self._close_idle(c)

    def _idle_wait(self, conn: Conn, peer: str) -> bytes:
        """Wait on a kept connection for its next HELLO; return its first bytes, or b"" when it is over.

        It is over when the client closes it, it breaks, or it is closed from here (expired, over a cap).
        """
        buffer = bytearray(HEADER.size)
        try:
            n = conn.recv_into(memoryview(buffer))
        except (DstpError, OSError):
            n = 0
        with self._lock:
            ours = self._idle.pop(conn, None) is not None
        return bytes(buffer[:n]) if ours and n else b""

    def idle_connections(self) -> int:
        """Return how many kept connections wait for a HELLO."""
        with self._lock:
            return len(self._idle)

    def expire_idle(self) -> int:
        """Close the kept connections idle for longer than ``idle_timeout`` (by ``timer``); return how many.

        The janitor calls this every tick; a test that moved its clock may call it to act at once.
        """
        now = self.timer()
        with self._lock:
            stale = [c for c, (_, since) in self._idle.items() if now - since > self.idle_timeout]
            for conn in stale:
                del self._idle[conn]
        for conn in stale:
            self.idle_expired += 1
            self._close_idle(conn)
        return len(stale)

    # -- the HELLO ----------------------------------------------------------------------

    def _handshake(self, conn: Conn, first: bytes = b"") -> tuple[Transfer, int, int]:
        settimeout = getattr(conn, "settimeout", None)
        if settimeout is not None:
            settimeout(self.hello_timeout)
        with self._lock:
            arrived = self._pending.get(conn, ("", self.timer()))[1]
        hello_conn = _Deadline(_Prefixed(conn, first) if first else conn, arrived + self.hello_timeout, self.timer)
        try:
            header = recv_header(hello_conn, max_payload=MAX_CONTROL_PAYLOAD)
            if header is not None and header.kind != Kind.HELLO:  # refused before its payload is read
                raise ProtocolError(f"expected HELLO, got {header.kind.name}")
            frame = None if header is None else \
                Frame(header.kind, header.stripe, header.sequence, header.offset, recv_payload(hello_conn, header))
        except TimeoutError as exc:
            raise ProtocolError(f"no whole HELLO within {self.hello_timeout:g} s") from exc
        except TransportError as exc:
            if not isinstance(exc, ProtocolError) and conn not in self._pending_now():
                raise ProtocolError(f"no whole HELLO within {self.hello_timeout:g} s") from exc
            raise
        if frame is None:
            raise ProtocolError("the connection closed before HELLO")
        self._hello_done(conn)  # whole: the HELLO deadline is met, however long the redemption waits for a slot
        hello = frame.json()
        if not isinstance(hello, dict):
            raise ProtocolError("HELLO payload must be a JSON object")
        try:
            ticket = bytes.fromhex(hello["ticket"])
            stripe = int(hello.get("stripe", 0))
            acked = int(hello.get("acked", 0))
            have = {int(s) for s in hello.get("have", [])}
            attempt = int(hello.get("attempt", 0))
            proof = bytes.fromhex(str(hello.get("proof", "")))
            keep = hello.get("keep") is True and self.max_idle_connections > 0
        except (KeyError, TypeError, ValueError) as exc:
            raise ProtocolError("HELLO needs ticket (hex), stripe, acked, have, attempt and proof (hex)") from exc
        if not 0 <= stripe < MAX_STRIPES or not 0 <= acked < 2**64 or not 0 <= attempt < 2**32 \
                or len(have) > MAX_HAVE:
            raise ProtocolError("HELLO fields out of range")
        if settimeout is not None:
            settimeout(None)

        def proves(key: bytes) -> bool:
            return bool(key) and check_proof(hello_proof(key, ticket, stripe, attempt, acked), proof)

        transfer, publish = self._transfer_of(ticket, proves)
        try:
            if not proves(transfer.ticket_key):
                raise TicketError(NOT_YOURS)
            if self.clock() > transfer.expires_at:
                raise TicketExpiredError("the ticket expired; the transfer cannot be resumed — run the query again")
            self.listener.configure(conn, {"congestion_control": transfer.source.congestion_control})
            generation = transfer.attach(stripe, conn, acked, have, attempt, keep)
        finally:
            # Each HELLO of a new transfer is attached before the next one may look: a replay of a HELLO (the same
            # attempt) is then refused as the replay it is, never served in place of the original.
            if publish is not None:
                publish()
        return transfer, stripe, generation

    def _transfer_of(self, ticket: bytes, proves: Callable[[bytes], bool]
                     ) -> tuple[Transfer, Callable[[], None] | None]:
        """Return the transfer of ``ticket`` — the one under way (or just finished), else a new one redeemed
        here — and what to call once this HELLO's stripe is attached: publish the new transfer, or let the
        next HELLO queued on its redemption go (None when there is neither).

        The redemption (``open_source``: the service checks the proof, claims the ticket and waits for a
        transfer slot) runs outside the lock, so a HELLO waiting for admission never holds up the HELLOs,
        stripe joins and resumes of other transfers; another HELLO of the same ticket waits until the
        transfer is published.
        """
        while True:
            with self._lock:
                # While HELLOs of a new transfer still queue for their attach, a later one queues behind them.
                pending = self._redeeming.get(ticket)
                mine = pending is None
                if pending is not None:
                    place = pending.join()
                else:
                    transfer = self._transfers.get(ticket) or self._finished_transfer(ticket)
                    if transfer is not None:
                        return transfer, None
                    pending = self._redeeming[ticket] = _Redemption()
            if not mine:
                found = pending.wait(place, self._stopped)
                if found is not None:
                    return found, lambda: self._left(ticket, pending, place)
                self._left(ticket, pending, place)
                continue  # that HELLO failed (a stranger's proof, say): this one tries for itself
            try:
                source, key = self.open_source(ticket, self.kind, None, proof=proves)
                made = Transfer(
                    ticket, source, expires_at=source.expires_at, window_bytes=self.window_bytes,
                    resume_timeout=self.resume_timeout, on_done=self._forget, label=source.label,
                    ticket_key=key, seal=Seal(seal_key(key)) if self.sealed else None,
                )
                made.start()
            except BaseException:
                self._published(ticket, None, pending)
                raise
            return made, lambda: self._published(ticket, made, pending)

    def _published(self, ticket: bytes, transfer: Transfer | None, pending: _Redemption) -> None:
        """End the redemption of ``ticket``: the HELLOs queued on it attach in turn, then every later HELLO
        finds the transfer directly (or, when the redemption failed, tries for itself)."""
        with self._lock:
            if transfer is not None and not transfer.done:
                self._transfers[ticket] = transfer
            if transfer is None or pending.idle():
                self._redeeming.pop(ticket, None)
            pending.finish(transfer)

    def _left(self, ticket: bytes, pending: _Redemption, place: object) -> None:
        """A HELLO queued on the redemption of ``ticket`` is attached (or refused): the next may go."""
        with self._lock:
            if pending.leave(place) and self._redeeming.get(ticket) is pending:
                del self._redeeming[ticket]

    def _forget(self, transfer: Transfer) -> None:
        key: bytes = transfer.key
        with self._lock:
            if self._transfers.get(key) is transfer:
                del self._transfers[key]
            if transfer.finished_clean:
                self._finished[key] = (transfer, self.timer())

    def _finished_transfer(self, ticket: bytes) -> Transfer | None:
        """Return the cleanly finished transfer of ``ticket`` while a late stripe may still join it (lock held)."""
        entry = self._finished.get(ticket)
        if entry is None:
            return None
        if self.timer() - entry[1] > self.hello_timeout + HELLO_GRACE_S:
            del self._finished[ticket]
            return None
        return entry[0]

    def _janitor(self) -> None:
        while not self._stopped.wait(JANITOR_INTERVAL_S):
            now, elapsed = self.clock(), self.timer()
            with self._lock:
                transfers = list(self._transfers.values())
                late = [c for c, (_, since) in self._pending.items()
                        if elapsed - since > self.hello_timeout + HELLO_GRACE_S]
                for conn in late:
                    del self._pending[conn]
                for ticket in [t for t, (_, since) in self._finished.items()
                               if elapsed - since > self.hello_timeout + HELLO_GRACE_S]:
                    del self._finished[ticket]
            for conn in late:  # a HELLO trickled in byte by byte still has one deadline
                self._hello_timeouts += 1
                _wake(conn)
            self.expire_idle()
            for t in transfers:
                idle = t.idle_for()
                if idle > self.resume_timeout or (idle > 0 and now > t.expires_at):
                    t.abandon(f"no stripe connected for {idle:.0f} s")

    def active_transfers(self) -> int:
        with self._lock:
            return len(self._transfers)

    def has_transfer(self, ticket: bytes) -> bool:
        """Return whether the transfer of ``ticket`` is under way (or broken and awaiting a resume)."""
        with self._lock:
            return ticket in self._transfers

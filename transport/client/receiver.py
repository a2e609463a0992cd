"""The client side of a data channel: stripes in, messages out in order.

``StripedReceiver`` opens ``streams`` connections, presents the ticket on
each, and one thread per stripe reads frames into place. Each HELLO proves the client
holds the offer's ticket key (``key``), and a sealed transfer (``cipher``)
has its frames opened here (transport/wire/frames.py). ``messages()``
yields the transfer's messages strictly in sequence order, acknowledging them
to the server as it goes (which frees the server's retransmit window). It
rejects duplicates, data after END, and a transfer that ends with gaps.

When a stripe breaks — connection reset, a checksum mismatch (a corrupted
frame is dropped, never delivered), the server going away — its reader
reconnects with the same ticket, says which messages it already holds, and
the server resends only what is missing. After ``max_reconnects`` failures on
one stripe, or ``stall_timeout`` seconds without any frame, the transfer
fails with a typed error.

With a ``pool`` (transport/client/pool.py) the stripes are warm: each comes from the
pool when it holds one for ``pool_key`` (else it is dialed), every HELLO asks
the server to keep its connection (``"keep": true``), and after a clean END
each stripe waits for the server's answering BYE and goes back to the pool.
A pooled connection that turns out dead before its first frame arrives (the
server expired it, a reset) is replaced by a fresh dial at once, without
counting a failure or a reconnect.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from collections.abc import Hashable
from typing import Any, Callable, Iterator, Protocol

from dstp.errors import (
    DstpError,
    IntegrityError,
    ProtocolError,
    TransportError,
    TransportUnavailableError,
    error_from_status,
)
from dstp.transport import native
from dstp.transport.client.files import DiskWriteError
from dstp.transport.client.pool import ConnectionPool
from dstp.transport.wire.frames import (
    CIPHERS,
    Conn,
    Kind,
    Seal,
    control_payload,
    recv_checked,
    recv_header,
    recv_payload,
    send_frame,
)
from dstp.transport.wire.proofs import hello_proof, seal_key
from dstp.transport.wire.values import TransferSummary

__all__ = ["MessageSink", "ReceiverStats", "StripedReceiver"]

log = logging.getLogger("dstp.transport")

_END = object()

#: How long closing a transfer waits for each stripe's reader thread to end (seconds).
READER_JOIN_S = 5.0
#: After a clean END, how long the stripes wait for the server's answering BYE before they are closed.
RELEASE_WAIT_S = 10.0


class MessageSink(Protocol):
    """Where payloads land (file blocks go straight to disk from the reader threads).

    A sink may also offer ``receive_in_place(fd, sequence, header)``: receive a plaintext DATA
    frame's payload from socket ``fd`` natively (the GIL released), check it, put it in its place
    and return what ``received`` would (transport/client/files.py ``FileSink``).
    """

    def buffer_for(self, sequence: int, offset: int, length: int) -> memoryview | None:
        """Return the exact-size buffer to receive this payload into, or None for a fresh one."""

    def received(self, sequence: int, offset: int, payload: memoryview, crc: int) -> Any:
        """Take a checked payload in the reader thread; return what ``messages()`` yields for it."""


@dataclass(slots=True)
class ReceiverStats:
    """What a receiver saw: bytes, frames, reconnects, corrupted frames, time."""

    bytes: int = 0
    frames: int = 0
    #: Frames received by the native path (transport/native.py), the rest in Python.
    native_frames: int = 0
    reconnects: int = 0
    corrupted: int = 0
    #: Stripes that started on a kept (pooled) connection, and pooled connections found dead and replaced.
    reused: int = 0
    stale: int = 0
    started: float = field(default_factory=time.perf_counter)
    per_stripe_bytes: dict[int, int] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self.started


class _Fatal(Exception):
    pass


class StripedReceiver:
    """Receives one transfer over ``streams`` connections made by ``dial``."""

    def __init__(
        self,
        ticket: bytes,
        streams: int,
        dial: Callable[[int], Conn],
        *,
        sink: MessageSink | None = None,
        max_reconnects: int = 5,
        stall_timeout: float = 60.0,
        ack_every_bytes: int = 8 * 2**20,
        key: bytes = b"",
        cipher: str = "",
        pool: ConnectionPool | None = None,
        pool_key: Hashable = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if cipher and cipher not in CIPHERS:
            raise TransportUnavailableError(f"the server seals this transfer with {cipher!r}, which this client "
                                            f"does not speak ({', '.join(CIPHERS)})")
        self.ticket = ticket
        #: The offer's ticket key: each HELLO proves it (transport/server/tickets.py ``hello_proof``).
        self.key = key
        #: Opens the sealed frames of a sealed transfer (the offer's ``cipher``); None for plaintext.
        self.seal = Seal(seal_key(key)) if cipher else None
        self._attempts: dict[int, int] = {}  # stripe -> connections made so far (each HELLO's attempt)
        self.streams = max(1, streams)
        self.dial = dial
        self.sink = sink
        self.max_reconnects = max_reconnects
        self.stall_timeout = stall_timeout
        self.ack_every_bytes = ack_every_bytes
        self.stats = ReceiverStats()
        #: The server's account of the transfer, from its END frame (None until it arrives).
        self.end: TransferSummary | None = None
        self._cond = threading.Condition()
        self._pending: dict[int, Any] = {}
        self._next = 0
        self._end_seq: int | None = None
        #: What ends the transfer for the caller: a DstpError, or the OSError of a sink that cannot write (a full disk).
        self._error: DstpError | DiskWriteError | None = None
        self._live: dict[int, Conn] = {}
        self._send_locks = {i: threading.Lock() for i in range(self.streams)}
        self._finished = False
        self._threads: list[threading.Thread] = []
        #: What the stall timer reads (a test's clock can jump; the default is ``time.monotonic``).
        self.clock = clock
        self._last_frame = clock()
        self._last_seq: dict[int, int] = {}  # stripe -> the last message it delivered
        self._failures: dict[int, int] = {}  # stripe -> connections that broke
        #: Where warm connections come from and go back to (None: every stripe dialed, closed at the end).
        self.pool = pool
        self.pool_key = pool_key
        self._untried: set[int] = set()  # stripes on a pooled connection that has not delivered a frame yet
        self._released: set[int] = set()  # id() of the connections that went back to the pool
        self._releasing = False  # the pool expects this transfer's connections back
        self._abandoned = False  # stripes not released by now are closed instead
        self._closed = False  # close() ran: a second call returns at once instead of joining the readers

    # -- stripes ------------------------------------------------------------------------

    def _hello(self, stripe: int, conn: Conn) -> None:
        with self._cond:
            attempt = self._attempts.get(stripe, -1) + 1
            self._attempts[stripe] = attempt
            hello = {"ticket": self.ticket.hex(), "stripe": stripe, "stripes": self.streams,
                     "acked": self._next, "have": sorted(self._pending), "attempt": attempt,
                     "proof": hello_proof(self.key, self.ticket, stripe, attempt, self._next).hex() if self.key else ""}
            if self.pool is not None:
                hello["keep"] = True
        send_frame(conn, Kind.HELLO, stripe, 0, 0, control_payload(hello))

    def _connect(self, stripe: int) -> Conn:
        """Return a connection for ``stripe`` with its HELLO sent: a pooled one if it still works, else dialed."""
        while self.pool is not None:
            taken = self.pool.take(self.pool_key)
            if taken is None:
                break
            conn, warm = taken
            try:
                self._hello(stripe, conn)
            except DstpError:
                conn.close()
                with self._cond:
                    self.stats.stale += 1
                continue
            with self._cond:
                self._untried.add(stripe)
                self.stats.reused += warm
            return conn
        conn = self.dial(stripe)
        try:
            self._hello(stripe, conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def start(self) -> None:
        """Open every stripe at once (one round trip, not one per stripe); raise the first failure."""
        conns: list[Conn | None] = [None] * self.streams
        errors: list[BaseException] = []

        def open_stripe(stripe: int) -> None:
            try:
                conns[stripe] = self._connect(stripe)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread below
                errors.append(exc)

        if self.streams == 1:
            open_stripe(0)
        else:
            dialers = [threading.Thread(target=open_stripe, args=(i,), name=f"dstp-dial-{i}", daemon=True)
                       for i in range(self.streams)]
            for t in dialers:
                t.start()
            for t in dialers:
                t.join()
        if errors:
            for c in conns:
                if c is not None:
                    c.close()
            raise errors[0]
        for stripe, conn in enumerate(conns):
            assert conn is not None
            with self._cond:
                self._live[stripe] = conn
            t = threading.Thread(target=self._read_stripe, args=(stripe, conn), name=f"dstp-stripe-{stripe}",
                                 daemon=True)
            self._threads.append(t)
            t.start()

    def _read_stripe(self, stripe: int, conn: Conn) -> None:
        failures = 0
        while True:
            try:
                if self._read_frames(stripe, conn):
                    self._release(stripe, conn)
                return  # clean end: transfer complete
            except _Fatal:
                return
            except DiskWriteError as exc:  # the sink cannot write (a full disk): the transfer ends, once, with it
                self._fail(exc)
                return
            except DstpError as exc:
                with self._cond:
                    if self._finished or self._error is not None:
                        return
                    self._live.pop(stripe, None)
                    stale = stripe in self._untried
                    self._untried.discard(stripe)
                if stale:  # a kept connection died while it waited: dial a fresh one, no failure counted
                    log.info("stripe %d: kept connection was closed (%s); dialing a fresh one", stripe, exc)
                    conn.close()
                    self.stats.stale += 1
                    conn = self._reconnect(stripe, 0)
                    if conn is None:
                        return
                    continue
                if isinstance(exc, IntegrityError):
                    self.stats.corrupted += 1
                failures += 1
                with self._cond:
                    self._failures[stripe] = failures
                conn.close()
                if failures > self.max_reconnects:
                    self._fail(TransportError(
                        f"stripe {stripe} failed {failures} times, last: {exc}; giving up"))
                    return
                log.info("stripe %d broke (%s); resuming", stripe, exc)
                conn = self._reconnect(stripe, failures)
                if conn is None:
                    return

    def _reconnect(self, stripe: int, attempt: int) -> Conn | None:
        """Return a new connection for a broken stripe (``attempt`` 0: a dead kept one, replaced at once)."""
        delay = min(2.0, 0.05 * 2 ** (attempt - 1)) if attempt else 0.0
        last: DstpError | None = None
        for _ in range(3):
            time.sleep(delay)
            with self._cond:
                if self._finished or self._error is not None:
                    return None
            try:
                conn = self.dial(stripe)
            except DstpError as exc:
                last = exc
                delay = min(2.0, max(delay, 0.05) * 2)
                continue
            try:
                self._hello(stripe, conn)
            except DstpError as exc:
                conn.close()
                last = exc
                delay = min(2.0, max(delay, 0.05) * 2)
                continue
            with self._cond:
                self._live[stripe] = conn
            self.stats.reconnects += attempt > 0
            return conn
        self._fail(last or TransportError(f"stripe {stripe} could not reconnect"))
        return None

    def _read_frames(self, stripe: int, conn: Conn) -> bool:
        """Read the stripe's frames to the end of the transfer; return whether the server kept the connection."""
        while True:
            header = recv_header(conn)
            if header is None:
                with self._cond:
                    whole = self._end_seq is not None and all(
                        s in self._pending for s in range(self._next, self._end_seq + 1))
                    if self._finished or whole or (self._end_seq is not None and self._next > self._end_seq):
                        return False
                raise TransportError("the server closed the data connection before the transfer ended")
            if header.kind == Kind.BYE and self._releasing:
                # The server's answer to our BYE: it sent nothing after it and waits for the next HELLO.
                recv_payload(conn, header, seal=self.seal)
                return True
            if header.kind == Kind.ERROR:
                payload = recv_payload(conn, header)
                info = _json(payload)
                with self._cond:
                    stale = stripe in self._untried
                if stale and info.get("code") == "protocol_error":
                    # A kept or pre-dialed connection the server gave up on (its HELLO deadline passed
                    # while it waited), not an answer to this HELLO.
                    raise TransportError(str(info.get("message", "kept connection refused")))
                self._fail(error_from_status(str(info.get("status", "UNAVAILABLE")),
                                             str(info.get("message", "the server reported an error")),
                                             info.get("code")))
                raise _Fatal()
            if header.kind not in (Kind.DATA, Kind.END):
                raise ProtocolError(f"unexpected {header.kind.name} frame from the server")
            seq = header.sequence
            with self._cond:
                self._untried.discard(stripe)
                if seq < self._next or seq in self._pending:
                    self._fail(IntegrityError(f"message {seq} arrived twice (stripe {stripe})"))
                    raise _Fatal()
                if self._end_seq is not None and seq > self._end_seq:
                    self._fail(ProtocolError(f"message {seq} arrived after the END of the transfer"))
                    raise _Fatal()
            native_fd = native.fd_of(conn) if self.seal is None and not header.sealed else -1
            in_place = getattr(self.sink, "receive_in_place", None) if header.kind == Kind.DATA else None
            item: Any
            if in_place is not None and native_fd >= 0:  # straight to its place in the file, checked on the way
                item = in_place(native_fd, seq, header)
            else:
                target = None
                if header.kind == Kind.DATA and self.sink is not None:
                    target = self.sink.buffer_for(seq, header.offset, header.payload_length)
                payload, crc = recv_checked(conn, header, target, self.seal)
                item = payload
                if header.kind == Kind.DATA and self.sink is not None:
                    item = self.sink.received(seq, header.offset, payload, crc)
            with self._cond:
                if header.kind == Kind.END:
                    if self._end_seq is not None or any(s > seq for s in self._pending):
                        self._fail(ProtocolError("END frame arrived out of place"))
                        raise _Fatal()
                    self._end_seq = seq
                    self.end = TransferSummary.from_end_payload(_json(payload))
                    self._pending[seq] = _END
                else:
                    self._pending[seq] = (header.offset, item, header.payload_length)
                self.stats.frames += 1
                self.stats.native_frames += native_fd >= 0
                self.stats.bytes += header.length
                self.stats.per_stripe_bytes[stripe] = self.stats.per_stripe_bytes.get(stripe, 0) + header.length
                self._last_seq[stripe] = seq
                self._last_frame = self.clock()
                self._cond.notify_all()

    def _where(self) -> str:
        """Say (under the lock) where a stalled transfer stands, stripe by stripe, for the error message.

        ``waiting for message 17 (3 later messages held); stripe 0: last #16, open; stripe 1: nothing
        yet, open, kept connection; stripe 2: last #12, closed after 2 failures``
        """
        parts = [f"waiting for message {self._next} ({len(self._pending)} later messages held)"]
        for stripe in range(self.streams):
            last = self._last_seq.get(stripe)
            state = [f"last #{last}" if last is not None else "nothing yet",
                     "open" if stripe in self._live else "closed"]
            if stripe in self._untried:
                state.append("kept connection")
            if self._failures.get(stripe):
                state.append(f"after {self._failures[stripe]} failures")
            parts.append(f"stripe {stripe}: {', '.join(state)}")
        return "; ".join(parts)

    def _fail(self, error: DstpError | DiskWriteError) -> None:
        with self._cond:
            if self._error is None and not self._finished:
                self._error = error
            self._cond.notify_all()

    # -- delivery -----------------------------------------------------------------------

    def messages(self) -> Iterator[tuple[int, int, Any]]:
        """Yield (sequence, offset, payload) in order until END; raise the transfer's error, if any.

        The payload is a memoryview, or what the sink's ``received`` returned for it.
        """
        unacked = 0
        try:
            while True:
                with self._cond:
                    starving = self._next not in self._pending and self._error is None
                if starving and unacked:
                    # Before waiting, acknowledge: a server whose window is full waits for this.
                    self._ack(self._next)
                    unacked = 0
                with self._cond:
                    while self._next not in self._pending and self._error is None:
                        if not self._cond.wait(timeout=1.0):
                            idle = self.clock() - self._last_frame
                            if idle > self.stall_timeout:
                                self._error = TransportError(
                                    f"no data arrived for {idle:.0f} s; the transfer stalled {self._where()}")
                    if self._error is not None:
                        raise self._error
                    item = self._pending.pop(self._next)
                    seq = self._next
                    self._next += 1
                if item is _END:
                    self._complete()
                    return
                offset, payload, length = item
                unacked += length
                if unacked >= self.ack_every_bytes:
                    self._ack(seq + 1)
                    unacked = 0
                yield seq, offset, payload
        finally:
            self.close()

    def summary(self) -> TransferSummary:
        """Return the server's account of the transfer with what this side saw (after ``messages()`` ends)."""
        stats = self.stats
        return (self.end or TransferSummary()).replace(
            wire_bytes=stats.bytes, reconnects=stats.reconnects, corrupted_frames=stats.corrupted,
            streams=self.streams, per_stripe_bytes=dict(stats.per_stripe_bytes), transfer_seconds=stats.seconds,
        )

    def _ack(self, upto: int) -> None:
        with self._cond:
            live = list(self._live.items())
        if not live:
            return
        stripe, conn = live[upto % len(live)]
        lock = self._send_locks.setdefault(stripe, threading.Lock())
        try:
            with lock:
                send_frame(conn, Kind.ACK, stripe, upto, 0, seal=self.seal)
        except DstpError:
            pass  # the reader will notice the broken stripe and resume

    def _complete(self) -> None:
        with self._cond:
            self._finished = True
            live = list(self._live.items())
            if self.pool is not None and live:
                self._releasing = True
                self.pool.expect(self.pool_key, len(live))
        for stripe, conn in live:
            try:
                with self._send_locks.setdefault(stripe, threading.Lock()):
                    send_frame(conn, Kind.ACK, stripe, self._next, 0, seal=self.seal)
                    send_frame(conn, Kind.BYE, stripe, 0, 0, seal=self.seal)
            except DstpError:
                pass

    def close(self) -> None:
        """Close every stripe and stop the readers.

        After a complete transfer the closing happens in the background: a UDT
        close lingers until the peer acknowledges our BYE (one round trip, 0.11 s
        across the Atlantic) and the caller already has every record.
        """
        with self._cond:
            complete = self._finished and self._error is None and self._end_seq is not None \
                and self._next > self._end_seq
            again, self._closed = self._closed, True
            self._finished = True
            live = list(self._live.values())
            self._live.clear()
            self._pending.clear()  # drop payload views (they may point into a file mapping)
            self._cond.notify_all()
        if again and not live:
            return  # closed before (``messages()`` closes at its end, its caller again): nothing left to do
        if complete and live and self._releasing:
            # Not a daemon, as the closing thread below: a process that exits now waits for its readers
            # (the server's BYE, one round trip) instead of finalizing under them — pyarrow's and gRPC's
            # C++ threads then abort the exit ("terminate called without an active exception").
            threading.Thread(target=self._return_stripes, args=(live,), name="dstp-stripes-return").start()
        elif complete and live:
            threading.Thread(target=self._shut, args=(live,), name="dstp-stripes-close").start()
        else:
            self._shut(live)

    def _shut(self, live: list[Conn]) -> None:
        for conn in live:
            conn.close()
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(timeout=READER_JOIN_S)

    def _release(self, stripe: int, conn: Conn) -> None:
        """Hand a stripe the server kept back to the pool (the reader thread, after the server's BYE)."""
        assert self.pool is not None
        with self._cond:
            if self._abandoned:
                return
            self._released.add(id(conn))
        self.pool.give(self.pool_key, conn)

    def _return_stripes(self, live: list[Conn]) -> None:
        """Wait for the readers to hand their connections back; close the ones the server did not keep."""
        assert self.pool is not None
        deadline = time.monotonic() + RELEASE_WAIT_S
        for t in self._threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        with self._cond:
            self._abandoned = True
            dropped = [conn for conn in live if id(conn) not in self._released]
        self.pool.forfeit(self.pool_key, len(dropped))
        for conn in dropped:
            conn.close()
        for t in self._threads:
            t.join(timeout=READER_JOIN_S)


def _json(payload: memoryview) -> dict[str, Any]:
    import json

    try:
        value = json.loads(bytes(payload))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError("a control frame carried invalid JSON") from exc
    if not isinstance(value, dict):
        raise ProtocolError("a control frame carried JSON that is not an object")
    return value

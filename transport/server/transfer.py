"""One transfer on the server side: messages dealt across stripes, acknowledged, resumable.

A producer thread numbers the messages of a source and queues them; each
stripe's sender takes the next queued message, so faster stripes carry more
("dealing"). Every message stays in memory until the client acknowledges it
(ACK n: all messages below n were delivered in order), which bounds memory by
``window_bytes`` — the producer waits when the window is full — and makes
resumption exact: when a stripe breaks, the messages it owned and the client
had not acknowledged become *orphans*; the client reconnects that stripe with
the same ticket and says which later messages it already holds, and only the
orphans it lacks are sent again. Nothing is lost, nothing is duplicated.

A client that stops acknowledging stalls the transfer: the producer waits
on a full window (its source marks itself blocked), or, once everything is
produced, the transfer waits for the last ACK and BYE (marked here). Each
ACK that moves the window restarts the stall timer; after
``stall_timeout_s`` without one, admission aborts the transfer through the
source's pace: every connection is closed and the slot is free. Frames from
the client are control frames only (ACK, BYE, ERROR; at most 1 MiB): a
header claiming anything else is refused before a byte of its payload is
read or reserved.

A stripe whose HELLO asked to keep its connection (``"keep": true``) is not
closed when the transfer ends: its reader stops at that stripe's BYE, its
sender at the end of the transfer, and :meth:`serve` returns True — the
connection is at a frame boundary both ways and the channel server may
answer the BYE and wait for the connection's next HELLO (channel_server.py).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from dstp.errors import DstpError, ProtocolError, TicketError, TransportError
from dstp.incidents import for_client
from dstp.transport import native
from dstp.transport.server.sources import MessageSource
from dstp.transport.wire.frames import (
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

__all__ = ["Transfer"]

log = logging.getLogger("dstp.transport")


@dataclass(slots=True)
class _Message:
    kind: Kind
    payload: Any
    offset: int
    size: int
    #: The payload's CRC-32C when its source knew it already (a file block), else None.
    crc: int | None = None


class Transfer:
    """The server side of one ticket's transfer over one or more stripes."""

    def __init__(
        self,
        key: bytes,
        source: MessageSource,
        *,
        expires_at: float,
        window_bytes: int = 64 * 2**20,
        resume_timeout: float = 60.0,
        on_done: Callable[["Transfer"], None] | None = None,
        label: str = "",
        ticket_key: bytes = b"",
        seal: Seal | None = None,
    ) -> None:
        self.key = key
        #: The ticket's key: every stripe's HELLO proves it (channel_server.py).
        self.ticket_key = ticket_key
        #: Seals the frames of a sealed transfer (DATA, END out; ACK, BYE in); None: plaintext.
        self.seal = seal
        self._attempts: dict[int, int] = {}  # stripe -> attempt number of its last accepted HELLO
        self._keep: set[int] = set()  # generations whose client asked to keep the connection after the transfer
        self._byes: set[int] = set()  # generations whose reader read the client's BYE
        self.source = source
        self.expires_at = expires_at
        self.window_bytes = max(1, window_bytes)
        self.resume_timeout = resume_timeout
        self.on_done = on_done
        self.label = label
        self._cond = threading.Condition()
        self._messages: dict[int, _Message] = {}
        self._queue: collections.deque[int] = collections.deque()
        self._owner: dict[int, int] = {}
        # per stripe: messages it owned, unacknowledged, when it broke. Only that stripe's own
        # reconnection may resend them: until then the client may still be draining them from
        # the old connection's buffers, and resending earlier would duplicate them.
        self._orphans: dict[int, set[int]] = {}
        self._acked = 0
        self._unacked_bytes = 0
        self._end_seq: int | None = None
        self._live: dict[int, tuple[int, Conn]] = {}  # stripe -> (generation, conn)
        self._generation = 0
        self._error: DstpError | None = None
        self._done = False
        self._clean = False  # done, and ended by the client's BYE without an error
        self._all_dead_since: float | None = None
        self.sent_bytes = 0
        self.resumes = 0
        self._producer = threading.Thread(target=self._produce, name=f"dstp-produce-{label}", daemon=True)
        source.pace.on_stall(self._stalled)

    # -- production ---------------------------------------------------------------------

    def start(self) -> None:
        self._producer.start()

    def _produce(self) -> None:
        seq = 0
        iterator = self.source.messages()
        known_crc = getattr(self.source, "known_crc", None)
        try:
            for payload, offset in iterator:
                size = payload.nbytes if isinstance(payload, memoryview) else len(payload)  # IPC messages too
                with self._cond:
                    while (not self._done and self._unacked_bytes
                           and self._unacked_bytes + size > self.window_bytes):
                        self._cond.wait(0.5)
                    if self._done:
                        return
                    self._messages[seq] = _Message(Kind.DATA, payload, offset, size,
                                                   known_crc(offset, size) if known_crc is not None else None)
                    self._unacked_bytes += size
                    self._queue.append(seq)
                    self._cond.notify_all()
                seq += 1
            with self._cond:
                live = list(self._live.items())
            paths: dict[str, Any] = {str(s): getattr(conn, "path_stats", dict)() for s, (_, conn) in live}
            end = control_payload(self.source.summary().replace(messages=seq, paths=paths).end_payload())
            with self._cond:
                self._messages[seq] = _Message(Kind.END, end, 0, len(end))
                self._end_seq = seq
                self._queue.append(seq)
                self._cond.notify_all()
            self.source.pace.blocked()  # all produced: what is left is the client's to take and acknowledge
        except Exception as exc:  # noqa: BLE001 - reported to the client; an incident is logged, by id
            self.fail(for_client(exc, f"data channel, transfer {self.label}"))
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:
                close()

    # -- stripes ------------------------------------------------------------------------

    def attach(self, stripe: int, conn: Conn, acked: int, have: set[int], attempt: int = 0,
               keep: bool = False) -> int:
        """Register a (re)connected stripe; return its generation. ``have``: messages ≥ ``acked`` it holds.

        ``attempt`` must exceed the stripe's previous one (TicketError): a replayed HELLO cannot take
        a stripe over. ``keep``: the connection outlives a clean end of the transfer (:meth:`serve`).
        """
        with self._cond:
            if self._done and self._error is not None:
                # The transfer failed before this stripe arrived (a read error on its first block, say): the
                # client is told why, with the incident id, not that its ticket was used.
                raise self._error
            if self._done:
                if not (self._clean and keep and attempt > self._attempts.get(stripe, -1)):
                    raise TicketError("this ticket was already used: its transfer has finished (tickets are "
                                      "single-use) — run the query again for a new one")
                # A stripe whose HELLO was on its way while the other stripes finished the transfer: nothing
                # is left to send on it; it is kept once its client says BYE on it (serve), as the others were.
                self._attempts[stripe] = attempt
                self._generation += 1
                self._keep.add(self._generation)
                return self._generation
            if attempt <= self._attempts.get(stripe, -1):
                raise TicketError(f"stripe {stripe} was already opened with attempt {attempt}: a HELLO is good "
                                  "for one connection (a resumed stripe counts its attempt up)")
            self._attempts[stripe] = attempt
            old = self._live.pop(stripe, None)
            if old is not None:
                self._orphan(stripe)
                old[1].close()
            self._ack(acked)
            orphans = self._orphans.pop(stripe, set())
            if orphans:
                self.resumes += 1
                missing = sorted(s for s in orphans if s not in have and s >= self._acked)
                # orphans the client already holds stay in memory until acknowledged, but are not resent
                self._queue.extendleft(reversed(missing))
            self._generation += 1
            self._live[stripe] = (self._generation, conn)
            if keep:
                self._keep.add(self._generation)
            self._all_dead_since = None
            self._cond.notify_all()
            return self._generation

    def _orphan(self, stripe: int) -> None:
        lost = self._orphans.setdefault(stripe, set())
        for seq, owner in list(self._owner.items()):
            if owner == stripe:
                del self._owner[seq]
                if seq >= self._acked:
                    lost.add(seq)

    def detach(self, stripe: int, generation: int) -> None:
        """Forget a stripe that broke; its unacknowledged messages wait for a resume."""
        with self._cond:
            current = self._live.get(stripe)
            if current is None or current[0] != generation:
                return
            del self._live[stripe]
            self._orphan(stripe)
            if not self._live and not self._done:
                self._all_dead_since = time.monotonic()
            self._cond.notify_all()

    def _next_for(self, stripe: int, generation: int) -> int | None:
        with self._cond:
            while True:
                current = self._live.get(stripe)
                if self._done or self._error or current is None or current[0] != generation:
                    return None
                if self._queue:
                    seq = self._queue.popleft()
                    if seq < self._acked or seq not in self._messages:
                        continue
                    self._owner[seq] = stripe
                    return seq
                self._cond.wait(1.0)

    def serve(self, stripe: int, conn: Conn, generation: int) -> bool:
        """Send this stripe's share until the transfer ends or the stripe breaks (blocks).

        Return True when the connection is kept (its HELLO asked, the transfer ended cleanly and the client
        said BYE on it): nothing more of this transfer will be sent or read on it. Otherwise it is closed.
        """
        reader = threading.Thread(target=self._read_acks, args=(stripe, conn, generation),
                                  name=f"dstp-acks-{self.label}-{stripe}", daemon=True)
        reader.start()
        file_handle = getattr(self.source, "file_handle", None)
        if native.fd_of(conn) >= 0 and self.seal is None:
            log.debug("transfer %s: stripe %d sends natively (%s%s)", self.label, stripe, native.reason(),
                      ", sendfile" if file_handle is not None else "")
        try:
            while True:
                seq = self._next_for(stripe, generation)
                if seq is None:
                    break
                msg = self._messages.get(seq)
                if msg is None:
                    continue
                send_frame(conn, msg.kind, stripe, seq, msg.offset, msg.payload, self.seal,
                           file=file_handle() if file_handle is not None and msg.kind == Kind.DATA else None,
                           body_crc=msg.crc)
                self.sent_bytes += msg.size
        except TransportError as exc:
            log.info("transfer %s: stripe %d broke while sending: %s", self.label, stripe, exc)
            self.detach(stripe, generation)
        error = self._error
        if error is not None:
            try:
                send_frame(conn, Kind.ERROR, stripe, 0, 0, control_payload(
                    {"code": error.code, "status": error.grpc_status, "message": error.message}))
            except (TransportError, OSError):
                pass
            getattr(conn, "close_after_error", conn.close)()
        reader.join(timeout=5.0)
        with self._cond:
            kept = generation in self._keep and generation in self._byes and self._error is None \
                and not reader.is_alive()
        if not kept:
            conn.close()
        return kept

    def _read_acks(self, stripe: int, conn: Conn, generation: int) -> None:
        try:
            while True:
                header = recv_header(conn, max_payload=MAX_CONTROL_PAYLOAD)
                if header is None:
                    break
                if header.kind not in (Kind.ACK, Kind.BYE, Kind.ERROR):  # before its payload is read or reserved
                    raise ProtocolError(f"unexpected {header.kind.name} frame from the client")
                frame = Frame(header.kind, header.stripe, header.sequence, header.offset,
                              recv_payload(conn, header, seal=self.seal))
                if frame.kind == Kind.ACK:
                    with self._cond:
                        moved = frame.sequence > self._acked and not self._done
                        self._ack(frame.sequence)
                        self._cond.notify_all()
                    if moved:
                        self.source.pace.progressed()
                elif frame.kind == Kind.BYE:
                    with self._cond:
                        self._byes.add(generation)
                    self.finish()
                    break
                else:
                    raise ProtocolError(f"unexpected {frame.kind.name} frame from the client")
        except DstpError as exc:
            log.info("transfer %s: stripe %d: %s", self.label, stripe, exc)
        finally:
            if not self._done:
                self.detach(stripe, generation)
            with self._cond:
                keep = generation in self._keep and generation in self._byes
            if not keep:
                conn.close()

    def _ack(self, upto: int) -> None:
        if upto <= self._acked:
            return
        for seq in range(self._acked, upto):
            msg = self._messages.pop(seq, None)
            if msg is not None:
                self._unacked_bytes -= msg.size
            self._owner.pop(seq, None)
            for lost in self._orphans.values():
                lost.discard(seq)
        self._acked = upto

    # -- ending -------------------------------------------------------------------------

    def fail(self, error: DstpError) -> None:
        """End the transfer with ``error``; every live stripe receives an ERROR frame."""
        with self._cond:
            if self._error is None and not self._done:
                self._error = error
            self._cond.notify_all()
        log.info("transfer %s failed: %s", self.label, error)
        self._finish(cancel=True)

    def finish(self) -> None:
        """End the transfer successfully (the client said BYE)."""
        self._finish(cancel=False)

    def abandon(self, reason: str) -> None:
        """End a transfer no client is coming back to."""
        log.info("transfer %s abandoned: %s", self.label, reason)
        self._finish(cancel=True)

    def _stalled(self, error: DstpError) -> None:
        """End a transfer whose client stopped taking data: close every stripe (senders blocked on a full
        socket wake up) rather than queue an ERROR frame no one reads."""
        self.abandon(error.message)

    def _finish(self, cancel: bool) -> None:
        with self._cond:
            if self._done:
                return
            self._done = True
            self._clean = not cancel and self._error is None
            live = list(self._live.values())
            self._cond.notify_all()
        if cancel:
            self.source.cancel()
        if self._error is None:
            for generation, conn in live:
                if cancel or generation not in self._keep:  # a kept stripe ends at its own BYE (serve)
                    conn.close()
        if threading.current_thread() is not self._producer:
            self._producer.join(timeout=10.0)
        with self._cond:
            self._messages.clear()
            self._queue.clear()
        self.source.close()
        if self.on_done is not None:
            self.on_done(self)

    @property
    def done(self) -> bool:
        return self._done

    @property
    def finished_clean(self) -> bool:
        """Whether the transfer ended by the client's BYE, without an error (late stripes may still be kept)."""
        return self._clean

    def idle_for(self) -> float:
        """Return for how long no stripe has been connected (0 while one is)."""
        with self._cond:
            return 0.0 if self._all_dead_since is None else time.monotonic() - self._all_dead_since

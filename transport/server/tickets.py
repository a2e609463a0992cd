"""Tickets: single-use, expiring capabilities to fetch one query's records, bound to who asked.

Query issues one ticket per channel offer; all offers of a query form a
group, and claiming any ticket of a group voids the others, so a result can
be fetched once, on one channel. A ticket is 3 bytes of version (``DT1``)
followed by 24 random bytes: unguessable, and meaningless outside the server
that issued it. The server keeps what it refers to; nothing in the ticket can
be edited to reach another query.

A ticket alone is not enough to redeem it. Each comes with a *ticket key*
(:data:`KEY_LENGTH` random bytes) that the server returns only to the client
that asked, in the same answer (``ChannelOffer.key``); redeeming proves
knowledge of the key without sending it (:mod:`dstp.transport.wire.proofs`,
which the client computes with and the server checks with).
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from dstp.errors import TicketError, TicketExpiredError

__all__ = ["KEY_LENGTH", "Ticket", "TicketStore", "TICKET_PREFIX", "TICKET_LENGTH"]

TICKET_PREFIX = b"DT1"
TICKET_LENGTH = len(TICKET_PREFIX) + 24
#: Bytes of a ticket key.
KEY_LENGTH = 32


@dataclass(frozen=True, slots=True)
class Ticket:
    """An issued ticket: its bytes, its query, its channel and its expiry."""

    token: bytes
    query_id: str
    kind: str
    expires_at: float
    #: The ticket key: returned only to the client that asked; proves that a redeemer is that client.
    key: bytes = field(default=b"", repr=False)

    @property
    def expires_at_unix_ms(self) -> int:
        return int(self.expires_at * 1000)


@dataclass(slots=True)
class _Entry:
    ticket: Ticket
    payload: Any
    group: str


class TicketStore:
    """Issues and redeems tickets; thread-safe."""

    def __init__(self, ttl_s: float, clock: Callable[[], float] = time.time) -> None:
        self.ttl_s = ttl_s
        self.clock = clock
        self._lock = threading.Lock()
        self._entries: dict[bytes, _Entry] = {}
        self._groups: dict[str, list[bytes]] = {}

    def issue(self, query_id: str, kind: str, payload: Any) -> Ticket:
        """Return a new ticket of ``query_id`` for channel ``kind``."""
        token = TICKET_PREFIX + secrets.token_bytes(TICKET_LENGTH - len(TICKET_PREFIX))
        ticket = Ticket(token, query_id, kind, self.clock() + self.ttl_s, secrets.token_bytes(KEY_LENGTH))
        with self._lock:
            self._purge()
            self._entries[token] = _Entry(ticket, payload, query_id)
            self._groups.setdefault(query_id, []).append(token)
        return ticket

    def claim(self, token: bytes, kind: str,
              check: Callable[[Ticket, Any], None] | None = None) -> tuple[Ticket, Any]:
        """Redeem ``token`` for channel ``kind``; return (ticket, payload). Voids its siblings.

        ``check(ticket, payload)`` runs before anything changes and raises (TicketError) to refuse:
        a redeemer who cannot prove the ticket is theirs leaves it intact for its owner.
        """
        if not isinstance(token, (bytes, bytearray)) or len(token) != TICKET_LENGTH or not token.startswith(TICKET_PREFIX):
            raise TicketError("this is not a dstp ticket; send the ticket from a Query response unchanged")
        with self._lock:
            entry = self._entries.get(bytes(token))
            if entry is None:
                raise TicketError(
                    "unknown or already used ticket; tickets are single-use — run the query again for a new one"
                )
            if entry.ticket.kind != kind:
                raise TicketError(
                    f"this ticket is for the {entry.ticket.kind} channel, not {kind}"
                )
            if check is not None:
                check(entry.ticket, entry.payload)
            late = self.clock() - entry.ticket.expires_at
            if late <= 0:
                for sibling in self._groups.pop(entry.group, []):
                    self._entries.pop(sibling, None)
        if late > 0:
            # Kept, not voided: every stripe presenting it hears "expired", not "unknown".
            raise TicketExpiredError(
                f"the ticket expired {late:.0f} s ago (tickets live {self.ttl_s:g} s); run the query again"
            )
        return entry.ticket, entry.payload

    def _purge(self) -> None:
        now = self.clock()
        # Keep expired entries a little so a late client hears "expired", not "unknown".
        stale = [t for t, e in self._entries.items() if now > e.ticket.expires_at + 3600]
        for token in stale:
            entry = self._entries.pop(token)
            self._groups.pop(entry.group, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

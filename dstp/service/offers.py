"""Offers: the channels a request may use, each with a single-use ticket for it.

    offers.available(channels, compression)    the requested channels the server runs;
                                               refuses (never downgrades) when none is
    offers.issue(label, available, subject, …)  one Offer per channel, their tickets one group
    offers.claim(token, kind)                  (Ticket, Grant): what the ticket grants

A :class:`Grant` is what the server keeps behind a ticket: the subject (a
planned query or a checked file request), the principal that asked, the
channel and the terms agreed for it (streams, compression, congestion
control). The ticket itself carries nothing that could be edited to reach
another request; its key (``Ticket.key``) goes only to the principal that
asked, who proves it to redeem (transport/server/tickets.py).
"""

from __future__ import annotations

import itertools
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Generic, Sequence, TypeVar

from dstp.auth import ANONYMOUS, Principal
from dstp.errors import TransportUnavailableError
from dstp.transport.wire.ipc import COMPRESSIONS
from dstp.transport.server.tickets import Ticket, TicketStore

__all__ = ["CHANNELS", "ChannelInfo", "Grant", "Offer", "Offers"]

#: Channel kinds, in the order a server prefers them when a client has no preference.
CHANNELS = ("grpc", "striped", "udt")

#: Streams granted on the striped channel when the client leaves it to the server.
DEFAULT_STREAMS = 4

S = TypeVar("S")


@dataclass(frozen=True, slots=True)
class ChannelInfo:
    """A data channel the server runs: its kind, where to reach it, what it allows."""

    kind: str
    endpoint: str = ""
    max_streams: int = 1
    congestion_controls: tuple[str, ...] = ()
    #: How the channel seals its transfers' frames ("aes-256-gcm"), "" for plaintext (or gRPC: TLS's own).
    cipher: str = ""


@dataclass(frozen=True, slots=True)
class Offer:
    """How to fetch one request's data on one channel."""

    kind: str
    ticket: Ticket
    endpoint: str
    streams: int
    compression: str
    congestion_control: str
    cipher: str = ""


@dataclass(frozen=True, slots=True)
class Grant(Generic[S]):
    """What a ticket grants: a subject on one channel, on the terms agreed for it."""

    subject: S
    kind: str
    streams: int
    compression: str
    congestion_control: str
    #: Who asked: only this principal's proof redeems the ticket.
    principal: Principal = ANONYMOUS


class Offers:
    """The channels this server runs, and the tickets it issued for them."""

    def __init__(self, tickets: TicketStore) -> None:
        self.tickets = tickets
        self.channels: dict[str, ChannelInfo] = {"grpc": ChannelInfo("grpc")}
        self._counter = itertools.count(1)

    def register(self, info: ChannelInfo) -> None:
        """Offer a data channel from now on."""
        self.channels[info.kind] = info

    def label(self, prefix: str) -> str:
        """Return a new request id: ``q000001-1a2b3c4d`` (queries), ``f…`` (files)."""
        return f"{prefix}{next(self._counter):06d}-{uuid.uuid4().hex[:8]}"

    def available(self, channels: Sequence[str], compression: str) -> list[str]:
        """Return the requested channels the server runs; refuse, never downgrade, if none."""
        if compression not in COMPRESSIONS:
            raise TransportUnavailableError(
                f"compression {compression!r} is not offered; choose from {', '.join(COMPRESSIONS)}"
            )
        wanted = list(channels or CHANNELS)
        for c in wanted:
            if c not in CHANNELS:
                raise TransportUnavailableError(f"unknown channel {c!r}; channels are {', '.join(CHANNELS)}")
        available = [c for c in wanted if c in self.channels]
        if not available:
            offered = ", ".join(k for k in CHANNELS if k in self.channels)
            hint = " (the server was built without libudt; install libudt-dev and reinstall dstp)" \
                if "udt" in wanted and "udt" not in self.channels else ""
            raise TransportUnavailableError(
                f"this server does not offer {', '.join(wanted)}{hint}; it offers: {offered}"
            )
        return available

    def issue(
        self,
        label: str,
        available: Sequence[str],
        subject: S,
        *,
        streams: int,
        compression: str,
        congestion_control: str,
        principal: Principal = ANONYMOUS,
    ) -> tuple[Offer, ...]:
        """Issue one ticket per available channel for ``subject`` (all of them one group: one is redeemed)."""
        offers = []
        for kind in available:
            info = self.channels[kind]
            granted = 1 if kind != "striped" else max(1, min(streams or DEFAULT_STREAMS, info.max_streams))
            cc = ""
            if congestion_control and kind == "striped":
                if congestion_control not in info.congestion_controls:
                    raise TransportUnavailableError(
                        f"congestion control {congestion_control!r} is not allowed on this server "
                        f"(allowed: {', '.join(info.congestion_controls) or 'kernel default only'})"
                    )
                cc = congestion_control
            ticket = self.tickets.issue(label, kind, Grant(subject, kind, granted, compression, cc, principal))
            offers.append(Offer(kind, ticket, info.endpoint, granted, compression, cc, info.cipher))
        return tuple(offers)

    def claim(self, token: bytes, kind: str,
              check: Callable[[Ticket, Any], None] | None = None) -> tuple[Ticket, Grant[object]]:
        """Redeem ``token`` for channel ``kind`` (TicketError, TicketExpiredError); return it and its grant.

        ``check(ticket, grant)`` may refuse first (TicketError), leaving the ticket to its owner.
        """
        ticket, grant = self.tickets.claim(token, kind, check)
        return ticket, grant

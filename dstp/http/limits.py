"""HTTP limits that hold: request timeouts, a connection cap, body size, Host allow-list, security headers.

uvicorn (h11) gives a connection no deadline before its request arrives: a
thousand clients that send half a request each held a thousand descriptors
for a minute. :func:`guarded_protocol` returns uvicorn's h11 protocol with

* a **header deadline** (``http_header_timeout_s``, from the connection's
  start or the end of its previous response) and a **body deadline**
  (``http_body_timeout_s``, from the end of the headers); a connection past
  one is closed. Deadlines are measured by the server's monotonic ``clock``
  (never the wall clock: a step of it would cut every connection) and checked
  every ``SWEEP_S`` seconds, so a test advances the clock instead of sleeping;
* a **connection cap** (``http_max_connections``): a new connection over the
  cap closes the oldest one still waiting for its request, or, if every
  connection is busy with a response, is answered 503 and closed.

One ASGI layer goes around the app (:class:`Guard`): the ``Host`` header
must be allowed (``allowed_hosts``; a DNS-rebinding page names its own host),
a request body larger than ``http_max_body_bytes`` is refused from its
``Content-Length`` before a byte is read (or as soon as a chunked body
exceeds it), and every response carries the security headers of
:data:`SECURITY_HEADERS`.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable

import h11
from fastapi import Request
from uvicorn.protocols.http.h11_impl import H11Protocol

from dstp.errors import BadRequestError, DstpError, LimitExceededError
from dstp.http.error_responses import error_response

__all__ = ["SECURITY_HEADERS", "Guard", "HttpLimits", "allowed_hosts", "guarded_protocol", "host_allowed"]

log = logging.getLogger("dstp.http")

#: How often deadlines are checked (real seconds).
SWEEP_S = 0.1

#: Sent with every response: no framing, no MIME sniffing, no referrer leaks, scripts and styles from here only.
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", b"default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
                                 b"object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
)

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """The HTTP server's limits (from Settings) and the clock its deadlines are measured by."""

    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    max_body_bytes: int = 256 * 2**10
    max_connections: int = 256
    allowed_hosts: tuple[str, ...] = ("*",)
    clock: Callable[[], float] = time.monotonic

    @classmethod
    def from_settings(cls, settings: Any, clock: Callable[[], float] = time.monotonic) -> "HttpLimits":
        return cls(settings.http_header_timeout_s, settings.http_body_timeout_s, settings.http_max_body_bytes,
                   settings.http_max_connections, allowed_hosts(settings.allowed_hosts, settings.host), clock)


def allowed_hosts(configured: tuple[str, ...], listen_host: str) -> tuple[str, ...]:
    """Return the Host values to accept: those configured, else the loopback names on loopback, else any."""
    if configured:
        return tuple(h.lower() for h in configured)
    try:
        loopback = listen_host == "localhost" or ipaddress.ip_address(listen_host.strip("[]")).is_loopback
    except ValueError:
        loopback = False
    return (*LOOPBACK_NAMES, listen_host.lower()) if loopback else ("*",)


def host_allowed(host_header: str, allowed: tuple[str, ...]) -> bool:
    """Return whether ``host_header`` (``name``, ``name:port``, ``[v6]:port``) is allowed by ``allowed``."""
    if "*" in allowed:
        return True
    value = host_header.strip().lower()
    if value.startswith("["):
        name = value[1:value.find("]")] if "]" in value else value
    else:
        name = value.rsplit(":", 1)[0] if value.count(":") == 1 else value
    return value in allowed or name in allowed or f"[{name}]" in allowed


# -- the protocol: deadlines and the connection cap ------------------------------------------------

_SERVICE_UNAVAILABLE = json.dumps({"error": {
    "code": LimitExceededError.code,
    "message": "the server has too many HTTP connections open; try again in a moment"}}).encode()


class _Sweeper:
    """Tracks the connections of one server: the phase each is in, since when; closes those past a deadline."""

    def __init__(self, limits: HttpLimits) -> None:
        self.limits = limits
        self.connections: dict[H11Protocol, tuple[Any, float]] = {}  # protocol -> (h11 state, since)
        self._armed = False
        self.closed_for_timeout = 0
        self.evicted = 0
        #: How many sweeps have run (a test waits for sweeps instead of sleeping).
        self.sweeps = 0

    def opened(self, protocol: H11Protocol) -> bool:
        """Track a new connection; return False if it must be refused (cap reached, nothing to evict)."""
        now = self.limits.clock()
        if len(self.connections) >= self.limits.max_connections:
            waiting = [(since, p) for p, (state, since) in self.connections.items() if state is h11.IDLE]
            if not waiting:
                return False
            _, oldest = min(waiting, key=lambda item: item[0])
            self.evicted += 1
            self._close(oldest)
        self.connections[protocol] = (protocol.conn.their_state, now)
        self._arm(protocol.loop)
        return True

    def closed(self, protocol: H11Protocol) -> None:
        self.connections.pop(protocol, None)

    def update(self, protocol: H11Protocol) -> None:
        """Note the phase a connection is in after it received data or finished a response."""
        entry = self.connections.get(protocol)
        if entry is not None and entry[0] is not protocol.conn.their_state:
            self.connections[protocol] = (protocol.conn.their_state, self.limits.clock())

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        if not self._armed:
            self._armed = True
            loop.call_later(SWEEP_S, self._sweep, loop)

    def _sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        self._armed = False
        self.sweeps += 1
        now = self.limits.clock()
        for protocol in list(self.connections):
            self.update(protocol)
            state, since = self.connections[protocol]
            if state is h11.IDLE:
                limit = self.limits.header_timeout_s
            elif state is h11.SEND_BODY:
                limit = self.limits.body_timeout_s
            else:
                continue
            if now - since > limit:
                self.closed_for_timeout += 1
                self._close(protocol)
        if self.connections:
            self._arm(loop)

    def _close(self, protocol: H11Protocol) -> None:
        self.connections.pop(protocol, None)
        transport = protocol.transport
        if transport is not None and not transport.is_closing():
            transport.abort()  # nothing of ours is pending on a connection still sending its request


def guarded_protocol(limits: HttpLimits) -> tuple[type[H11Protocol], _Sweeper]:
    """Return uvicorn's h11 protocol with request deadlines and the connection cap, and its sweeper."""
    sweeper = _Sweeper(limits)

    class GuardedH11Protocol(H11Protocol):
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if not sweeper.opened(self):
                body = _SERVICE_UNAVAILABLE
                transport.write(b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
                                b"retry-after: 1\r\nconnection: close\r\ncontent-length: "
                                + str(len(body)).encode() + b"\r\n\r\n" + body)
                transport.close()

        def connection_lost(self, exc: Exception | None) -> None:
            sweeper.closed(self)
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            sweeper.update(self)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            sweeper.update(self)

    return GuardedH11Protocol, sweeper


# -- the ASGI layers ---------------------------------------------------------------------------------

class Guard:
    """ASGI layer: the Host allow-list and the body-size limit; security headers on every response."""

    def __init__(self, app: Any, limits: HttpLimits) -> None:
        self.app = app
        self.limits = limits

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limits = self.limits

        async def with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                present = {k.lower() for k, _ in message.get("headers", [])}
                message = {**message, "headers": [*message.get("headers", []),
                                                  *(h for h in SECURITY_HEADERS if h[0] not in present)]}
            await send(message)

        error = self._refusal(scope)
        if error is not None:
            await error_response(Request(scope, receive), error)(scope, receive, with_headers)
            return
        received = 0

        async def counted() -> Any:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limits.max_body_bytes:
                    raise _too_large(limits.max_body_bytes, received)
            return message

        await self.app(scope, counted, with_headers)

    def _refusal(self, scope: Any) -> DstpError | None:
        """Return why a request is refused from its headers alone (a foreign Host, a body too large), or None."""
        headers = {k.lower(): v for k, v in scope.get("headers", [])}
        host = headers.get(b"host", b"").decode("latin-1")
        if host and not host_allowed(host, self.limits.allowed_hosts):
            return BadRequestError(f"this server does not answer to the host {host!r} (allowed_hosts); "
                                   "use its own address")
        length = headers.get(b"content-length")
        if length is not None:
            try:
                declared = int(length)
            except ValueError:
                declared = -1
            if declared < 0 or declared > self.limits.max_body_bytes:
                return _too_large(self.limits.max_body_bytes, declared)
        return None


def _too_large(limit: int, size: int) -> BadRequestError:
    shown = f"{size:,} bytes" if size >= 0 else "of an unreadable length"
    return BadRequestError(f"the request body is {shown}; this server accepts at most {limit:,} "
                         "(http_max_body_bytes) — a query's SQL is far shorter")

"""HTTP limits that hold: request timeouts, a connection cap, request and response sizes, Host, security headers.

uvicorn (h11) gives a connection no deadline before its request arrives: a
thousand clients that send half a request each held a thousand descriptors
for a minute. :func:`guarded_protocol` returns uvicorn's h11 protocol with

* a **header deadline** (``http_header_timeout_s``, from the connection's
  start or the end of its previous response) and a **body deadline**
  (``http_body_timeout_s``, from the end of the headers); a connection past
  one is closed. Deadlines are measured by the server's monotonic ``clock``
  (never the wall clock: a step of it would cut every connection) and checked
  every ``SWEEP_S`` seconds, so a test advances the clock instead of sleeping;
* a **connection cap** (``http_max_connections``) and a **cap per source
  address** (``max_connections_per_address``): a new connection over either
  closes the oldest one (of its address, or of all) still waiting for its
  request, or, if every such connection is busy with a response, is answered
  503 and closed;
* a **request head cap** (:attr:`HttpLimits.max_head_bytes`: the request line
  and headers together, sized so a GET URL holds a query of ``max_sql_length``
  characters however they percent-encode). A request over it is answered
  414 (its request line alone is over) or 431 (its headers), any other
  request h11 cannot parse 400, each with the JSON error body; the rest of
  such a request is then read and dropped until the client closes (at most
  ``http_header_timeout_s``) — closing with it unread would make the kernel
  reset the connection, and most clients report the reset, not the answer.

One ASGI layer goes around the app (:class:`Guard`): the ``Host`` header
must be allowed (``allowed_hosts``; a DNS-rebinding page names its own host),
a request body larger than ``http_max_body_bytes`` is refused from its
``Content-Length`` before a byte is read (or as soon as a chunked body
exceeds it: such a body is read by this layer, at most that many bytes, before
the app sees it, so the refusal is the limit's own message), and every
response carries the security headers of :data:`SECURITY_HEADERS`. A
response header longer than :data:`MAX_RESPONSE_HEADER_BYTES`, or headers
longer than :data:`MAX_RESPONSE_HEAD_BYTES` together, is a bug of ours: it is
never sent (clients fail on it without a word); the request gets ``500
internal`` with an incident id instead.
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

__all__ = ["MAX_RESPONSE_HEAD_BYTES", "MAX_RESPONSE_HEADER_BYTES", "SECURITY_HEADERS", "Guard", "HttpLimits",
           "ResponseHeaderTooLarge", "allowed_hosts", "guarded_protocol", "host_allowed", "request_head_limit"]

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

#: The most bytes one response header may take (name, ": " and value). Every common client reads it: aiohttp
#: (``max_field_size``) and Apache's proxy (``LimitRequestFieldSize``) stop at 8,190, Node.js and HAProxy at 16 KiB
#: for all headers together, curl and httpx at 100 KiB; nginx proxies need ``proxy_buffer_size 16k`` (SECURITY.md).
MAX_RESPONSE_HEADER_BYTES = 8_000
#: The most bytes all of a response's headers may take together (Node.js and HAProxy read 16 KiB).
MAX_RESPONSE_HEAD_BYTES = 16_000

#: Bytes one character of a query may take in a URL: up to 4 of UTF-8, each percent-encoded as 3.
URL_BYTES_PER_CHARACTER = 12
#: Room in a request's head beyond its query text: the path, the other parameters, and the headers.
REQUEST_HEAD_ROOM = 16_384


def request_head_limit(max_sql_length: int) -> int:
    """Return the most bytes a request line and headers may take: a query of ``max_sql_length`` characters fits."""
    return URL_BYTES_PER_CHARACTER * max_sql_length + REQUEST_HEAD_ROOM


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """The HTTP server's limits (from Settings) and the clock its deadlines are measured by."""

    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    max_body_bytes: int = 256 * 2**10
    max_connections: int = 256
    allowed_hosts: tuple[str, ...] = ("*",)
    clock: Callable[[], float] = time.monotonic
    max_sql_length: int = 16_384
    max_per_address: int = 64

    @property
    def max_head_bytes(self) -> int:
        """The most bytes a request line and headers may take together (h11's incomplete-event cap)."""
        return request_head_limit(self.max_sql_length)

    @classmethod
    def from_settings(cls, settings: Any, clock: Callable[[], float] = time.monotonic) -> "HttpLimits":
        return cls(settings.http_header_timeout_s, settings.http_body_timeout_s, settings.http_max_body_bytes,
                   settings.http_max_connections, allowed_hosts(settings.allowed_hosts, settings.host), clock,
                   settings.max_sql_length, settings.max_connections_per_address)


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

_REASONS = {400: "Bad Request", 414: "URI Too Long", 431: "Request Header Fields Too Large",
            503: "Service Unavailable"}


def _head_refusal(request_line: int, head: int, limits: HttpLimits) -> tuple[int, BadRequestError] | None:
    """Return the status (414, 431) and error for a request whose line and head take these bytes, or None."""
    limit, chars = limits.max_head_bytes, limits.max_sql_length
    if request_line > limit:
        return 414, BadRequestError(
            f"the URL is longer than this server reads ({limit:,} bytes: room for a query of max_sql_length="
            f"{chars:,} characters, percent-encoded); send the query with POST /query and a JSON body "
            '{"sql": "..."}')
    if head > limit:
        return 431, BadRequestError(
            f"the request line and headers take more than this server reads ({limit:,} bytes together, sized "
            f"by max_sql_length={chars:,}); send fewer or shorter headers")
    return None


def _unreadable_request(received: bytes, limits: HttpLimits) -> tuple[int, BadRequestError]:
    """Return the status and error for a request h11 refused, from the bytes it had ``received`` of it."""
    line_end = received.find(b"\n")
    refusal = _head_refusal(len(received) if line_end < 0 else line_end, len(received), limits)
    return refusal or (400, BadRequestError("this is not a valid HTTP/1.1 request"))


def _raw_response(status: int, body: bytes, *extra: bytes) -> bytes:
    """Return a whole HTTP/1.1 response that closes its connection: JSON ``body`` and the security headers."""
    head = [b"HTTP/1.1 %d %s" % (status, _REASONS[status].encode()),
            b"content-type: application/json", b"connection: close", b"content-length: %d" % len(body),
            *extra, *(name + b": " + value for name, value in SECURITY_HEADERS)]
    return b"\r\n".join(head) + b"\r\n\r\n" + body


class _Sweeper:
    """Tracks the connections of one server: the phase each is in, since when; closes those past a deadline."""

    def __init__(self, limits: HttpLimits) -> None:
        self.limits = limits
        self.connections: dict[H11Protocol, tuple[Any, float]] = {}  # protocol -> (h11 state, since)
        self.addresses: dict[H11Protocol, str] = {}  # protocol -> the client's address
        self._armed = False
        self.closed_for_timeout = 0
        self.evicted = 0
        #: How many sweeps have run (a test waits for sweeps instead of sleeping).
        self.sweeps = 0

    def opened(self, protocol: H11Protocol) -> bool:
        """Track a new connection; return False if it must be refused (a cap reached, nothing to evict).

        Over its address's cap, a connection closes that address's oldest one still waiting for a request;
        over the total, the oldest such of any address.
        """
        now = self.limits.clock()
        address = _address(protocol)
        same = [p for p in self.connections if self.addresses.get(p) == address]
        for crowd, cap in ((same, self.limits.max_per_address), (list(self.connections), self.limits.max_connections)):
            if len(crowd) < cap:
                continue
            waiting = [(self.connections[p][1], p) for p in crowd if self.connections[p][0] is h11.IDLE]
            if not waiting:
                return False
            _, oldest = min(waiting, key=lambda item: item[0])
            self.evicted += 1
            self._close(oldest)
            if crowd is same:
                break  # one closed: under both caps again
        self.connections[protocol] = (protocol.conn.their_state, now)
        self.addresses[protocol] = address
        self._arm(protocol.loop)
        return True

    def closed(self, protocol: H11Protocol) -> None:
        self.connections.pop(protocol, None)
        self.addresses.pop(protocol, None)

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
            if state is h11.IDLE or state is h11.ERROR:  # ERROR: a refused request, its rest being dropped
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
        self.addresses.pop(protocol, None)
        transport = protocol.transport
        if transport is not None and not transport.is_closing():
            transport.abort()  # nothing of ours is pending on a connection still sending its request


def _address(protocol: H11Protocol) -> str:
    """Return the address a connection comes from ("" when the transport cannot tell)."""
    transport = protocol.transport
    peer = transport.get_extra_info("peername") if transport is not None else None
    return str(peer[0]) if isinstance(peer, tuple) and peer else ""


def guarded_protocol(limits: HttpLimits) -> tuple[type[H11Protocol], _Sweeper]:
    """Return uvicorn's h11 protocol with request deadlines and the connection cap, and its sweeper."""
    sweeper = _Sweeper(limits)

    class GuardedH11Protocol(H11Protocol):
        refused = False  # answered a request h11 could not parse; what the client still sends is dropped

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if not sweeper.opened(self):
                transport.write(_raw_response(503, _SERVICE_UNAVAILABLE, b"retry-after: 1"))
                transport.close()

        def connection_lost(self, exc: Exception | None) -> None:
            sweeper.closed(self)
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self.refused:
                return  # the rest of a refused request: dropped until the client closes, or its deadline
            super().data_received(data)
            sweeper.update(self)

        def send_400_response(self, msg: str) -> None:
            # uvicorn's answer to whatever h11 cannot parse is a bare text 400 and a close with the rest of the
            # request unread, which the kernel turns into a reset: clients show "connection reset", not why.
            status, error = _unreadable_request(self.conn.trailing_data[0], limits)
            log.info("refused an HTTP request h11 could not parse (%d): %s", status, error.message)
            self.refused = True
            self.transport.write(_raw_response(status, json.dumps(error.to_dict(), separators=(",", ":")).encode()))
            if self.transport.can_write_eof():
                self.transport.write_eof()
            sweeper.update(self)  # h11 is in ERROR: closed at the header deadline unless the client closes first

        def on_response_complete(self) -> None:
            super().on_response_complete()
            sweeper.update(self)

    return GuardedH11Protocol, sweeper


# -- the ASGI layers ---------------------------------------------------------------------------------

class Guard:
    """ASGI layer: the Host allow-list and the body-size limit; security headers on every response, none too long."""

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
                _check_header_sizes(message["headers"])
            await send(message)

        head = _head_size(scope)
        refusal = _head_refusal(head[0], head[1], limits)  # h11 checks only a head that arrives incomplete
        if refusal is not None:
            response = error_response(Request(scope, receive), refusal[1])
            response.status_code = refusal[0]
            await response(scope, receive, with_headers)
            return
        error = self._refusal(scope)
        if error is not None:
            await error_response(Request(scope, receive), error)(scope, receive, with_headers)
            return
        if any(k.lower() == b"transfer-encoding" for k, _ in scope.get("headers", [])):
            # A body of unknown length is read here, up to the limit, before the app: refused inside the app's
            # body parsing, the limit's message would be rewritten as "There was an error parsing the body".
            body, error = await _bounded_body(receive, limits.max_body_bytes)
            if error is not None:
                await error_response(Request(scope, receive), error)(scope, receive, with_headers)
                return
            if body is None:
                return  # the client went away before its body ended: nobody to answer
            receive = _replay(body, receive)
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


def _head_size(scope: Any) -> tuple[int, int]:
    """Return the bytes of a request's line and of its whole head (line and headers), as sent."""
    query = scope.get("query_string", b"")
    line = len(scope["method"]) + 1 + len(scope.get("raw_path") or scope["path"].encode()) + \
        (1 + len(query) if query else 0) + len(" HTTP/1.1\r\n")
    return line, line + sum(len(k) + len(v) + 4 for k, v in scope.get("headers", [])) + 2


async def _bounded_body(receive: Any, limit: int) -> tuple[bytes | None, DstpError | None]:
    """Return a request's whole body (None if the client disconnected), or the error once it exceeds ``limit``."""
    parts: list[bytes] = []
    received = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None, None
        chunk = message.get("body", b"")
        received += len(chunk)
        if received > limit:
            return None, _too_large(limit, received, at_least=True)
        parts.append(chunk)
        if not message.get("more_body", False):
            return b"".join(parts), None


def _replay(body: bytes, receive: Any) -> Callable[[], Any]:
    """Return a receive that gives ``body`` as one message, then what ``receive`` gives (a disconnect)."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> Any:
        return pending.pop() if pending else await receive()

    return replayed


class ResponseHeaderTooLarge(RuntimeError):
    """A response header over :data:`MAX_RESPONSE_HEADER_BYTES` (or all over :data:`MAX_RESPONSE_HEAD_BYTES`)."""


def _check_header_sizes(headers: list[tuple[bytes, bytes]]) -> None:
    """Raise ResponseHeaderTooLarge if a header, or all together, would be too long for common clients."""
    total = 0
    for name, value in headers:
        line = len(name) + 2 + len(value)
        if line > MAX_RESPONSE_HEADER_BYTES:
            raise ResponseHeaderTooLarge(f"the response header {name.decode('latin-1')} takes {line:,} bytes; "
                                         f"at most {MAX_RESPONSE_HEADER_BYTES:,} are sent")
        total += line + 2
    if total > MAX_RESPONSE_HEAD_BYTES:
        raise ResponseHeaderTooLarge(f"the response headers take {total:,} bytes together; at most "
                                     f"{MAX_RESPONSE_HEAD_BYTES:,} are sent")


def _too_large(limit: int, size: int, at_least: bool = False) -> BadRequestError:
    shown = f"{'at least ' if at_least else ''}{size:,} bytes" if size >= 0 else "of an unreadable length"
    return BadRequestError(f"the request body is {shown}; this server accepts at most {limit:,} "
                         "(http_max_body_bytes) — a query's SQL is far shorter")

"""UDT sockets for the data channel: availability, tuning and typed errors.

This module wraps the compiled extension :mod:`dstp.transport._udt` (a thin
pybind11 binding of libudt, built by ``setup.py`` only when libudt's headers
are present; see ``docs/udt.md``). It adds what the data channel needs on top
of the raw socket:

* :func:`available` / :func:`unavailable_reason` -- whether the extension was
  built, so the server can advertise the UDT channel only when it works;
* :func:`tuned_options` -- MSS, buffer sizes and flow window from the path's
  MTU, round-trip time and rate;
* :func:`listen` / :func:`connect` -- sockets with those options applied in the
  order libudt requires (MSS, then UDT_FC, then the buffers);
* errors as :mod:`dstp.errors` types: every libudt failure surfaces as
  :class:`~dstp.errors.TransportError` (the libudt exception is chained as
  ``__cause__`` and its code kept in ``udt_code``), a missing extension as
  :class:`~dstp.errors.TransportUnavailableError`.

Data is never copied on the Python side: :meth:`UdtConnection.sendall` and
:meth:`UdtConnection.sendall_buffers` take any buffer-protocol object
(``bytes``, ``memoryview``, ``numpy`` arrays, ``pyarrow.Buffer``) and
:meth:`UdtConnection.recv_into` fills caller-owned memory, all with the GIL
released.

UDT has no half-close: once the peer has closed and everything it sent has
been read, a receive raises :class:`~dstp.errors.TransportError`. Protocols on
top of UDT must therefore mark the end of their stream themselves.
"""

from __future__ import annotations

import contextlib
import importlib
import ipaddress
import math
import socket as _socket
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

from dstp.errors import TransportError, TransportUnavailableError

_udt: Any  # dstp.transport._udt, or None when it was not built
_IMPORT_ERROR: str | None = None
try:  # the extension is optional: built only where libudt-dev is installed
    _udt = importlib.import_module("dstp.transport._udt")
except ImportError as exc:  # pragma: no cover - depends on the build machine
    _udt = None
    _IMPORT_ERROR = str(exc)

__all__ = [
    "DEFAULT_MTU",
    "DEFAULT_TIMEOUT",
    "IP_UDP_HEADER",
    "MAX_BUFFER",
    "MIN_BUFFER",
    "UDT_HEADER",
    "UNAVAILABLE",
    "UdtConnection",
    "UdtListener",
    "UdtOptions",
    "available",
    "connect",
    "flow_window_for",
    "listen",
    "tuned_options",
    "unavailable_reason",
]

MIB = 1 << 20
#: Message of :class:`TransportUnavailableError` when the extension is missing.
UNAVAILABLE = "unavailable: install libudt-dev and reinstall dstp"
#: Ethernet MTU, the usual path MTU on the Internet.
DEFAULT_MTU = 1500
#: IPv4 (20) + UDP (8) headers. libudt subtracts exactly this from UDT_MSS.
IP_UDP_HEADER = 28
#: Extra IP header bytes of IPv6 over IPv4 (libudt 4.x still subtracts 28).
IPV6_EXTRA_HEADER = 20
#: UDT's own data-packet header (4 x 32-bit words).
UDT_HEADER = 16
#: Bounds of the buffers :func:`tuned_options` picks.
MIN_BUFFER = 64 * MIB  # below this libudt fell to ~70 MB/s on loopback (bench/results/bulk.md)
MAX_BUFFER = 256 * MIB
#: Seconds :func:`connect` waits for the server by default.
DEFAULT_TIMEOUT = 10.0
#: Seconds close() waits for unsent data to be acknowledged (libudt: 180).
DEFAULT_LINGER = 30
# libudt bounds: UDT_MSS must leave room for headers; UDT_FC has a floor of 32.
_MIN_MSS = IP_UDP_HEADER + UDT_HEADER + 32
_MAX_MSS = 65535


def available() -> bool:
    """Return True when the UDT extension is built and importable."""
    return _udt is not None


def unavailable_reason() -> str:
    """Return why UDT cannot be used ("" when it can)."""
    if _udt is not None:
        return ""
    return UNAVAILABLE


def _require() -> Any:
    if _udt is None:
        raise TransportUnavailableError(f"the UDT data channel is {UNAVAILABLE}")
    return _udt


# ---------------------------------------------------------------------------
# Tuning
# ---------------------------------------------------------------------------


def flow_window_for(buffer_bytes: int, mss: int) -> int:
    """Return the UDT_FC (packets) matched to a buffer: ``ceil(2 * buffer / mss)``.

    libudt caps the receive buffer at UDT_FC packets (of ``mss - 28`` bytes),
    so the window must at least cover the buffer; twice the buffer in packets
    leaves that headroom without the oversized windows (hundreds of thousands
    of packets) that made raw transfers slower on this machine.
    """
    if buffer_bytes <= 0 or mss <= IP_UDP_HEADER:
        raise ValueError("buffer_bytes and mss must be positive (mss > 28)")
    return max(32, math.ceil(2 * buffer_bytes / mss))


def tuned_options(rtt_s: float, rate_bps: float, mtu: int = DEFAULT_MTU, *, ipv6: bool = False) -> dict[str, int]:
    """Return UDT options for a path of round-trip time ``rtt_s`` (seconds),
    target rate ``rate_bps`` (bits per second) and path MTU ``mtu`` (bytes).

    * ``mss``: UDT_MSS counts the whole IP packet -- libudt sends UDP payloads
      of ``UDT_MSS - 28`` bytes (``m_iPktSize = m_iMSS - 28`` in core.cpp; the
      UDT4 reference: "including all UDT, UDP, and IP headers"). So for IPv4
      ``mss = mtu``; for IPv6 ``mss = mtu - 20`` because libudt still assumes a
      20-byte IP header. Each packet then carries ``mss - 28 - 16`` data bytes.
    * ``buffer_bytes``: ``2 x`` the bandwidth-delay product
      (``rate_bps / 8 * rtt_s``), rounded up to a MiB and kept within
      [64 MiB, 256 MiB]; used for UDT_SNDBUF/UDT_RCVBUF and UDP_SNDBUF/UDP_RCVBUF
      (the kernel silently caps the UDP ones at net.core.[rw]mem_max).
    * ``flow_window``: UDT_FC = ``ceil(2 x buffer_bytes / mss)`` packets
      (:func:`flow_window_for`).

    The result also reports ``bdp_bytes`` and ``payload_bytes`` (data bytes per
    packet) for logs; pass it to :func:`listen`/:func:`connect` as
    ``**{k: v for k in ("mss", "buffer_bytes", "flow_window")}`` or via
    :meth:`UdtOptions.from_tuned`.
    """
    if rtt_s < 0 or rate_bps <= 0:
        raise ValueError("rtt_s must be >= 0 and rate_bps > 0")
    mss = int(mtu) - (IPV6_EXTRA_HEADER if ipv6 else 0)
    if not _MIN_MSS <= mss <= _MAX_MSS:
        raise ValueError(f"mtu {mtu} gives an unusable UDT_MSS {mss}")
    bdp = rate_bps / 8.0 * rtt_s
    buffer = math.ceil(2 * bdp / MIB) * MIB
    buffer = min(MAX_BUFFER, max(MIN_BUFFER, buffer))
    return {
        "mss": mss,
        "buffer_bytes": buffer,
        "flow_window": flow_window_for(buffer, mss),
        "bdp_bytes": int(bdp),
        "payload_bytes": mss - IP_UDP_HEADER - UDT_HEADER,
    }


@dataclass(frozen=True)
class UdtOptions:
    """Socket options applied by :func:`listen` and :func:`connect`.

    ``buffer_bytes=None`` keeps libudt's defaults (10 MB UDT buffers, small UDP
    buffers, UDT_FC 25600). With a buffer and ``flow_window=None`` the window is
    matched to it (:func:`flow_window_for`), otherwise libudt would cap the
    receive buffer at 25600 packets.
    """

    mss: int = DEFAULT_MTU
    buffer_bytes: int | None = None
    flow_window: int | None = None
    udp_buffer_bytes: int | None = None
    linger_s: int = DEFAULT_LINGER
    max_bandwidth: int | None = None  # bytes/s; None = unlimited

    @classmethod
    def from_tuned(cls, tuned: dict[str, int], **overrides: Any) -> UdtOptions:
        keys = ("mss", "buffer_bytes", "flow_window")
        return cls(**{k: tuned[k] for k in keys}, **overrides)

    def resolved_flow_window(self) -> int | None:
        if self.flow_window is not None:
            return self.flow_window
        if self.buffer_bytes is not None:
            return flow_window_for(self.buffer_bytes, self.mss)
        return None

    def apply(self, sock: Any) -> None:
        """Set the options on an unbound, unconnected extension socket."""
        if not _MIN_MSS <= self.mss <= _MAX_MSS:
            raise ValueError(f"mss must be in [{_MIN_MSS}, {_MAX_MSS}], got {self.mss}")
        # Order matters: buffers are converted to packets of (MSS - 28) bytes,
        # and UDT_RCVBUF is capped at UDT_FC packets.
        sock.setsockopt("UDT_MSS", self.mss)
        fc = self.resolved_flow_window()
        if fc is not None:
            sock.setsockopt("UDT_FC", fc)
        if self.buffer_bytes is not None:
            sock.setsockopt("UDT_SNDBUF", self.buffer_bytes)
            sock.setsockopt("UDT_RCVBUF", self.buffer_bytes)
        udp = self.udp_buffer_bytes if self.udp_buffer_bytes is not None else self.buffer_bytes
        if udp is not None:
            sock.setsockopt("UDP_SNDBUF", udp)
            sock.setsockopt("UDP_RCVBUF", udp)
        sock.setsockopt("UDT_LINGER", self.linger_s)
        if self.max_bandwidth is not None:
            sock.setsockopt("UDT_MAXBW", self.max_bandwidth)


# ---------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------


def _translate(exc: BaseException, what: str) -> TransportError:
    """Return the dstp error for a libudt exception raised while doing ``what``."""
    u = _udt
    detail = getattr(exc, "udt_message", "") or getattr(exc, "strerror", None) or str(exc)
    if isinstance(exc, u.UdtTimeout):
        message = f"UDT {what} timed out: {detail}"
    elif isinstance(exc, u.UdtConnectError):
        message = f"cannot open the UDT data connection ({what}): {detail}"
    elif isinstance(exc, u.UdtConnectionLost):
        message = f"the UDT data connection was lost during {what}: the peer closed it or became unreachable"
    elif isinstance(exc, u.UdtClosedError):
        message = f"UDT {what} on a connection that is already closed"
    else:
        message = f"UDT {what} failed: {detail}"
    err = TransportError(message)
    err.udt_code = getattr(exc, "code", None)  # type: ignore[attr-defined]
    return err


@contextlib.contextmanager
def _errors(what: str) -> Iterator[None]:
    try:
        yield
    except TransportError:
        raise
    except Exception as exc:
        if _udt is not None and isinstance(exc, _udt.UdtError):
            raise _translate(exc, what) from exc
        raise


def _family(host: str) -> int:
    try:
        return _socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else _socket.AF_INET
    except ValueError:
        return _socket.AF_INET  # a name: libudt resolves it as IPv4


# ---------------------------------------------------------------------------
# Connections
# ---------------------------------------------------------------------------


class UdtConnection:
    """A connected UDT stream. Thread-safe for one sender and one receiver."""

    def __init__(self, sock: Any, options: UdtOptions | None = None) -> None:
        self._sock = sock
        self.options = options

    @property
    def socket(self) -> Any:
        """The extension socket (:class:`dstp.transport._udt.UdtSocket`)."""
        return self._sock

    @property
    def closed(self) -> bool:
        return bool(self._sock.closed)

    def sendall(self, data: Any) -> None:
        """Send a whole buffer-protocol object (no copy; GIL released)."""
        with _errors("send"):
            self._sock.sendall(data)

    def sendall_buffers(self, buffers: Iterable[Any]) -> int:
        """Send buffers (e.g. the ``pyarrow.Buffer`` parts of an IPC message) in order, without copying."""
        with _errors("send"):
            return int(self._sock.sendall_buffers(buffers))

    def recv(self, n: int) -> bytes:
        """Receive up to ``n`` bytes (at least one)."""
        with _errors("receive"):
            return bytes(self._sock.recv(n))

    def recv_into(self, buffer: Any, nbytes: int = 0) -> int:
        """Receive up to ``nbytes`` (0: ``len(buffer)``) into a writable buffer; returns the count (> 0)."""
        with _errors("receive"):
            return int(self._sock.recv_into(buffer, nbytes))

    def recv_exactly_into(self, buffer: Any, nbytes: int = 0) -> None:
        """Fill exactly ``nbytes`` (0: the whole buffer); a short stream raises TransportError."""
        with _errors("receive"):
            self._sock.recvall_into(buffer, nbytes)

    def perfmon(self, clear: bool = True) -> dict[str, float]:
        """libudt's counters (UDT::TRACEINFO) as a dict; see docs/udt.md."""
        with _errors("perfmon"):
            return dict(self._sock.perfmon(clear))

    def effective_options(self) -> dict[str, int]:
        """The options libudt actually uses (after its rounding and caps)."""
        names = ("UDT_MSS", "UDT_FC", "UDT_SNDBUF", "UDT_RCVBUF", "UDP_SNDBUF", "UDP_RCVBUF", "UDT_LINGER")
        with _errors("getsockopt"):
            return {n: int(self._sock.getsockopt(n)) for n in names}

    @property
    def local_address(self) -> tuple[str, int]:
        with _errors("getsockname"):
            return tuple(self._sock.getsockname())  # type: ignore[return-value]

    @property
    def peer_address(self) -> tuple[str, int]:
        with _errors("getpeername"):
            return tuple(self._sock.getpeername())  # type: ignore[return-value]

    def close(self) -> None:
        """Close; waits up to ``linger_s`` for unsent data to be acknowledged. Idempotent."""
        with _errors("close"):
            self._sock.close()

    def __enter__(self) -> UdtConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"UdtConnection({self._sock!r})"


class UdtListener:
    """A listening UDT socket; accepted connections inherit its options."""

    def __init__(self, sock: Any, options: UdtOptions) -> None:
        self._sock = sock
        self.options = options

    @property
    def address(self) -> tuple[str, int]:
        with _errors("getsockname"):
            return tuple(self._sock.getsockname())  # type: ignore[return-value]

    def accept(self, timeout: float | None = None) -> tuple[UdtConnection, tuple[str, int]]:
        """Wait for a connection (``timeout`` seconds, None = forever)."""
        with _errors("accept"):
            sock, addr = self._sock.accept(timeout)
        return UdtConnection(sock, self.options), tuple(addr)  # type: ignore[return-value]

    def close(self) -> None:
        """Stop listening (a thread blocked in accept() gets a TransportError). Idempotent."""
        with _errors("close"):
            self._sock.close()

    def __enter__(self) -> UdtListener:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"UdtListener({self._sock!r})"


def _options(
    options: UdtOptions | None, mss: int | None, buffer_bytes: int | None, flow_window: int | None
) -> UdtOptions:
    base = options or UdtOptions()
    changes: dict[str, Any] = {}
    if mss is not None:
        changes["mss"] = mss
    if buffer_bytes is not None:
        changes["buffer_bytes"] = buffer_bytes
    if flow_window is not None:
        changes["flow_window"] = flow_window
    return UdtOptions(**{**asdict(base), **changes}) if changes else base


def listen(
    host: str,
    port: int,
    *,
    mss: int | None = None,
    buffer_bytes: int | None = None,
    flow_window: int | None = None,
    options: UdtOptions | None = None,
    backlog: int = 16,
    timeout: float | None = DEFAULT_TIMEOUT,
) -> UdtListener:
    """Return a listener on ``host:port`` (port 0: any free port, see ``.address``).

    ``timeout`` bounds creating the socket, which waits for libudt's socket table
    (see ``connect``): a table that stays locked is a ``TransportError`` naming it,
    not a server that never starts.
    """
    u = _require()
    opts = _options(options, mss, buffer_bytes, flow_window)
    with _errors(f"listen on {host}:{port}"):
        sock = u.UdtSocket(_family(host), timeout=timeout)
        try:
            opts.apply(sock)
            sock.bind(host, port)
            sock.listen(backlog)
        except BaseException:
            sock.close()
            raise
    return UdtListener(sock, opts)


def connect(
    host: str,
    port: int,
    *,
    mss: int | None = None,
    buffer_bytes: int | None = None,
    flow_window: int | None = None,
    options: UdtOptions | None = None,
    timeout: float | None = DEFAULT_TIMEOUT,
) -> UdtConnection:
    """Connect to a UDT listener within ``timeout`` seconds.

    libudt gives each handshake attempt a fixed 3 s; for a longer timeout the
    attempt is repeated on a fresh socket (so a server that starts listening a
    little late is still reached), and a shorter one cuts the attempt short.
    ``timeout=None`` makes exactly one libudt attempt (about 3 s to fail).
    The timeout covers creating the socket too: libudt can keep its socket
    table locked while its garbage collector tears down a closed connection.
    The MSS is negotiated down to the smaller of the two peers'.
    """
    u = _require()
    opts = _options(options, mss, buffer_bytes, flow_window)
    what = f"connect to {host}:{port}"
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        with _errors(what):
            # Creating the socket waits for libudt's socket table, which its
            # garbage collector can hold for minutes: that wait counts too.
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            sock = u.UdtSocket(_family(host), timeout=remaining)
            try:
                opts.apply(sock)
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                sock.connect(host, port, remaining)
                return UdtConnection(sock, opts)
            except u.UdtConnectError as exc:
                sock.close()
                # libudt's own 3 s attempt ended unanswered; try again while time remains.
                no_answer = exc.code == u.ERROR_CODES["ENOSERVER"]
                if not no_answer or deadline is None or deadline - time.monotonic() < 0.05:
                    raise
            except BaseException:
                sock.close()
                raise

"""TCP for the striped channel: connections, congestion control, buffer limits.

Both ends use it: the server's listener (:mod:`dstp.transport.server.listeners`) accepts
connections as :class:`TcpConn`, the client's ``TcpChannel`` (:mod:`dstp.transport.client.channels`)
dials them with :func:`connect`.

Two kernel facts drive the choices here (measured, see docs/transport.md):

* ``SO_SNDBUF``/``SO_RCVBUF`` switch off the kernel's buffer autotuning and
  are clamped to ``net.core.wmem_max``/``rmem_max`` (4 MiB on this machine),
  while autotuning may grow to the third value of ``net.ipv4.tcp_rmem`` (6 MiB
  by default). So an explicit buffer only helps when the wanted size lies
  between the autotuning ceiling and the explicit ceiling; :func:`buffer_plan`
  decides from the live kernel values.
* ``TCP_CONGESTION`` can be set per socket to any algorithm listed in
  ``net.ipv4.tcp_allowed_congestion_control``; BBR keeps a lossy long path
  full where CUBIC collapses (100 ms, 0.1 % loss: 853 vs 5.7 Mb/s with iperf3).
"""

from __future__ import annotations

import os
import socket
import struct
import time
from dataclasses import dataclass
from pathlib import Path

from dstp.errors import TransportError, TransportUnavailableError

__all__ = [
    "KernelLimits",
    "TcpConn",
    "allowed_congestion_controls",
    "buffer_plan",
    "connect",
    "kernel_limits",
    "set_congestion_control",
]

_PROC = Path("/proc/sys/net")
try:
    #: Most buffers one sendmsg takes (an IPC message of a wide result has many).
    IOV_MAX = max(16, os.sysconf("SC_IOV_MAX"))
except (OSError, ValueError):
    IOV_MAX = 1024


def _read(path: Path, default: str = "") -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return default


def allowed_congestion_controls() -> tuple[str, ...]:
    """Return the congestion controls this process may set per socket.

    Unprivileged sockets may choose those in ``tcp_allowed_congestion_control``;
    a process with CAP_NET_ADMIN (root here) may choose any available one.
    """
    allowed = _read(_PROC / "ipv4/tcp_allowed_congestion_control").split()
    if os.geteuid() == 0:
        allowed += _read(_PROC / "ipv4/tcp_available_congestion_control").split()
    return tuple(dict.fromkeys(allowed))


def set_congestion_control(sock: socket.socket, name: str) -> None:
    """Set ``TCP_CONGESTION`` on ``sock``; TransportUnavailableError if the kernel refuses."""
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, name.encode())
    except OSError as exc:
        raise TransportUnavailableError(
            f"congestion control {name!r} is not available here ({exc.strerror}); "
            f"allowed: {', '.join(allowed_congestion_controls()) or 'none'}"
        ) from exc


@dataclass(frozen=True, slots=True)
class KernelLimits:
    """Socket buffer ceilings of this host, in bytes."""

    rmem_max: int
    wmem_max: int
    tcp_rmem_max: int
    tcp_wmem_max: int


#: How long :func:`kernel_limits` trusts what it read (four files of /proc: 0.1 ms, on every ``auto`` choice).
KERNEL_LIMITS_MAX_AGE_S = 10.0
_limits: tuple[float, KernelLimits] | None = None


def kernel_limits() -> KernelLimits:
    """Return the live socket-buffer limits (explicit ceilings and autotuning ceilings), read at most every
    :data:`KERNEL_LIMITS_MAX_AGE_S` seconds."""
    global _limits
    now = time.monotonic()
    if _limits is not None and now - _limits[0] < KERNEL_LIMITS_MAX_AGE_S:
        return _limits[1]

    def third(text: str, default: int) -> int:
        parts = text.split()
        return int(parts[2]) if len(parts) == 3 else default

    limits = KernelLimits(
        rmem_max=int(_read(_PROC / "core/rmem_max", "212992")),
        wmem_max=int(_read(_PROC / "core/wmem_max", "212992")),
        tcp_rmem_max=third(_read(_PROC / "ipv4/tcp_rmem"), 6291456),
        tcp_wmem_max=third(_read(_PROC / "ipv4/tcp_wmem"), 4194304),
    )
    _limits = (now, limits)
    return limits


def buffer_plan(wanted: int, limits: KernelLimits | None = None) -> int:
    """Return the socket buffer to set explicitly for a wanted window, or 0 to leave autotuning on.

    Explicit buffers are set only when they would give a larger window than
    autotuning can reach; Linux doubles the requested value for bookkeeping,
    so the effective ceiling of an explicit setting is ``rmem_max``.
    """
    limits = limits or kernel_limits()
    explicit_ceiling = min(limits.rmem_max, limits.wmem_max)
    auto_ceiling = min(limits.tcp_rmem_max, limits.tcp_wmem_max)
    if wanted <= auto_ceiling or explicit_ceiling <= auto_ceiling:
        return 0
    return min(wanted, explicit_ceiling)


_TCP_INFO = struct.Struct("=8B24I")  # struct tcp_info up to tcpi_total_retrans (Linux uapi/linux/tcp.h)


def tcp_path_stats(sock: socket.socket) -> dict[str, float]:
    """Return what the kernel measured on a connection: smoothed RTT, retransmissions, segments sent."""
    try:
        raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    except OSError:
        return {}
    if len(raw) < 144:
        return {}
    fields = _TCP_INFO.unpack_from(raw)
    u32 = fields[8:]
    rtt_us, total_retrans = u32[15], u32[23]
    segs_out = struct.unpack_from("=I", raw, 136)[0]
    return {"rtt_ms": rtt_us / 1000.0, "retransmits": float(total_retrans), "segments": float(segs_out)}


class TcpConn:
    """A connected TCP socket speaking frames (send without copies, receive into buffers)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._closed = False

    def send_parts(self, parts: list[memoryview | bytes]) -> None:
        """Send ``parts`` with sendmsg, at most IOV_MAX buffers a call, without copying them."""
        views = [v for v in (memoryview(p) for p in parts) if v.nbytes]
        first = 0
        try:
            while first < len(views):
                sent = self.sock.sendmsg(views[first:first + IOV_MAX])
                # drop what went out, keep sending the rest (still without copying)
                while sent:
                    size = views[first].nbytes
                    if sent >= size:
                        sent -= size
                        first += 1
                    else:
                        views[first] = views[first][sent:]
                        sent = 0
        except OSError as exc:
            raise TransportError(f"data connection lost while sending: {exc.strerror or exc}") from exc

    def native_fd(self) -> int:
        """Return the descriptor the native data path may use (transport/native.py), or -1.

        Only while the socket blocks without a timeout (the handshake's timeouts stay with Python).
        """
        return -1 if self._closed or self.sock.gettimeout() is not None else self.sock.fileno()

    def recv_into(self, view: memoryview) -> int:
        try:
            return self.sock.recv_into(view)
        except TimeoutError:
            raise  # only set during the handshake, which reports it itself
        except OSError as exc:
            raise TransportError(f"data connection lost while receiving: {exc.strerror or exc}") from exc

    def settimeout(self, seconds: float | None) -> None:
        self.sock.settimeout(seconds)

    def alive(self) -> bool:
        """Return whether an idle connection can still carry a transfer: open, and nothing unread on it.

        A peer that closed shows as end of stream, a reset as an error, and bytes nobody asked for (an
        ERROR frame of a server that gave up on it) as readable data: each makes the connection unusable.
        """
        if self._closed:
            return False
        try:
            self.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            return True
        except OSError:
            return False
        return False

    def path_stats(self) -> dict[str, float]:
        """Return the kernel's RTT and retransmission counts for this connection."""
        return tcp_path_stats(self.sock)

    def close(self) -> None:
        """Close the connection; threads blocked on it in other calls wake up (shutdown first)."""
        if self._closed:
            return
        self._closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def close_after_error(self, drain_bytes: int = 1 << 20, timeout: float = 0.5) -> None:
        """Close after sending an ERROR frame, so that the peer reads it.

        Closing with unread input makes the kernel answer with a reset, which
        destroys the ERROR frame still queued at the peer: so stop writing,
        read (and drop) what the peer sent, briefly and boundedly, then close.
        """
        try:
            self.sock.shutdown(socket.SHUT_WR)
            self.sock.settimeout(timeout)
            drained = 0
            while drained < drain_bytes:
                chunk = self.sock.recv(65536)
                if not chunk:
                    break
                drained += len(chunk)
        except OSError:
            pass
        self.close()

    def abort(self) -> None:
        """Reset the connection at once (SO_LINGER 0): the peer sees a broken stripe."""
        if self._closed:
            return
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        except OSError:
            pass
        self.close()


def configure(sock: socket.socket, *, congestion_control: str = "", buffer_bytes: int = 0) -> None:
    """Apply dstp's socket options: no Nagle, optional congestion control and explicit buffers."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if congestion_control:
        set_congestion_control(sock, congestion_control)
    if buffer_bytes:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, buffer_bytes)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer_bytes)


def connect(
    host: str, port: int, *, timeout: float = 10.0, congestion_control: str = "", buffer_bytes: int = 0
) -> TcpConn:
    """Return a configured connection to ``host:port`` (buffers set before connecting, for window scaling)."""
    try:
        # An ASCII name goes as bytes: a str makes CPython load the idna codec (~5 ms of start-up).
        name: str | bytes = host.encode("ascii") if host.isascii() else host
        infos = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise TransportError(f"cannot resolve data endpoint {host}:{port}: {exc}") from exc
    last: OSError | None = None
    for family, kind, proto, _, address in infos:
        sock = socket.socket(family, kind, proto)
        try:
            configure(sock, congestion_control=congestion_control, buffer_bytes=buffer_bytes)
            sock.settimeout(timeout)
            sock.connect(address)
            sock.settimeout(None)
            return TcpConn(sock)
        except TransportUnavailableError:
            sock.close()
            raise
        except OSError as exc:
            sock.close()
            last = exc
    raise TransportError(
        f"cannot open a data connection to {host}:{port}: {last.strerror if last else 'no address'}"
    )

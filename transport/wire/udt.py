"""The UDT data channel: the same frames, tickets and resume as striped TCP, over libudt.

Only the connection differs: :class:`UdtConn` adapts
:mod:`dstp.transport.udt_socket` (the pybind11 extension over the reference
UDT4 library) to the channel's ``Conn`` protocol, so ``DataChannelServer``,
``Transfer`` and ``StripedReceiver`` run unchanged. The server's
``UdtChannelListener`` (:mod:`dstp.transport.server.listeners`) accepts them,
the client's ``UdtChannel`` (:mod:`dstp.transport.client.channels`) dials them
with :func:`dial`; both import this module only when UDT is used (loading
libudt costs 0.1 s).

Tuning: UDT_MSS counts the whole IP packet, so it is set to the path MTU (the
route's MTU from the kernel, capped at :data:`MAX_MSS`, 32000); buffers are twice the
bandwidth-delay product (at least 64 MiB) and the flow window UDT_FC is matched
to them (``ceil(2 × buffer / MSS)``) — an oversized window made transfers
slower, not faster. The MSS is negotiated down to the smaller of the peers'.
UDT has no end-of-file: a receive after the peer closed raises, which the
frame protocol tolerates because its END frame marks the end of the data.
"""

from __future__ import annotations

import socket

from dstp.errors import TransportError
from dstp.transport import udt_socket
from dstp.transport.udt_socket import UdtOptions, available, tuned_options, unavailable_reason

__all__ = ["MAX_MSS", "UdtConn", "available", "dial", "path_mtu", "unavailable_reason"]

#: The largest UDT_MSS the channel asks for (it takes the route's MTU up to this). Only loopback (MTU 65536) and
#: IPoIB (65520) have routes above 9000. Raw libudt moving 256 MiB on loopback (bench/udt_settings.py, 5 interleaved
#: rounds, 2026-11-29), medians in MB/s: at load 1.6-1.8, MSS 32000 286, 64000 266, 16000 249, 9000 195; at load
#: 1.9-2.9, 16000 265, 9000 193; at load 3-5 the spread swamped it (64000 277, 9000 220, 32000 191). Pooled over
#: the runs, 64000 and 32000 lie within each other's spread and above 9000.
MAX_MSS = 32000


def path_mtu(host: str, port: int) -> int:
    """Return the kernel's MTU for the route to ``host`` (1500 if it cannot tell)."""
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect((host, port))
            return int(probe.getsockopt(socket.IPPROTO_IP, getattr(socket, "IP_MTU", 14)))
    except OSError:
        return 1500


class UdtConn:
    """A UDT connection speaking frames."""

    def __init__(self, connection: udt_socket.UdtConnection) -> None:
        self.connection = connection
        self.raw = connection.socket
        self._closed = False

    def send_parts(self, parts: list[memoryview | bytes]) -> None:
        try:
            self.connection.sendall_buffers(parts)
        except TransportError as exc:
            raise TransportError(f"UDT data connection lost while sending: {exc}") from exc

    def recv_into(self, view: memoryview) -> int:
        try:
            return int(self.raw.recv_into(view, view.nbytes))
        except Exception as exc:  # noqa: BLE001 - the extension's typed errors
            name = type(exc).__name__
            if name == "UdtTimeout":
                raise TimeoutError("UDT receive timed out") from exc
            if self._closed:
                return 0
            raise TransportError(f"UDT data connection lost while receiving: {exc}") from exc

    def alive(self) -> bool:
        """Return whether libudt still counts the connection as connected (a kept one the server closed is not)."""
        try:
            return not self._closed and self.raw.state() == "CONNECTED"
        except Exception:  # noqa: BLE001 - the extension's typed errors: a socket that fails to answer is dead
            return False

    def settimeout(self, seconds: float | None) -> None:
        self.raw.setsockopt("UDT_RCVTIMEO", -1 if seconds is None else int(seconds * 1000))

    def path_stats(self) -> dict[str, float]:
        """Return libudt's RTT, retransmissions and packets sent for this connection."""
        try:
            p = self.connection.perfmon(clear=False)
        except TransportError:
            return {}
        return {"rtt_ms": float(p.get("msRTT", 0.0)), "retransmits": float(p.get("pktRetransTotal", 0)),
                "segments": float(p.get("pktSentTotal", 0)), "bandwidth_mbps": float(p.get("mbpsBandwidth", 0.0))}

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self.connection.close()
        except TransportError:
            pass

    def abort(self) -> None:
        """Close at once. (Changing UDT_LINGER first would wait for the lock a blocked recv holds.)"""
        self.close()


def dial(host: str, port: int, *, rtt_s: float, rate_bps: float = 1e9, timeout: float = 10.0) -> UdtConn:
    """Return a UDT connection tuned for the path to ``host:port``."""
    mtu = min(MAX_MSS, path_mtu(host, port))
    tuned = tuned_options(max(rtt_s, 0.001), rate_bps, mtu)
    connection = udt_socket.connect(host, port, options=UdtOptions.from_tuned(tuned, linger_s=10),
                                    timeout=timeout)
    return UdtConn(connection)

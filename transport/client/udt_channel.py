"""The client's UDT data channel (imported only when UDT is chosen: loading libudt costs 0.1 s)."""

from __future__ import annotations

import math

from dstp.transport.client.channels import StripedChannel
from dstp.transport.client.pool import ConnectionPool
from dstp.transport.wire.udt import UdtConn, dial

__all__ = ["UdtChannel"]


class UdtChannel(StripedChannel):
    """UDT to ``host:port``, tuned for a path of ``rtt_s`` seconds (one stripe: UDT paces itself).

    With a ``pool`` its connection is kept between transfers, as striped TCP's are: the next
    transfer skips UDT's handshake and starts at the sending rate the last one reached. A kept
    connection is good for paths whose RTT is within a factor of two of the one it was tuned for
    (its buffers and flow window follow the RTT).
    """

    def __init__(self, host: str, port: int, *, rtt_s: float, timeout: float = 10.0,
                 pool: ConnectionPool | None = None, **receiver_options: object) -> None:
        super().__init__(pool=pool, **receiver_options)
        self.host, self.port = host, port
        self.rtt_s = rtt_s
        self.timeout = timeout
        self.pool_scope = ("udt", host, port, round(math.log2(max(rtt_s, 0.001) * 1e3)))

    def connect(self, stripe: int) -> UdtConn:
        return dial(self.host, self.port, rtt_s=self.rtt_s, timeout=self.timeout)

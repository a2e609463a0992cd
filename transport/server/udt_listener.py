"""Where the server's UDT data channel accepts connections (imported only when UDT is served)."""

from __future__ import annotations

from typing import Any

from dstp.errors import TransportError
from dstp.transport import udt_socket
from dstp.transport.udt_socket import UdtOptions
from dstp.transport.wire.udt import MAX_MSS, UdtConn, available, path_mtu, unavailable_reason

__all__ = ["UdtChannelListener"]


class UdtChannelListener:
    """The UDT channel's listening socket."""

    def __init__(self, host: str, port: int, *, mss: int = 0, buffer_bytes: int = 64 * 2**20) -> None:
        if not available():
            raise TransportError(f"the UDT data channel is {unavailable_reason()}")
        mss = mss or min(MAX_MSS, path_mtu(host, port or 9))
        self.options = UdtOptions(mss=mss, buffer_bytes=buffer_bytes, linger_s=10)
        self.listener = udt_socket.listen(host, port, options=self.options, backlog=64)
        bound = self.listener.address
        self.endpoint = f"{bound[0]}:{bound[1]}"
        self._closed = False

    def accept(self) -> tuple[UdtConn, str]:
        if self._closed:
            raise OSError("listener closed")
        try:
            conn, peer = self.listener.accept(None)  # close() from another thread wakes it
        except TransportError as exc:
            raise OSError(str(exc)) from exc
        return UdtConn(conn), f"{peer[0]}:{peer[1]}"

    def configure(self, conn: Any, options: dict[str, Any]) -> None:
        """UDT options are inherited from the listener; nothing is negotiated per transfer."""

    def close(self) -> None:
        self._closed = True
        try:
            self.listener.close()
        except TransportError:
            pass

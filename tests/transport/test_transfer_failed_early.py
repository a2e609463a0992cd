"""A transfer that fails before a stripe arrives: the stripe is told the failure, not that its ticket was used."""

from __future__ import annotations

import math
import socket
import threading
from pathlib import Path
from typing import Any

import pytest

from dstp.errors import ServerError, TicketError
from dstp.transport.server.sources import FileSource
from dstp.transport.server.transfer import Transfer
from dstp.transport.wire.tcp import TcpConn


def test_a_stripe_arriving_after_its_transfer_failed_is_told_why(tmp_path: Path) -> None:
    # A plain projection reads its first block before any stripe connects; when that read fails, the transfer
    # ends at once. A stripe arriving then was told "this ticket was already used" and the client never saw the
    # failure or its incident id (a fresh-clone run of tests/e2e/test_incidents.py, striped door).
    def broken(path: Path) -> Any:
        raise OSError(5, "the disk said EIO (injected)")

    ended = threading.Event()
    source = FileSource(tmp_path / "f.bin", [(0, 10)], 4096, opener=broken)
    transfer = Transfer(b"k" * 16, source, expires_at=math.inf, on_done=lambda _: ended.set(), label="t1")
    transfer.start()
    assert ended.wait(30)
    a, b = socket.socketpair()
    try:
        with pytest.raises(ServerError, match=r"incident [0-9a-f]{12}") as caught:
            transfer.attach(0, TcpConn(a), 0, set())
        assert not isinstance(caught.value, TicketError)
    finally:
        a.close()
        b.close()

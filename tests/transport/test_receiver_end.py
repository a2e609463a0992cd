"""A finished transfer hands its records over without waiting for the server to close or answer BYE.

After END the client sends ACK and BYE; the server's answer (closing the connection, or its BYE on
a kept one) takes one more round trip — 0.11 s across the Atlantic — which the caller must not
wait for. Here each data connection holds the news of its end at a gate, so the readers cannot
finish while the query is read; their join timeout is raised so that a client waiting for them
would hang (and the test time out).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

import dstp
from dstp.transport.client import receiver
from dstp.transport.client.tuning import AutoTuner
from faults import WrappedChannel

SQL = "select temperature, time from ccm3 where humidity > 50 limit 5000"


class _GatedAfterBye:
    """A client connection that holds the news of its end (EOF, or the error a closed UDT socket gives)
    at ``gate``: the server's answer to our BYE is the connection closing."""

    def __init__(self, inner: Any, gate: threading.Event, held: threading.Event) -> None:
        self.inner, self.gate, self.held = inner, gate, held

    def recv_into(self, view: memoryview) -> int:
        try:
            n = int(self.inner.recv_into(view))
        except Exception:
            self._hold()
            raise
        if n == 0:
            self._hold()
        return n

    def _hold(self) -> None:
        self.held.set()
        self.gate.wait(120)  # the reader learns of the end only when the test says

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("transport, streams", [("striped", 2), ("udt", 0)])
def test_the_records_are_handed_over_before_the_server_answers_bye(data_server, tmp_path, monkeypatch,
                                                                    transport, streams) -> None:
    monkeypatch.setattr(receiver, "READER_JOIN_S", 600.0)  # waiting for a held reader would hang the test
    gate, held = threading.Event(), threading.Event()
    client = dstp.Client(data_server.endpoints.grpc, tuner=AutoTuner(tmp_path / "tuning.json"),
                         wrap_channel=lambda channel: WrappedChannel(channel, lambda conn: _GatedAfterBye(conn, gate, held)))
    try:
        want = client.query(SQL)
        got = client.query(SQL, transport=transport, streams=streams)
        assert got.equals(want) and client.last_summary is not None and client.last_summary.transport == transport
        # The server closes each connection once it has our BYE: a reader gets there, and is held.
        assert held.wait(30), "no connection reached its end: the gate was never used"
    finally:
        gate.set()
        client.close()

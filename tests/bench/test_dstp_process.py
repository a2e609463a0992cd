"""The benchmark harness's processes end with their block: nothing it starts outlives a run (CI ran it as root and
left ``dstp agent`` processes behind, one per benchmark that used one)."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.dstp_process import agent  # noqa: E402


def test_an_agent_started_by_the_harness_stops_with_its_block(tmp_path: Path) -> None:
    sock = tmp_path / "agent.sock"
    with agent(sock) as running:
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(sock))  # it listens while the block runs
        pid = running.proc.pid
    with pytest.raises((ConnectionRefusedError, FileNotFoundError)):
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(sock))
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
    # it stopped on the harness's SIGTERM, right after a request's connection, not killed after the harness's wait
    assert running.proc.returncode == 0

"""A killed `dstp query -o FILE` leaves a hidden ``.FILE.dstp-partial-PID``; the next save of FILE removes it
(issue 33: it stayed forever). One of a process still running is kept: it may be another save under way."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow.csv as pacsv


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_the_next_save_removes_what_a_killed_save_left(server, tmp_path: Path) -> None:
    out = tmp_path / "out.csv"
    stale = tmp_path / f".out.csv.dstp-partial-{_dead_pid()}"
    stale.write_bytes(b"time,lat\n1990-01")  # what a save killed half-way leaves
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        busy = tmp_path / f".out.csv.dstp-partial-{running.pid}"
        busy.write_bytes(b"another save, under way")
        done = subprocess.run([sys.executable, "-m", "dstp.cli", "query", "select lat from ccm3 where lat > 80",
                               "--server", server.endpoints.grpc, "-o", str(out)],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert not stale.exists()
        assert busy.exists()  # its process still runs
    finally:
        running.kill()
        running.wait()
    assert pacsv.read_csv(out).num_rows > 0

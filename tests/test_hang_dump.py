"""The watchdog's native stack dump finishes on a process with many threads (it used to deadlock)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

THREADS = 120

SCRIPT = f"""
import os, sys, threading
sys.path.insert(0, {str(Path(__file__).parent)!r})
from hang_dump import native_stacks
release = threading.Event()
def deep(n):
    return deep(n - 1) if n else release.wait()
threads = [threading.Thread(target=deep, args=(30,), daemon=True) for _ in range({THREADS})]
for t in threads:
    t.start()
stacks = native_stacks(os.getpid())
release.set()
print(stacks.count("Thread "), len(stacks))
"""


@pytest.mark.skipif(shutil.which("gdb") is None, reason="gdb is not installed (./dev installs it)")
def test_native_stacks_of_a_process_with_many_threads_are_all_written() -> None:
    # More than 64 KiB of stacks: with gdb's output on a pipe read by a thread gdb had stopped, this hung
    # until the subprocess timeout below, and the conftest's watchdog hung the same way in a hung run.
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    threads, size = map(int, done.stdout.split())
    assert size > 64 * 1024
    assert threads > THREADS  # each thread is named in the "thread apply all" header and in its stack

"""The native stacks of a process that hangs, by gdb, for the conftest's watchdog.

gdb stops every thread of the process it attaches to — the thread waiting for gdb's answer too. With
gdb's output on a pipe that thread read, gdb blocked once the pipe held 64 KiB (a few dozen threads'
stacks) while the only reader was stopped: neither ever went on, and the run hung where it should have
ended with the stacks. gdb therefore writes into a file, read once it has detached.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile

#: How long gdb may take to attach, print every thread's stack and detach.
NATIVE_DUMP_TIMEOUT_S = 60.0


def native_stacks(pid: int, timeout_s: float = NATIVE_DUMP_TIMEOUT_S) -> str:
    """Return every thread's native stack of process ``pid`` (it may be this one), or why there are none."""
    gdb = shutil.which("gdb")
    if gdb is None:
        return "(install gdb to see the native stacks as well)\n"
    with tempfile.TemporaryFile("w+") as out:
        try:
            subprocess.run([gdb, "-p", str(pid), "-batch", "-ex", "thread apply all bt"], stdin=subprocess.DEVNULL,
                           stdout=out, stderr=subprocess.STDOUT, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            return f"(gdb gave no native stacks within {timeout_s:.0f} s)\n"
        out.seek(0)
        return out.read()

"""The kernel's floor for a download to tmpfs (``splice_floor.c``), built with cc on first use.

The binary goes to ``$XDG_CACHE_HOME/dstp/splice_floor/<hash>/`` (a hash of the source and the
flags); nothing compiled is kept in the repository.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

SOURCE = Path(__file__).resolve().parent / "splice_floor.c"
FLAGS = ("-O2", "-pthread")


def build() -> Path:
    """Return the compiled ``splice_floor`` (compiling it once per source and flags)."""
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc) is None:
        raise RuntimeError(f"{cc} not found: install a C compiler (build-essential)")
    key = hashlib.sha256(SOURCE.read_bytes() + " ".join((cc, *FLAGS)).encode()).hexdigest()[:16]
    folder = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "dstp" / "splice_floor" / key
    exe = folder / "splice_floor"
    if not exe.exists():
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f"splice_floor.{os.getpid()}.tmp"
        done = subprocess.run([cc, *FLAGS, str(SOURCE), "-o", str(tmp)], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"building {SOURCE.name} failed:\n{done.stderr}")
        tmp.replace(exe)
    return exe

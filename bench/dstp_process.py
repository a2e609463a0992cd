"""A dstp server in its own process, as users run it: ``python -m dstp.cli serve``."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence


@dataclass
class ServerProcess:
    """A running ``dstp serve`` and the endpoints it printed."""

    proc: subprocess.Popen[str]
    endpoints: dict[str, str] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def rss_bytes(self) -> tuple[int, int]:
        """Return (current RSS, peak RSS) of the server process in bytes."""
        status = Path(f"/proc/{self.pid}/status").read_text()
        values = {k: int(v.split()[0]) * 1024 for k, v in re.findall(r"^(VmRSS|VmHWM):\s+(.*)$", status, re.M)}
        return values.get("VmRSS", 0), values.get("VmHWM", 0)

    def cpu_seconds(self) -> float:
        """Return user+system CPU seconds the server has used so far."""
        return cpu_seconds(self.pid)


def cpu_seconds(pid: int) -> float:
    """Return user+system CPU seconds process ``pid`` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class AgentProcess:
    """A running ``dstp agent`` and its socket."""

    proc: subprocess.Popen[str]
    socket: Path

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.proc.pid)


@contextlib.contextmanager
def agent(sock: Path, *, prefix: Sequence[str] = (), env: Mapping[str, str] | None = None) -> Iterator[AgentProcess]:
    """Run ``dstp agent --socket sock`` (optionally under ``prefix``) until the block ends."""
    # --foreground: this process is the agent, so stopping it stops the agent (a background agent forks away and
    # outlived every benchmark and test that started one)
    cmd = [*prefix, sys.executable, "-m", "dstp.cli", "agent", "--foreground", "--socket", str(sock)]
    errors = tempfile.TemporaryFile("w+")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errors, text=True,
                            env={**os.environ, **(env or {})})
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        if not line.startswith("export DSTP_AGENT_SOCK="):
            proc.wait(30)
            errors.seek(0)
            raise RuntimeError(f"dstp agent did not start: {errors.read()[-500:]}")
        yield AgentProcess(proc, sock)
    finally:
        stop(proc)
        errors.close()
        if proc.stdout is not None:
            proc.stdout.close()


def stop(proc: subprocess.Popen[Any]) -> None:
    """Terminate ``proc``; kill it if it is still there 15 s later."""
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def serve(root: Path, *args: str, prefix: Sequence[str] = (), timeout: float = 120,
          env: Mapping[str, str] | None = None, stderr: Any = None) -> Iterator[ServerProcess]:
    """Run ``dstp serve root`` (optionally under ``prefix``, e.g. ``ip netns exec NS``) until the block ends.

    ``env``: variables added to this process's environment for the server (e.g. ``DSTP_SCAN_THREADS``);
    ``stderr``: a file its log goes to (default: a temporary one, shown if it fails to start).
    """
    cmd = [*prefix, sys.executable, "-m", "dstp.cli", "serve", str(root), "--port", "0", "--http-port", "-1", *args]
    errors = stderr if stderr is not None else tempfile.TemporaryFile("w+")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errors, text=True,
                            env={**os.environ, **env} if env else None)
    server = ServerProcess(proc)
    try:
        deadline = time.monotonic() + timeout
        assert proc.stdout is not None
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                code = proc.wait()
                errors.seek(0)
                raise RuntimeError(f"dstp serve exited with {code} before listening: {errors.read()[-600:]}")
            m = re.match(r"\s+(grpc|http|data|udt|flight)\s+(\S+)", line)
            if m:
                server.endpoints[m.group(1)] = m.group(2)
            if line.startswith("try:"):
                break
        if "grpc" not in server.endpoints:
            raise RuntimeError("dstp serve did not report a gRPC address")
        yield server
    finally:
        stop(proc)
        if proc.stdout:
            proc.stdout.close()
        if stderr is None:
            errors.close()

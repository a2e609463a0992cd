"""Peer processes: the services' servers and the client drivers, on loopback or in a namespace.

Every server is its own process that reads the netCDF files itself: ``dstp serve`` (gRPC,
HTTP, striped TCP and UDT endpoints) and ``python -m bench.peers.{soap,opendap,flight}``, each
of which prints ``listening SERVICE URL`` once it accepts connections. Client drivers
(:mod:`bench.peers.client`) are long-lived processes spoken to in JSON lines. ``prefix`` is
prepended to every command line (``ip netns exec NS`` on the emulated WAN path).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any, Iterator, Sequence

from bench.dstp_process import serve as serve_dstp

REPO = Path(__file__).resolve().parents[2]
PEER_SERVICES = ("soap", "opendap", "flight")


def _env() -> dict[str, str]:
    """Return the environment for child processes: ``bench`` importable from any namespace."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


def _stop(proc: subprocess.Popen[Any], grace_s: float = 10) -> None:
    """Return once ``proc`` has exited (SIGTERM, then SIGKILL after ``grace_s``)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _lines(stream: IO[str], into: queue.Queue[str | None]) -> None:
    """Return when ``stream`` ends, having put each of its lines (then None) on ``into``."""
    for line in stream:
        into.put(line)
    into.put(None)


class LineProcess:
    """A child process whose stdout is read line by line on a thread, with timeouts."""

    def __init__(self, argv: Sequence[str], log: Path, stdin: bool = False) -> None:
        self.argv = list(argv)
        self.log = log
        self._log = open(log, "w")  # noqa: SIM115 - lives as long as the process, closed in close()
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=self._log, text=True, cwd=REPO, env=_env())
        self._queue: queue.Queue[str | None] = queue.Queue()
        assert self.proc.stdout is not None
        threading.Thread(target=_lines, args=(self.proc.stdout, self._queue), daemon=True).start()

    def next_line(self, timeout_s: float) -> str:
        """Return the next stdout line; raise RuntimeError on EOF or after ``timeout_s``."""
        try:
            line = self._queue.get(timeout=timeout_s)
        except queue.Empty:
            _stop(self.proc, 2)
            raise RuntimeError(f"no answer in {timeout_s:.0f} s from {' '.join(self.argv[-6:])}; stopped it") from None
        if line is None:
            raise RuntimeError(f"process exited ({self.proc.wait()}): {self.stderr_tail()}")
        return line

    def stderr_tail(self, chars: int = 600) -> str:
        """Return the end of the process's stderr log."""
        self._log.flush()
        text = self.log.read_text(errors="replace").strip()
        return text[-chars:] if text else "(no stderr)"

    def close(self) -> None:
        """Return once the process has exited and its pipes are closed."""
        if self.proc.stdin:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        _stop(self.proc)
        if self.proc.stdout:
            self.proc.stdout.close()
        self._log.close()


class ClientDriver(LineProcess):
    """A running ``python -m bench.peers.client`` for one peer, spoken to in JSON lines."""

    def __init__(self, peer: str, url: str, logs: Path, prefix: Sequence[str] = ()) -> None:
        super().__init__([*prefix, sys.executable, "-m", "bench.peers.client", "--peer", peer, "--url", url],
                         logs / f"client-{peer}.log", stdin=True)
        self.peer = peer
        self.ready: dict[str, Any] = {}

    def wait_ready(self, timeout_s: float = 120) -> dict[str, Any]:
        """Return the driver's ready message (``ready`` False and ``error`` when set-up failed)."""
        try:
            self.ready = json.loads(self.next_line(timeout_s))
        except RuntimeError as exc:
            self.ready = {"ready": False, "peer": self.peer, "error": str(exc)}
        return self.ready

    def request(self, size: int, timeout_s: float) -> dict[str, Any]:
        """Return the driver's answer to one request of ``size`` records (``error`` on failure)."""
        if self.proc.poll() is not None or not self.ready.get("ready"):
            return {"size": size, "error": self.ready.get("error") or "client driver is not running"}
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps({"size": size}) + "\n")
            self.proc.stdin.flush()
            return dict(json.loads(self.next_line(timeout_s)))
        except (RuntimeError, OSError) as exc:
            self.ready = {"ready": False, "error": str(exc)}
            return {"size": size, "error": str(exc)}


@contextlib.contextmanager
def serve_all(root: Path, host: str, prefix: Sequence[str] = (), timeout_s: float = 120
              ) -> Iterator[dict[str, dict[str, str]]]:
    """Return (as a context) each service's endpoints, all servers running on ``host`` until the block ends.

    Keys: ``dstp`` (``grpc``, ``http``, ``data``, ``udt``) and ``soap``/``opendap``/``flight``
    (``url``, and ``log``: its stderr, readable until the block ends). A peer server that fails
    to start gets ``{"error": …}`` instead of a url.
    """
    with tempfile.TemporaryDirectory(prefix="dstp-table4-") as tmp, contextlib.ExitStack() as stack:
        starting = {}
        for service in PEER_SERVICES:
            proc = LineProcess([*prefix, sys.executable, "-m", f"bench.peers.{service}", "--root", str(root),
                                "--host", host], Path(tmp) / f"server-{service}.log")
            stack.callback(proc.close)
            starting[service] = proc
        endpoints: dict[str, dict[str, str]] = {}
        srv = stack.enter_context(serve_dstp(root, "--host", host, "--http-port", "0", prefix=prefix,
                                             timeout=timeout_s))
        endpoints["dstp"] = dict(srv.endpoints)
        deadline = time.monotonic() + timeout_s
        for service, proc in starting.items():
            try:
                line = proc.next_line(max(1.0, deadline - time.monotonic()))
                word, name, url = line.split()
                ok = word == "listening" and name == service
                endpoints[service] = {"url": url, "log": str(proc.log)} if ok else {
                    "error": f"unexpected first line {line!r}"}
            except (RuntimeError, ValueError) as exc:
                endpoints[service] = {"error": f"{service} server did not start: {exc}"}
        yield endpoints


def last_exception(log: str | Path) -> str | None:
    """Return the last ``SomeError: message`` line of a server's stderr log, if any."""
    found = None
    with contextlib.suppress(OSError):
        for line in Path(log).read_text(errors="replace").splitlines():
            if re.match(r"^[A-Za-z_.]*(Error|Exception): ", line):
                found = line.strip()[:300]
    return found

"""Helpers of the ``dstp agent`` tests: the command line, its environment, and an agent held at a gate."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Iterator

import dstp
from dstp.agent import Agent
from dstp.transport.client.tuning import AutoTuner
from faults import WrappedChannel

DSTP = [sys.executable, "-m", "dstp.cli"]


def agent_env(sock: Path | str) -> dict[str, str]:
    """Return an environment without DSTP_* settings but ``DSTP_AGENT_SOCK`` = ``sock``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSTP_")}
    env["DSTP_AGENT_SOCK"] = str(sock)
    return env


class Held:
    """A client connection that stops receiving, once ``after`` bytes have come, until ``gate`` is set."""

    def __init__(self, inner: Any, gate: threading.Event, held: threading.Event, after: int) -> None:
        self.inner, self.gate, self.held, self.after, self.position = inner, gate, held, after, 0

    def recv_into(self, view: memoryview) -> int:
        if self.position >= self.after and not self.gate.is_set():
            self.held.set()
            assert self.gate.wait(60), "the test never opened the gate"
        n = int(self.inner.recv_into(view[:max(1, min(view.nbytes, self.after - self.position))]
                                     if self.position < self.after else view))
        self.position += n
        return n

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class Said(logging.Handler):
    """Sees whether a log message with ``words`` was emitted."""

    def __init__(self, words: str) -> None:
        super().__init__(logging.INFO)
        self.words, self.seen = words, threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.words in record.getMessage():
            self.seen.set()


@contextlib.contextmanager
def gated_agent(sock: Path, tmp_path: Path, words: str
                ) -> Iterator[tuple[Agent, Callable[[list[str], int], tuple[int, str]]]]:
    """An agent in this process whose clients stop receiving on their data connection after 300 kB until a
    gate opens, and ``stop(argv, sig)``: run the dstp command ``argv`` through it, send it ``sig`` once its
    transfer is held, wait for the agent to log ``words``, open the gate; return (exit status, stderr)."""
    gate, held = threading.Event(), threading.Event()

    def connect(server: str, **kw: Any) -> dstp.Client:
        return dstp.Client(server, tuner=AutoTuner(tmp_path / "tuning.json"),
                           wrap_channel=lambda channel: WrappedChannel(
                               channel, lambda conn: Held(conn, gate, held, after=300_000)), **kw)

    def stop(argv: list[str], sig: int) -> tuple[int, str]:
        proc = subprocess.Popen([*DSTP, *argv], env=agent_env(sock), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            assert held.wait(60), "the transfer never reached the gate"
            proc.send_signal(sig)
            assert noticed.seen.wait(60), "the agent did not notice its caller stopped"
        finally:
            gate.set()  # the next block or batch arrives, and the agent stops there
            _, err = proc.communicate(timeout=60)
        return proc.returncode, err

    noticed = Said(words)
    log = logging.getLogger("dstp.agent")
    level = log.level
    log.setLevel(logging.INFO)
    log.addHandler(noticed)
    try:
        with Agent(sock, connect=connect) as agent:
            yield agent, stop
    finally:
        log.removeHandler(noticed)
        log.setLevel(level)


@contextlib.contextmanager
def refusing_agent(sock: Path, refusal: str) -> Iterator[None]:
    """An agent at ``sock`` that reads one request (closing any descriptors sent with it) and refuses it with
    ``refusal``, as an agent of another dstp release does."""
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(sock))
    listener.listen(1)

    def refuse() -> None:
        conn, _ = listener.accept()
        with conn:
            _, fds, _, _ = socket.recv_fds(conn, 65536, 2)
            for fd in fds:
                os.close(fd)
            conn.sendall(json.dumps({"error": f"bad request to the agent: {refusal}"}).encode() + b"\n")

    thread = threading.Thread(target=refuse)
    thread.start()
    try:
        yield
    finally:
        thread.join(30)
        listener.close()

"""``dstp agent``: start (in the background, as ssh-agent does, or in the foreground) or stop the agent that runs
``dstp get`` and ``dstp query`` on warm clients (:mod:`dstp.agent`; part of :mod:`dstp.cli`)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from dstp.commands import error
from dstp.errors import DstpError

__all__ = ["cmd_agent"]


def cmd_agent(args: argparse.Namespace) -> int:
    import shlex

    from dstp.agent import AGENT_ENV, new_socket_path

    if args.kill:
        return _kill_agent()
    # As ssh-agent: each agent its own socket, in a fresh private folder (removed when it stops), unless --socket.
    made = None
    if args.socket:
        path = Path(args.socket).absolute()
    else:
        path = new_socket_path()
        made = path.parent
    export = f"export {AGENT_ENV}={shlex.quote(str(path))}"
    if not args.foreground:
        return _agent_in_background(args, path, export, made)
    stop = _stop_on_signals()  # before it says it listens: a SIGTERM right after must close it, not kill it
    try:
        agent = _start_agent(args, path)
    except BaseException:
        _remove_folder(made)
        raise
    print(export, flush=True)
    print(f"dstp agent listening at {path}: with {AGENT_ENV} set, `dstp get` and `dstp query` run here on "
          f"connections kept warm (a server's unused {args.client_idle:.0f} s are closed). Ctrl-C stops it.",
          file=sys.stderr, flush=True)
    return _run_agent(agent, stop, made)


def _remove_folder(folder: Path | None) -> None:
    """Remove the private folder made for an agent's socket (and its log), if one was made."""
    if folder is not None:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)


def _kill_agent() -> int:
    """``dstp agent -k``: stop the background agent $DSTP_AGENT_PID names; print the shell lines that forget it."""
    from dstp.agent import AGENT_ENV, AGENT_PID_ENV

    pid = os.environ.get(AGENT_PID_ENV, "")
    if not pid.isdigit():
        error(f"${AGENT_PID_ENV} names no agent: stop the one you started with kill PID (`dstp agent` printed it)")
        return 1
    try:
        os.kill(int(pid), signal.SIGTERM)
    except ProcessLookupError:
        print(f"dstp: no agent runs as pid {pid} any more", file=sys.stderr)
    except PermissionError:
        error(f"pid {pid} is not a process of yours: ${AGENT_PID_ENV} is stale; not stopped")
        return 1
    print(f"unset {AGENT_ENV} {AGENT_PID_ENV}", flush=True)
    print(f"dstp agent (pid {pid}) stopped", file=sys.stderr, flush=True)
    return 0


def _start_agent(args: argparse.Namespace, path: Path) -> Any:
    from dstp.agent import Agent

    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    agent = Agent(path, client_idle_s=args.client_idle)
    agent.start()
    return agent


def _stop_on_signals() -> threading.Event:
    """Return the event SIGINT and SIGTERM set from now on."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def _run_agent(agent: Any, stop: threading.Event, made: Path | None = None) -> int:
    """Serve until ``stop`` (SIGINT or SIGTERM); then close the agent (its socket is removed, and its folder if
    made for it)."""
    # Wake now and then: a signal the kernel hands to another thread (gRPC's, the agent's) only flags the main
    # thread, whose handler then runs when it wakes; a bare wait() slept through a SIGTERM sent right after a
    # request, and the agent was killed 15 s later.
    while not stop.wait(0.5):
        pass
    agent.close()
    print(f"dstp agent stopped after {agent.requests} request(s)", file=sys.stderr, flush=True)
    _remove_folder(made)
    return 0


def _agent_in_background(args: argparse.Namespace, path: Path, export: str, made: Path | None) -> int:
    """Fork an agent that outlives this command (its output to SOCKET.log); print the shell lines to use it.

    This process returns once the agent listens (or has said why it cannot), so
    ``eval "$(dstp agent)"`` sets ``DSTP_AGENT_SOCK`` and ``DSTP_AGENT_PID`` (as ssh-agent does).
    The fork comes before anything starts a thread or loads gRPC.
    """
    from dstp.agent import AGENT_PID_ENV

    log_path = path.with_name(path.name + ".log")
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid:
        os.close(write_end)
        with os.fdopen(read_end, "rb") as said:
            answer = said.read().decode(errors="replace")
        if answer != "listening":
            os.waitpid(pid, 0)
            error(answer or f"the agent ended before it listened; see {log_path}")
            return 1
        print(f"{export}\nexport {AGENT_PID_ENV}={pid}", flush=True)
        print(f"dstp agent (pid {pid}) listening at {path}; its log: {log_path}; stop it with kill {pid} "
              '(or eval "$(dstp agent -k)")', file=sys.stderr, flush=True)
        return 0
    os.close(read_end)
    os.setsid()  # not stopped by the terminal's Ctrl-C or hang-up
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    stop = _stop_on_signals()  # before it says it listens (the kill its starter may send next must close it)
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(log, 1)
        os.dup2(log, 2)
        agent = _start_agent(args, path)
    except (OSError, DstpError) as exc:
        os.write(write_end, str(exc).encode())
        _remove_folder(made)
        return 1
    os.write(write_end, b"listening")
    os.close(write_end)
    return _run_agent(agent, stop, made)

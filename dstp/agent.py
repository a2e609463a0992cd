"""``dstp agent``: one long-lived process that keeps connections warm for short ``dstp get`` commands.

Every ``dstp get`` is a new process: it imports gRPC, dials the control connection and the data stripes,
and the stripes start in TCP slow start — on a 100 ms path, the first seconds of every download. With an
agent running and ``DSTP_AGENT_SOCK`` naming its socket (as ``SSH_AUTH_SOCK`` names ssh-agent's), ``dstp
get`` only parses its arguments, hands the request to the agent over a Unix socket and prints what comes
back. The agent runs it on a client it keeps per server and credentials, so the control channel, the pooled
stripes with their congestion windows, and what the auto-tuner measured carry over from one command to the
next. The server still checks a ticket per transfer and caps and expires idle stripes.

This module is the agent and its caller. Its top level imports the standard library only: the caller runs
inside ``dstp get``, before anything heavier is loaded; the agent imports the client when it starts.

The protocol: one request per connection, UTF-8 JSON, one object per line::

    → {"dstp_agent": 1, "op": "get", "server", "token", "tls", "ca_file",
       "dataset", "file", "out" (absolute), "offset", "length", "transport", "streams",
       "congestion_control", "progress" (true: send progress lines)}
    ← {"progress": {"bytes", "seconds", "transport", "streams"}}   at most every PROGRESS_EVERY_S
    ← {"summary": {...}}    done: the file is complete, checked and renamed (``Client.get``'s summary)
    ← {"error": "..."}      failed; the message ``dstp get`` prints
    ← {"stopped": {"partial", "state"}}   after the caller shut down its sending side: the agent stopped
                            at the next block and saved what arrived (those two files) for a resume

Only processes of the agent's own user may connect (``SO_PEERCRED``); the socket is 0600 in a folder of
that user's. Requests for the same output file run one after another, so a ``dstp get`` run again after
Ctrl-C resumes from what the stopped one saved.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import stat
import struct
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Hashable, Iterator

__all__ = ["AGENT_ENV", "Agent", "AgentError", "AgentUnavailable", "default_socket_path", "get_via_agent"]

#: The environment variable that names the agent's socket.
AGENT_ENV = "DSTP_AGENT_SOCK"
PROTOCOL = 1
#: Longest request line the agent reads (a request is a few hundred bytes).
MAX_REQUEST_BYTES = 1 << 16
#: How long the agent waits for a request line after a caller connects.
REQUEST_WAIT_S = 10.0
#: Progress lines are sent at most this often.
PROGRESS_EVERY_S = 0.1
#: How long a stopped ``dstp get`` waits for the agent to say it saved what arrived.
STOP_WAIT_S = 10.0
#: Default: a server's client (control channel and pooled stripes) unused this long is closed.
CLIENT_IDLE_S = 600.0

log = logging.getLogger("dstp.agent")


class AgentUnavailable(Exception):
    """No agent answers at the socket (none runs, or the socket is stale): run the command directly."""


class AgentError(Exception):
    """The agent ran the request and it failed; the message says why, as ``dstp get`` would."""


class _Gone(BaseException):
    """The caller shut down its side: stop the download (a BaseException, like Ctrl-C, so nothing swallows it)."""


def default_socket_path() -> Path:
    """Return where ``dstp agent`` listens by default: ``$XDG_RUNTIME_DIR``, else a private folder in /tmp."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime) and os.access(runtime, os.W_OK):
        return Path(runtime) / "dstp-agent.sock"
    return Path(tempfile.gettempdir()) / f"dstp-{os.getuid()}" / "agent.sock"


# ---------------------------------------------------------------------- the caller (inside `dstp get`)


def get_via_agent(path: str, request: dict[str, Any], progress: Callable[[dict[str, Any]], None] | None) -> dict[str, Any]:
    """Have the agent at ``path`` run a download; return its summary (as ``Client.get``'s).

    Raises AgentUnavailable when nothing answers there, AgentError when the download failed. An
    interruption (KeyboardInterrupt, or any BaseException raised by a signal handler) asks the agent to
    stop, waits up to STOP_WAIT_S for it to save what arrived, and is raised again with the agent's answer
    in ``.agent_answer`` (``{"stopped": …}``) — unless the download completed meanwhile: then its summary is
    returned, since the file is whole.
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(5.0)
        try:
            sock.connect(path)
        except OSError as exc:
            raise AgentUnavailable(exc.strerror or str(exc)) from None
        sock.settimeout(None)
        message = {"dstp_agent": PROTOCOL, "op": "get", **request, "progress": progress is not None}
        sock.sendall(json.dumps(message).encode() + b"\n")
        lines = sock.makefile("rb")
        try:
            for line in lines:
                answer = json.loads(line)
                if "progress" in answer:
                    if progress is not None:
                        progress(answer["progress"])
                    continue
                return _outcome(answer)
        except Exception:
            raise
        except BaseException as exc:  # Ctrl-C, or the signal handler of SIGTERM
            final = _stop(sock, lines)
            if "summary" in final:
                return dict(final["summary"])
            exc.agent_answer = final  # type: ignore[attr-defined]
            raise
        raise AgentError(f"the agent closed the connection without an answer (did it stop or crash? see its log); "
                         f"{request['out']} was not written: run the command again (it resumes from what was saved)")
    finally:
        sock.close()


def _outcome(answer: dict[str, Any]) -> dict[str, Any]:
    if "summary" in answer:
        return dict(answer["summary"])
    if "error" in answer:
        raise AgentError(str(answer["error"]))
    raise AgentError(f"the agent answered something this dstp does not know: {sorted(answer)}")


def _stop(sock: socket.socket, lines: Any) -> dict[str, Any]:
    """Tell the agent to stop (shut down our side); return its last answer, or {} if none came in time."""
    try:
        sock.shutdown(socket.SHUT_WR)
        sock.settimeout(STOP_WAIT_S)
        for line in lines:
            answer = json.loads(line)
            if "progress" not in answer:
                return dict(answer)
    except (OSError, ValueError):
        pass
    return {}


# ---------------------------------------------------------------------- the agent


class _Clients:
    """Clients of servers, kept by (server, credentials) while they are used; thread-safe.

    A client is taken for one request and given back after it; two requests to the same server at once
    use two clients. A client unused for ``idle_s`` is closed by :meth:`reap`.
    """

    def __init__(self, connect: Callable[..., Any], idle_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._connect, self.idle_s, self._clock = connect, idle_s, clock
        self._idle: dict[Hashable, list[tuple[float, Any]]] = {}
        self._lock = threading.Lock()

    def take(self, key: tuple[str, str, bool, str]) -> tuple[Any, bool]:
        """Return (a client for ``key``, whether it was kept from an earlier request)."""
        with self._lock:
            idle = self._idle.get(key)
            if idle:
                return idle.pop()[1], True  # the most recently used
        server, token, tls, ca_file = key
        return self._connect(server, token=token, tls=tls, ca_file=ca_file), False

    def give(self, key: Hashable, client: Any) -> None:
        with self._lock:
            self._idle.setdefault(key, []).append((self._clock(), client))

    def idle(self) -> int:
        with self._lock:
            return sum(len(v) for v in self._idle.values())

    def reap(self) -> int:
        """Close the clients unused for ``idle_s``; return how many."""
        now = self._clock()
        with self._lock:
            old = [c for v in self._idle.values() for t, c in v if now - t >= self.idle_s]
            for key in list(self._idle):
                self._idle[key] = [(t, c) for t, c in self._idle[key] if now - t < self.idle_s]
                if not self._idle[key]:
                    del self._idle[key]
        for client in old:
            client.close()
        return len(old)

    def close(self) -> None:
        with self._lock:
            clients = [c for v in self._idle.values() for _, c in v]
            self._idle.clear()
        for client in clients:
            client.close()


class _Watcher:
    """A download's progress callback: sends progress lines if asked, and raises _Gone once the caller left.

    A thread reads the caller's side until it ends: a caller that shuts down its sending side (or dies)
    is noticed at once, and the download stops at its next block.
    """

    def __init__(self, conn: socket.socket, send: Callable[[dict[str, Any]], None], report: bool, out: Path) -> None:
        self._conn, self._send, self._report, self._out = conn, send, report, out
        self._sent = 0.0
        self._lock = threading.Lock()
        #: Set when the caller's side ended before the answer was sent.
        self.gone = threading.Event()
        #: Set once the answer is out (the end of the caller's side is then no news).
        self.answered = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="dstp-agent-caller", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while True:  # ends with the connection: the caller's EOF, or the agent's shutdown after its answer
            try:
                if not self._conn.recv(4096):
                    break
            except OSError:
                break
        if not self.answered.is_set():
            log.info("the caller of %s left; stopping at the next block", self._out)
            self.gone.set()

    def __call__(self, p: Any) -> None:
        if self.gone.is_set():
            raise _Gone()
        if not self._report:
            return
        now = time.monotonic()
        with self._lock:  # shares of a cluster download report from several threads
            if now - self._sent < PROGRESS_EVERY_S:
                return
            self._sent = now
        try:
            self._send({"progress": {"bytes": p.bytes, "seconds": p.seconds, "transport": p.transport,
                                     "streams": p.streams}})
        except OSError:
            raise _Gone() from None

    def close(self) -> None:
        """Mark the request answered and end the connection (which ends the watching thread)."""
        self.answered.set()
        try:
            self._conn.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._thread.join(timeout=5)


class Agent:
    """Serve ``dstp get`` requests on the Unix socket ``path`` with clients kept warm (see the module doc).

    ``connect(server, token=, tls=, ca_file=)`` makes a client (default :func:`dstp.connect`);
    ``client_idle_s``: a server's client unused this long is closed.
    """

    def __init__(self, path: Path, *, client_idle_s: float = CLIENT_IDLE_S,
                 connect: Callable[..., Any] | None = None) -> None:
        if connect is None:
            import dstp

            connect = dstp.connect
        self.path = Path(path)
        self.clients = _Clients(connect, client_idle_s)
        self._listener: socket.socket | None = None
        self._closed = threading.Event()
        #: Output path → (its lock, requests holding or waiting for it); an entry goes with its last request.
        self._outputs: dict[str, tuple[threading.Lock, list[int]]] = {}
        self._outputs_lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        #: Downloads asked for so far (well-formed requests: done, failed or stopped).
        self.requests = 0

    def start(self) -> None:
        """Listen on ``path`` (refusing if another agent does) and serve in background threads."""
        self._listener = _listen(self.path)
        for target, name in ((self._accept, "dstp-agent-accept"), (self._reap, "dstp-agent-reap")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def close(self) -> None:
        """Stop listening, remove the socket and close every kept client (running requests finish)."""
        self._closed.set()
        if self._listener is not None:
            try:
                self._listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._listener.close()
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass
        for thread in self._threads:
            thread.join(timeout=5)
        self.clients.close()

    def __enter__(self) -> "Agent":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _reap(self) -> None:
        every = max(0.05, min(30.0, self.clients.idle_s / 4))
        while not self._closed.wait(every):
            closed = self.clients.reap()
            if closed:
                log.info("closed %d client(s) unused for %.0f s", closed, self.clients.idle_s)

    def _accept(self) -> None:
        assert self._listener is not None
        while not self._closed.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(conn,), name="dstp-agent-request", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        send_lock = threading.Lock()

        def send(answer: dict[str, Any]) -> None:
            with send_lock:
                conn.sendall(json.dumps(answer, default=str).encode() + b"\n")

        with conn:
            try:
                uid = _peer_uid(conn)
                if uid != os.getuid():
                    log.warning("refused a connection from uid %s", uid)
                    send({"error": f"this agent serves only uid {os.getuid()}"})
                    return
                conn.settimeout(REQUEST_WAIT_S)  # a caller that never sends its request does not hold a thread
                request = _read_request(conn)
                conn.settimeout(None)
                with self._outputs_lock:
                    self.requests += 1
                self._get(conn, request, send)
            except _BadRequest as exc:
                _quietly(send, {"error": f"bad request to the agent: {exc}"})
            except OSError as exc:  # the caller went away before its answer
                log.info("a caller left: %s", exc)

    def _get(self, conn: socket.socket, request: dict[str, Any], send: Callable[[dict[str, Any]], None]) -> None:
        out = Path(request["out"])
        key = (request["server"], request.get("token") or "", bool(request.get("tls")), request.get("ca_file") or "")
        watcher = _Watcher(conn, send, bool(request.get("progress")), out)
        try:
            self._run(watcher, out, key, request, send)
        finally:
            watcher.close()

    def _run(self, watcher: _Watcher, out: Path, key: tuple[str, str, bool, str], request: dict[str, Any],
             send: Callable[[dict[str, Any]], None]) -> None:
        from dstp.errors import DstpError
        from dstp.transport.files import STATE_SUFFIX, partial_path

        with self._output_lock(out):
            client, kept = self.clients.take(key)
            keep = False
            try:
                summary = client.get(request["dataset"], request["file"], out, offset=int(request.get("offset", 0)),
                                     length=int(request.get("length", -1)),
                                     transport=str(request.get("transport", "auto")),
                                     streams=int(request.get("streams", 0)),
                                     congestion_control=str(request.get("congestion_control", "")),
                                     progress=watcher)
                keep = True
            except _Gone:
                keep = True
                log.info("stopped %s at its caller's request", out)
                _quietly(send, {"stopped": {"partial": str(partial_path(out)), "state": f"{out}{STATE_SUFFIX}"}})
                return
            except (DstpError, OSError, ValueError) as exc:
                send({"error": str(exc)})
                return
            except Exception as exc:  # a bug: say so to the caller and in the agent's log, keep serving
                log.exception("request for %s failed", out)
                send({"error": f"the agent failed ({type(exc).__name__}: {exc}); see its output"})
                return
            finally:
                if keep:
                    self.clients.give(key, client)
                else:  # after an error the client may hold a broken channel: the next request dials afresh
                    client.close()
        summary["agent"] = (f"{self.path}, on a client kept from an earlier request" if kept
                            else f"{self.path}, on a new client of {key[0]}")
        send({"summary": summary})

    @contextlib.contextmanager
    def _output_lock(self, out: Path) -> Iterator[None]:
        """Hold ``out`` for one request: requests for the same output run one after the other."""
        key = str(out)
        with self._outputs_lock:
            lock, users = self._outputs.setdefault(key, (threading.Lock(), [0]))
            users[0] += 1
        try:
            with lock:
                yield
        finally:
            with self._outputs_lock:
                users[0] -= 1
                if not users[0]:  # a long-lived agent keeps no entry per output it ever wrote
                    del self._outputs[key]


class _BadRequest(Exception):
    pass


def _read_request(conn: socket.socket) -> dict[str, Any]:
    data = b""
    while b"\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            raise _BadRequest("the connection closed before a whole request line")
        data += chunk
        if len(data) > MAX_REQUEST_BYTES:
            raise _BadRequest(f"a request line longer than {MAX_REQUEST_BYTES} bytes")
    try:
        request = json.loads(data.split(b"\n", 1)[0])
    except ValueError as exc:
        raise _BadRequest(f"not JSON ({exc})") from None
    if not isinstance(request, dict) or request.get("dstp_agent") != PROTOCOL:
        raise _BadRequest(f"not a dstp agent request of protocol {PROTOCOL} (is this dstp older or newer than "
                          "the agent? restart the agent)")
    if request.get("op") != "get":
        raise _BadRequest(f"unknown op {request.get('op')!r}; this agent runs: get")
    for name in ("server", "dataset", "file", "out"):
        if not isinstance(request.get(name), str) or not request[name]:
            raise _BadRequest(f"{name!r} missing")
    if not os.path.isabs(request["out"]):
        raise _BadRequest(f"'out' must be an absolute path, not {request['out']!r}")
    return request


def _quietly(send: Callable[[dict[str, Any]], None], answer: dict[str, Any]) -> None:
    try:
        send(answer)
    except OSError:
        pass


def _peer_uid(conn: socket.socket) -> int:
    """Return the uid of the process at the other end of a Unix socket (Linux SO_PEERCRED)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[1])


def _listen(path: Path) -> socket.socket:
    """Return a listening Unix socket at ``path``, 0600, in a folder only this user can enter if we made it."""
    folder = path.parent
    if not folder.exists():
        folder.mkdir(mode=0o700, parents=True)
    info = folder.stat()
    shared = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if info.st_uid != os.getuid() and shared and not info.st_mode & stat.S_ISVTX:
        raise OSError(f"others may replace files in {folder} (not yours, writable, no sticky bit): choose a "
                      "socket in a folder of yours (--socket)")
    if os.path.lexists(path):
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            raise OSError(f"{path} exists and is not a socket; remove it or choose another --socket")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(path))
        except OSError:
            os.unlink(path)  # stale: the agent that made it is gone
        else:
            raise OSError(f"an agent already listens at {path}; use it (export {AGENT_ENV}={path}) or stop it")
        finally:
            probe.close()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        listener.bind(str(path))
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    listener.listen(64)
    return listener

"""``dstp agent``: one long-lived process that keeps connections warm for short ``dstp get`` and ``dstp query``.

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

``dstp query`` sends its options instead, and its standard output and error as file descriptors with the
request line (``SCM_RIGHTS``): the agent runs the command's own code (``dstp.commands.query_on``) on its kept client
with ``sys.stdout``/``sys.stderr`` of that thread pointing at them, so the records, the progress bar, the
messages and files written with ``-o`` are exactly the command's::

    → {"dstp_agent": 1, "op": "query", "server", "token", "tls", "ca_file", "encoding" (the caller's stdout's),
       "query": {the options of dstp.commands.AGENT_QUERY_OPTIONS; "output" absolute}}   + fds: stdout, stderr
    → {"stop": "interrupted" | "terminated"}   (optional, then the caller shuts down its side) Ctrl-C / SIGTERM:
                            the query stops at its next batch as the command would, and says so on its stderr
    ← {"exit": status}      the command's exit status; everything else went to the caller's stdout and stderr
    ← {"error": "..."}      a request the agent could not take (then nothing was written)
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

__all__ = ["AGENT_ENV", "AGENT_PID_ENV", "Agent", "AgentError", "AgentRefused", "AgentUnavailable",
           "get_via_agent", "new_socket_path", "query_via_agent"]

#: The environment variable that names the agent's socket.
AGENT_ENV = "DSTP_AGENT_SOCK"
#: The environment variable that names a background agent's process (``dstp agent -k`` stops it).
AGENT_PID_ENV = "DSTP_AGENT_PID"
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


class AgentRefused(AgentUnavailable):
    """The agent would not take the request (one older or newer than this dstp, most likely): nothing ran."""


#: How the agent's answer to a request it would not take begins.
REFUSED = "bad request to the agent: "


class AgentError(Exception):
    """The agent ran the request and it failed; the message says why, as ``dstp get`` would."""

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        #: The dstp error code of the failure (``connection_error``: no server answers), "" if none.
        self.code = code


class _Gone(BaseException):
    """The caller shut down its side: stop the download (a BaseException, like Ctrl-C, so nothing swallows it)."""


def new_socket_path() -> Path:
    """Return a socket path of a new agent's own: ``agent.sock`` in a fresh folder only this user may enter
    (``$XDG_RUNTIME_DIR/dstp-agent-XXXXXXXX``, else the same in /tmp), made now.

    One socket per agent, as ssh-agent makes one: two terminals or logins that each start an agent get
    two, and a shell uses the one its ``DSTP_AGENT_SOCK`` names (a fixed path per user made the second
    agent fail, or every terminal share the first).
    """
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = runtime if runtime and os.path.isdir(runtime) and os.access(runtime, os.W_OK) else None
    return Path(tempfile.mkdtemp(prefix="dstp-agent-", dir=base)) / "agent.sock"  # mkdtemp: mode 0700


# ---------------------------------------------------------------------- the caller (inside `dstp get`)


def get_via_agent(path: str, request: dict[str, Any], progress: Callable[[dict[str, Any]], None] | None) -> dict[str, Any]:
    """Have the agent at ``path`` run a download; return its summary (as ``Client.get``'s).

    Raises AgentUnavailable when nothing answers there, AgentError when the download failed. An
    interruption (KeyboardInterrupt, or any BaseException raised by a signal handler) asks the agent to
    stop, waits up to STOP_WAIT_S for it to save what arrived, and is raised again with the agent's answer
    in ``.agent_answer`` (``{"stopped": …}``) — unless the download completed meanwhile: then its summary is
    returned, since the file is whole.
    """
    sock = _dial(path)
    try:
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
                return dict(_answer(answer, "summary"))
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


def query_via_agent(path: str, request: dict[str, Any]) -> int:
    """Have the agent at ``path`` run a ``dstp query`` writing to this process's stdout and stderr; return its
    exit status.

    Raises AgentUnavailable when nothing answers there (or this process's stdout/stderr are not files to hand
    over), AgentError when the agent refused the request or vanished. An interruption (KeyboardInterrupt, or a
    signal handler's BaseException) is passed on ({"stop": …}); the agent stops the query at its next batch
    and says so on our stderr, and its exit status is returned — the interruption is raised again only if
    no status came within STOP_WAIT_S.
    """
    import sys

    try:
        fds = [sys.stdout.fileno(), sys.stderr.fileno()]
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError) as exc:  # io.UnsupportedOperation: not a file (a test's capture)
        raise AgentUnavailable(f"this command's output is not a file to hand over: {exc}") from None
    sock = _dial(path)
    try:
        message = {"dstp_agent": PROTOCOL, "op": "query", **request,
                   "encoding": getattr(sys.stdout, "encoding", None) or "utf-8"}
        socket.send_fds(sock, [json.dumps(message).encode() + b"\n"], fds)
        lines = sock.makefile("rb")
        try:
            for line in lines:
                return int(_answer(json.loads(line), "exit"))
        except Exception:
            raise
        except BaseException as exc:  # Ctrl-C, or the signal handler of SIGTERM
            final = _stop(sock, lines, "interrupted" if isinstance(exc, KeyboardInterrupt) else "terminated")
            if "exit" in final:
                return int(final["exit"])
            raise
        raise AgentError("the agent closed the connection without an answer (did it stop or crash? see its log); "
                         "the query's output may be missing or cut short: run the command again")
    finally:
        sock.close()


def _dial(path: str) -> socket.socket:
    """Return a connection to the agent at ``path``; AgentUnavailable if nothing answers there."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(5.0)
    try:
        sock.connect(path)
    except OSError as exc:
        sock.close()
        raise AgentUnavailable(exc.strerror or str(exc)) from None
    sock.settimeout(None)
    return sock


def _answer(answer: dict[str, Any], field: str) -> Any:
    """Return the agent's final answer's ``field`` ("summary" of a get, "exit" of a query); raise AgentRefused
    for a request it would not take (nothing ran: the command may run it itself), AgentError for a failure."""
    if field in answer:
        return answer[field]
    if "error" in answer:
        if str(answer["error"]).startswith(REFUSED):
            raise AgentRefused(str(answer["error"])[len(REFUSED):])
        raise AgentError(str(answer["error"]), str(answer.get("code") or ""))
    raise AgentError(f"the agent answered something this dstp does not know: {sorted(answer)}")


def _stop(sock: socket.socket, lines: Any, reason: str = "") -> dict[str, Any]:
    """Tell the agent to stop (say ``reason`` if given, shut down our side); return its last answer, or {} if
    none came in time."""
    try:
        if reason:
            sock.sendall(json.dumps({"stop": reason}).encode() + b"\n")
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
        #: Set when the caller's side ended (or said stop) before the answer was sent.
        self.gone = threading.Event()
        #: Why, when the caller said: "interrupted" (Ctrl-C) or "terminated" (SIGTERM); "" if it just left.
        self.reason = ""
        #: Set once the answer is out (the end of the caller's side is then no news).
        self.answered = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="dstp-agent-caller", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        said = b""
        while True:  # ends with the connection: the caller's EOF, or the agent's shutdown after its answer
            try:
                chunk = self._conn.recv(4096)
            except OSError:
                break
            if not chunk:
                break
            said = (said + chunk)[-4096:]
            if b"\n" in said and not self.gone.is_set():
                with contextlib.suppress(ValueError, AttributeError):
                    self.reason = str(json.loads(said.split(b"\n", 1)[0]).get("stop", ""))
                if self.reason and not self.answered.is_set():
                    self.gone.set()  # before saying so: whoever reads the log may rely on it being set
                    log.info("the caller of %s was %s; stopping at the next batch", self._out, self.reason)
        if not self.answered.is_set() and not self.gone.is_set():
            self.gone.set()
            log.info("the caller of %s left; stopping at the next block", self._out)

    def stop_query(self) -> None:
        """Raise what stopped the caller (``dstp query`` handles it as its own Ctrl-C or SIGTERM) once it left."""
        if self.gone.is_set():
            from dstp.commands import Terminated

            raise KeyboardInterrupt() if self.reason == "interrupted" else Terminated()

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
                request, fds = _read_request(conn)
                conn.settimeout(None)
                with self._outputs_lock:
                    self.requests += 1
                if request["op"] == "query":
                    self._query(conn, request, fds, send)
                else:
                    self._get(conn, request, send)
            except _BadRequest as exc:
                _quietly(send, {"error": f"{REFUSED}{exc}"})
            except OSError as exc:  # the caller went away before its answer
                log.info("a caller left: %s", exc)

    def _query(self, conn: socket.socket, request: dict[str, Any], fds: list[int],
               send: Callable[[dict[str, Any]], None]) -> None:
        """Run ``dstp query`` with the caller's stdout and stderr (``fds``, closed here); answer its exit status."""
        import argparse

        from dstp import commands

        args = argparse.Namespace(**request["query"])
        key = _client_key(request)
        watcher = _Watcher(conn, send, False, Path(args.output or "a query's output"))
        taken: list[tuple[Any, bool]] = []

        def run(a: argparse.Namespace) -> int:
            taken.append(self.clients.take(key))  # inside: a client that cannot be made is the command's error
            return commands.query_on(a, taken[0][0], watcher.stop_query)

        try:
            with _caller_streams(fds, str(request.get("encoding") or "utf-8")) as (out, err):
                with _redirected(out, err):
                    status = 1
                    try:
                        status = commands.run_command(run, args)
                    except Exception as exc:  # a bug: say so to the caller and in the agent's log, keep serving
                        log.exception("a query failed")
                        commands.error(f"the agent failed ({type(exc).__name__}: {exc}); see its output")
                    finally:
                        if taken and status == 1:  # after an error the client may hold a broken channel
                            taken[0][0].close()
                        elif taken:
                            self.clients.give(key, taken[0][0])
                    if args.verbose and taken:
                        print(f"agent: {self.path}, on a " + ("client kept from an earlier request" if taken[0][1]
                                                             else f"new client of {key[0]}"), file=err)
            send({"exit": status})
        finally:
            watcher.close()

    def _get(self, conn: socket.socket, request: dict[str, Any], send: Callable[[dict[str, Any]], None]) -> None:
        out = Path(request["out"])
        key = _client_key(request)
        watcher = _Watcher(conn, send, bool(request.get("progress")), out)
        try:
            self._run(watcher, out, key, request, send)
        finally:
            watcher.close()

    def _run(self, watcher: _Watcher, out: Path, key: tuple[str, str, bool, str], request: dict[str, Any],
             send: Callable[[dict[str, Any]], None]) -> None:
        from dstp.errors import DstpError
        from dstp.transport.client.files import STATE_SUFFIX, partial_path

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
                send({"error": str(exc), "code": getattr(exc, "code", "")})
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


def _client_key(request: dict[str, Any]) -> tuple[str, str, bool, str]:
    """Return which kept client serves ``request``: one per server and credentials (token, TLS, CA file)."""
    return request["server"], request.get("token") or "", bool(request.get("tls")), request.get("ca_file") or ""


class _BadRequest(Exception):
    pass


def _read_request(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """Return the request line and the file descriptors that came with it (closed here if it is refused)."""
    data, fds = b"", []
    try:
        while b"\n" not in data:
            chunk, more, _, _ = socket.recv_fds(conn, 4096, 2)
            fds += more
            if not chunk:
                raise _BadRequest("the connection closed before a whole request line")
            data += chunk
            if len(data) > MAX_REQUEST_BYTES:
                raise _BadRequest(f"a request line longer than {MAX_REQUEST_BYTES} bytes")
        return _checked(data.split(b"\n", 1)[0], fds), fds
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise


def _checked(line: bytes, fds: list[int]) -> dict[str, Any]:
    try:
        request = json.loads(line)
    except ValueError as exc:
        raise _BadRequest(f"not JSON ({exc})") from None
    if not isinstance(request, dict) or request.get("dstp_agent") != PROTOCOL:
        raise _BadRequest(f"not a dstp agent request of protocol {PROTOCOL} (is this dstp older or newer than "
                          "the agent? restart the agent)")
    op = request.get("op")
    if op not in ("get", "query"):
        raise _BadRequest(f"unknown op {op!r}; this agent runs: get, query")
    if len(fds) != (2 if op == "query" else 0):
        raise _BadRequest(f"{len(fds)} file descriptors with a {op} request (a query sends its stdout and stderr, "
                          "a get none)")
    for name in ("server",) + (("dataset", "file", "out") if op == "get" else ()):
        if not isinstance(request.get(name), str) or not request[name]:
            raise _BadRequest(f"{name!r} missing")
    if op == "get" and not os.path.isabs(request["out"]):
        raise _BadRequest(f"'out' must be an absolute path, not {request['out']!r}")
    if op == "query":
        _check_query(request.get("query"))
    return request


def _check_query(options: Any) -> None:
    """Refuse query options that are not exactly what this version's ``dstp query`` sends, with sane types."""
    from dstp.commands import AGENT_QUERY_OPTIONS

    if not isinstance(options, dict) or set(options) != set(AGENT_QUERY_OPTIONS):
        got = sorted(options) if isinstance(options, dict) else type(options).__name__
        raise _BadRequest(f"'query' must hold {', '.join(AGENT_QUERY_OPTIONS)}; got {got} (is this dstp older or "
                          "newer than the agent? restart the agent)")
    kinds = {"sql": str, "format": str, "transport": str, "max_rows": int, "streams": int,
             "allow_truncated": bool, "explain": bool, "verbose": bool}
    for name, kind in kinds.items():
        if not isinstance(options[name], kind):
            raise _BadRequest(f"query option {name!r} must be {kind.__name__}, not {options[name]!r}")
    for name in ("output", "compression"):
        if options[name] is not None and not isinstance(options[name], str):
            raise _BadRequest(f"query option {name!r} must be a string or null")
    if options["progress"] is not None and not isinstance(options["progress"], bool):
        raise _BadRequest("query option 'progress' must be true, false or null")
    if options["output"] is not None and not os.path.isabs(options["output"]):
        raise _BadRequest(f"query option 'output' must be an absolute path, not {options['output']!r}")


class _ThreadStream:
    """The agent's ``sys.stdout`` / ``sys.stderr``: what a thread writes goes to the stream it set (a caller's),
    else to the agent's own."""

    def __init__(self, default: Any) -> None:
        self._default = default
        self._local = threading.local()

    def thread_stream(self) -> Any:
        """Return the stream this thread writes to (for threads it starts: a progress bar's refresher)."""
        return getattr(self._local, "stream", None) or self._default

    def __getattr__(self, name: str) -> Any:
        return getattr(self.thread_stream(), name)


_STREAMS_LOCK = threading.Lock()


@contextlib.contextmanager
def _redirected(out: Any, err: Any) -> Iterator[None]:
    """Point this thread's ``sys.stdout`` and ``sys.stderr`` at ``out`` and ``err`` (other threads keep theirs)."""
    import sys

    with _STREAMS_LOCK:
        streams = []
        for name in ("stdout", "stderr"):
            current = getattr(sys, name)
            if not isinstance(current, _ThreadStream):
                current = _ThreadStream(current)
                setattr(sys, name, current)
            streams.append(current)
    streams[0]._local.stream, streams[1]._local.stream = out, err
    try:
        yield
    finally:
        streams[0]._local.stream = streams[1]._local.stream = None


@contextlib.contextmanager
def _caller_streams(fds: list[int], encoding: str) -> Iterator[tuple[Any, Any]]:
    """Return text streams on the caller's stdout and stderr descriptors; flushed and closed after the block
    (a caller gone meanwhile — a closed pipe — loses what was left to write, nothing else)."""
    import codecs

    try:
        codecs.lookup(encoding)
    except LookupError:
        encoding = "utf-8"
    streams = []
    try:
        for fd in list(fds):
            streams.append(open(fd, "w", buffering=1 if os.isatty(fd) else -1, encoding=encoding,  # noqa: SIM115
                                errors="backslashreplace", closefd=True))
            fds.remove(fd)
        yield streams[0], streams[1]
    finally:
        for fd in fds:
            os.close(fd)
        for stream in streams:
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
            with contextlib.suppress(OSError, ValueError):
                stream.close()


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

"""The attacks of issues 13 and 33 as real clients: raw gRPC stubs, raw sockets, half-sent HTTP requests.

Each attack runs on threads of its own until ``stop()``; ``running()`` says it still runs, so a test
can require that a probe was answered *while* the attack went on. Sizes are kept small for CI (tens
of connections, not hundreds): the limits they meet are set small in the tests' settings too.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any, Callable

import grpc

from dstp.proto import dstp_pb2 as pb
from dstp.proto import dstp_pb2_grpc as pb_grpc
from dstp.transport.wire.frames import HEADER, MAGIC, VERSION, Kind

#: 990 terms of ``+1``, as a balanced tree (the chain form is refused by the depth limit already).
def planning_bomb(terms: int = 990) -> str:
    parts = ["1"] * terms
    while len(parts) > 1:
        parts = [f"({a}+{b})" for a, b in zip(parts[::2], parts[1::2])] + (parts[-1:] if len(parts) % 2 else [])
    return f"select temperature+{parts[0]} from ccm3"


def host_port(endpoint: str) -> tuple[str, int]:
    host, port = endpoint.rsplit(":", 1)
    return host.strip("[]"), int(port)


class Attack:
    """Threads that attack until stopped."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.errors: list[BaseException] = []

    def _spawn(self, target: Callable[..., None], *args: Any) -> None:
        def guarded() -> None:
            try:
                target(*args)
            except BaseException as exc:  # noqa: BLE001 - kept for the test to look at
                if not self._stop.is_set():
                    self.errors.append(exc)

        t = threading.Thread(target=guarded, daemon=True)
        t.start()
        self._threads.append(t)

    def running(self) -> bool:
        return not self._stop.is_set() and any(t.is_alive() for t in self._threads)

    def stop(self) -> None:
        self._stop.set()
        self.close()
        for t in self._threads:
            t.join(timeout=10)

    def close(self) -> None:
        pass

    def __enter__(self) -> "Attack":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class PlanningBomb(Attack):
    """``clients`` threads sending the planning bomb over gRPC Query, again and again; counts the answers."""

    def __init__(self, target: str, clients: int = 16, sql: str | None = None) -> None:
        super().__init__()
        self.sql = sql or planning_bomb()
        self.codes: list[grpc.StatusCode] = []
        self.seconds: list[float] = []
        self._channels = [grpc.insecure_channel(target) for _ in range(clients)]
        for channel in self._channels:
            self._spawn(self._run, pb_grpc.DstpStub(channel))

    def _run(self, stub: pb_grpc.DstpStub) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                stub.Query(pb.QueryRequest(sql=self.sql), timeout=60)
                self.codes.append(grpc.StatusCode.OK)
            except grpc.RpcError as exc:
                self.codes.append(exc.code())
            self.seconds.append(time.monotonic() - started)

    def close(self) -> None:
        for channel in self._channels:
            channel.close()


class StalledGrpcReaders(Attack):
    """``clients`` gRPC Run streams of a large result, each reading one message and then nothing."""

    def __init__(self, target: str, clients: int, sql: str = "select * from ccm3", token: str = "") -> None:
        super().__init__()
        self.sql = sql
        self.metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self.started = threading.Semaphore(0)
        self.outcomes: list[str] = []
        # No BDP probing: gRPC would otherwise grow each stream's window to megabytes, and with the kernel's
        # socket buffers the whole 8.6 MB of ccm3 fitted in the pipe now and then (the server finished, nothing
        # stalled). A reader that takes nothing keeps the window at its first 64 KiB, as an attacker would.
        options = [("grpc.http2.bdp_probe", 0)]
        self._channels = [grpc.insecure_channel(target, options=options) for _ in range(clients)]
        self._calls: list[Any] = []
        for channel in self._channels:
            self._spawn(self._run, pb_grpc.DstpStub(channel))

    def _run(self, stub: pb_grpc.DstpStub) -> None:
        call = stub.Run(pb.QueryRequest(sql=self.sql), metadata=self.metadata)
        self._calls.append(call)
        try:
            next(call)  # the plan: the query runs and holds a slot
            self.outcomes.append("started")
        except grpc.RpcError as exc:
            self.outcomes.append(exc.code().name)
        self.started.release()
        self._stop.wait()  # and never reads again, keeping the connection

    def read_rest(self) -> list[str]:
        """Read what is left of each stream; return how each ended (a status name, or OK)."""
        ends = []
        for call in self._calls:
            try:
                for _ in call:
                    pass
                ends.append("OK")
            except grpc.RpcError as exc:
                ends.append(exc.code().name)
        return ends

    def close(self) -> None:
        for call in self._calls:
            call.cancel()
        for channel in self._channels:
            channel.close()


def hello_frame(payload: dict[str, Any]) -> bytes:
    """Return a HELLO frame (checksum left wrong: a trickled HELLO never gets as far as checking it)."""
    body = json.dumps(payload).encode()
    return HEADER.pack(MAGIC, VERSION, int(Kind.HELLO), 0, 0, 0, len(body), 0) + body


class TricklingHellos(Attack):
    """``connections`` data connections from ``source`` that send a HELLO one byte at a time, forever."""

    def __init__(self, endpoint: str, connections: int, source: str = "127.0.0.2", every_s: float = 0.2) -> None:
        super().__init__()
        self.endpoint, self.source, self.every_s = host_port(endpoint), source, every_s
        self.cut = 0  # connections the server closed
        self.opened = 0
        self._lock = threading.Lock()
        for _ in range(connections):
            self._spawn(self._run)

    def _run(self) -> None:
        frame = hello_frame({"ticket": "00" * 27, "stripe": 0, "acked": 0, "have": [], "pad": "x" * 200})
        while not self._stop.is_set():
            sock = socket.socket()
            sock.bind((self.source, 0))
            try:
                sock.connect(self.endpoint)
                with self._lock:
                    self.opened += 1
                sock.settimeout(self.every_s)
                for byte in frame:
                    if self._stop.is_set():
                        return
                    sock.sendall(bytes([byte]))
                    try:
                        if sock.recv(65536) == b"":  # the server let go of us
                            raise ConnectionResetError
                    except TimeoutError:
                        pass
            except OSError:
                with self._lock:
                    self.cut += 1
                self._stop.wait(self.every_s)
            finally:
                sock.close()


class HalfSentHttpRequests(Attack):
    """``connections`` HTTP connections that send the start of a request and then nothing, reopening when cut."""

    def __init__(self, endpoint: str, connections: int) -> None:
        super().__init__()
        self.endpoint = host_port(endpoint)
        self.cut = 0
        self._lock = threading.Lock()
        for _ in range(connections):
            self._spawn(self._run)

    def _run(self) -> None:
        while not self._stop.is_set():
            sock = socket.create_connection(self.endpoint, timeout=5)
            try:
                sock.sendall(b"GET /query?sql=select+temperature+from+ccm3 HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                sock.settimeout(0.2)
                while not self._stop.is_set():
                    try:
                        if sock.recv(65536) == b"":
                            break  # cut by the server
                    except TimeoutError:
                        continue
                with self._lock:
                    self.cut += 1
            except OSError:
                with self._lock:
                    self.cut += 1
            finally:
                sock.close()


#: What an HTTP/2 client sends first: the connection preface and an empty SETTINGS frame.
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


class IdleHttp2Flood(Attack):
    """From each of ``sources``, ``per_source`` connections that send the HTTP/2 preface and an empty SETTINGS
    frame and then nothing (no token, no call), reopened when the server closes them, at most ``max_opens`` opens
    in all (issue 33: 2 x 10,000 of them took a server to 19,999 of its 20,000 descriptors)."""

    def __init__(self, endpoint: str, sources: list[str], per_source: int, max_opens: int = 5_000) -> None:
        super().__init__()
        self.endpoint = host_port(endpoint)
        self.opened = 0
        self.cut = 0
        self.max_opens = max_opens
        self._lock = threading.Lock()
        for source in sources:
            self._spawn(self._run, source, per_source)

    def _open(self, source: str) -> socket.socket | None:
        with self._lock:
            if self.opened >= self.max_opens:
                return None
            self.opened += 1
        sock = socket.socket()
        try:
            sock.bind((source, 0))
            sock.connect(self.endpoint)
            sock.sendall(HTTP2_PREFACE)
            sock.setblocking(False)
            return sock
        except OSError:
            sock.close()
            with self._lock:
                self.cut += 1
            return None

    def _run(self, source: str, count: int) -> None:
        held: list[socket.socket] = []
        try:
            while not self._stop.is_set():
                while len(held) < count and not self._stop.is_set():
                    sock = self._open(source)
                    if sock is None:
                        break
                    held.append(sock)
                self._stop.wait(0.05)
                alive = []
                for sock in held:  # whatever the server sends is read and dropped; a close is counted
                    try:
                        while sock.recv(65536):
                            pass
                        sock.close()
                        with self._lock:
                            self.cut += 1
                    except BlockingIOError:
                        alive.append(sock)
                    except OSError:
                        sock.close()
                        with self._lock:
                            self.cut += 1
                held = alive
        finally:
            for sock in held:
                sock.close()


class TokenGuessing(Attack):
    """Guesses API tokens over one gRPC connection, ``attempts`` times; collects the status codes."""

    def __init__(self, target: str, attempts: int) -> None:
        super().__init__()
        self.codes: list[grpc.StatusCode] = []
        self.details: list[str] = []
        self._channel = grpc.insecure_channel(target)
        stub = pb_grpc.DstpStub(self._channel)
        for i in range(attempts):
            try:
                stub.ListDatasets(pb.ListDatasetsRequest(), metadata=(("authorization", f"Bearer dstp_guess{i:08d}"),))
                self.codes.append(grpc.StatusCode.OK)
            except grpc.RpcError as exc:
                self.codes.append(exc.code())
                self.details.append(exc.details() or "")

    def close(self) -> None:
        self._channel.close()


class PendingHelloFlood(Attack):
    """From each of ``sources``, ``per_source`` data connections that send nothing (pending HELLOs), reopened
    when cut, at most ``max_opens`` opens in all (issue 33: 32 addresses x 16 reached the data port's cap)."""

    def __init__(self, endpoint: str, sources: list[str], per_source: int, max_opens: int = 5_000) -> None:
        super().__init__()
        self.endpoint = host_port(endpoint)
        self.opened = 0
        self.cut = 0
        self.max_opens = max_opens
        self._lock = threading.Lock()
        for source in sources:
            self._spawn(self._run, source, per_source)

    def _run(self, source: str, count: int) -> None:
        held: list[socket.socket] = []
        try:
            while not self._stop.is_set():
                while len(held) < count and not self._stop.is_set():
                    with self._lock:
                        if self.opened >= self.max_opens:
                            break
                        self.opened += 1
                    sock = socket.socket()
                    try:
                        sock.bind((source, 0))
                        sock.connect(self.endpoint)
                        sock.sendall(b"DSTP")  # the start of a header, and never the rest
                        sock.setblocking(False)
                        held.append(sock)
                    except OSError:
                        sock.close()
                        with self._lock:
                            self.cut += 1
                self._stop.wait(0.05)
                alive = []
                for sock in held:
                    try:
                        while sock.recv(65536):
                            pass
                        sock.close()
                        with self._lock:
                            self.cut += 1
                    except BlockingIOError:
                        alive.append(sock)
                    except OSError:
                        sock.close()
                        with self._lock:
                            self.cut += 1
                held = alive
        finally:
            for sock in held:
                sock.close()


def eventually(condition: Callable[[], bool], what: str, seconds: float = 15.0) -> None:
    """Wait until ``condition()`` holds, failing with ``what`` after ``seconds`` (a bound, never a timer waited out)."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def answered_within(deadline_s: float, probe: Callable[[], Any]) -> Any:
    """Return ``probe()`` run on a thread, failing if it has not returned after ``deadline_s``."""
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["value"] = probe()
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            result["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(deadline_s)
    assert not t.is_alive(), f"the probe was not answered within {deadline_s:g} s"
    if "error" in result:
        raise result["error"]
    return result["value"]

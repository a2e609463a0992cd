"""Real object-store servers on loopback for the store tests and benchmarks.

* An S3-compatible server: moto's standalone server (``moto[server]`` from PyPI, a Flask app speaking the S3
  REST API with SigV4 checks, ETags, ranged GETs and If-Match). MinIO is not on a package registry here, and
  building it from Go sources takes longer than the whole test run.
* An HTTP server with range requests: uvicorn serving a folder through Starlette's ``StaticFiles`` (ETag,
  Last-Modified, ``Range: bytes=…`` answered 206).

Both count the requests they answer, by method, so tests can say a warm start made no GET.
"""

from __future__ import annotations

import asyncio
import collections
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator



def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Gate:
    """Ranged GETs held by a server until ``n`` of them wait at once — proof that a client sent them side by side,
    not one after another — or, so that a client that does not never hangs, until ``timeout_s``."""

    n: int
    timeout_s: float = 20.0
    waiting: int = 0
    timed_out: bool = False
    opened: "asyncio.Event | None" = None


@dataclass
class RequestLog:
    """Requests a server answered: method → count, and the paths of the GETs."""

    counts: collections.Counter[str] = field(default_factory=collections.Counter)
    gets: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def note(self, method: str, path: str, query: str) -> None:
        with self.lock:
            kind = "LIST" if method == "GET" and ("list-type" in query or path.rstrip("/").count("/") <= 1) else method
            self.counts[kind] += 1
            if kind == "GET":
                self.gets.append(path)

    def reset(self) -> None:
        with self.lock:
            self.counts.clear()
            self.gets.clear()


class S3Server:
    """moto's S3 server on a free loopback port, with a client to fill it."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        self.log = RequestLog()
        self.port = free_port()
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self._server.start()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._hook()
        self.access_key, self.secret_key = self._checked_credentials()

    def _checked_credentials(self) -> tuple[str, str]:
        """Turn on moto's signature and IAM checks; return the keys of a user allowed s3:* and iam:* (the test secret:
        tests search every answer, page, log and asset for it)."""
        import json

        import boto3
        from moto import settings
        from moto.core.authorization import ActionAuthenticatorMixin

        # the next 3 requests go unchecked (they make the user), every one after is checked; the threaded server
        # runs in this process, so its settings are these (what its /moto-api/reset-auth call sets)
        settings.INITIAL_NO_AUTH_ACTION_COUNT = 3
        ActionAuthenticatorMixin.request_count = 0
        iam = boto3.client("iam", endpoint_url=self.endpoint, aws_access_key_id="AKIABOOTSTRAP0000000",
                           aws_secret_access_key="bootstrap", region_name="us-east-1")
        user = f"dstp-{self.port}"  # moto keeps one state per process: a user per server
        iam.create_user(UserName=user)
        iam.put_user_policy(UserName=user, PolicyName="s3", PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": ["s3:*", "iam:*"], "Resource": "*"}]}))
        key = iam.create_access_key(UserName=user)["AccessKey"]
        return key["AccessKeyId"], key["SecretAccessKey"]

    def _hook(self) -> None:
        """Count requests: wrap the WSGI app moto's server runs."""
        wsgi = self._server._server  # type: ignore[attr-defined]  # werkzeug's server, running moto's app
        inner, log = wsgi.app, self.log

        def counting(environ: dict[str, Any], start_response: Any) -> Any:
            log.note(environ["REQUEST_METHOD"], environ.get("PATH_INFO", ""), environ.get("QUERY_STRING", ""))
            return inner(environ, start_response)

        wsgi.app = counting

    def client(self) -> Any:
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=self.access_key,
                            aws_secret_access_key=self.secret_key, region_name="us-east-1")

    def upload_tree(self, bucket: str, folder: Path, prefix: str, pattern: str = "*.nc") -> list[str]:
        """Upload the files of ``folder`` matching ``pattern`` under ``prefix``; return their keys."""
        client = self.client()
        keys = []
        for path in sorted(p for p in folder.rglob(pattern) if p.is_file()):
            key = f"{prefix}/{path.relative_to(folder).as_posix()}".lstrip("/")
            client.upload_file(str(path), bucket, key)
            keys.append(key)
        return keys

    def stop(self) -> None:
        self._server.stop()


class RangeHTTPServer:
    """uvicorn serving ``folder`` with range requests, on a free loopback port, in a thread."""

    def __init__(self, folder: Path) -> None:
        import uvicorn
        from starlette.applications import Starlette
        from starlette.routing import Mount
        from starlette.staticfiles import StaticFiles

        self.folder = folder
        self.log = RequestLog()
        static = Starlette(routes=[Mount("/", app=StaticFiles(directory=folder))])
        log = self.log
        self._failing = [0, 503]  # requests still to refuse, with which status
        self.failed = 0
        self.gate: Gate | None = None

        async def counting(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                log.note(scope["method"], "/data" + scope["path"], "")
                if self._failing[0] > 0:
                    self._failing[0] -= 1
                    self.failed += 1
                    await send({"type": "http.response.start", "status": self._failing[1],
                                "headers": [(b"content-length", b"0"), (b"retry-after", b"0")]})
                    await send({"type": "http.response.body", "body": b""})
                    return
                gate = self.gate
                if gate is not None and any(k == b"range" for k, _ in scope["headers"]):
                    if gate.opened is None:
                        gate.opened = asyncio.Event()  # made in the server's own loop
                    gate.waiting += 1
                    if gate.waiting >= gate.n:
                        gate.opened.set()
                    try:
                        await asyncio.wait_for(gate.opened.wait(), gate.timeout_s)
                    except asyncio.TimeoutError:
                        gate.timed_out = True
                        gate.opened.set()
            await static(scope, receive, send)

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._server = uvicorn.Server(uvicorn.Config(counting, host="127.0.0.1", port=self.port, log_level="warning",
                                                     lifespan="off"))
        self._thread = threading.Thread(target=self._server.run, name="range-http", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 20
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the range HTTP server did not start")
            time.sleep(0.01)  # polling a flag set by the server's own thread, not waiting out a timer

    def fail_next(self, count: int, status: int) -> None:
        """Answer the next ``count`` requests with ``status`` (a busy or failing server), then serve again."""
        self._failing[:] = [count, status]
        self.failed = 0

    def hold_gets(self, n: int) -> Gate:
        """Hold the next ranged GETs until ``n`` wait at once (:class:`Gate`); return the gate to look at after."""
        self.gate = Gate(n)
        return self.gate

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(10)


def s3_servers() -> Iterator[S3Server]:
    server = S3Server()
    try:
        yield server
    finally:
        server.stop()

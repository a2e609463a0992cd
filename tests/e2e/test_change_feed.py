"""The change feed's doors on a real server: GET /changes, server-sent events, gRPC WatchCatalog, webhooks.

A file renamed into a served folder is published by ``Catalog.refresh`` (the seam ``dstp catalog reload`` and
SIGHUP use; no timer is waited out) and must appear on every door with its file name, the dataset's new version
and its time range — the range read back from the file itself by xarray, not from the server. A change to a
dataset restricted to the group ``polar`` reaches alice (in polar) and never bob, on every door.
"""

from __future__ import annotations

import http.server
import json
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

import httpx
import numpy as np
import pytest
import xarray as xr

import dstp
from builders import daily

from dstp.auth import TokenStore
from dstp.catalog.publish import publish
from dstp.server import DstpServer
from dstp.settings import Settings

#: Longest a test waits for an event another thread delivers (never reached when the code works).
WAIT_S = 60.0


def _iso(value: np.datetime64) -> str:
    return str(value.astype("datetime64[s]"))


def time_range(path: Path) -> tuple[str, str]:
    """The oracle: the first and last time of one file, decoded by xarray on its own."""
    with xr.open_dataset(path) as ds:
        values = ds["time"].values
    return _iso(values.min()), _iso(values.max())


@pytest.fixture()
def served(tmp_path: Path) -> Iterator[tuple[DstpServer, Path, Path, dict[str, str]]]:
    root = tmp_path / "root"
    public = root / "daily"
    publish([daily(public / f"d_{d:04d}.nc", d) for d in range(3)], "daily")
    secret = root / "secret"
    publish([daily(secret / f"s_{d:04d}.nc", d) for d in range(2)], "secret")
    xml = secret / "secret.dstp.xml"
    text = xml.read_text()
    assert '<access policy="public"/>' in text
    xml.write_text(text.replace('<access policy="public"/>', '<access policy="restricted" groups="polar"/>'))
    tokens = TokenStore(tmp_path / "tokens.json")
    issued = {"alice": tokens.create("alice", ["polar"]).secret, "bob": tokens.create("bob").secret}
    settings = Settings(catalog_root=root, port=0, http_port=0, data_port=-1, udt_port=-1, state_dir=tmp_path / "state",
                        catalog_settle_s=0.0, catalog_watch=False, catalog_poll_s=0.0, catalog_rescan_s=0.0,
                        token_store=tmp_path / "tokens.json", allow_anonymous="true")
    with DstpServer(settings) as server:
        yield server, public, secret, issued


def publish_now(server: DstpServer, dataset: str, files: int) -> list:
    """Refresh until ``dataset`` has ``files`` files (settle_s is 0: one or two looks); return the changes."""
    assert server.catalog is not None
    changes: list = []
    for _ in range(3):
        changes += server.catalog.refresh()
        if len(server.catalog.get(dataset).files) == files:
            return changes
    raise AssertionError(f"{dataset} did not reach {files} files")


def _http(server: DstpServer, token: str = "") -> httpx.Client:
    assert server.endpoints is not None
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=f"http://{server.endpoints.http}", headers=headers, timeout=WAIT_S)


class SseReader:
    """Reads a /changes/stream on a thread; events arrive in ``events`` as (event, id, data)."""

    def __init__(self, server: DstpServer, token: str = "", headers: dict[str, str] | None = None,
                 params: dict[str, Any] | None = None) -> None:
        self.events: queue.Queue[tuple[str, str, dict[str, Any]]] = queue.Queue()
        self.client = _http(server, token)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(headers or {}, params or {}), daemon=True)
        self._thread.start()

    def _run(self, headers: dict[str, str], params: dict[str, Any]) -> None:
        try:
            with self.client.stream("GET", "/changes/stream", headers=headers, params=params) as answer:
                assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/event-stream")
                event, event_id, data = "", "", ""
                for line in answer.iter_lines():
                    if self._stop.is_set():
                        return
                    if line.startswith("event: "):
                        event = line[7:]
                    elif line.startswith("id: "):
                        event_id = line[4:]
                    elif line.startswith("data: "):
                        data = line[6:]
                    elif line == "" and event:
                        self.events.put((event, event_id, json.loads(data)))
                        event, event_id, data = "", "", ""
        except (httpx.HTTPError, RuntimeError):  # closed by close()
            pass

    def next(self, kind: str) -> tuple[str, dict[str, Any]]:
        while True:
            event, event_id, data = self.events.get(timeout=WAIT_S)
            if event == kind:
                return event_id, data

    def close(self) -> None:
        self._stop.set()
        self.client.close()


def test_a_file_renamed_into_a_served_folder_appears_on_every_door(served) -> None:
    server, public, secret, tokens = served
    assert server.endpoints is not None and server.catalog is not None
    start = server.catalog.version
    sse = SseReader(server, tokens["bob"])  # from now on
    try:
        _, feed = sse.next("feed")
        assert feed["version"] == start and feed["complete"]
        with dstp.connect(server.endpoints.grpc, token=tokens["bob"]) as client:
            watched: queue.Queue = queue.Queue()

            def watch() -> None:
                try:
                    for change in client.watch(since=start):
                        watched.put(change)
                except dstp.errors.DstpError as exc:  # the client closed at the end of the test
                    watched.put(exc)

            threading.Thread(target=watch, daemon=True).start()
            new = daily(public / "d_0003.nc", 3)  # written as .d_0003.nc.part, renamed into place
            publish_now(server, "daily", 4)
            first, last = time_range(new)
            assert (first, last) == ("2000-01-04T00:00:00", "2000-01-04T00:00:00")

            # GET /changes
            with _http(server, tokens["bob"]) as http:
                page = http.get("/changes", params={"since": start}).json()
            [change] = page["changes"]
            assert change["dataset"] == "daily" and change["kind"] == "changed" and change["version"] == 2
            assert change["files_added"] == ["daily/d_0003.nc"]
            assert (change["axis"], change["first"], change["last"]) == ("time", first, last)
            assert page["next"] == change["seq"] == start + 1 and not page["more"] and page["complete"]

            # server-sent events, delivered as published
            event_id, pushed = sse.next("change")
            assert pushed == change and event_id == f"{page['epoch']}:{change['seq']}"

            # gRPC WatchCatalog (from `since`, then live)
            got = watched.get(timeout=WAIT_S)
            assert (got.dataset, got.version, got.files_added, got.axis, got.first, got.last) == \
                ("daily", 2, ("daily/d_0003.nc",), "time", first, last)
            (public / "d_0000.nc").unlink()
            publish_now(server, "daily", 3)
            gone = watched.get(timeout=WAIT_S)
            assert gone.files_removed == ("daily/d_0000.nc",) and gone.version == 3
            assert gone.first == gone.last == time_range_of_day(0)
            _, pushed = sse.next("change")
            assert pushed["files_removed"] == ["daily/d_0000.nc"]
            feed_now = client.changes(since=start)
            assert [c.seq for c in feed_now.changes] == [start + 1, start + 2] and feed_now.complete
    finally:
        sse.close()


def test_following_watches_are_capped_at_a_quarter_of_the_grpc_threads(served) -> None:
    from dstp.errors import LimitExceededError

    server, _, _, tokens = served
    assert server.endpoints is not None
    cap = server.settings.grpc_workers // 4
    with dstp.connect(server.endpoints.grpc, token=tokens["bob"]) as client:
        streams = [client._rpc.watch(-1, "", True) for _ in range(cap)]
        try:
            for stream in streams:
                assert next(stream).complete  # the first message: the stream follows, holding its slot
            with pytest.raises(LimitExceededError, match=f"at most {cap} catalog watches at once") as refused:
                next(client._rpc.watch(-1, "", True))
            assert refused.value.retry_after_s == 15
            assert client.changes(since=0).complete  # a watch that does not follow is not counted
        finally:
            for stream in streams:
                stream.close()


def time_range_of_day(day: int) -> str:
    return _iso(np.datetime64("2000-01-01") + np.timedelta64(day, "D"))


def test_a_change_to_a_restricted_dataset_reaches_only_those_who_may_read_it(served) -> None:
    server, public, secret, tokens = served
    assert server.endpoints is not None and server.catalog is not None
    start = server.catalog.version
    daily(secret / "s_0002.nc", 2)
    publish_now(server, "secret", 3)
    daily(public / "d_0003.nc", 3)
    publish_now(server, "daily", 4)
    for who, sees in (("alice", True), ("bob", False), ("", False)):
        with _http(server, tokens.get(who, "")) as http:
            page = http.get("/changes", params={"since": start}).json()
        datasets = [c["dataset"] for c in page["changes"]]
        assert datasets == (["secret", "daily"] if sees else ["daily"]), who
        # the hidden change's number is skipped, not asked for again
        assert page["next"] == start + 2
        sse = SseReader(server, tokens.get(who, ""), params={"since": start})
        try:
            _, first = sse.next("change")
            assert first["dataset"] == ("secret" if sees else "daily"), who
        finally:
            sse.close()
        with dstp.connect(server.endpoints.grpc, token=tokens.get(who) or None) as client:
            assert [c.dataset for c in client.changes(since=start).changes] == datasets
    # removed: judged by the descriptor it was published with
    for f in secret.iterdir():
        f.unlink()
    secret.rmdir()
    server.catalog.refresh()
    assert "secret" not in server.catalog
    with _http(server, tokens["bob"]) as bob, _http(server, tokens["alice"]) as alice:
        assert [c["dataset"] for c in bob.get("/changes", params={"since": start + 2}).json()["changes"]] == []
        [removed] = alice.get("/changes", params={"since": start + 2}).json()["changes"]
        assert (removed["dataset"], removed["kind"]) == ("secret", "removed")


def test_the_event_stream_resumes_after_its_last_event_id(served) -> None:
    server, public, _, _ = served
    assert server.catalog is not None
    start = server.catalog.version
    for day in (3, 4):
        daily(public / f"d_{day:04d}.nc", day)
        publish_now(server, "daily", day + 1)
    epoch = server.catalog.epoch
    sse = SseReader(server, headers={"Last-Event-ID": f"{epoch}:{start + 1}"})
    try:
        event_id, change = sse.next("change")
        assert event_id == f"{epoch}:{start + 2}" and change["files_added"] == ["daily/d_0004.nc"]
    finally:
        sse.close()
    with _http(server) as http:
        bad = http.get("/changes/stream", headers={"Last-Event-ID": "yesterday"})
        assert bad.status_code == 400 and "'yesterday'" in bad.json()["error"]["message"]
        stale = http.get("/changes", params={"since": 0, "epoch": "another index"}).json()
        assert not stale["complete"] and stale["changes"] == [] and stale["next"] == server.catalog.version


def test_pages_of_changes_link_to_the_next(served) -> None:
    server, public, _, _ = served
    assert server.catalog is not None
    start = server.catalog.version
    for day in (3, 4, 5):
        daily(public / f"d_{day:04d}.nc", day)
        publish_now(server, "daily", day + 1)
    seen = []
    with _http(server) as http:
        answer = http.get("/changes", params={"since": start, "limit": 2})
        while True:
            page = answer.json()
            seen += [c["files_added"][0] for c in page["changes"]]
            if not page["more"]:
                assert "link" not in answer.headers
                break
            assert answer.links["next"]["url"].startswith("/changes?since=")
            answer = http.get(answer.links["next"]["url"])
    assert seen == ["daily/d_0003.nc", "daily/d_0004.nc", "daily/d_0005.nc"]


def test_query_results_name_the_dataset_version_they_were_computed_on(served) -> None:
    server, public, _, _ = served
    with _http(server) as http:
        before = http.get("/query", params={"sql": "select time, t2m from daily", "format": "csv"})
        assert before.headers["x-dstp-version"] == "daily=1"
        daily(public / "d_0003.nc", 3)
        publish_now(server, "daily", 4)
        after = http.get("/query", params={"sql": "select time, t2m from daily", "format": "csv"})
        assert after.headers["x-dstp-version"] == "daily=2"


def test_the_dataset_page_describes_a_dataset_as_it_is_now(served) -> None:
    """Descriptions are kept per dataset version: after a file is published the page lists it (it was kept by id,
    and showed the files and time range of the first version until a restart)."""
    server, public, _, _ = served
    with _http(server) as http:
        assert len(http.get("/datasets/daily.json").json()["files"]) == 3
        daily(public / "d_0003.nc", 3)
        publish_now(server, "daily", 4)
        after = http.get("/datasets/daily.json").json()
        assert [f["name"] for f in after["files"]] == [f"d_{d:04d}.nc" for d in range(4)]
        listed = http.get("/index.json", params={"q": "t2m"}).json()["datasets"]
        assert [d["time_end"][:10] for d in listed if d["id"] == "daily"] == ["2000-01-04"]


def test_dstp_changes_prints_and_follows_the_feed(served, capsys: pytest.CaptureFixture[str]) -> None:
    from dstp.cli import main

    server, public, _, tokens = served
    assert server.endpoints is not None and server.catalog is not None
    start = server.catalog.version
    new = daily(public / "d_0003.nc", 3)
    publish_now(server, "daily", 4)
    first, last = time_range(new)
    target = ["--server", server.endpoints.grpc, "--token", tokens["bob"]]
    assert main(["changes", "--since", str(start), *target]) == 0
    out = capsys.readouterr().out
    assert f"#{start + 1}" in out and "daily changed, version 2: 1 file(s) added (daily/d_0003.nc)" in out
    assert f"time {first} … {last}" in out and f"next: dstp changes --since {start + 1}" in out
    assert main(["changes", "--json", "--since", str(start), *target]) == 0
    [record] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert (record["files_added"], record["first"], record["last"]) == (["daily/d_0003.nc"], first, last)
    # --follow, in a process of its own: the backlog after --since, then each change as it is published
    with subprocess.Popen([sys.executable, "-m", "dstp.cli", "changes", "--follow", "--json", "--since", str(start),
                           *target], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) as follow:
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [lines.put(line) for line in follow.stdout], daemon=True).start()  # type: ignore[union-attr]
        try:
            assert json.loads(lines.get(timeout=WAIT_S))["files_added"] == ["daily/d_0003.nc"]
            (public / "d_0001.nc").unlink()
            publish_now(server, "daily", 3)
            assert json.loads(lines.get(timeout=WAIT_S))["files_removed"] == ["daily/d_0001.nc"]
        finally:
            follow.terminate()
            follow.wait(timeout=WAIT_S)


class Receiver:
    """A real HTTP server on 127.0.0.1 that records the JSON bodies POSTed to it; answers 503 to the first
    ``fail`` POSTs."""

    def __init__(self, fail: int = 0) -> None:
        self.bodies: queue.Queue[dict[str, Any]] = queue.Queue()
        self.posts = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the standard library's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.posts += 1
                if outer.posts <= fail:
                    self.send_response(503)
                    self.end_headers()
                    return
                outer.bodies.put(json.loads(body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_webhooks_post_each_change_and_retry_a_failed_post(tmp_path: Path) -> None:
    root = tmp_path / "root"
    public = root / "daily"
    publish([daily(public / f"d_{d:04d}.nc", d) for d in range(3)], "daily")
    secret = root / "secret"
    publish([daily(secret / f"s_{d:04d}.nc", d) for d in range(2)], "secret")
    xml = secret / "secret.dstp.xml"
    xml.write_text(xml.read_text().replace('<access policy="public"/>', '<access policy="restricted" groups="polar"/>'))
    receiver = Receiver(fail=1)
    settings = Settings(catalog_root=root, port=0, http_port=-1, data_port=-1, udt_port=-1,
                        state_dir=tmp_path / "state", catalog_settle_s=0.0, catalog_watch=False, catalog_poll_s=0.0,
                        catalog_rescan_s=0.0, allow_anonymous="true", webhook_urls=(receiver.url,),
                        webhook_retry_s=0.0, webhook_retries=2)
    try:
        with DstpServer(settings) as server:
            daily(secret / "s_0002.nc", 2)  # restricted: never posted
            publish_now(server, "secret", 3)
            new = daily(public / "d_0003.nc", 3)
            publish_now(server, "daily", 4)
            body = receiver.bodies.get(timeout=WAIT_S)
            change = body["change"]
            assert change["dataset"] == "daily" and change["files_added"] == ["daily/d_0003.nc"]
            assert (change["first"], change["last"]) == time_range(new)
            assert body["dropped"] == 0 and body["epoch"] == server.catalog.epoch  # type: ignore[union-attr]
            assert receiver.posts == 2  # the first answered 503, the retry delivered
        # stopped: the sender has counted what it delivered (counted after the receiver answered)
        assert server.webhooks.stats()[receiver.url] == {"sent": 1, "failed": 0, "dropped": 0, "waiting": 0}
        assert receiver.bodies.empty()
    finally:
        receiver.close()


def test_a_full_webhook_queue_drops_the_oldest_and_says_so(tmp_path: Path) -> None:
    from dstp.service.feed import Feed
    from dstp.webhooks import Webhooks

    from dstp.catalog.registry import Catalog

    root = tmp_path / "root"
    public = root / "daily"
    publish([daily(public / f"d_{d:04d}.nc", d) for d in (0, 1)], "daily")
    catalog = Catalog.scan(root, index=tmp_path / "index.sqlite", settle_s=0.0)
    gate, posting = threading.Event(), threading.Event()
    posted: list[dict[str, Any]] = []
    done = threading.Condition()

    def post(url: str, body: bytes, timeout_s: float) -> None:  # a receiver that hangs until the gate opens
        posting.set()
        assert gate.wait(WAIT_S)
        with done:
            posted.append(json.loads(body))
            done.notify_all()

    url = "http://127.0.0.1:9/hook"
    hooks = Webhooks(Feed(catalog), [url], queue=2, post=post).start()
    try:
        def add(day: int) -> None:
            daily(public / f"d_{day:04d}.nc", day)
            catalog.refresh()
            catalog.refresh()
            assert hooks.wait_gathered(catalog.version, WAIT_S)

        add(2)
        assert posting.wait(WAIT_S)  # the first is being posted, and hangs
        for day in range(3, 7):
            add(day)
        # of the other four only the newest two were kept
        assert hooks.stats()[url] == {"sent": 0, "failed": 0, "dropped": 2, "waiting": 2}
        gate.set()
        with done:
            assert done.wait_for(lambda: len(posted) == 3, WAIT_S)
        assert [p["change"]["files_added"] for p in posted] == [["daily/d_0002.nc"], ["daily/d_0005.nc"],
                                                                ["daily/d_0006.nc"]]
        assert [p["dropped"] for p in posted] == [0, 2, 0]
    finally:
        gate.set()
        hooks.stop()
        catalog.close()


def test_bad_webhook_urls_are_refused_naming_the_setting(tmp_path: Path) -> None:
    from dstp.service.feed import Feed
    from dstp.webhooks import Webhooks

    from dstp.catalog.registry import Catalog

    catalog = Catalog.scan(tmp_path, index=None)
    try:
        with pytest.raises(ValueError, match=r"webhook_urls: 'ftp://example.org/x' is not an http"):
            Webhooks(Feed(catalog), ["ftp://example.org/x"])
    finally:
        catalog.close()

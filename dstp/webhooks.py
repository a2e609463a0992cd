"""Webhooks: every change of the catalog POSTed as JSON to the URLs the operator configured (``webhook_urls``).

ERDDAP's subscriptions, built on the change feed (:class:`dstp.service.feed.Feed`) rather than beside it: a
webhook says *what* changed (dataset, files, columns, time range, versions), as ``GET /changes`` does, and only
for datasets a client without a token may read (a webhook receiver is often another organisation's service).

    Webhooks(feed, urls, queue=1000, retries=5, retry_s=2.0, timeout_s=10.0).start() … .stop()

Each URL has its own bounded queue and thread, so a slow or dead receiver holds up no other: a POST that fails
(no answer within ``timeout_s``, or an answer other than 2xx) is tried again ``retries`` times, waiting
``retry_s``, then twice that, …; past ``queue`` changes waiting, the oldest are dropped, logged, and the next
body says how many (``dropped``) so its receiver knows to catch up from ``GET /changes``. The body:

    {"epoch": "…", "catalog_version": 12, "dropped": 0, "change": {seq, at, dataset, version, kind, files_added,
     files_removed, files_changed, files_renamed, columns, axis, first, last, descriptor}}

POSTs go through the standard library's ``urllib.request``: one small JSON POST per change needs no pool or
HTTP/2, and the server's runtime dependencies stay as they are (httpx is a test dependency only).
"""

from __future__ import annotations

import json
import logging
import threading
import urllib.error
import urllib.request
from collections import deque
from typing import Any, Callable
from urllib.parse import urlsplit

from dstp import __version__
from dstp.auth import ANONYMOUS
from dstp.service.feed import Feed, change_json

__all__ = ["Webhooks", "post_json"]

log = logging.getLogger("dstp.webhooks")


def post_json(url: str, body: bytes, timeout_s: float) -> None:
    """POST ``body`` (JSON) to ``url``; raise OSError unless it answers 2xx within ``timeout_s``."""
    request = urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": "application/json", "User-Agent": f"dstp/{__version__}", "X-Dstp-Event": "change"})
    with urllib.request.urlopen(request, timeout=timeout_s) as answer:  # noqa: S310 - the operator's own URLs
        answer.read(65_536)
        if not 200 <= answer.status < 300:
            raise OSError(f"answered {answer.status}")


class _Target:
    """One URL: its queue of bodies waiting, and how many were dropped since the last one sent."""

    def __init__(self, url: str, size: int) -> None:
        self.url = url
        self.waiting: deque[dict[str, Any]] = deque()
        self.size = size
        self.dropped = 0
        #: Bodies delivered and given up on (after every retry), for the log and tests.
        self.sent = 0
        self.failed = 0


class Webhooks:
    """Sends the catalog's changes to ``urls``; see the module's docstring."""

    def __init__(self, feed: Feed, urls: tuple[str, ...] | list[str], *, queue: int = 1_000, retries: int = 5,
                 retry_s: float = 2.0, timeout_s: float = 10.0,
                 post: Callable[[str, bytes, float], None] = post_json) -> None:
        for url in urls:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ValueError(f"webhook_urls: {url!r} is not an http:// or https:// URL")
        self.feed = feed
        self.retries, self.retry_s, self.timeout_s = max(0, retries), max(0.0, retry_s), timeout_s
        self._post = post
        self._targets = [_Target(u, max(1, queue)) for u in urls]
        self._cond = threading.Condition()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._unsubscribe: Callable[[], None] = lambda: None
        # only changes published from now on: a receiver catches up on older ones from GET /changes
        self._since = feed.catalog.version
        self._epoch = feed.catalog.epoch

    def start(self) -> "Webhooks":
        """Start sending; return self."""
        self._unsubscribe = self.feed.subscribe(self._wake.set)
        threads = [threading.Thread(target=self._gather, name="dstp-webhooks", daemon=True)]
        threads += [threading.Thread(target=self._send, args=(t,), name=f"dstp-webhook-{i}", daemon=True)
                    for i, t in enumerate(self._targets)]
        for thread in threads:
            thread.start()
        self._threads = threads
        log.info("webhooks: each change is POSTed to %s", ", ".join(t.url for t in self._targets))
        return self

    def stop(self) -> None:
        """Stop sending (bodies still waiting are dropped; their changes stay in GET /changes)."""
        self._unsubscribe()
        self._stop.set()
        self._wake.set()
        with self._cond:
            self._cond.notify_all()
        for thread in self._threads:
            thread.join(timeout=self.timeout_s + 5.0)

    def stats(self) -> dict[str, dict[str, int]]:
        """Return, per URL, bodies sent, given up on, dropped from a full queue, and waiting."""
        with self._cond:
            return {t.url: {"sent": t.sent, "failed": t.failed, "dropped": t.dropped, "waiting": len(t.waiting)}
                    for t in self._targets}

    def wait_gathered(self, version: int, timeout: float) -> bool:
        """Wait until the changes up to catalog ``version`` are queued (or dropped); False if ``timeout`` passed."""
        with self._cond:
            return self._cond.wait_for(lambda: self._since >= version, timeout)

    def _gather(self) -> None:
        """Turn each refresh's new changes (those ANONYMOUS may see) into a body in every URL's queue."""
        while not self._stop.is_set():
            self._wake.wait()
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                while True:
                    page = self.feed.changes(ANONYMOUS, self._since, self._epoch or None)
                    if not page.complete:  # the index was rebuilt: follow the new numbering from now
                        self._since, self._epoch = page.version, page.epoch
                        break
                    self._queue([{"epoch": page.epoch, "catalog_version": page.version,
                                  "change": change_json(c)} for c in page.changes], page.next)
                    if not page.more:
                        break
            except Exception:  # noqa: BLE001 - a failed read must not end the webhooks; the next refresh tries again
                log.exception("webhooks: reading the change feed failed")

    def _queue(self, bodies: list[dict[str, Any]], since: int) -> None:
        with self._cond:
            self._since = since
            for t in self._targets:
                for body in bodies:
                    if len(t.waiting) >= t.size:
                        t.waiting.popleft()
                        t.dropped += 1
                        if t.dropped == 1 or t.dropped % 1000 == 0:
                            log.warning("webhook %s: %d change(s) dropped, its queue (webhook_queue=%d) is full",
                                        t.url, t.dropped, t.size)
                    t.waiting.append(body)
            self._cond.notify_all()

    def _send(self, t: _Target) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(t.waiting) or self._stop.is_set())
                if self._stop.is_set():
                    return
                body = {**t.waiting.popleft(), "dropped": t.dropped}
                t.dropped = 0
            data = json.dumps(body, separators=(",", ":")).encode()
            delay = self.retry_s
            for attempt in range(self.retries + 1):
                try:
                    self._post(t.url, data, self.timeout_s)
                except (OSError, ValueError) as exc:  # urllib's HTTPError and URLError are OSErrors
                    if attempt == self.retries:
                        log.warning("webhook %s: change %s not delivered after %d tries (%s)", t.url,
                                    body["change"]["seq"], attempt + 1, exc)
                        with self._cond:
                            t.failed += 1
                        break
                    if self._stop.wait(delay):
                        return
                    delay *= 2
                else:
                    with self._cond:
                        t.sent += 1
                    break

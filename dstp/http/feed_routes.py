"""The HTTP doors onto the change feed: ``GET /changes`` (pages of JSON) and ``GET /changes/stream`` (server-sent
events).

One ``APIRouter``, included by :func:`dstp.http.app.create_app`. Each route only translates
:meth:`DstpService.changes <dstp.service.DstpService.changes>` (which leaves out changes of datasets the caller
may not read) into JSON or an ``text/event-stream``:

    GET /changes?since=12&epoch=…&limit=100
        {"epoch", "version", "complete", "next", "more", "changes": [{seq, at, dataset, version, kind,
         files_added, files_removed, files_changed, files_renamed, columns, axis, first, last, descriptor}]}
        and, while more changes follow, ``Link: </changes?since=NEXT&epoch=…>; rel="next"``.

    GET /changes/stream[?since=12]   (or the header Last-Event-ID: <epoch>:<seq>, as EventSource sends on reconnect)
        event: feed     data: {"epoch", "version", "complete"}            (first)
        event: change   id: <epoch>:<seq>   data: {the change, as above}   (one per change, as published)
        : keepalive                                                        (every KEEPALIVE_S without a change)

The stream waits on an ``asyncio.Event`` that the feed sets after each refresh that changed something: no
thread is held while it waits, and it ends when the client goes or the server stops.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, AsyncIterator, Callable
from urllib.parse import urlencode

import anyio
from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse

from dstp.auth import Principal
from dstp.errors import BadRequestError
from dstp.service import DstpService
from dstp.service.feed import MAX_CHANGES_PER_PAGE, FeedPage, change_json

__all__ = ["KEEPALIVE_S", "feed_router", "page_json", "parse_event_id"]

#: Seconds between keepalive comments on a quiet stream (proxies close idle connections; a gone client shows).
KEEPALIVE_S = 15.0
#: Milliseconds an EventSource waits before it reconnects (sent once, as the stream's ``retry:``).
RETRY_MS = 3_000

SINCE = Query(0, ge=0, description="Send the changes after this catalog version (0: every change kept).")
EPOCH = Query("", description="The epoch of the page `since` came from: if the server's index was rebuilt since, "
              "the answer says complete=false (list the catalog again).")
LIMIT = Query(MAX_CHANGES_PER_PAGE, ge=1, le=MAX_CHANGES_PER_PAGE, description="Most changes looked at per page.")


def page_json(page: FeedPage) -> dict[str, Any]:
    """Return a page of the feed as JSON."""
    return {"epoch": page.epoch, "version": page.version, "complete": page.complete, "next": page.next,
            "more": page.more, "changes": [change_json(c) for c in page.changes]}


def parse_event_id(text: str) -> tuple[str | None, int]:
    """Return (epoch or None, seq) of a ``Last-Event-ID`` (``<epoch>:<seq>`` as the stream sends, or a bare seq)."""
    epoch, _, seq = text.strip().rpartition(":")
    try:
        number = int(seq)
    except ValueError:
        raise BadRequestError(f"Last-Event-ID {text[:80]!r} is not an event id of this feed (<epoch>:<seq>, as the "
                              "stream sent it); reconnect without it, or with ?since=N") from None
    if number < 0:
        raise BadRequestError(f"Last-Event-ID {text[:80]!r} names a negative catalog version")
    return (epoch or None), number


def _event(kind: str, data: dict[str, Any], event_id: str = "") -> bytes:
    head = f"id: {event_id}\n" if event_id else ""
    return f"{head}event: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def feed_router(service: DstpService, principal_of: Callable[[Request], Principal]) -> APIRouter:
    """Return the router of ``/changes`` and ``/changes/stream``."""
    router = APIRouter()

    @router.get("/changes", tags=["catalog"], summary="What changed in the catalog after a catalog version",
                description="Which datasets, files, columns and time ranges changed, with the catalog version "
                "each change made (`seq`) and each dataset's new `version`. Page on with `since=next` while "
                "`more` (also a `Link: rel=\"next\"` header). `complete: false`: the changes asked for are no "
                "longer all kept (or the index was rebuilt): list the catalog again. Changes of datasets you may "
                "not read are left out.")
    def changes(request: Request, since: int = SINCE, epoch: str = EPOCH, limit: int = LIMIT) -> JSONResponse:
        page = service.changes(since, epoch or None, limit, principal_of(request))
        headers = {}
        if page.more:
            query = urlencode({"since": page.next, "epoch": page.epoch, "limit": limit})
            headers["Link"] = f'<{request.url.path}?{query}>; rel="next"'
        return JSONResponse(page_json(page), headers=headers)

    @router.get("/changes/stream", tags=["catalog"], response_class=StreamingResponse,
                summary="The catalog's changes as server-sent events, as they are published",
                description="text/event-stream: a first `feed` event (epoch, version, complete), then one "
                "`change` event per change (id `<epoch>:<seq>`, data as in /changes). Without `since` it starts "
                "now; an EventSource reconnecting sends Last-Event-ID and resumes after it.",
                responses={200: {"content": {"text/event-stream": {}}}})
    async def stream(request: Request, since: int | None = Query(None, ge=0, description=SINCE.description),
                     epoch: str = EPOCH) -> StreamingResponse:
        principal = principal_of(request)
        resume = request.headers.get("last-event-id")
        wanted_epoch = epoch or None
        if resume:
            wanted_epoch, since = parse_event_id(resume)
        start = since if since is not None else service.catalog.version
        first = await anyio.to_thread.run_sync(lambda: service.changes(start, wanted_epoch, principal=principal))
        return StreamingResponse(_events(service, principal, first), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    return router


async def _events(service: DstpService, principal: Principal, first: FeedPage) -> AsyncIterator[bytes]:
    """Yield the event stream: the feed's state, its changes, then each new one as it is published."""
    loop = asyncio.get_running_loop()
    wake = asyncio.Event()

    def changed() -> None:  # on the refreshing thread
        try:
            loop.call_soon_threadsafe(wake.set)
        except RuntimeError:  # the loop closed: the stream is over
            pass

    unsubscribe = service.feed.subscribe(changed)
    try:
        yield f"retry: {RETRY_MS}\n\n".encode()
        yield _event("feed", {"epoch": first.epoch, "version": first.version, "complete": first.complete})
        epoch = first.epoch
        page: FeedPage | None = first if first.complete else None
        since = first.next if first.complete else first.version
        # the first page was read before this stream subscribed: look once more before the first wait
        look_again = True
        while not service.feed.closed:
            if page is None:
                wake.clear()  # before asking: a change published meanwhile sets it again
                page = await anyio.to_thread.run_sync(lambda: service.changes(since, epoch, principal=principal))
            for c in page.changes:
                yield _event("change", change_json(c), f"{page.epoch}:{c.seq}")
            since, more = page.next, page.more
            page = None
            if more or look_again:
                look_again = False
                continue
            with anyio.move_on_after(KEEPALIVE_S) as waited:
                await wake.wait()
            if waited.cancelled_caught and not service.feed.closed:
                yield b": keepalive\n\n"
    finally:
        unsubscribe()

"""``dstp changes`` and the paging of ``dstp ls``: the catalog's change feed and listing, from the command line.

    dstp changes [--since N] [--follow] [--json]   what changed after catalog version N (every change kept: 0);
                                                  --follow keeps printing changes as the server publishes them
    dstp ls [--limit N] [--search WORDS]          the listing, asked for a page at a time

Thin: each command calls the Python client (``Client.changes``, ``Client.watch``, ``Client.datasets_page``) and
prints what it answers.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from typing import Any, Callable, Iterator

__all__ = ["add_changes_parser", "change_line", "cmd_changes", "listing_pages"]

#: Datasets asked for per ListDatasets call by ``dstp ls``.
LS_PAGE = 500


def change_line(change: Any) -> str:
    """Return one line for a change: its catalog version, when, and what it did."""
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(change.at))
    return f"#{change.seq:<6d} {when}Z  {change.summary()}"


def _print(change: Any, as_json: bool) -> None:
    if as_json:
        print(json.dumps(asdict(change), separators=(",", ":")), flush=True)
    else:
        print(change_line(change), flush=True)


def cmd_changes(args: argparse.Namespace, connect: Callable[[argparse.Namespace], Any]) -> int:
    """Print the changes after ``--since``; with ``--follow`` go on printing them as they are published."""
    with connect(args) as client:
        if args.follow:
            for change in client.watch(since=args.since):
                _print(change, args.json)
            return 0
        feed = client.changes(since=args.since or 0)
        for change in feed.changes:
            _print(change, args.json)
        if not args.json:
            if not feed.complete:
                print(f"the changes after version {args.since or 0} are no longer all kept (or the server's index "
                      f"was rebuilt): list the catalog again (dstp ls), then follow from version {feed.version}")
            elif not feed.changes:
                print(f"no changes after catalog version {args.since or 0}")
            print(f"catalog version {feed.version} (epoch {feed.epoch or '-'}); next: dstp changes --since "
                  f"{feed.version}")
    return 0 if feed.complete else 1


def add_changes_parser(sub: Any, server_arg: Callable[[argparse.ArgumentParser], None],
                       connect: Callable[[argparse.Namespace], Any]) -> None:
    """Add ``dstp changes`` to the command line's subcommands."""
    p = sub.add_parser("changes", help="what changed in the catalog of a server: datasets, files, time ranges",
                       description="Print the catalog's changes after catalog version --since (0: every change the "
                       "server keeps): which dataset, its new version, the files added, removed, changed or renamed, "
                       "and the time range they cover. Changes of datasets you may not read are not shown.")
    server_arg(p)
    p.add_argument("--since", type=int, default=None, metavar="N",
                   help="catalog version to start after (default: 0; with --follow: now)")
    p.add_argument("--follow", "-f", action="store_true",
                   help="keep printing changes as the server publishes them (Ctrl-C ends)")
    p.add_argument("--json", action="store_true", help="one JSON object per change and line")
    p.set_defaults(func=lambda args: cmd_changes(args, connect))


def listing_pages(client: Any, limit: int, search: str) -> Iterator[tuple[list[Any], int]]:
    """Yield (datasets, total matching) a page at a time, until ``limit`` datasets (0: all) were listed."""
    offset, listed = 0, 0
    while True:
        size = LS_PAGE if not limit else min(LS_PAGE, limit - listed)
        page = client.datasets_page(offset, size, search)
        yield page.datasets, page.total
        listed += len(page.datasets)
        if not page.next_offset or not page.datasets or (limit and listed >= limit):
            return
        offset = page.next_offset

"""``dstp token create | list | revoke``: the API tokens of a server on this machine (part of :mod:`dstp.cli`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from dstp.commands import error

__all__ = ["add_token_commands"]


def _token_store(args: argparse.Namespace) -> Any:
    from dstp.auth import TokenStore, default_token_store
    from dstp.settings import Settings

    path = Path(args.store) if args.store else (Settings.from_env().token_store or default_token_store())
    return TokenStore(path)


def cmd_token_create(args: argparse.Namespace) -> int:
    from dstp.auth import parse_duration

    store = _token_store(args)
    groups = [g.strip() for g in (args.groups or "").split(",") if g.strip()]
    expires = parse_duration(args.expires) if args.expires else None
    issued = store.create(args.user, groups, expires_in=expires)
    row = issued.record.as_row(issued.record.created)
    print(issued.secret)
    print(f"token {row['id']} for {row['user']} (groups: {row['groups'] or 'none'}; expires: {row['expires']}) "
          f"stored in {store.path}.\nThe token above is shown once; it is kept only as a hash. Give it to its user: "
          "dstp --token …, DSTP_TOKEN=…, dstp.connect(…, token=…), or the /login page.", file=sys.stderr)
    return 0


def cmd_token_list(args: argparse.Namespace) -> int:
    import time

    store = _token_store(args)
    rows = [r.as_row(time.time()) for r in store.records()]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print(f"no tokens in {store.path}; make one with: dstp token create --user NAME --groups G1,G2")
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table("id", "user", "groups", "created", "expires", "status", box=None)
    for r in rows:
        table.add_row(r["id"], r["user"], r["groups"], r["created"], r["expires"], r["status"])
    Console().print(table)
    return 0


def cmd_token_revoke(args: argparse.Namespace) -> int:
    store = _token_store(args)
    try:
        record = store.revoke(args.id)
    except KeyError as exc:
        error(str(exc.args[0]))
        return 1
    print(f"token {record.id} of {record.user} revoked; a server using {store.path} refuses it from its next request")
    return 0


def add_token_commands(sub: Any) -> None:
    """Add ``dstp token create | list | revoke`` to the command group's subparsers ``sub``."""
    p = sub.add_parser("token", help="API tokens of a server on this machine (create, list, revoke)",
                       description="Manage the API tokens a dstp server on this machine accepts. Tokens are "
                                   "kept as SHA-256 hashes in the token store (setting token_store, "
                                   "DSTP_TOKEN_STORE; default tokens.json in the user data folder); a running "
                                   "server sees changes at its next request.")
    tsub = p.add_subparsers(dest="token_command", required=True, metavar="ACTION")
    t = tsub.add_parser("create", help="issue a token and print it (once)")
    t.add_argument("--user", required=True, help="who the token is for (shown in logs and listings)")
    t.add_argument("--groups", default="", help="comma-separated groups, matched against descriptors' "
                                               '<access groups="…">, e.g. polar,admins')
    t.add_argument("--expires", default=None, metavar="DURATION",
                   help="lifetime: 90d, 12h, 30m, 2w (default: never expires)")
    t.set_defaults(func=cmd_token_create)
    t = tsub.add_parser("list", help="list tokens (never their secrets)")
    t.add_argument("--json", action="store_true", help="print JSON")
    t.set_defaults(func=cmd_token_list)
    t = tsub.add_parser("revoke", help="revoke a token by its id")
    t.add_argument("id", help="the token's id (dstp token list)")
    t.set_defaults(func=cmd_token_revoke)
    for t in tsub.choices.values():
        t.add_argument("--store", default=None, metavar="FILE",
                       help="token store (default: the token_store setting, DSTP_TOKEN_STORE)")

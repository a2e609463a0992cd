"""API tokens: long random secrets, stored as SHA-256 hashes in one JSON file.

    store = TokenStore(path, clock)
    issued = store.create("alice", ["polar", "admins"], expires_in=90 * 86400)   # issued.secret: shown once
    store.verify(secret)        -> TokenRecord (AuthenticationError: unknown, revoked, expired)
    store.records()             -> every token, secrets never included
    store.revoke(token_id)

A token reads ``dstp_<id>_<secret>``: ``<id>`` (12 hex digits) names it in
``dstp token list``/``revoke`` and in logs; ``<secret>`` is
``secrets.token_urlsafe(32)`` (256 random bits). The file keeps only
``sha256(token)``. A slow password hash (bcrypt, scrypt, Argon2) protects
secrets people choose, which an attacker holding the file can guess; nobody
can enumerate 2²⁵⁶ random secrets, however fast the hash, so a slow one
would only add milliseconds to every request. The comparison is
constant-time.

The server re-reads the file whenever it changes (its size, mtime or inode),
so ``dstp token create``/``revoke`` on the same machine take effect at once,
without a restart. Writes replace the file atomically (mode 0600) under an
advisory lock, so two ``dstp token`` commands cannot lose each other's change.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import re
import secrets
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator, Sequence

import platformdirs

from dstp.errors import AuthenticationError

__all__ = ["IssuedToken", "TOKEN_PREFIX", "TokenRecord", "TokenStore", "default_token_store",
           "hash_token", "parse_duration"]

TOKEN_PREFIX = "dstp_"
_TOKEN = re.compile(r"dstp_([0-9a-f]{12})_[A-Za-z0-9_-]{32,}")
_GROUP = re.compile(r"[A-Za-z0-9_.@:\-]+")
_USER = re.compile(r"[^\s,]{1,128}")
FORMAT_VERSION = 1


def default_token_store() -> Path:
    """Return where tokens are kept when ``token_store`` is not set: the per-user data folder."""
    return Path(platformdirs.user_data_dir("dstp")) / "tokens.json"


def hash_token(token: str) -> str:
    """Return what the store keeps of a token: ``sha256:<hex>``."""
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


def parse_duration(text: str) -> float:
    """Return seconds for ``90d``, ``12h``, ``30m``, ``2w`` or a plain number of seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text)
    if m is None:
        raise ValueError(f"cannot read {text!r} as a duration; write e.g. 90d, 12h, 30m or 2w")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}[m.group(2)]


def _when(t: float | None) -> str:
    return "" if t is None else datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


@dataclass(frozen=True, slots=True)
class TokenRecord:
    """One token as the store keeps it (no secret)."""

    id: str
    user: str
    groups: tuple[str, ...]
    created: float
    expires: float | None
    revoked: float | None
    hash: str

    def status(self, now: float) -> str:
        """Return ``active``, ``expired`` or ``revoked``."""
        if self.revoked is not None:
            return "revoked"
        if self.expires is not None and now >= self.expires:
            return "expired"
        return "active"

    def as_row(self, now: float) -> dict[str, str]:
        """Return the token as ``dstp token list`` shows it."""
        return {"id": self.id, "user": self.user, "groups": ",".join(self.groups), "created": _when(self.created),
                "expires": _when(self.expires) or "never", "status": self.status(now)}


@dataclass(frozen=True, slots=True)
class IssuedToken:
    """A token just created: its record, and the secret (shown to its owner once, kept nowhere)."""

    record: TokenRecord
    secret: str


class TokenStore:
    """The API tokens of one server, in the JSON file at ``path`` (created on first ``create``)."""

    def __init__(self, path: Path, clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self.clock = clock
        self._lock = threading.Lock()
        self._seen: tuple[int, int, int] | None = None
        self._records: dict[str, TokenRecord] = {}

    # -- reading ------------------------------------------------------------------------

    def _signature(self) -> tuple[int, int, int] | None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def _load(self) -> dict[str, TokenRecord]:
        """Return the records, re-reading the file if it changed since the last look."""
        signature = self._signature()
        with self._lock:
            if signature == self._seen:
                return self._records
            records = self._read() if signature is not None else {}
            self._seen, self._records = signature, records
            return records

    def _read(self) -> dict[str, TokenRecord]:
        try:
            doc = json.loads(self.path.read_text())
            rows = doc["tokens"] if doc.get("version") == FORMAT_VERSION else None
            if not isinstance(rows, list):
                raise ValueError(f"not a version {FORMAT_VERSION} token store")
            records = {}
            for r in rows:
                r = dict(r)
                r["groups"] = tuple(r.get("groups", ()))
                record = TokenRecord(**r)
                records[record.id] = record
            return records
        except (OSError, ValueError, KeyError, TypeError) as exc:
            # Refuse every token rather than guess: a damaged store must not let anyone in.
            raise AuthenticationError(f"the server's token store {self.path} cannot be read ({exc}); "
                                      "ask its operator to check it") from exc

    def records(self) -> list[TokenRecord]:
        """Return every token, oldest first."""
        return sorted(self._load().values(), key=lambda r: (r.created, r.id))

    def verify(self, token: str) -> TokenRecord:
        """Return the record of an active ``token``; AuthenticationError saying why otherwise."""
        m = _TOKEN.fullmatch(token)
        record = self._load().get(m.group(1)) if m else None
        if record is None or not hmac.compare_digest(record.hash, hash_token(token)):
            raise AuthenticationError(
                "the token was not accepted: it is not one this server issued (a typo, or another server's?); "
                "ask the server's operator for one (dstp token create)")
        return self._active(record)

    def active(self, token_id: str) -> TokenRecord:
        """Return the record of token ``token_id`` if it is still active (not revoked, not expired, still in the
        store); AuthenticationError saying why otherwise. For what a credential already verified still may do."""
        record = self._load().get(token_id)
        if record is None:
            raise AuthenticationError(f"token {token_id} is no longer in the server's token store; "
                                      "ask the server's operator for a new one")
        return self._active(record)

    def _active(self, record: TokenRecord) -> TokenRecord:
        now = self.clock()
        if record.revoked is not None:
            raise AuthenticationError(f"token {record.id} was revoked on {_when(record.revoked)}; "
                                      "ask the server's operator for a new one")
        if record.expires is not None and now >= record.expires:
            raise AuthenticationError(f"token {record.id} expired on {_when(record.expires)}; "
                                      "ask the server's operator for a new one")
        return record

    # -- writing ------------------------------------------------------------------------

    @contextlib.contextmanager
    def _editing(self) -> Iterator[dict[str, TokenRecord]]:
        """Yield the records to change under the store's lock; write them back atomically."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        lock_path = self.path.with_name(self.path.name + ".lock")
        with open(lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            records = dict(self._read()) if self.path.exists() else {}
            yield records
            doc = {"version": FORMAT_VERSION,
                   "tokens": [asdict(r) | {"groups": list(r.groups)}
                              for r in sorted(records.values(), key=lambda r: (r.created, r.id))]}
            fd, tmp = tempfile.mkstemp(prefix=".tokens-", dir=self.path.parent)
            try:
                with os.fdopen(fd, "w") as f:
                    json.dump(doc, f, indent=1)
                    f.write("\n")
                os.chmod(tmp, 0o600)
                os.replace(tmp, self.path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise

    def create(self, user: str, groups: Sequence[str] = (), *, expires_in: float | None = None) -> IssuedToken:
        """Issue a token for ``user`` in ``groups``; ``expires_in`` seconds from now (None: never)."""
        if not _USER.fullmatch(user):
            raise ValueError(f"user {user!r}: give a name without spaces or commas")
        bad = [g for g in groups if not _GROUP.fullmatch(g)]
        if bad:
            raise ValueError(f"group {bad[0]!r}: group names are letters, digits and _ . @ : -")
        now = self.clock()
        with self._editing() as records:
            token_id = secrets.token_hex(6)
            while token_id in records:
                token_id = secrets.token_hex(6)
            secret = f"{TOKEN_PREFIX}{token_id}_{secrets.token_urlsafe(32)}"
            record = TokenRecord(token_id, user, tuple(dict.fromkeys(groups)), now,
                                 None if expires_in is None else now + expires_in, None, hash_token(secret))
            records[token_id] = record
        return IssuedToken(record, secret)

    def revoke(self, token_id: str) -> TokenRecord:
        """Revoke token ``token_id`` (KeyError naming the known ids if there is none)."""
        with self._editing() as records:
            record = records.get(token_id)
            if record is None:
                known = ", ".join(sorted(records)) or "none"
                raise KeyError(f"no token {token_id!r} in {self.path} (tokens: {known})")
            if record.revoked is None:
                record = TokenRecord(record.id, record.user, record.groups, record.created, record.expires,
                                     self.clock(), record.hash)
                records[token_id] = record
        return record

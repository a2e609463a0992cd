"""Browser sessions: the cookie /login sets, mapped to the credential it was made with.

The cookie holds a random session id (``secrets.token_urlsafe(32)``), never
the token itself; the server keeps, for at most ``ttl_s`` seconds, the token
the user pasted, and authenticates it again on every request, so a revoked or
expired token ends its sessions at once. Sessions live in memory: a restart
logs everyone out. At most ``max_sessions`` are kept (the oldest go first).
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from collections import OrderedDict
from typing import Callable

__all__ = ["SESSION_COOKIE", "SessionStore"]

#: Name of the session cookie.
SESSION_COOKIE = "dstp_session"


def _key(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


class SessionStore:
    """Session id → credential, expiring."""

    def __init__(self, ttl_s: float, clock: Callable[[], float] = time.time, max_sessions: int = 10_000) -> None:
        self.ttl_s = ttl_s
        self.clock = clock
        self.max_sessions = max_sessions
        self._lock = threading.Lock()
        self._sessions: OrderedDict[str, tuple[str, float]] = OrderedDict()

    def create(self, credential: str) -> str:
        """Return a new session id for ``credential``."""
        session_id = secrets.token_urlsafe(32)
        with self._lock:
            self._sessions[_key(session_id)] = (credential, self.clock() + self.ttl_s)
            while len(self._sessions) > self.max_sessions:
                self._sessions.popitem(last=False)
        return session_id

    def credential(self, session_id: str) -> str | None:
        """Return the credential of a live session, else None."""
        key = _key(session_id)
        with self._lock:
            found = self._sessions.get(key)
            if found is None:
                return None
            if self.clock() >= found[1]:
                del self._sessions[key]
                return None
            return found[0]

    def drop(self, session_id: str) -> None:
        """End a session (log out)."""
        with self._lock:
            self._sessions.pop(_key(session_id), None)

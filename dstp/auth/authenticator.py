"""Authenticator: a request's credential in, a Principal out — the one place credentials are checked.

Adapters call it at the boundary (the gRPC interceptor, the HTTP middleware)
and pass the Principal to the service:

    authenticator.authenticate("Bearer dstp_…")  -> Principal (AuthenticationError if not valid)
    authenticator.authenticate(None)             -> ANONYMOUS, or AuthenticationError when the
                                                   server needs a token (``allow_anonymous``)

A bearer token is an API token of the :class:`~dstp.auth.tokens.TokenStore`
(``dstp_…``) or, when ``oidc_issuer`` is set, a JWT of that issuer. A
credential that is present but not valid is refused, never treated as
anonymous: a user whose token expired must hear so, not see less.

Each door passes the request's source address. An anonymous principal carries
it (fair shares are counted per address, ``Principal.share_key``), and failed
authentications are counted by it (:class:`FailedAuthentications`): past
``auth_failures_per_minute`` from one address in a minute, every credential
from that address is refused unread (RESOURCE_EXHAUSTED / 429 with a
retry-after) until the minute ends — guessing tokens ran at 1,460 a second
on one connection, unlimited and unlogged. Every failure is logged with its
address (repeated lines rate-limited by :mod:`dstp.log_limits`).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import math
import threading
import time
from typing import Callable, Iterable

from dstp.auth.oidc import OidcVerifier
from dstp.auth.policy import AccessRule, anonymous_by_default
from dstp.auth.principal import ANONYMOUS, Principal
from dstp.auth.tokens import TOKEN_PREFIX, TokenStore, default_token_store
from dstp.errors import AuthenticationError, LimitExceededError
from dstp.settings import Settings

__all__ = ["Authenticator", "FailedAuthentications", "NEEDS_TOKEN"]

log = logging.getLogger("dstp.auth")

#: Source addresses whose failures are remembered at once (the least recent is forgotten first).
ADDRESSES_KEPT = 10_000

#: What a request without a credential hears from a server that needs one.
NEEDS_TOKEN = ("this server needs a token: pass token=… to dstp.connect() (or set DSTP_TOKEN), "
               "use `dstp --token …`, send the header Authorization: Bearer <token>, or log in at /login")


class FailedAuthentications:
    """Counts failed authentications per source address in fixed windows of ``window_s``; refuses past a limit."""

    def __init__(self, per_window: int, window_s: float = 60.0, clock: Callable[[], float] = time.time) -> None:
        self.per_window = per_window
        self.window_s = window_s
        self.clock = clock
        self._lock = threading.Lock()
        self._windows: collections.OrderedDict[str, list[float]] = collections.OrderedDict()  # address -> [start, n]
        #: Credentials refused unread because their address was over the limit.
        self.refused = 0

    def check(self, source: str) -> None:
        """Raise LimitExceededError if ``source`` failed too often in its current window."""
        if self.per_window <= 0:
            return
        now = self.clock()
        with self._lock:
            window = self._windows.get(source)
            if window is None or now - window[0] >= self.window_s or window[1] < self.per_window:
                return
            self.refused += 1
            retry = max(1.0, math.ceil(window[0] + self.window_s - now))
        raise LimitExceededError(
            f"too many failed authentications from {source or 'this address'} ({self.per_window} a minute); "
            f"check the token and try again in {retry:g} s", retry_after_s=retry)

    def failed(self, source: str, error: AuthenticationError) -> None:
        """Count a failure of ``source``; log it (and once, that the address reached the limit)."""
        now = self.clock()
        with self._lock:
            window = self._windows.pop(source, None)
            if window is None or now - window[0] >= self.window_s:
                window = [now, 0.0]
            window[1] += 1
            self._windows[source] = window
            while len(self._windows) > ADDRESSES_KEPT:
                self._windows.popitem(last=False)
            count = int(window[1])
        log.warning("failed authentication from %s: %s", source or "(unknown address)", error.message)
        if count == self.per_window:
            log.warning("%s failed to authenticate %d times in %g s: its credentials are refused unread until "
                        "the window ends", source or "(unknown address)", count, self.window_s)


class Authenticator:
    """Turns the credential of a request into a :class:`Principal`."""

    def __init__(self, *, allow_anonymous: bool, tokens: TokenStore | None = None,
                 oidc: OidcVerifier | None = None, clock: Callable[[], float] = time.time,
                 failures_per_minute: int = 0) -> None:
        self.allow_anonymous = allow_anonymous
        self.tokens = tokens
        self.oidc = oidc
        self.clock = clock
        self.failures = FailedAuthentications(failures_per_minute, clock=clock)

    @classmethod
    def from_settings(cls, settings: Settings, descriptors: Iterable[AccessRule],
                      clock: Callable[[], float] = time.time) -> "Authenticator":
        """Return the authenticator ``settings`` describe for a catalog of ``descriptors``."""
        choice = settings.allow_anonymous.strip().lower()
        if choice not in ("auto", "true", "false", "1", "0", "yes", "no", "on", "off"):
            raise ValueError(f"allow_anonymous={settings.allow_anonymous!r}: use auto, true or false")
        anonymous = anonymous_by_default(descriptors) if choice == "auto" else choice in ("true", "1", "yes", "on")
        oidc = None
        if settings.oidc_issuer:
            oidc = OidcVerifier(settings.oidc_issuer, audience=settings.oidc_audience,
                                jwks_url=settings.oidc_jwks_url, user_claim=settings.oidc_user_claim,
                                groups_claim=settings.oidc_groups_claim, clock=clock)
        store = TokenStore(settings.token_store or default_token_store(), clock)
        return cls(allow_anonymous=anonymous, tokens=store, oidc=oidc, clock=clock,
                   failures_per_minute=settings.auth_failures_per_minute)

    def authenticate(self, authorization: str | None, source: str = "") -> Principal:
        """Return the principal of an ``Authorization`` value (``Bearer <token>``; None when absent).

        ``source`` is the address the request came from ("" when the door cannot tell).
        """
        if authorization is None or not authorization.strip():
            if self.allow_anonymous:
                return dataclasses.replace(ANONYMOUS, source=source) if source else ANONYMOUS
            raise AuthenticationError(NEEDS_TOKEN)
        self.failures.check(source)
        try:
            scheme, _, credential = authorization.strip().partition(" ")
            if scheme.lower() != "bearer" or not credential.strip():
                raise AuthenticationError("the Authorization header must read 'Bearer <token>'")
            return self.verify(credential.strip())
        except AuthenticationError as exc:
            self.failures.failed(source, exc)
            raise

    def revalidate(self, principal: Principal) -> None:
        """Raise AuthenticationError if the credential ``principal`` was verified from is no longer valid.

        For what outlives the request that presented it: a ticket redeemed on a data channel, which carries
        no credential of its own, must stop working when its token is revoked or its credential expires.
        """
        if not principal.authenticated:
            return
        if principal.via == "token" and self.tokens is not None:
            self.tokens.active(principal.credential)
        if principal.expires is not None and self.clock() >= principal.expires:
            raise AuthenticationError(f"the credential of {principal.name} expired; authenticate again")

    def verify(self, token: str) -> Principal:
        """Return the principal of a bearer token (API token or JWT); AuthenticationError if not valid."""
        if token.startswith(TOKEN_PREFIX) and self.tokens is not None:
            record = self.tokens.verify(token)
            return Principal(record.user, frozenset(record.groups), authenticated=True, via="token",
                             credential=record.id, expires=record.expires)
        if token.count(".") == 2:
            if self.oidc is None:
                raise AuthenticationError("this server does not accept JWTs (it has no oidc_issuer); "
                                          "use an API token from its operator (dstp token create)")
            return self.oidc.verify(token)
        raise AuthenticationError("the bearer token is not a dstp API token (dstp_…) nor a JWT; "
                                  "check that it was copied whole")

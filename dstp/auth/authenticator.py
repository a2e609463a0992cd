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
"""

from __future__ import annotations

import time
from typing import Callable, Iterable

from dstp.auth.oidc import OidcVerifier
from dstp.auth.policy import AccessRule, anonymous_by_default
from dstp.auth.principal import ANONYMOUS, Principal
from dstp.auth.tokens import TOKEN_PREFIX, TokenStore, default_token_store
from dstp.errors import AuthenticationError
from dstp.settings import Settings

__all__ = ["Authenticator", "NEEDS_TOKEN"]

#: What a request without a credential hears from a server that needs one.
NEEDS_TOKEN = ("this server needs a token: pass token=… to dstp.connect() (or set DSTP_TOKEN), "
               "use `dstp --token …`, send the header Authorization: Bearer <token>, or log in at /login")


class Authenticator:
    """Turns the credential of a request into a :class:`Principal`."""

    def __init__(self, *, allow_anonymous: bool, tokens: TokenStore | None = None,
                 oidc: OidcVerifier | None = None, clock: Callable[[], float] = time.time) -> None:
        self.allow_anonymous = allow_anonymous
        self.tokens = tokens
        self.oidc = oidc
        self.clock = clock

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
        return cls(allow_anonymous=anonymous, tokens=store, oidc=oidc, clock=clock)

    def authenticate(self, authorization: str | None) -> Principal:
        """Return the principal of an ``Authorization`` value (``Bearer <token>``; None when absent)."""
        if authorization is None or not authorization.strip():
            if self.allow_anonymous:
                return ANONYMOUS
            raise AuthenticationError(NEEDS_TOKEN)
        scheme, _, credential = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not credential.strip():
            raise AuthenticationError("the Authorization header must read 'Bearer <token>'")
        return self.verify(credential.strip())

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

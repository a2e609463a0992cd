"""Trust: who a request acts for, what it may read, and the TLS the server speaks.

    Principal, ANONYMOUS      who a request acts for (``principal``)
    can_read(p, d, now)       the one access check, called by the service for every resource (``policy``)
    Authenticator             a request's credential → Principal, at the adapters' boundary (``authenticator``)
    TokenStore                API tokens, stored hashed; ``dstp token`` manages them (``tokens``)
    OidcVerifier              OIDC/JWT bearer tokens checked against the issuer's JWKS (``oidc``)
    SessionStore              browser logins (``sessions``)
    load_tls, self_signed     certificates for gRPC and HTTP (``tls``)

Nothing here imports gRPC, sockets or the web framework: adapters bring the
credential (a header, gRPC metadata, a cookie) and take a Principal back.
docs/security-auth.md describes the model.
"""

from dstp.auth.authenticator import NEEDS_TOKEN, Authenticator
from dstp.auth.oidc import OidcVerifier
from dstp.auth.policy import AccessRule, anonymous_by_default, can_read, embargo_start
from dstp.auth.principal import ANONYMOUS, Principal
from dstp.auth.sessions import SESSION_COOKIE, SessionStore
from dstp.auth.tokens import IssuedToken, TokenRecord, TokenStore, default_token_store, parse_duration

__all__ = [
    "ANONYMOUS",
    "AccessRule",
    "Authenticator",
    "IssuedToken",
    "NEEDS_TOKEN",
    "OidcVerifier",
    "Principal",
    "SESSION_COOKIE",
    "SessionStore",
    "TokenRecord",
    "TokenStore",
    "anonymous_by_default",
    "can_read",
    "default_token_store",
    "embargo_start",
    "parse_duration",
]

"""OIDC/JWT bearer tokens, verified with PyJWT against the issuer's published keys (JWKS).

    verifier = OidcVerifier(issuer, audience=…, jwks_url=…, clock=…)
    verifier.verify(jwt_text) -> Principal (AuthenticationError when it is not valid)

The signature is checked by PyJWT with a key from ``PyJWKClient`` (fetched
from ``jwks_url``, or from the ``jwks_uri`` of the issuer's
``/.well-known/openid-configuration``, and cached); only asymmetric
algorithms are accepted (no ``none``, no HMAC with a public key). ``iss``
must equal the configured issuer, ``aud`` must contain the audience when one
is configured, and ``exp``/``nbf`` are compared with the server's clock (the
same seam tickets and embargoes use), with ``LEEWAY_S`` of tolerance.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.request
from typing import Any, Callable

import jwt

from dstp.auth.principal import Principal
from dstp.errors import AuthenticationError

__all__ = ["ALGORITHMS", "LEEWAY_S", "OidcVerifier"]

log = logging.getLogger("dstp.auth")

#: Signature algorithms accepted (asymmetric only).
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
#: Clock difference tolerated on exp and nbf, seconds.
LEEWAY_S = 30.0


class OidcVerifier:
    """Verifies JWTs of one issuer."""

    def __init__(self, issuer: str, *, audience: str = "", jwks_url: str = "", user_claim: str = "sub",
                 groups_claim: str = "groups", clock: Callable[[], float] = time.time, timeout: float = 5.0) -> None:
        self.issuer = issuer
        self.audience = audience
        self.user_claim = user_claim
        self.groups_claim = groups_claim
        self.clock = clock
        self.timeout = timeout
        self._jwks_url = jwks_url
        self._client: jwt.PyJWKClient | None = None
        self._lock = threading.Lock()

    def _keys(self) -> jwt.PyJWKClient:
        with self._lock:
            if self._client is None:
                url = self._jwks_url or self._discover()
                self._client = jwt.PyJWKClient(url, cache_keys=True, lifespan=300, timeout=int(self.timeout) or 1)
            return self._client

    def _discover(self) -> str:
        url = self.issuer.rstrip("/") + "/.well-known/openid-configuration"
        try:
            with urllib.request.urlopen(url, timeout=self.timeout) as r:  # noqa: S310 - the configured issuer
                doc = json.load(r)
            return str(doc["jwks_uri"])
        except (OSError, ValueError, KeyError) as exc:
            log.warning("cannot read the OIDC configuration at %s: %s", url, exc)
            raise AuthenticationError(f"the server cannot reach its identity provider ({self.issuer}) to check "
                                      "the token; try again later, or use an API token") from exc

    def verify(self, token: str) -> Principal:
        """Return the principal a valid JWT names; AuthenticationError saying what is wrong otherwise."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError as exc:
            raise AuthenticationError("the bearer token is neither a dstp API token nor a readable JWT") from exc
        if header.get("alg") not in ALGORITHMS:
            raise AuthenticationError(f"JWTs signed with {header.get('alg')!r} are not accepted "
                                      f"(accepted: {', '.join(ALGORITHMS)})")
        try:
            key = self._keys().get_signing_key_from_jwt(token)
        except jwt.PyJWKClientConnectionError as exc:
            log.warning("cannot fetch the JWKS of %s: %s", self.issuer, exc)
            raise AuthenticationError(f"the server cannot reach its identity provider ({self.issuer}) to check "
                                      "the token; try again later, or use an API token") from exc
        except jwt.PyJWKClientError as exc:
            raise AuthenticationError(f"the JWT was not signed by a key of {self.issuer}") from exc
        try:
            claims: dict[str, Any] = jwt.decode(
                token, key.key, algorithms=[header["alg"]], issuer=self.issuer,
                audience=self.audience or None,
                options={"verify_exp": False, "verify_nbf": False, "verify_iat": False,
                         "verify_aud": bool(self.audience), "require": ["exp", "iss", self.user_claim]},
            )
        except jwt.InvalidAudienceError as exc:
            raise AuthenticationError(f"the JWT is not meant for this server (aud must include {self.audience!r})"
                                      ) from exc
        except jwt.InvalidIssuerError as exc:
            raise AuthenticationError(f"the JWT was issued by another issuer (this server accepts {self.issuer})"
                                      ) from exc
        except jwt.InvalidTokenError as exc:
            raise AuthenticationError(f"the JWT is not valid: {exc}") from exc
        now = self.clock()
        if not isinstance(claims["exp"], (int, float)) or now > claims["exp"] + LEEWAY_S:
            raise AuthenticationError("the JWT has expired; get a fresh one from your identity provider")
        nbf = claims.get("nbf")
        if isinstance(nbf, (int, float)) and now + LEEWAY_S < nbf:
            raise AuthenticationError("the JWT is not valid yet (nbf lies in the future)")
        groups = claims.get(self.groups_claim, ())
        if isinstance(groups, str):
            groups = groups.split()
        if not isinstance(groups, (list, tuple)):
            groups = ()
        user = str(claims[self.user_claim])
        return Principal(user, frozenset(str(g) for g in groups), authenticated=True, via="oidc",
                         credential=f"{self.issuer}#{claims.get('sub', user)}", expires=float(claims["exp"]) + LEEWAY_S)

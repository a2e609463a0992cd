"""Principal: who a request acts for, as the boundary established it (never parsed inside the core)."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ANONYMOUS", "Principal"]


@dataclass(frozen=True, slots=True)
class Principal:
    """The identity a request carries: a user, the groups it belongs to, how it was proved.

    Adapters get it from :class:`~dstp.auth.Authenticator` (a gRPC interceptor,
    HTTP middleware) and hand it to every service call; the service only ever
    asks :func:`~dstp.auth.can_read` about it.
    """

    #: The user's name ("alice"; an OIDC subject; "anonymous").
    name: str
    #: Groups named in descriptors' ``<access groups="…">`` that this principal belongs to.
    groups: frozenset[str] = field(default_factory=frozenset)
    #: True when a credential was presented and verified.
    authenticated: bool = False
    #: How: "token" (an API token of the token store), "oidc" (a JWT), "" (anonymous).
    via: str = ""
    #: Which credential: the token id, or the JWT's issuer and subject; "" when anonymous.
    credential: str = ""
    #: When the credential stops being valid (a JWT's ``exp``, a token's expiry; seconds since 1970), or None.
    expires: float | None = None
    #: The address the request came from (set for anonymous requests by each door): anonymous callers get
    #: one fair share per address (``share_key``), not one share for all of them together.
    source: str = field(default="", compare=False)

    @property
    def key(self) -> str:
        """Return the stable identity tickets are bound to (and quotas counted by): one per credential."""
        return f"{self.via}:{self.credential}" if self.authenticated else "anonymous"

    @property
    def share_key(self) -> str:
        """Return what slots and quotas are counted by: the credential, or for anonymous requests the address."""
        if self.authenticated or not self.source:
            return self.key
        return f"anonymous@{self.source}"

    def describe(self) -> str:
        """Return the principal as a person reads it: ``alice (polar, admins)``, ``anonymous``."""
        if not self.authenticated:
            return "anonymous"
        return f"{self.name} ({', '.join(sorted(self.groups))})" if self.groups else self.name


#: Whoever sent no credential, on a server that allows that (``allow_anonymous``).
ANONYMOUS = Principal("anonymous")

"""What a client presents to a server: a token and TLS, from the arguments given or else the environment.

Kept apart from the client (which imports gRPC) so a ``dstp get`` handed to the agent (:mod:`dstp.agent`)
resolves them in the user's own process, from the user's own environment, without loading the client.
"""

from __future__ import annotations

import os

__all__ = ["client_credentials"]


def client_credentials(token: str | None, tls: bool | None, ca_file: str | None) -> tuple[str | None, bool, str | None]:
    """Return (token, tls, ca_file): what was given, else ``DSTP_TOKEN``, ``DSTP_CA_FILE``, ``DSTP_TLS``."""
    token = token if token is not None else (os.environ.get("DSTP_TOKEN") or None)
    ca_file = ca_file if ca_file is not None else (os.environ.get("DSTP_CA_FILE") or None)
    if tls is None:
        tls = bool(ca_file) or os.environ.get("DSTP_TLS", "").lower() in ("1", "true", "yes", "on")
    return token, tls, ca_file

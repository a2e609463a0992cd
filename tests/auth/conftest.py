"""A catalog with every access policy, a token store, TLS material and a server on loopback for the auth tests.

Datasets (copies of the small samples):

==========  =====================================================  =====================================
id          descriptor                                            who may read it
==========  =====================================================  =====================================
ccm3        ``<access policy="public"/>``                        everyone
members     ``<access policy="registered"/>``                    any valid token
polar       ``<access policy="restricted" groups="polar"/>``     group polar
embargoed   ``policy="public" groups="polar" embargo-until=…``   polar before 2030-01-01, everyone after
==========  =====================================================  =====================================

Tokens: alice (polar), bob (ocean-team), carol (expired), dave (revoked). The
server's clock is a :class:`Clock` the tests set to BEFORE or AFTER the embargo.
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from clock import Clock  # noqa: E402
from authcase import BEFORE, POLICIES, copy_dataset  # noqa: E402
from dstp.auth import TokenStore  # noqa: E402
from dstp.auth.tls import TlsMaterial, self_signed  # noqa: E402
from dstp.server import DstpServer  # noqa: E402
from dstp.settings import Settings  # noqa: E402

@pytest.fixture(scope="session")
def auth_catalog(tmp_path_factory: pytest.TempPathFactory, catalog_root: Path) -> Path:
    root = tmp_path_factory.mktemp("auth-catalog")
    shutil.copytree(catalog_root / "ccm3", root / "ccm3")
    copy_dataset(catalog_root, root, "ccm3", "members", POLICIES["members"])
    copy_dataset(catalog_root, root, "ocean", "polar", POLICIES["polar"])
    copy_dataset(catalog_root, root, "ocean", "embargoed", POLICIES["embargoed"])
    return root


@dataclass
class Tokens:
    """The token store and the secrets of the test principals."""

    path: Path
    alice: str  # polar
    bob: str  # ocean-team
    carol: str  # expired
    dave: str  # revoked
    dave_id: str


@pytest.fixture(scope="session")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> Tokens:
    path = tmp_path_factory.mktemp("tokens") / "tokens.json"
    store = TokenStore(path, clock=lambda: BEFORE - 86400)
    alice = store.create("alice", ["polar"]).secret
    bob = store.create("bob", ["ocean-team"]).secret
    carol = store.create("carol", ["polar"], expires_in=3600).secret  # expired long before BEFORE
    dave = store.create("dave", ["polar"])
    store.revoke(dave.record.id)
    return Tokens(path, alice, bob, carol, dave.secret, dave.record.id)


@pytest.fixture(scope="session")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsMaterial:
    return self_signed(tmp_path_factory.mktemp("tls"), ["localhost", "127.0.0.1"])


@pytest.fixture(scope="session")
def auth_clock() -> Clock:
    clock = Clock()
    clock.now = BEFORE
    return clock


@pytest.fixture(scope="session")
def auth_server(auth_catalog: Path, tokens: Tokens, tls: TlsMaterial, auth_clock: Clock) -> Iterator[DstpServer]:
    """TLS, tokens, anonymous allowed (so that anonymous is part of the matrix), every channel on."""
    settings = Settings(catalog_root=auth_catalog, port=0, http_port=0, data_port=0, udt_port=-1, batch_rows=4096,
                        token_store=tokens.path, tls_cert=tls.cert_path, tls_key=tls.key_path,
                        allow_anonymous="true", block_bytes=256 * 1024,
                        auth_failures_per_minute=0)  # the matrix presents hundreds of bad tokens from one address
    with DstpServer(settings, clock=auth_clock) as srv:
        yield srv

"""OIDC/JWT bearer tokens, verified with PyJWT against an issuer's JWKS served on loopback.

The issuer is a tiny HTTP server on 127.0.0.1 publishing its discovery
document and JWKS; its RSA key is generated with ``cryptography``, the JWTs
signed with PyJWT. The dstp server is configured with the issuer only (the
JWKS is found through discovery) and checks expiry by its clock.
"""

from __future__ import annotations

import http.server
import json
import shutil
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

import dstp
from authcase import POLICIES, copy_dataset
from clock import Clock
from dstp.server import DstpServer
from dstp.settings import Settings

AUDIENCE = "dstp-test"


class Issuer:
    """An OIDC issuer on loopback: discovery, JWKS, and a signer."""

    def __init__(self) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        jwks = json.dumps({"keys": [jwk | {"kid": "k1", "use": "sig", "alg": "RS256"}]}).encode()
        issuer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the http.server API
                if self.path == "/.well-known/openid-configuration":
                    body = json.dumps({"issuer": issuer.url, "jwks_uri": issuer.url + "/jwks.json"}).encode()
                elif self.path == "/jwks.json":
                    body = jwks
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def token(self, now: float, *, key: Any = None, kid: str = "k1", alg: str = "RS256", **claims: Any) -> str:
        body = {"iss": self.url, "sub": "u-123", "aud": AUDIENCE, "exp": now + 600, "iat": now,
                "preferred_username": "frida", "groups": ["polar"]} | claims
        return jwt.encode(body, key or self.key, algorithm=alg, headers={"kid": kid})

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def issuer() -> Iterator[Issuer]:
    found = Issuer()
    yield found
    found.stop()


@pytest.fixture(scope="module")
def oidc_server(tmp_path_factory: pytest.TempPathFactory, catalog_root: Path,
                issuer: Issuer) -> Iterator[tuple[DstpServer, Clock]]:
    root = tmp_path_factory.mktemp("oidc")
    shutil.copytree(catalog_root / "ccm3", root / "ccm3")
    copy_dataset(catalog_root, root, "ocean", "polar", POLICIES["polar"])
    clock = Clock()
    settings = Settings(catalog_root=root, port=0, http_port=0, data_port=-1, udt_port=-1,
                        token_store=tmp_path_factory.mktemp("none") / "tokens.json", oidc_issuer=issuer.url,
                        oidc_audience=AUDIENCE, oidc_user_claim="preferred_username")
    with DstpServer(settings, clock=clock) as srv:
        yield srv, clock


def test_a_valid_jwt_names_the_user_and_groups(oidc_server: tuple[DstpServer, Clock], issuer: Issuer) -> None:
    srv, clock = oidc_server
    token = issuer.token(clock())
    with dstp.connect(srv.endpoints.grpc, token=token) as c:
        assert {d.id for d in c.datasets()} == {"ccm3", "polar"}
        assert c.query("select salinity from polar limit 2").num_rows == 2
    with httpx.Client(base_url=f"http://{srv.endpoints.http}", timeout=30) as http:
        r = http.get("/datasets.json", headers={"Authorization": f"Bearer {token}"})
        assert {d["id"] for d in r.json()} == {"ccm3", "polar"}
    no_groups = issuer.token(clock(), groups=[])
    with dstp.connect(srv.endpoints.grpc, token=no_groups) as c:
        assert {d.id for d in c.datasets()} == {"ccm3"}


@pytest.mark.parametrize("case, words", [
    ("expired", "expired"),
    ("not-yet", "not valid yet"),
    ("issuer", "another issuer"),
    ("audience", "not meant for this server"),
    ("foreign-key", "not signed by a key"),
    ("tampered", "not valid"),
    ("alg-none", "not accepted"),
    ("hs256-with-the-public-key", "not accepted"),
])
def test_jwts_that_are_not_valid_are_refused(oidc_server: tuple[DstpServer, Clock], issuer: Issuer, case: str,
                                              words: str) -> None:
    srv, clock = oidc_server
    now = clock()
    token = {
        "expired": lambda: issuer.token(now - 3600, exp=now - 120),
        "not-yet": lambda: issuer.token(now, nbf=now + 3600),
        "issuer": lambda: issuer.token(now, iss="https://elsewhere.example"),
        "audience": lambda: issuer.token(now, aud="another-service"),
        "foreign-key": lambda: issuer.token(now, key=issuer.other, kid="k9"),
        "tampered": lambda: _tamper(issuer.token(now)),
        "alg-none": lambda: jwt.encode({"iss": issuer.url, "sub": "x", "exp": now + 600}, None, algorithm="none"),
        "hs256-with-the-public-key": lambda: jwt.encode(
            {"iss": issuer.url, "sub": "x", "exp": now + 600, "aud": AUDIENCE}, b"k" * 32, algorithm="HS256"),
    }[case]()
    with dstp.connect(srv.endpoints.grpc, token=token) as c:
        with pytest.raises(dstp.AuthenticationError, match=words):
            c.datasets()


def test_expiry_follows_the_server_clock(oidc_server: tuple[DstpServer, Clock], issuer: Issuer) -> None:
    srv, clock = oidc_server
    token = issuer.token(clock())
    with dstp.connect(srv.endpoints.grpc, token=token) as c:
        assert c.datasets()
        clock.advance(3600)
        try:
            with pytest.raises(dstp.AuthenticationError, match="expired"):
                c.datasets()
        finally:
            clock.now = time.time()


def _tamper(token: str) -> str:
    head, body, signature = token.split(".")
    claims = json.loads(jwt.utils.base64url_decode(body))
    claims["groups"] = ["polar", "admins"]
    return ".".join((head, jwt.utils.base64url_encode(json.dumps(claims).encode()).decode(), signature))

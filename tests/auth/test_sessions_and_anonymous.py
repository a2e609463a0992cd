"""Logging in from a browser (a session cookie), and servers that need a token (allow_anonymous)."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

import dstp
from authcase import POLICIES, copy_dataset
from dstp.auth import TokenStore
from dstp.server import DstpServer
from dstp.settings import Settings


@pytest.fixture()
def browser(auth_server: DstpServer, tls: Any) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"https://{auth_server.endpoints.http}", timeout=30,
                      verify=ssl.create_default_context(cafile=str(tls.cert_path))) as c:
        yield c


def log_in(browser: httpx.Client, token: str, next_: str = "/") -> httpx.Response:
    return browser.post("/login", data={"token": token, "next": next_}, follow_redirects=False)


def test_login_sets_a_secure_httponly_session_cookie_that_is_not_the_token(browser: httpx.Client,
                                                                           tokens: Any) -> None:
    assert browser.get("/datasets/polar.json").status_code == 404  # anonymous
    form = browser.get("/login", headers={"Accept": "text/html"})
    assert form.status_code == 200 and 'name="token"' in form.text
    r = log_in(browser, tokens.alice, "/datasets/polar")
    assert r.status_code == 303 and r.headers["location"] == "/datasets/polar"
    cookie = r.headers["set-cookie"]
    for attribute in ("dstp_session=", "HttpOnly", "Secure", "SameSite=lax", "Path=/"):
        assert attribute.lower() in cookie.lower(), cookie
    assert tokens.alice not in cookie and tokens.alice.split("_", 2)[2] not in cookie
    page = browser.get("/datasets/polar", headers={"Accept": "text/html"})
    assert page.status_code == 200 and "alice (polar)" in page.text and 'action="/logout"' in page.text
    assert browser.get("/datasets/polar.json").status_code == 200
    out = browser.post("/logout", follow_redirects=False)
    assert out.status_code == 303 and 'dstp_session=""' in out.headers["set-cookie"]
    assert browser.get("/datasets/polar.json").status_code == 404


def test_a_bad_token_and_a_foreign_next_are_refused(browser: httpx.Client, tokens: Any) -> None:
    r = log_in(browser, "dstp_000000000000_" + "x" * 43)
    assert r.status_code == 401 and "not one this server issued" in r.text and "set-cookie" not in r.headers
    for target in ("//evil.example/x", "https://evil.example/", "/\\evil.example"):
        assert log_in(browser, tokens.alice, target).headers["location"] == "/"
    r = browser.post("/login", data={"token": tokens.alice}, headers={"Origin": "https://evil.example"},
                     follow_redirects=False)
    assert r.status_code == 400 and "set-cookie" not in r.headers


def test_revoking_a_token_ends_its_sessions(browser: httpx.Client, tokens: Any) -> None:
    store = TokenStore(tokens.path)
    erin = store.create("erin", ["polar"])
    assert log_in(browser, erin.secret).status_code == 303
    assert browser.get("/datasets/polar.json").status_code == 200
    store.revoke(erin.record.id)
    r = browser.get("/datasets/polar.json")
    assert r.status_code == 401 and "revoked" in r.json()["error"]["message"]
    assert browser.get("/login").status_code == 200  # the login page still answers


@pytest.fixture(scope="module")
def closed_server(tmp_path_factory: pytest.TempPathFactory, catalog_root: Path, tokens: Any) -> Iterator[DstpServer]:
    """Plaintext, a catalog with a restricted dataset, allow_anonymous left at auto: tokens needed."""
    root = tmp_path_factory.mktemp("closed")
    import shutil

    shutil.copytree(catalog_root / "ccm3", root / "ccm3")
    copy_dataset(catalog_root, root, "ocean", "polar", POLICIES["polar"])
    settings = Settings(catalog_root=root, port=0, http_port=0, data_port=0, udt_port=-1, token_store=tokens.path)
    with DstpServer(settings) as srv:
        yield srv


def test_a_catalog_with_restricted_data_needs_a_token_by_default(closed_server: DstpServer, tokens: Any,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DSTP_TOKEN", raising=False)
    assert closed_server.authenticator is not None and not closed_server.authenticator.allow_anonymous
    with dstp.connect(closed_server.endpoints.grpc) as c:
        with pytest.raises(dstp.AuthenticationError, match="needs a token.*DSTP_TOKEN"):
            c.datasets()
    with dstp.connect(closed_server.endpoints.grpc, token=tokens.alice) as c:
        assert {d.id for d in c.datasets()} == {"ccm3", "polar"}
        assert c.query("select salinity from polar limit 2", transport="striped").num_rows == 2
    monkeypatch.setenv("DSTP_TOKEN", tokens.bob)
    with dstp.connect(closed_server.endpoints.grpc) as c:
        assert {d.id for d in c.datasets()} == {"ccm3"}
    with httpx.Client(base_url=f"http://{closed_server.endpoints.http}", timeout=30) as http:
        r = http.get("/datasets.json")
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthenticated"
        assert r.headers["WWW-Authenticate"] == 'Bearer realm="dstp"' and "DSTP_TOKEN" in r.json()["error"]["message"]
        page = http.get("/", headers={"Accept": "text/html"})
        assert page.status_code == 401 and 'action="/login"' in page.text
        assert http.get("/login").status_code == 200 and http.get("/static/dstp.css").status_code == 200
        ok = http.get("/datasets.json", headers={"Authorization": f"Bearer {tokens.alice}"})
        assert ok.status_code == 200 and {d["id"] for d in ok.json()} == {"ccm3", "polar"}

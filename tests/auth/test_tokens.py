"""API tokens: issued once, stored hashed, verified in constant time, revoked and expired by the clock; the CLI."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

import dstp
from clock import Clock
from dstp.auth import Authenticator, TokenStore, parse_duration
from dstp.auth.tokens import hash_token
from dstp.cli import main


def test_a_token_is_stored_only_as_its_hash(tmp_path: Path) -> None:
    store = TokenStore(tmp_path / "t" / "tokens.json")
    issued = store.create("alice", ["polar", "admins"], expires_in=90 * 86400)
    text = store.path.read_text()
    assert issued.secret.startswith(f"dstp_{issued.record.id}_") and len(issued.secret) > 50
    assert issued.secret not in text and issued.secret.split("_", 2)[2] not in text
    assert hash_token(issued.secret) in text
    assert stat.S_IMODE(os.stat(store.path).st_mode) == 0o600
    record = store.verify(issued.secret)
    assert (record.user, record.groups) == ("alice", ("polar", "admins"))


def test_unknown_altered_expired_and_revoked_tokens_are_refused_with_a_reason(tmp_path: Path) -> None:
    clock = Clock()
    store = TokenStore(tmp_path / "tokens.json", clock)
    good = store.create("alice", [], expires_in=3600)
    for wrong in ("", "dstp_", good.secret[:-1] + ("A" if good.secret[-1] != "A" else "B"), "Bearer x",
                  "dstp_000000000000_" + "x" * 43):
        with pytest.raises(dstp.AuthenticationError, match="not one this server issued"):
            store.verify(wrong)
    clock.advance(3601)
    with pytest.raises(dstp.AuthenticationError, match="expired on"):
        store.verify(good.secret)
    other = store.create("bob", [])
    store.revoke(other.record.id)
    with pytest.raises(dstp.AuthenticationError, match="revoked"):
        store.verify(other.secret)
    with pytest.raises(KeyError, match="no token 'nope'"):
        store.revoke("nope")


def test_a_running_server_sees_new_and_revoked_tokens_without_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    server_side = TokenStore(path)
    with pytest.raises(dstp.AuthenticationError):
        server_side.verify("dstp_000000000000_" + "x" * 43)  # no file yet: nobody
    cli_side = TokenStore(path)
    issued = cli_side.create("alice", ["polar"])
    assert server_side.verify(issued.secret).user == "alice"
    cli_side.revoke(issued.record.id)
    with pytest.raises(dstp.AuthenticationError, match="revoked"):
        server_side.verify(issued.secret)


def test_a_damaged_store_lets_nobody_in(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    issued = TokenStore(path).create("alice", [])
    path.write_text("{not json")
    with pytest.raises(dstp.AuthenticationError, match="cannot be read"):
        TokenStore(path).verify(issued.secret)


def test_the_authenticator_reads_bearer_headers_and_the_anonymous_rule(tmp_path: Path) -> None:
    store = TokenStore(tmp_path / "tokens.json")
    issued = store.create("alice", ["polar"])
    closed, open_ = Authenticator(allow_anonymous=False, tokens=store), Authenticator(allow_anonymous=True, tokens=store)
    with pytest.raises(dstp.AuthenticationError, match="DSTP_TOKEN"):
        closed.authenticate(None)
    assert not open_.authenticate(None).authenticated
    principal = closed.authenticate(f"Bearer {issued.secret}")
    assert principal.name == "alice" and principal.groups == {"polar"} and principal.key == f"token:{issued.record.id}"
    with pytest.raises(dstp.AuthenticationError, match="Bearer <token>"):
        open_.authenticate(f"Basic {issued.secret}")
    with pytest.raises(dstp.AuthenticationError, match="not one this server issued"):
        open_.authenticate("Bearer dstp_000000000000_" + "x" * 43)  # present but wrong: refused, not anonymous
    with pytest.raises(dstp.AuthenticationError, match="does not accept JWTs"):
        open_.authenticate("Bearer a.b.c")


@pytest.mark.parametrize("text, seconds", [("90d", 90 * 86400), ("12h", 43200), ("30m", 1800), ("2w", 1209600),
                                           ("45", 45)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_the_token_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = str(tmp_path / "tokens.json")
    assert main(["token", "create", "--user", "alice", "--groups", "polar,admins", "--expires", "90d",
                 "--store", store]) == 0
    out, err = capsys.readouterr()
    secret = out.strip()
    assert secret.startswith("dstp_") and "shown once" in err
    assert TokenStore(Path(store)).verify(secret).groups == ("polar", "admins")
    assert main(["token", "list", "--json", "--store", store]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["user"], r["groups"], r["status"]) for r in rows] == [("alice", "polar,admins", "active")]
    assert secret not in json.dumps(rows)
    assert main(["token", "revoke", rows[0]["id"], "--store", store]) == 0
    assert "revoked" in capsys.readouterr().out
    assert main(["token", "list", "--json", "--store", store]) == 0
    assert json.loads(capsys.readouterr().out)[0]["status"] == "revoked"
    assert main(["token", "revoke", "nope", "--store", store]) == 1
    assert "no token 'nope'" in capsys.readouterr().err
    assert main(["token", "create", "--user", "x", "--groups", "bad group", "--store", store]) == 1

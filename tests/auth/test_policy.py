"""The access policy, the one function every resource goes through: can_read(principal, descriptor, now)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timezone

import pytest

from dstp.auth import ANONYMOUS, Principal, anonymous_by_default, can_read, embargo_start


@dataclass(frozen=True)
class Rule:
    access_policy: str
    access_groups: tuple[str, ...] = ()
    embargo_until: date | None = None


ALICE = Principal("alice", frozenset({"polar", "admins"}), authenticated=True, via="token", credential="a1")
BOB = Principal("bob", frozenset({"ocean"}), authenticated=True, via="token", credential="b1")
NOGROUP = Principal("eve", frozenset(), authenticated=True, via="oidc", credential="iss#eve")
DAY = date(2027, 1, 1)
MIDNIGHT = datetime(2027, 1, 1, tzinfo=timezone.utc).timestamp()


@pytest.mark.parametrize("rule, expected", [
    (Rule("public"), (True, True, True, True)),
    (Rule("registered"), (False, True, True, True)),
    (Rule("restricted", ("polar",)), (False, True, False, False)),
    (Rule("restricted", ("ocean", "polar")), (False, True, True, False)),
    (Rule("secret-typo", ("polar",)), (False, False, False, False)),  # unknown policy: nobody
])
def test_policies(rule: Rule, expected: tuple[bool, ...]) -> None:
    got = tuple(can_read(p, rule, MIDNIGHT) for p in (ANONYMOUS, ALICE, BOB, NOGROUP))
    assert got == expected


def test_an_embargo_admits_its_groups_before_and_the_policy_from_midnight_utc() -> None:
    public, registered = Rule("public", ("polar",), DAY), Rule("registered", ("polar",), DAY)
    assert embargo_start(DAY) == MIDNIGHT
    before, at = MIDNIGHT - 1, MIDNIGHT
    assert [can_read(p, public, before) for p in (ANONYMOUS, ALICE, BOB)] == [False, True, False]
    assert [can_read(p, public, at) for p in (ANONYMOUS, ALICE, BOB)] == [True, True, True]
    assert [can_read(p, registered, at) for p in (ANONYMOUS, ALICE, BOB)] == [False, True, True]


def test_anonymous_is_on_by_default_only_for_plainly_public_catalogs() -> None:
    assert anonymous_by_default([Rule("public"), Rule("public")])
    assert anonymous_by_default([])
    for limited in (Rule("registered"), Rule("restricted", ("polar",)), Rule("public", ("polar",), DAY)):
        assert not anonymous_by_default([Rule("public"), limited])


def test_principals_are_bound_by_credential() -> None:
    assert ANONYMOUS.key == "anonymous" and not ANONYMOUS.authenticated
    assert ALICE.key == "token:a1" and NOGROUP.key == "oidc:iss#eve"
    assert ALICE.describe() == "alice (admins, polar)" and ANONYMOUS.describe() == "anonymous"

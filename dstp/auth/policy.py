"""Access policy: the one function that says whether a principal may read a dataset.

Every resource of every adapter goes through :func:`can_read` (the service
calls it for listings, search, facets, counts, describe, queries — every
dataset a query reads —, bulk files, quicklooks and snippets); a dataset a
principal may not read is *not found*, exactly like one that does not exist.

A descriptor's ``<access>`` element says who may read (docs/security-auth.md):

=====================================================  ==========================================
``<access policy="public"/>`` (or no element)          everyone, anonymous requests included
``<access policy="registered"/>``                      any request with a valid token
``<access policy="restricted" groups="polar admins"/>``  principals in one of the groups
``embargo-until="2027-01-01"`` (with public/registered)  before that day (00:00 UTC) only the
                                                       groups; from then on the policy
=====================================================  ==========================================

Anything else (an unknown policy) reads as nobody: the check fails closed.
"""

from __future__ import annotations

import calendar
from datetime import date
from typing import Iterable, Protocol

from dstp.auth.principal import Principal

__all__ = ["AccessRule", "anonymous_by_default", "can_read", "embargo_start"]


class AccessRule(Protocol):
    """What a descriptor says about access (``dstp.catalog.descriptor.Descriptor`` has these)."""

    @property
    def access_policy(self) -> str: ...

    @property
    def access_groups(self) -> tuple[str, ...]: ...

    @property
    def embargo_until(self) -> date | None: ...


def embargo_start(day: date) -> float:
    """Return the Unix time an embargo ends: 00:00 UTC of ``day``."""
    return float(calendar.timegm(day.timetuple()))


def can_read(principal: Principal, descriptor: AccessRule, now: float) -> bool:
    """Return whether ``principal`` may read the dataset ``descriptor`` publishes, at Unix time ``now``."""
    in_groups = not principal.groups.isdisjoint(descriptor.access_groups)
    embargo = descriptor.embargo_until
    if embargo is not None and now < embargo_start(embargo):
        return in_groups
    policy = descriptor.access_policy
    if policy == "public":
        return True
    if policy == "registered":
        return principal.authenticated
    if policy == "restricted":
        return in_groups
    return False


def anonymous_by_default(descriptors: Iterable[AccessRule]) -> bool:
    """Return whether ``allow_anonymous = auto`` lets requests without a token in: only for a catalog
    whose datasets are all plainly public (no restricted, registered or embargoed one).

    A publisher who limits any dataset runs a server that is about identities;
    refusing tokenless requests there keeps strangers from probing it at all.
    """
    return all(d.access_policy == "public" and d.embargo_until is None for d in descriptors)

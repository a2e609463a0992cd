"""Whether the tests may create network namespaces here (iproute2 and the right to add one).

CI runs as root and creates them; elsewhere the tests that need them skip, saying why.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest


def namespaces_unavailable(probe: str) -> str | None:
    """Return why a network namespace cannot be created here, or None when it can (adds and deletes ``probe``)."""
    if shutil.which("ip") is None:
        return "iproute2 `ip` is not installed"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, timeout=30)
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=30)
    return None if made.returncode == 0 else f"cannot create network namespaces here: {made.stderr.strip()}"


def skip_without_namespaces(probe: str) -> None:
    """Skip the calling test (or fixture) when no network namespace can be created here."""
    reason = namespaces_unavailable(probe)
    if reason:
        pytest.skip(reason)

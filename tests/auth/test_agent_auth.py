"""``dstp agent`` on a TLS server with tokens: each caller is served with its own credentials, never another's.

The agent keeps a client per (server, token, TLS, CA file). A caller without a token must not be
answered on the client an earlier caller's token opened: the restricted dataset does not exist
for it, exactly as without the agent.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from dstp.agent import AGENT_ENV, Agent

DSTP = [sys.executable, "-m", "dstp.cli"]


@pytest.fixture()
def agent_sock(tmp_path: Path) -> Iterator[Path]:
    with Agent(tmp_path / "agent.sock") as agent:
        yield agent.path


def _get(server: str, dataset: str, name: str, out: Path, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*DSTP, "get", dataset, name, "-o", str(out), "--server", server, *extra],
                          env=env, capture_output=True, text=True, timeout=120, cwd=out.parent)


def test_the_agent_serves_each_caller_with_its_own_token(auth_server, auth_catalog, tokens, tls, tmp_path,
                                                         agent_sock) -> None:
    server = f"localhost:{auth_server.endpoints.grpc.rsplit(':', 1)[1]}"
    name = sorted((auth_catalog / "polar").glob("*.nc"))[0].name
    base = {k: v for k, v in os.environ.items() if not k.startswith("DSTP_")}
    (tmp_path / "ca.pem").write_bytes(tls.cert_path.read_bytes())  # a CA file named relative to the caller's folder
    via = {**base, AGENT_ENV: str(agent_sock), "DSTP_CA_FILE": "ca.pem"}

    alice = _get(server, "polar", name, tmp_path / "alice.nc", {**via, "DSTP_TOKEN": tokens.alice}, "-v")
    assert alice.returncode == 0, alice.stderr
    assert "agent: " in alice.stderr
    assert (tmp_path / "alice.nc").read_bytes() == (auth_catalog / "polar" / name).read_bytes()

    for who, extra in (("anonymous", {}), ("bob", {"DSTP_TOKEN": tokens.bob})):
        out = tmp_path / f"{who}.nc"
        through = _get(server, "polar", name, out, {**via, **extra})
        direct = _get(server, "polar", name, out, {**via, **extra}, "--no-agent")
        assert through.returncode == direct.returncode == 1, (through.stderr, direct.stderr)
        assert through.stderr == direct.stderr and "polar" in through.stderr
        assert not out.exists()

    carol = _get(server, "ccm3", "ccm3_1990-01.nc", tmp_path / "carol.nc", {**via, "DSTP_TOKEN": tokens.carol})
    direct = _get(server, "ccm3", "ccm3_1990-01.nc", tmp_path / "carol.nc",
                  {**via, "DSTP_TOKEN": tokens.carol}, "--no-agent")
    assert carol.returncode == direct.returncode == 1 and carol.stderr == direct.stderr  # an expired token

"""The start-up benchmark's quick mode runs every variant, the agent's included, without a failure."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import startup  # noqa: E402


def test_every_start_up_variant_runs(catalog_root: Path) -> None:
    result = startup.run(True, {"small": catalog_root})
    assert result["mode"] == "quick"
    variants = {k: v for k, v in result.items() if k != "mode"}
    assert "dstp get via agent (striped x1)" in variants and "dstp get via agent (auto)" in variants
    assert "dstp query limit 1 via agent (striped)" in variants
    assert all(v is not None and v > 0 for v in variants.values()), variants  # None: every run of it failed


def test_the_import_trace_of_a_get_through_the_agent_has_no_grpc(catalog_root: Path, tmp_path: Path) -> None:
    from bench.dstp_process import agent, serve

    with serve(catalog_root) as server, agent(tmp_path / "a.sock") as kept:
        sock = kept.socket
        argv, env = startup._variants(server.endpoints["grpc"], tmp_path, sock)["dstp get via agent (striped x1)"]
        traced = startup.importtime(argv, tmp_path, env)
        alone, env_alone = startup._variants(server.endpoints["grpc"], tmp_path, sock)[startup.GET]
        traced_alone = startup.importtime(alone, tmp_path, env_alone)
    assert "dstp.agent" in traced and "grpc" not in traced and "dstp.client" not in traced, traced
    assert "grpc" in traced_alone and "dstp.agent" not in traced_alone, traced_alone
    assert (tmp_path / startup.SAMPLE_FILE[1]).exists()

"""The TLS-cost benchmark's quick mode (bench/tls_cost.py): both modes run every tool and every run succeeds.

No timing assertions: the quick mode runs the seed query on the small samples
and fetches an 8 MiB file once per tool, plaintext and TLS (sealed data
channels, tokens), on loopback.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import tls_cost  # noqa: E402
from bench.__main__ import samples  # noqa: E402


def test_every_tool_runs_with_and_without_tls() -> None:
    result = tls_cost.run(True, samples(True))
    rows = result["loopback"]
    assert {(r["what"], r["tool"], r["mode"]) for r in rows} == {
        (what, tool, mode) for what, tool in (("seed query", "grpc × 1"), ("seed query", "striped × 4"),
                                              ("dstp get 8MiB", "striped × 8"), ("dstp get 8MiB", "grpc × 1"))
        for mode in ("plain", "tls")}
    for r in rows:
        assert r["ok"], r.get("runs") or r  # each failing run says why (its error, its exit status)
    seeds = {r["rows"] for r in rows if r["what"] == "seed query"}
    assert len(seeds) == 1 and seeds.pop() > 0  # the same records whatever the mode and channel
    assert all("vs_plain" in r for r in rows if r["mode"] == "tls")

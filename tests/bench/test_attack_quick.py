"""bench.attack in quick mode: two load steps and the descriptor-exhaustion flood against real ``dstp serve``s.

No timing assertions (the harness's smoke test): every answer is checked against the oracle, none may be
wrong, every door's probe is counted, the tables render, and nothing is written.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import attack  # noqa: E402
from bench.report import RESULTS  # noqa: E402
from dstp.samples import generate_samples  # noqa: E402


def test_quick_attack_run(tmp_path: Path) -> None:
    generate_samples(tmp_path, "small")
    before = sorted(RESULTS.glob("attack*")) if RESULTS.exists() else []
    result = attack.run(True, {"small": tmp_path})
    assert result["wrong"] == 0
    assert [p["clients"] for p in result["scaling"]] == list(attack.QUICK["steps"])
    assert all(p["ok"] > 0 and p["errors"] == 0 for p in result["scaling"])
    for run in result["exhaustion"]:
        assert set(run["attacked"]) == {"grpc", "http", "striped", "flight"}
        assert all(v["answers"] + v["failures"] > 0 for v in run["attacked"].values())
        assert sum(run["opened"].values()) > 0
    text = attack.markdown(result)
    assert "Descriptor exhaustion" in text and "flight" in text
    assert (sorted(RESULTS.glob("attack*")) if RESULTS.exists() else []) == before

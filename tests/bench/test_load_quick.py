"""bench.load in quick mode: a few clients against a real ``dstp serve``, plain and with tokens and TLS.

No timing assertions (this is the harness's smoke test): every answer is checked against the
oracle, nothing but back-pressure may fail, the tables render, and nothing is written.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import load  # noqa: E402
from bench.report import RESULTS  # noqa: E402
from dstp.samples import generate_samples  # noqa: E402


@pytest.fixture(scope="module")
def quick_result(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("load-samples")
    generate_samples(root, "small")
    before = sorted(RESULTS.glob("load*")) if RESULTS.exists() else []
    started = time.monotonic()
    result = load.run(True, {"small": root}, sizes={**load.QUICK, "seconds": 2.0})
    result["test_seconds"] = time.monotonic() - started
    result["written"] = (sorted(RESULTS.glob("load*")) if RESULTS.exists() else []) != before
    return result


def test_the_oracle_reads_the_files_not_the_server(tmp_path: Path) -> None:
    generate_samples(tmp_path, "small")
    expected = load.oracle(tmp_path)
    assert set(expected) == {q for q, _ in load.QUERIES}
    assert all(rows > 0 for rows, _ in expected.values())


def test_every_answer_is_right_and_nothing_but_back_pressure_fails(quick_result: dict[str, Any]) -> None:
    assert [r["config"] for r in quick_result["configs"]] == ["plain", "secure"]
    for r in quick_result["configs"]:
        for phase in ("baseline", "load"):
            p = r[phase]
            assert p["ok"] > 0, (r["config"], phase, p)
            assert p["wrong"] == 0 and p["errors"] == 0, (r["config"], phase, p["error_samples"])
            assert p["p50_ms"] is not None and p["p99_ms"] >= p["p50_ms"]
        assert set(r["growth"]) == {"fds", "threads", "rss_mb"}
        assert r["goodput_ratio"] is not None


def test_the_tables_render_and_quick_mode_writes_nothing(quick_result: dict[str, Any]) -> None:
    text = load.markdown(quick_result)
    assert "goodput q/s" in text and "p99 ms" in text and "secure" in text
    assert not quick_result["written"]

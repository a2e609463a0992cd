"""The archive benchmark's quick mode (bench/archive.py): every measurement runs and answers, no timings checked.

40 and 300 daily files in one dataset (300: the helper processes read the headers), and 30 one-file datasets:
each is published, started cold and warm by a real ``dstp serve``, and a new file renamed into place must
become queryable (the benchmark queries it until it answers, up to ten minutes).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import archive  # noqa: E402


@pytest.fixture(scope="module")
def quick() -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    real = archive.measure

    def keep(*args: Any, **kwargs: Any) -> dict[str, Any]:
        row = real(*args, **kwargs)
        rows.append(row)
        return row

    archive.measure = keep  # type: ignore[assignment]
    try:
        summary = archive.run(True, {})
    finally:
        archive.measure = real  # type: ignore[assignment]
    return {"summary": summary, "rows": rows}


@pytest.mark.timeout(900)
def test_every_case_is_measured_and_the_new_file_becomes_queryable(quick: dict[str, Any]) -> None:
    rows = quick["rows"]
    assert [(r["layout"], r["files"]) for r in rows] == [("one dataset", 40), ("one dataset", 300),
                                                         ("N datasets", 30)]
    for row in rows:
        for start in ("cold", "warm"):
            assert row[start]["seconds"] > 0 and row[start]["rss_MB"] > 0, row
        assert row["new_file"]["seconds"] is not None, row["new_file"]
        if row["layout"] == "one dataset":
            assert row["publish"]["seconds"] > 0
    assert rows[1]["cold"]["headers_s"] is not None  # the cold start read the 300 headers (in helpers)
    assert rows[1]["warm"]["headers_s"] is None  # the warm start read none
    assert quick["summary"]["largest"] == 300


def test_the_report_and_plot_are_made_from_a_result(quick: dict[str, Any], tmp_path: Path) -> None:
    result = {"mode": "quick", "grid": archive.GRID, "goals": archive.GOALS, "rows": quick["rows"],
              "machine": {"cores": 2}}
    text = archive.report(result)
    assert "| one dataset | 300 |" in text and "| N datasets | 30 |" in text
    archive.plot(result, tmp_path)
    assert (tmp_path / "archive.png").stat().st_size > 0

"""The listings benchmark's quick mode (bench/listings.py): every door is measured and answers; no timings checked.

30 one-file datasets served by a real ``dstp serve``; each listing door is asked for a page (and, for reference,
the unpaged listings), the gRPC ListDatasets and a ``dstp ls --limit 100`` process run.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import listings  # noqa: E402


@pytest.mark.timeout(900)
def test_every_door_is_measured_and_reported(tmp_path: Path) -> None:
    rows: list[dict[str, Any]] = []
    real = listings.measure

    def keep(*args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        found = real(*args, **kwargs)
        rows.extend(found)
        return found

    listings.measure = keep  # type: ignore[assignment]
    try:
        summary = listings.run(True, {})
    finally:
        listings.measure = real  # type: ignore[assignment]
    doors = [r["door"] for r in rows]
    assert doors == [d for d, _, _ in listings._doors(30)] + ["gRPC ListDatasets (one page; bytes = datasets)",
                                                               "dstp ls --limit 100 (whole process)"]
    assert all(r["datasets"] == 30 and r["median_ms"] > 0 and r["bytes"] > 0 for r in rows), rows
    assert summary["worst_page"] in doors
    text = listings.report({"goal_ms": listings.GOAL_MS, "page": listings.PAGE, "rows": rows,
                            "machine": {"cores": 2}})
    assert "| /stac/collections (first page) | 30 |" in text

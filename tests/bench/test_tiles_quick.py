"""The tiles benchmark's quick mode (bench/tiles.py): every zoom and kind is measured and reported; no timings
checked."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import tiles  # noqa: E402


@pytest.mark.timeout(900)
def test_every_zoom_and_kind_is_measured_and_reported(catalog_root: Path) -> None:
    summary = tiles.run(True, {"small": catalog_root})
    assert summary["mode"] == "quick" and summary["warm_p50_ms"] > 0 and summary["cold_p50_ms"] > 0


def test_the_report_has_a_row_per_measurement() -> None:
    rows = [{"mode": "sequential", "zoom": z, "kind": k, "p50_ms": 1.0, "p99_ms": 2.0, "requests": 8}
            for z in tiles.QUICK_ZOOMS for k in ("cold", "render", "warm")]
    text = tiles.report({"samples": "small", "rows": rows, "machine": {"cores": 2}})
    assert text.count("| sequential |") == len(rows)
    assert [tile[0] for tile in tiles._tiles(3)] == [3] * tiles.PER_ZOOM and tiles._tiles(0) == [(0, 0, 0)]

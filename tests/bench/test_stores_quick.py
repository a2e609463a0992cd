"""The stores benchmark's quick mode (bench/stores.py): every measurement runs, answers agree across local disk,
moto's S3 and an HTTP server with ranges, and a restart on the index fetches no data (no timing is checked)."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import stores  # noqa: E402


def test_quick_run_answers_alike_everywhere_and_restarts_without_data_gets() -> None:
    result = stores.run(True, {})
    assert [r["backend"] for r in result["rows"]] == ["local", "s3", "https"]
    assert result["answers_agree"]
    for row in result["rows"][1:]:
        assert row["slab_cold_gets"] >= 1 and row["slab_warm_gets"] == 0  # decoded chunks are kept
        assert row["scan_cold_bytes"] <= result["archive_bytes"]
        assert row["whole_copies_after_restart"] == 0
        assert 1.0 <= row["scan_fetched_over_needed"] <= 1.25  # every chunk the scan needs, little more
    s3 = result["rows"][1]
    assert s3["restart_requests"] == {"LIST": 1}
    assert "HEAD" not in s3["cold_open_requests"]  # the listing says each object's version: no HEAD per object
    assert s3["cold_open_requests"]["GET"] == 3  # the three files' headers, one 64 KiB ranged GET each
    assert s3["cold_open_bytes"] <= 3 * 64 * 2**10
    assert "| obstore |" in stores.markdown(result)

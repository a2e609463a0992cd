"""bench.output_formats in quick mode: every format is written and reads back as the streamed records."""

from __future__ import annotations

from pathlib import Path

from bench import output_formats
from dstp.samples import generate_samples


def test_quick_run_writes_every_format_and_each_reads_back_equal(tmp_path: Path) -> None:
    generate_samples(tmp_path / "small", "small")
    result = output_formats.run(True, {"small": tmp_path / "small"})
    assert {(r["query"], r["peer"]) for r in result["rows"]} == {
        (q, p) for q in output_formats.QUERIES for p in output_formats.PEERS}
    assert all(r["equal"] is True for r in result["rows"] if r["peer"] != "stream")
    assert all(r["rows"] > 0 for r in result["runs"])

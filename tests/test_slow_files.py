"""The fast loop's list of slow files names files that exist (a renamed file would silently join the fast loop)."""

from __future__ import annotations

from pathlib import Path

from slow_files import SLOW_FILES

ROOT = Path(__file__).resolve().parents[1]


def test_every_slow_file_exists() -> None:
    assert len(SLOW_FILES) > 10
    assert sorted(f for f in SLOW_FILES if not (ROOT / f).is_file()) == []

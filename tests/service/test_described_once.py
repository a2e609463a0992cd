"""A dataset's summary and description are made once per published version, and a change gives new ones."""

from __future__ import annotations

from pathlib import Path

from builders import daily
from clock import Clock

from dstp.catalog.publish import publish
from dstp.catalog.registry import Catalog
from dstp.service import DstpService
from dstp.settings import Settings


def test_a_description_is_made_once_per_version_and_again_after_a_change(tmp_path: Path) -> None:
    root = tmp_path / "root"
    folder = root / "daily"
    publish([daily(folder / f"d_{day:04d}.nc", day) for day in (0, 1)], "daily")
    clock = Clock()
    catalog = Catalog.scan(root, index=tmp_path / "index.sqlite", settle_s=1.0, clock=clock)
    try:
        service = DstpService(catalog, Settings(catalog_root=root))
        first = service.describe("daily")
        assert service.describe("daily") is first and service.datasets()[0] is first.summary
        assert first.summary.time_end.startswith("2000-01-02") and len(first.files) == 2
        daily(folder / "d_0002.nc", 2)
        catalog.refresh()
        clock.advance(1.0)
        catalog.refresh()
        after = service.describe("daily")
        assert after.summary.version == first.summary.version + 1
        assert after.summary.time_end.startswith("2000-01-03") and len(after.files) == 3
        assert service.datasets()[0] == after.summary
    finally:
        catalog.close()

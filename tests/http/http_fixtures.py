"""Helpers the tests of dstp/http import by name (a conftest's fixtures need no import; these do)."""

from __future__ import annotations

from pathlib import Path

from dstp.settings import Settings


def web_settings(root: Path, **changes: object) -> Settings:
    """Return settings serving ``root`` on free loopback ports, HTTP on, data channels off."""
    return Settings(catalog_root=root, port=0, http_port=0, data_port=-1, udt_port=-1, batch_rows=4096).replace(
        **changes
    )

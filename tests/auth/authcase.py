"""The auth tests' catalog: its access policies, how a dataset is copied under one, the embargo's two sides."""

from __future__ import annotations

import shutil
from datetime import datetime, timezone
from pathlib import Path

BEFORE = datetime(2029, 6, 1, tzinfo=timezone.utc).timestamp()
AFTER = datetime(2030, 1, 2, tzinfo=timezone.utc).timestamp()

POLICIES = {
    "members": '<access policy="registered"/>',
    "polar": '<access policy="restricted" groups="polar"/>',
    "embargoed": '<access policy="public" groups="polar" embargo-until="2030-01-01"/>',
}


def copy_dataset(source: Path, root: Path, old_id: str, new_id: str, access: str) -> None:
    """Copy the sample dataset ``old_id`` under ``root`` as ``new_id`` with the ``<access>`` element ``access``."""
    target = root / new_id
    shutil.copytree(source / old_id, target)
    (target / f"{old_id}.dstp.xml").unlink()
    xml = (source / old_id / f"{old_id}.dstp.xml").read_text()
    xml = xml.replace(f'id="{old_id}"', f'id="{new_id}"').replace('<access policy="public"/>', access)
    assert access in xml
    (target / f"{new_id}.dstp.xml").write_text(xml)

"""A catalog of many one-file datasets (issue 35's paging): tiny files, one folder and descriptor each.

One file is written with netCDF4 and drafted by ``dstp publish``; the others are byte copies with the
descriptor's names replaced, so a thousand datasets take a second. Every dataset whose number is a multiple of
``every`` says "sea ice" in its title (for searches); ``restricted`` datasets are readable by the group ``polar``
only.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Iterable

from builders import daily

from dstp.catalog.publish import publish


def dataset_id(i: int) -> str:
    return f"ds_{i:05d}"


def many_datasets(root: Path, n: int, *, every: int = 100, restricted: Iterable[int] = ()) -> list[str]:
    """Write ``n`` one-file datasets under ``root``; return their ids in id order."""
    first = root / dataset_id(0)
    source = daily(first / f"{dataset_id(0)}.nc", 0)
    text = publish([source], dataset_id(0)).read_text()
    locked = set(restricted)
    for i in range(n):
        name = dataset_id(i)
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        if i:
            shutil.copyfile(source, folder / f"{name}.nc")
        xml = text.replace(dataset_id(0), name)
        if i % every == 0:
            xml = xml.replace("<title>T2m", "<title>Sea ice T2m")
        if i in locked:
            xml = xml.replace('<access policy="public"/>', '<access policy="restricted" groups="polar"/>')
        (folder / f"{name}.dstp.xml").write_text(xml)
    return [dataset_id(i) for i in range(n)]

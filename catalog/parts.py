"""Datasets split by variable: files that hold different variables on one grid, merged by variable.

Model output is often written one variable per file (CMIP's ``tas_*.nc`` beside
``pr_*.nc``), with constant files beside it (CMIP ``fx`` files: ``areacella``,
``sftlf``; a UGRID ``grid.nc`` beside the data on its mesh; MPAS' grid file
beside ``diag.*.nc``). A descriptor says so with one ``<part glob="…"/>`` per set
of files that hold the same variables. Each part is lined up along the
aggregation dimension on its own (when its files have it), then the parts are
merged by variable, as ``xarray.merge`` merges datasets: every part that has the
aggregation dimension must give it the same length (and, checked by
:mod:`.binding`, the same coordinate values), every other coordinate must be
equal wherever it is held, and a data variable is read from the one part that
holds it.
"""

from __future__ import annotations

import fnmatch
from pathlib import Path
from typing import Mapping, Sequence

from dstp.catalog.aggregation import order_files
from dstp.catalog.columns import DataFile
from dstp.catalog.descriptor import CoordinateSpec, Descriptor
from dstp.catalog.netcdf4_ import FileIdentity, FileMeta, FileSource
from dstp.errors import DataFileError, DescriptorError

__all__ = ["line_up", "part_of_each"]


def part_of_each(paths: Sequence[Path], folder: Path, descriptor: Descriptor, where: str) -> list[int]:
    """Return the part each file belongs to (all 0 when the descriptor names no parts).

    A file must match exactly one part's glob (relative to the descriptor's folder).
    """
    if not descriptor.parts:
        return [0] * len(paths)
    out: list[int] = []
    for path in paths:
        relative = path.relative_to(folder).as_posix()
        matched = [k for k, glob in enumerate(descriptor.parts) if fnmatch.fnmatchcase(relative, glob)]
        if len(matched) != 1:
            which = " and ".join(repr(descriptor.parts[k]) for k in matched)
            raise DescriptorError(
                f"{relative} matches {'no part' if not matched else f'the parts {which}'}; every file of "
                f"{descriptor.files_glob!r} must match exactly one <part glob=\"…\"/>", path=where)
        out.append(matched[0])
    unmatched = [glob for k, glob in enumerate(descriptor.parts) if k not in out]
    if unmatched:
        raise DescriptorError(f"<part glob={unmatched[0]!r}/> matches none of the files of "
                              f"{descriptor.files_glob!r}", path=where)
    return out


def line_up(
    metas: list[FileMeta], parts: list[int], agg: str | None, spec: CoordinateSpec | None, handles: FileSource,
    where: str, versions: Mapping[Path, FileIdentity | None] | None = None,
) -> tuple[list[FileMeta], list[DataFile], int]:
    """Return the files in order (part by part, each along the aggregation dimension), their places on it, and
    its length; refuse parts that give it different lengths, or a part of several files with nothing to
    aggregate them along. ``versions`` gives each file's version (and size); without it, sizes are read from
    the disk."""
    ordered: list[FileMeta] = []
    files: list[DataFile] = []
    lengths: dict[int, tuple[int, str]] = {}
    for part in sorted(set(parts)):
        members = [m for m, p in zip(metas, parts) if p == part]
        # A file that declares the dimension but holds nothing on it (a grid.nc with an empty `time`) is constant.
        has_agg = agg is not None and any(agg in v.dimensions for m in members for v in m.variables.values())
        if len(members) > 1 and not has_agg:
            what = f"part {part + 1}" if len(set(parts)) > 1 else "the glob"
            raise DescriptorError(
                f"{len(members)} files match {what} ({', '.join(m.path.name for m in members[:3])}) but "
                + ("no aggregate dimension is named" if agg is None else f"none has the aggregate dimension {agg!r}"),
                path=where)
        if has_agg:
            members = order_files(members, agg, spec, handles)
        start = 0
        for meta in members:
            count = meta.dimensions.get(agg, 0) if has_agg and agg else 0
            version = versions.get(meta.path) if versions is not None else None
            size = version.size if version is not None else meta.path.stat().st_size
            files.append(DataFile(meta.path, size, start, count, meta.format, part, version))
            start += count
        if has_agg:
            lengths[part] = (start, members[0].path.name)
        ordered += members
    if agg is not None and not lengths:
        raise DescriptorError(f"aggregate dimension {agg!r} is in none of the files", path=where)
    if len({n for n, _ in lengths.values()}) > 1:
        shown = ", ".join(f"{name} and its part: {n}" for n, name in lengths.values())
        raise DataFileError(f"the parts of the dataset give {agg!r} different lengths ({shown}); files split by "
                            f"variable must cover the same {agg!r}")
    return ordered, files, next(iter(lengths.values()))[0] if lengths else 0

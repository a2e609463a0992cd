"""Which files and variables one draft covers (part of :mod:`.publish`): the glob of a series, the union of its
files' variables, one group's view with the coordinates it finds in the groups above, and the parts of a dataset
split by variable, each with a glob of its own.
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import replace
from typing import Mapping, Sequence

from dstp.catalog.cf import coordinate_axis
from dstp.catalog.headers import FileMeta, VariableMeta, resolve_in_group
from dstp.errors import CatalogError

__all__ = ["basename", "common_glob", "part_globs", "resolve_reference", "split_by_variable", "union", "within_group"]


def resolve_reference(variables: Mapping[str, VariableMeta], owner: str, ref: str) -> str:
    """Return the key of the variable a CF attribute of ``owner`` names: in its group, else a parent's."""
    return resolve_in_group(variables, owner.rsplit("/", 1)[0] if "/" in owner else "", ref)


def basename(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def common_glob(names: Sequence[str]) -> str:
    """Return a glob matching ``names`` that later files of the series will match too.

    ``ccm3_1990-01.nc``, ``ccm3_1990-05.nc`` give ``ccm3_*.nc``: the common prefix
    is cut back to its last separator, the common suffix forward to its first.
    """
    if len(names) == 1:
        return names[0]
    prefix = os.path.commonprefix(list(names))
    suffix = os.path.commonprefix([n[::-1] for n in names])[::-1]
    prefix = prefix.rstrip("0123456789-")
    cut = max((i + 1 for i, ch in enumerate(prefix) if not ch.isalnum()), default=0)
    prefix = prefix[:cut]
    start = next((i for i, ch in enumerate(suffix) if not ch.isalnum()), len(suffix))
    suffix = suffix[start:]
    if len(prefix) + len(suffix) > min(len(n) for n in names):
        suffix = ""
    return f"{prefix}*{suffix}"


def union(metas: Sequence[FileMeta]) -> FileMeta:
    """Return the first file's metadata with the variables and dimensions only later files have added.

    Real archives drop or add a variable now and then; it is published, and
    reads as NULL on the records of the files that lack it.
    """
    head = metas[0]
    variables = dict(head.variables)
    dimensions = dict(head.dimensions)
    for meta in metas[1:]:
        for name, var in meta.variables.items():
            variables.setdefault(name, var)
        for name, size in meta.dimensions.items():
            dimensions.setdefault(name, size)
    return replace(head, dimensions=dimensions, variables=variables)


def within_group(meta: FileMeta, group: str) -> FileMeta:
    """Return ``meta`` with only the variables of ``group`` and the groups below it (``/`` is the root alone), and
    the coordinates they find in the groups above (CF 1.8 §2.7, search by proximity).

    ICESat-2 gridded products keep ``x``, ``y`` and 2-D latitude/longitude in the root and their data in groups
    (``/monthly/mean_fb``): the group's draft takes those root variables that are coordinates of its own — named
    by their ``coordinates``, ``bounds`` or ``grid_mapping``, or on its dimensions and recognised as an axis —
    never the root's data variables.
    """
    prefix = group.strip("/")
    if not prefix:
        variables = {k: v for k, v in meta.variables.items() if "/" not in k}
    else:
        variables = {k: v for k, v in meta.variables.items() if k.startswith(prefix + "/")}
    if not variables:
        groups = sorted({k.rsplit("/", 1)[0] for k in meta.variables if "/" in k})
        raise CatalogError(f"{meta.path.name} has no variables in group {group!r} "
                           f"(its groups: {', '.join(groups) or 'none, only the root'})")
    if prefix:
        variables.update(_ancestor_coordinates(meta.variables, prefix, variables))
    return replace(meta, variables=variables)


def _ancestor_coordinates(every: Mapping[str, VariableMeta], prefix: str, inside: Mapping[str, VariableMeta]
                          ) -> dict[str, VariableMeta]:
    """Return the variables of the groups above ``prefix`` that are coordinates of the variables ``inside`` it."""
    parts = prefix.split("/")
    above = {"/".join(parts[:k]) for k in range(len(parts))}  # "", "a", … : the groups above, not prefix itself

    def group_of(key: str) -> str:
        return key.rsplit("/", 1)[0] if "/" in key else ""

    dims = {d for v in inside.values() for d in v.value_dimensions}
    wanted: set[str] = set()
    pending = list(inside.values())
    while pending:  # what CF attributes name, found by proximity; then what those name in turn
        var = pending.pop()
        for key in ("coordinates", "bounds", "climatology", "grid_mapping"):
            value = var.attrs.get(key)
            if not isinstance(value, str):
                continue
            refs = value.replace(":", " ").split()[:1] if key == "grid_mapping" else value.split()
            for ref in refs:
                found = resolve_reference(every, var.name, ref)
                if found in every and group_of(found) in above and found not in wanted:
                    wanted.add(found)
                    pending.append(every[found])
    seen = {basename(k) for k in inside}
    for key, var in every.items():
        if group_of(key) not in above or key in wanted or basename(key) in seen:
            continue
        on_dims = bool(var.value_dimensions) and set(var.value_dimensions) <= dims
        if on_dims and var.dtype.kind in "iuf" and (
                coordinate_axis(basename(key), var.attrs) or var.value_dimensions == (basename(key),)):
            wanted.add(key)
    return {k: every[k] for k in every if k in wanted}


def split_by_variable(metas: Sequence[FileMeta], data_variables: set[str]) -> list[list[FileMeta]]:
    """Return the files in parts of a dataset split by variable: files that share a data variable are one part.

    ``tas_*.nc`` files share ``tas``, so they are one series, apart from ``pr_*.nc``; a CMIP fx file
    (``areacella``) or a UGRID grid file (no data variable) is a part of its own. A file that lacks a
    variable its series usually has still shares the others, so it stays in its series.
    """
    part = list(range(len(metas)))

    def root(i: int) -> int:
        while part[i] != i:
            part[i] = part[part[i]]
            i = part[i]
        return i

    holder: dict[str, int] = {}
    for i, meta in enumerate(metas):
        for name in data_variables & set(meta.variables):
            if name in holder:
                part[root(i)] = root(holder[name])
            else:
                holder[name] = i
    groups: dict[int, list[FileMeta]] = {}
    for i, meta in enumerate(metas):
        groups.setdefault(root(i), []).append(meta)
    return sorted(groups.values(), key=lambda g: min(m.path.name for m in g))


def part_globs(groups: list[list[FileMeta]], names: list[str]) -> tuple[str, ...]:
    """Return a glob per part that matches its files and no other of ``names``; refuse parts no glob separates."""
    globs = []
    for group in groups:
        own = sorted(m.path.name for m in group)
        head, _, tail = own[0].partition("_")
        suffix = "." + own[0].rsplit(".", 1)[-1] if "." in own[0] else ""
        # the series' common glob; one file's variable prefix (pr_*.nc: later files of it will match); its name
        literal = own[0].translate({ord("["): "[[]", ord("*"): "[*]", ord("?"): "[?]"})
        candidates = [*([f"{head}_*{suffix}"] if tail and len(own) == 1 else []), common_glob(own), literal]
        glob = next((g for g in candidates if sorted(n for n in names if fnmatch.fnmatchcase(n, g)) == own), "")
        if not glob:
            raise CatalogError(
                f"these files are split by variable, but no glob tells the part of {own[0]} from the others "
                f"({common_glob(own)!r} also matches another part's files); rename the files of each part with "
                "a common prefix, or write the descriptor's <part> globs by hand (docs/publishing.md)")
        globs.append(glob)
    return tuple(globs)

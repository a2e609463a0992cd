"""What changed in a catalog: one record per dataset per change, and the feed that lists them.

Every change a rescan publishes is a :class:`Change`: which dataset, its new
version, which files were added, removed, replaced or grown, or renamed,
which columns may read differently, and which range of the aggregation axis
(a time range, for most archives) the touched files cover. The catalog keeps
them in its index, numbered by the catalog version each one made, and
:meth:`Catalog.changes <dstp.catalog.registry.Catalog.changes>` answers "what
changed since version N" with a :class:`ChangeFeed`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from dstp.catalog.dataset import GriddedDataset

__all__ = ["ADDED", "CHANGED", "REMOVED", "Change", "ChangeFeed", "describe_change", "ends_of", "render"]

ADDED, CHANGED, REMOVED = "added", "changed", "removed"


@dataclass(frozen=True, slots=True)
class Change:
    """What one change did to one dataset."""

    #: The catalog version this change made (changes are numbered 1, 2, … in one index).
    seq: int
    #: When it was published (wall-clock seconds).
    at: float
    dataset: str
    #: The dataset's version after the change (its last version, for a removal).
    version: int
    #: added, changed or removed.
    kind: str
    #: Files by their path under the catalog root (not listed for a dataset added or removed whole).
    files_added: tuple[str, ...] = ()
    files_removed: tuple[str, ...] = ()
    #: Files whose content changed in place or that were replaced (grown along an unlimited dimension, say).
    files_changed: tuple[str, ...] = ()
    #: (from, to) of files renamed (the same file under a new name).
    files_renamed: tuple[tuple[str, str], ...] = ()
    #: Columns whose values, type or decoding may differ from the previous version.
    columns: tuple[str, ...] = ()
    #: The aggregation coordinate's first and last value over the touched files, as text ("" when none).
    first: str = ""
    last: str = ""
    #: The aggregation coordinate those values are of ("" when the dataset does not aggregate files).
    axis: str = ""
    #: Whether the descriptor itself changed.
    descriptor: bool = False

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> "Change":
        raw: dict[str, Any] = json.loads(text)
        for key in ("files_added", "files_removed", "files_changed", "columns"):
            raw[key] = tuple(raw.get(key, ()))
        raw["files_renamed"] = tuple(tuple(p) for p in raw.get("files_renamed", ()))
        return cls(**raw)

    def summary(self) -> str:
        """Return one line saying what changed, for the log."""
        parts = []
        for what, files in (("added", self.files_added), ("removed", self.files_removed),
                            ("changed", self.files_changed)):
            if files:
                parts.append(f"{len(files)} file(s) {what} ({', '.join(files[:3])}{' …' if len(files) > 3 else ''})")
        if self.files_renamed:
            parts.append(f"{len(self.files_renamed)} renamed")
        if self.descriptor:
            parts.append("descriptor edited")
        span = f"; {self.axis} {self.first} … {self.last}" if self.first else ""
        if not parts and self.kind == CHANGED:
            parts = ["republished"]
        return f"{self.dataset} {self.kind}, version {self.version}" + (": " + "; ".join(parts) if parts else "") + span


@dataclass(frozen=True, slots=True)
class ChangeFeed:
    """The changes since a catalog version."""

    #: Which index numbered them: a rebuilt index starts a new epoch and numbers from 1 again.
    epoch: str
    #: The catalog version now (the seq of its last change).
    version: int
    changes: tuple[Change, ...]
    #: False when the changes asked for are no longer all kept (too old, or of another epoch): list the
    #: catalog again instead.
    complete: bool = True


def describe_change(old: GriddedDataset | None, new: GriddedDataset | None, root: Path,
                    descriptor_changed: bool, appended: int = 0) -> dict[str, Any]:
    """Return the fields of the :class:`Change` from ``old`` to ``new`` (either None: added or removed).

    ``appended``: ``new`` is ``old`` with that many files appended (:mod:`.appending`), and nothing else
    changed: the same fields, from those files alone (not from a comparison of 100,000 files).
    """
    prefix = str(root).rstrip("/") + "/"

    def rel(p: Path) -> str:
        text = str(p)
        return text[len(prefix):] if text.startswith(prefix) else p.name

    if old is None or new is None:  # a dataset added or removed whole: its files are all of them, not listed
        ds = new if new is not None else old
        assert ds is not None
        first, last, axis = _span(None, set(), ds, {f.path for f in ds.files})
        return {"columns": tuple(_columns_of(ds)), "first": first, "last": last, "axis": axis,
                "descriptor": descriptor_changed}
    if appended:
        return _appended(old, new, appended, rel)
    before = {f.path: f for f in old.files}
    after = {f.path: f for f in new.files}
    added = [p for p in after if p not in before]
    removed = [p for p in before if p not in after]
    changed = [p for p in after if p in before and before[p].identity != after[p].identity]
    renamed: list[tuple[Path, Path]] = []
    # a file renamed is the same inode, size and mtime under another name (a rename changes only its ctime)
    gone = {_same_file(before[q]): q for q in removed if before[q].identity is not None}
    for p in list(added):
        match = gone.pop(_same_file(after[p]), None) if after[p].identity is not None else None
        if match is not None:
            renamed.append((match, p))
            added.remove(p)
            removed.remove(match)
    touched_new = {p for p in (*added, *changed)} | {p for _, p in renamed}
    touched_old = {p for p in (*removed, *changed)} | {p for p, _ in renamed}
    columns = _columns(old, new, touched_old, touched_new, descriptor_changed)
    first, last, axis = _span(old, touched_old, new, touched_new)
    return {"files_added": tuple(rel(p) for p in added), "files_removed": tuple(rel(p) for p in removed),
            "files_changed": tuple(rel(p) for p in changed),
            "files_renamed": tuple((rel(a), rel(b)) for a, b in renamed),
            "columns": tuple(columns), "first": first, "last": last, "axis": axis, "descriptor": descriptor_changed}


def _appended(old: GriddedDataset, new: GriddedDataset, n: int, rel: Any) -> dict[str, Any]:
    """Return the fields of an append of ``n`` files (what describe_change finds by comparing every file)."""
    tail = new.files[len(new.files) - n:]
    columns = []
    mine, theirs = _columns_of(new), _columns_of(old)
    agg = new.descriptor.aggregate
    for name in dict.fromkeys([*mine, *theirs]):
        a, b = theirs.get(name), mine.get(name)
        if a is None or b is None or a.arrow_type != b.arrow_type or a.spec != b.spec:
            columns.append(name)
        elif agg not in b.dimensions and a.values is not None and b.values is not None:
            if not _same(a.values, b.values):
                columns.append(name)
        else:
            decodings = getattr(b, "file_decodings", ())
            if not decodings or any(d is not None for d in decodings[len(decodings) - n:]):
                columns.append(name)
    dim = new.dimensions.get(agg) if agg else None
    coord = dim.coordinate if dim is not None else None
    values = [v for f in tail if f.count and coord is not None
              for v in ends_of(coord.values[f.start:f.start + f.count])]
    first = last = ""
    if values:
        try:
            first, last = render(min(values)), render(max(values))
        except TypeError:
            texts = sorted(render(v) for v in values)
            first, last = texts[0], texts[-1]
    return {"files_added": tuple(rel(f.path) for f in tail), "files_removed": (), "files_changed": (),
            "files_renamed": (), "columns": tuple(columns), "first": first, "last": last,
            "axis": coord.name if coord is not None else "", "descriptor": False}


def _same_file(f: Any) -> tuple[int, int, int, int]:
    i = f.identity
    return i.device, i.inode, i.size, i.mtime_ns


def _columns_of(ds: GriddedDataset) -> dict[str, Any]:
    return {**ds.coordinates, **ds.auxiliaries, **ds.attributes}


def _columns(old: GriddedDataset | None, new: GriddedDataset | None, touched_old: set[Path],
             touched_new: set[Path], descriptor_changed: bool) -> list[str]:
    """Return the columns that may read differently: in one version only, of another type or spec, or held by a
    touched file."""
    mine = _columns_of(new) if new is not None else {}
    theirs = _columns_of(old) if old is not None else {}
    agg = (new or old).descriptor.aggregate if (new or old) is not None else None  # type: ignore[union-attr]
    out = []
    for name in dict.fromkeys([*mine, *theirs]):
        a, b = theirs.get(name), mine.get(name)
        if a is None or b is None or a.arrow_type != b.arrow_type or a.spec != b.spec:
            out.append(name)
        elif agg not in b.dimensions and a.values is not None and b.values is not None:
            if not _same(a.values, b.values):  # held in memory, not along the files: compare the values
                out.append(name)
        elif _held(old, a, touched_old) or _held(new, b, touched_new):
            out.append(name)
        elif descriptor_changed and _decodings_differ(a, b):
            out.append(name)
    return out


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    try:
        return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
    except TypeError:
        return a.shape == b.shape and bool(np.array_equal(a, b))


def _decodings_differ(a: Any, b: Any) -> bool:
    try:
        return bool(a.file_decodings != b.file_decodings)
    except ValueError:  # values that compare as arrays: say it may differ
        return True


def _held(ds: GriddedDataset | None, column: Any, touched: set[Path]) -> bool:
    if ds is None or not touched:
        return False
    decodings = getattr(column, "file_decodings", ())
    if not decodings:  # derived columns: computed from the coordinates, touched whenever a file is
        return True
    return any(d is not None and f.path in touched for f, d in zip(ds.files, decodings))


def _span(old: GriddedDataset | None, touched_old: set[Path], new: GriddedDataset | None,
          touched_new: set[Path]) -> tuple[str, str, str]:
    """Return (first, last, coordinate) of the aggregation coordinate over the touched files of both versions."""
    values: list[Any] = []
    axis = ""
    for ds, touched in ((old, touched_old), (new, touched_new)):
        if ds is None or not touched or ds.descriptor.aggregate is None:
            continue
        dim = ds.dimensions.get(ds.descriptor.aggregate)
        coord = dim.coordinate if dim is not None else None
        if coord is None:
            continue
        axis = coord.name
        for f in ds.files:
            if f.path in touched and f.count:
                part = coord.values[f.start:f.start + f.count]
                values.extend(ends_of(part))
    if not values:
        return "", "", axis
    try:
        lo, hi = min(values), max(values)
    except TypeError:
        texts = sorted(render(v) for v in values)
        return texts[0], texts[-1], axis
    return render(lo), render(hi), axis


def ends_of(values: np.ndarray) -> Iterable[Any]:
    """Return the smallest and largest value of ``values`` (none when all are missing)."""
    if values.dtype.kind in "iufM":
        finite = values[~np.isnat(values)] if values.dtype.kind == "M" else \
            values[np.isfinite(values)] if values.dtype.kind == "f" else values
        return (finite.min(), finite.max()) if finite.size else ()
    texts = sorted(str(v) for v in values if v is not None)
    return (texts[0], texts[-1]) if texts else ()


def render(value: Any) -> str:
    """Return a coordinate value as text (ISO 8601 for instants)."""
    if isinstance(value, np.datetime64):
        return str(value.astype("datetime64[s]")) if value == value.astype("datetime64[s]") else str(value)
    if isinstance(value, np.generic):
        return str(value.item())
    return str(value)

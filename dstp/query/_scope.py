"""What a query's FROM clauses offer: dataset references, CTEs, subqueries and matchups, and their columns.

Validation binds every column name of a query to one *source* of the SELECT
it appears in (or of an enclosing SELECT, for a correlated subquery):

* :class:`DatasetSource` — a catalog dataset named in FROM or JOIN. Each such
  name is one :class:`DatasetRef`: the unit that planning turns into one scan
  (its grid, hyperslab and pushdown), registered in DuckDB as its own table;
* :class:`DerivedSource` — a CTE or a subquery in FROM, whose columns are its
  outputs;
* :class:`MatchupSource` — ``matchup(left, right, …)``: the left side's records
  with the right side's values at the nearest grid point.

Each column carries a :class:`ColumnMeta`: its calendar when it is a time, its
correlation key (time, latitude, longitude, vertical) and units, so that time
literals, time functions and comparisons between datasets are done in the
column's own terms, through CTEs and subqueries too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from dstp.catalog.cf import LAT_UNITS, LON_UNITS, calendar_family

if TYPE_CHECKING:
    from dstp.catalog.dataset import GriddedDataset
    from dstp.catalog.remote import RemoteDataset
    from dstp.query.parse import Sampling

__all__ = ["ColumnMeta", "DatasetRef", "DatasetSource", "DerivedSource", "KEY_KINDS", "MatchupSource", "Scope",
           "Source", "column_meta"]

#: Correlation keys dstp reconciles between datasets (a descriptor's <key name=…>).
KEY_KINDS = ("time", "latitude", "longitude", "vertical")
_RADIANS = {"radian", "radians", "rad"}


@dataclass(frozen=True, slots=True)
class ColumnMeta:
    """What dstp knows about one column a source offers."""

    #: The column's name in its source.
    name: str
    #: CF calendar of a time column (None: not a time known to dstp).
    calendar: str | None = None
    #: True when the time travels as ISO text (360_day, all_leap, julian).
    iso: bool = False
    #: Correlation key kind: time, latitude, longitude, vertical (None: not a key).
    key: str | None = None
    #: The key's units as the descriptor and files say ("degrees_east", "radians", "hPa").
    units: str | None = None
    #: (min, max) of the values when the catalog holds them (longitude conventions).
    value_range: tuple[float, float] | None = None
    #: The dataset column the values come from unchanged: (reference, column name).
    origin: tuple["DatasetRef", str] | None = None

    @property
    def radians(self) -> bool:
        return (self.units or "").strip().lower() in _RADIANS

    def __deepcopy__(self, memo: dict[int, Any]) -> "ColumnMeta":
        return self  # a value that names a dataset reference: copies of a tree share it

    @property
    def calendar_family(self) -> str | None:
        return calendar_family(self.calendar) if self.calendar else None


def _key_of(name: str, units: str | None, cf: dict[str, Any], axis: str | None, declared: str | None,
            is_time: bool) -> str | None:
    if declared in KEY_KINDS:
        return declared
    if is_time:
        return "time"
    std = str(cf.get("standard_name", "")).lower()
    compact = (units or "").replace(" ", "").lower()
    if std == "latitude" or compact in LAT_UNITS:
        return "latitude"
    if std == "longitude" or compact in LON_UNITS:
        return "longitude"
    if axis == "Z":
        return "vertical"
    return None


def column_meta(dataset: "GriddedDataset | RemoteDataset", name: str, ref: "DatasetRef | None") -> ColumnMeta:
    """Return the meta of one column of a dataset (local or remote) as a source offers it."""
    declared = dataset.declared_keys()
    info = dataset.key_info(name)
    key = _key_of(name, info.units, info.cf, info.axis, declared.get(name), info.calendar is not None)
    return ColumnMeta(name, info.calendar, info.iso, key, info.units, info.value_range,
                      (ref, name) if ref is not None else None)


@dataclass(eq=False)
class DatasetRef:
    """One catalog dataset named in a query: the unit planning turns into one scan."""

    index: int
    dataset: "GriddedDataset | RemoteDataset"
    #: The name that qualifies its columns in SQL (the alias, else the dataset id).
    alias: str
    #: Columns of the dataset the query reads from this reference.
    used: set[str] = field(default_factory=set)
    #: ``*`` or ``count(*)`` reads it: its grid includes the default grid.
    whole: bool = False
    strides: dict[str, int] = field(default_factory=dict)
    sampling: "Sampling | None" = None
    #: Conjuncts on this reference alone that may prune it (columns unqualified): coordinate ranges
    #: become hyperslabs, and a remote dataset filters by them.
    pushdown: list[Any] = field(default_factory=list)
    #: Range conjuncts implied by equality with another reference's keys.
    implied: list[Any] = field(default_factory=list)
    #: (other reference, its column, this reference's column) for each key equality in an inner join.
    equal_keys: list[tuple["DatasetRef", str, str]] = field(default_factory=list)
    #: first()/last() read it in grid order: its scan carries each record's row id.
    rowid: bool = False
    #: "scan" (a table of DuckDB), "left" or "right" of a matchup.
    role: str = "scan"
    #: The node where it was named, for error carets.
    node: Any = None

    def __deepcopy__(self, memo: dict[int, Any]) -> "DatasetRef":
        return self  # an identity: copies of a tree still name the same reference

    @property
    def table(self) -> str:
        """Return the name its records are registered under in DuckDB."""
        return f"__dstp_scan_{self.index}"

    @property
    def remote(self) -> bool:
        return getattr(self.dataset, "is_remote", False)

    def columns(self) -> tuple[str, ...]:
        """Return the used columns in the dataset's column order."""
        return tuple(c for c in self.dataset.column_names() if c in self.used)


class Source:
    """A name in FROM and the columns it offers."""

    alias: str

    def column_names(self) -> Sequence[str]:
        raise NotImplementedError

    def lookup(self, name: str, quoted: bool) -> str | None:
        """Return the column ``name`` stands for here (exact, else the one case-insensitive match), or None."""
        names = self.column_names()
        if name in names:
            return name
        if quoted:
            return None
        matches = [n for n in names if n.lower() == name.lower()]
        return matches[0] if len(matches) == 1 else None

    def meta(self, column: str) -> ColumnMeta:
        raise NotImplementedError

    def star(self) -> list[str]:
        """Return the columns ``*`` stands for."""
        return list(self.column_names())

    def qualifiers(self) -> set[str]:
        """Return the lower-cased names that may qualify this source's columns."""
        return {self.alias.lower()}

    def sql_column(self, column: str, qualifier: str | None) -> tuple[str, str]:
        """Return (table alias, column name) the bound column is written as in DuckDB's SQL."""
        return self.alias, column

    def use(self, column: str) -> None:
        """Note that the query reads ``column``."""

    def use_all(self) -> None:
        """Note that ``*`` or ``count(*)`` reads this source's records."""

    def describe(self) -> str:
        return self.alias

    def missing_because(self, name: str) -> str:
        """Return why this source offers no column ``name`` when it says so (else "")."""
        return ""


class DatasetSource(Source):
    """A catalog dataset in FROM."""

    def __init__(self, ref: DatasetRef) -> None:
        self.ref = ref
        self.alias = ref.alias
        self._metas: dict[str, ColumnMeta] = {}

    def column_names(self) -> Sequence[str]:
        return self.ref.dataset.column_names()

    def meta(self, column: str) -> ColumnMeta:
        if column not in self._metas:
            self._metas[column] = column_meta(self.ref.dataset, column, self.ref)
        return self._metas[column]

    def star(self) -> list[str]:
        return list(self.ref.dataset.star_columns())

    def qualifiers(self) -> set[str]:
        return {self.alias.lower(), self.ref.dataset.id.lower()}

    def use(self, column: str) -> None:
        self.ref.used.add(column)

    def use_all(self) -> None:
        self.ref.whole = True

    def describe(self) -> str:
        return self.ref.dataset.id if self.alias == self.ref.dataset.id else f"{self.alias} ({self.ref.dataset.id})"

    def missing_because(self, name: str) -> str:
        # The catalog's warnings say why a column a dataset usually has is not there ("no area_weight: …").
        return next((w for w in self.ref.dataset.warnings if w.lower().startswith(f"no {name.lower()}: ")), "")


class DerivedSource(Source):
    """A CTE or a subquery in FROM: its columns are the outputs of its query."""

    def __init__(self, alias: str, outputs: Sequence[ColumnMeta], kind: str = "subquery") -> None:
        self.alias = alias
        self.outputs = {m.name: m for m in outputs}
        self.kind = kind

    def column_names(self) -> Sequence[str]:
        return list(self.outputs)

    def meta(self, column: str) -> ColumnMeta:
        return self.outputs[column]


class MatchupSource(Source):
    """``matchup(left, right, …)``: left records with right values; columns qualified by either side's name."""

    def __init__(self, alias: str, left: Source, right: DatasetSource, left_name: str, right_name: str) -> None:
        self.alias = alias
        self.left, self.right = left, right
        self.left_name, self.right_name = left_name, right_name

    def column_names(self) -> Sequence[str]:
        return [*self.left.column_names(), *self.right.column_names()]

    def side(self, qualifier: str | None) -> list[tuple[str, Source]]:
        """Return the sides (prefix, source) a qualifier selects: one side, or both for none/the alias."""
        q = (qualifier or "").lower()
        sides: list[tuple[str, Source]] = [("l.", self.left), ("r.", self.right)]
        if q == self.left_name.lower():
            return sides[:1]
        if q == self.right_name.lower():
            return sides[1:]
        return sides

    def qualifiers(self) -> set[str]:
        return {self.alias.lower(), self.left_name.lower(), self.right_name.lower()}

    def meta(self, column: str) -> ColumnMeta:
        prefix, name = column[:2], column[2:]
        side = self.left if prefix == "l." else self.right
        return side.meta(name)

    def star(self) -> list[str]:
        return [*(f"l.{c}" for c in self.left.star()), *(f"r.{c}" for c in self.right.star())]

    def use_all(self) -> None:
        # count(*) counts the matchup's records: each left record once per point of the right grid's other
        # dimensions, as select * gives them — so both sides' whole grids are read.
        self.left.use_all()
        self.right.use_all()

    def describe(self) -> str:
        return f"matchup({self.left_name}, {self.right_name})"


@dataclass(eq=False)
class Scope:
    """The sources of one SELECT, and the SELECT around it (for correlated subqueries)."""

    sources: list[Source]
    parent: "Scope | None" = None
    #: Output names usable in GROUP BY, HAVING, QUALIFY and ORDER BY.
    aliases: tuple[str, ...] = ()

    def dataset_refs(self) -> list[DatasetRef]:
        return [s.ref for s in self.sources if isinstance(s, DatasetSource)]


def value_range(values: np.ndarray | None) -> tuple[float, float] | None:
    """Return (min, max) of numeric values held in memory, ignoring NaN, or None."""
    if values is None or values.size == 0 or values.dtype.kind not in "iuf":
        return None
    finite = values[np.isfinite(values)] if values.dtype.kind == "f" else values
    if finite.size == 0:
        return None
    return float(finite.min()), float(finite.max())

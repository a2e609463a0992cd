"""The query builder: columns and conditions picked in a form, and the SQL they stand for.

The builder's state travels in the page's URL, so a built query can be
bookmarked and its JSON twin answers for the same state::

    /datasets/ccm3/query?select=temperature&select=time&where=humidity:>:50&where=lat:between:30,40&limit=100
    /datasets/ccm3/query?group=lev&group=month(time)&agg=avg:temperature&agg=count:*&where=lat:>:0

``group`` is a column, or ``year(…)``, ``month(…)``, ``season(…)``, ``day(…)``
of a time column (buckets on the time's own calendar); ``agg`` is
``function:column`` with one of ``AGGREGATES`` (``count:*`` counts records,
``weighted_avg:x`` weighs by the dataset's ``area_weight``). With groups or
aggregates the result has one record per group — the group keys, then the
aggregates — and the picked columns are not used.

``where`` is ``column:operator:value`` (split at the first two colons, so
times keep theirs). Operators: ``= <> < <= > >=``, ``between`` (``lo,hi``),
``in`` (comma-separated), ``is null`` and ``is not null``. Values are
written as SQL literals of the column's type (numbers checked, text and
times quoted), so the generated SQL is always well-formed; the query engine
still validates it like any other query.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping, Sequence

from dstp.errors import QueryError, UnknownColumnError
from dstp.metadata import ColumnInfo, DatasetDetails

__all__ = ["AGGREGATES", "OPERATORS", "TIME_BUCKETS", "Aggregate", "BuilderState", "Condition", "sql_identifier",
           "sql_literal"]

OPERATORS = ("=", "<>", "<", "<=", ">", ">=", "between", "in", "is null", "is not null")
#: Aggregates the builder offers (the query language has more).
AGGREGATES = ("count", "avg", "min", "max", "sum", "stddev", "median", "weighted_avg")
#: Time buckets a time column can be grouped by.
TIME_BUCKETS = ("year", "month", "season", "day")
_BUCKET = re.compile(r"(year|month|season|day)\((.+)\)")

_BARE = re.compile(r"[a-z_][a-z0-9_]*")
_NUMBER = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?")
_RESERVED = frozenset(
    "all and any as asc between by case cast default desc distinct else end except false from group having in "
    "interval is join like limit not null offset on or order repeatable select stride table tablesample then "
    "true union using when where with".split()
)
_NUMERIC_TYPES = ("int", "uint", "float", "double", "halffloat", "decimal")


def sql_identifier(name: str) -> str:
    """Return ``name`` as a SQL identifier, quoted only when it must be."""
    if _BARE.fullmatch(name) and name not in _RESERVED:
        return name
    return '"' + name.replace('"', '""') + '"'


def sql_literal(column: ColumnInfo, text: str) -> str:
    """Return ``text`` as a literal of ``column``'s type; raise QueryError if it is not one."""
    text = text.strip()
    if column.arrow_type.startswith(_NUMERIC_TYPES):
        if not _NUMBER.fullmatch(text):
            raise QueryError(f"{column.name} is numeric ({column.arrow_type}); {text!r} is not a number")
        return text
    if column.arrow_type == "bool":
        if text.lower() not in ("true", "false"):
            raise QueryError(f"{column.name} is true or false; {text!r} is neither")
        return text.lower()
    return "'" + text.replace("'", "''") + "'"


@dataclass(frozen=True, slots=True)
class Condition:
    """One where-clause row: column, operator, value as typed."""

    column: str
    op: str
    value: str = ""

    @classmethod
    def parse(cls, text: str) -> "Condition":
        """Return the condition encoded as ``column:op:value``."""
        parts = text.split(":", 2)
        if len(parts) < 2:
            raise QueryError(f"where={text!r} must be column:operator:value, e.g. humidity:>:50")
        column, op = parts[0].strip(), " ".join(parts[1].lower().split())
        if op == "!=":
            op = "<>"
        if op not in OPERATORS:
            raise QueryError(f"where={text!r}: operator {op!r} is not one of {', '.join(OPERATORS)}")
        return cls(column, op, parts[2] if len(parts) == 3 else "")

    def encode(self) -> str:
        """Return the ``column:op:value`` form of this condition."""
        return f"{self.column}:{self.op}:{self.value}"

    def sql(self, columns: Mapping[str, ColumnInfo]) -> str:
        """Return this condition as SQL."""
        column = columns.get(self.column)
        if column is None:
            raise UnknownColumnError(f"where: no column {self.column!r}; columns are {', '.join(columns)}")
        name = sql_identifier(column.name)
        if self.op in ("is null", "is not null"):
            return f"{name} {self.op}"
        values = [v for v in self.value.split(",") if v.strip()] if self.op in ("between", "in") else [self.value]
        if not values or not values[0].strip():
            raise QueryError(f"where: {column.name} {self.op} needs a value")
        literals = [sql_literal(column, v) for v in values]
        if self.op == "between":
            if len(literals) != 2:
                raise QueryError(f"where: {column.name} between needs two values, low,high")
            return f"{name} between {literals[0]} and {literals[1]}"
        if self.op == "in":
            return f"{name} in ({', '.join(literals)})"
        return f"{name} {self.op} {literals[0]}"


@dataclass(frozen=True, slots=True)
class Aggregate:
    """One aggregate of the builder: a function of a column (``count:*`` counts records)."""

    function: str
    column: str

    @classmethod
    def parse(cls, text: str) -> "Aggregate":
        """Return the aggregate encoded as ``function:column``."""
        function, _, column = text.partition(":")
        function, column = function.strip().lower(), column.strip()
        if function not in AGGREGATES:
            raise QueryError(f"agg={text!r}: {function!r} is not one of {', '.join(AGGREGATES)}")
        if not column or (column == "*" and function != "count"):
            raise QueryError(f"agg={text!r} must be function:column, e.g. avg:temperature (count:* counts records)")
        return cls(function, column)

    def encode(self) -> str:
        return f"{self.function}:{self.column}"

    def name(self) -> str:
        """Return the output column's name: ``avg_temperature``, ``count``."""
        return self.function if self.column == "*" else f"{self.function}_{self.column}"

    def sql(self, columns: Mapping[str, ColumnInfo]) -> str:
        if self.column == "*":
            return "count(*)"
        if self.column not in columns:
            raise UnknownColumnError(f"agg: no column {self.column!r}; columns are {', '.join(columns)}")
        name = sql_identifier(self.column)
        if self.function == "weighted_avg":
            if "area_weight" not in columns:
                raise QueryError(f"agg: weighted_avg needs an area_weight column, which this dataset lacks; "
                                 f"use avg:{self.column}")
            return f"weighted_avg({name}, area_weight)"
        return f"{self.function}({name})"


def _group_sql(key: str, columns: Mapping[str, ColumnInfo]) -> tuple[str, str]:
    """Return (SQL, output name) of one group key: a column, or a time bucket ``month(time)``."""
    bucket = _BUCKET.fullmatch(key)
    name = bucket.group(2) if bucket else key
    column = columns.get(name)
    if column is None:
        raise UnknownColumnError(f"group: no column {name!r}; columns are {', '.join(columns)}")
    if bucket is None:
        return sql_identifier(name), name
    if " since " not in column.units and "timestamp" not in column.arrow_type:
        raise QueryError(f"group: {bucket.group(1)}({name}) needs a time column; {name} is not one")
    output = bucket.group(1) if bucket.group(1) not in columns else f"{bucket.group(1)}_{name}"
    return f"{bucket.group(1)}({sql_identifier(name)})", output


@dataclass(frozen=True, slots=True)
class BuilderState:
    """What the builder form holds: a dataset, output columns, conditions, groups, aggregates, a row limit."""

    dataset: str
    columns: tuple[str, ...] = ()
    conditions: tuple[Condition, ...] = ()
    limit: int | None = None
    groups: tuple[str, ...] = ()
    aggregates: tuple[Aggregate, ...] = ()

    @classmethod
    def parse(
        cls, dataset: str, select: Sequence[str] = (), where: Sequence[str] = (), limit: str = "",
        group: Sequence[str] = (), agg: Sequence[str] = (),
    ) -> "BuilderState":
        """Return the state encoded in the page's query parameters."""
        n: int | None = None
        if limit.strip():
            if not limit.strip().isdigit():
                raise QueryError(f"limit={limit!r} must be a whole number of rows")
            n = int(limit)
        columns = tuple(dict.fromkeys(c.strip() for c in select if c.strip()))
        groups = tuple(dict.fromkeys(g.strip() for g in group if g.strip()))
        aggregates = tuple(dict.fromkeys(Aggregate.parse(a) for a in agg if a.strip()))
        return cls(dataset, columns, tuple(Condition.parse(w) for w in where if w.strip()), n, groups, aggregates)

    @property
    def reduces(self) -> bool:
        """Return whether the state groups or aggregates (one record per group)."""
        return bool(self.groups or self.aggregates)

    def sql(self, details: DatasetDetails) -> str:
        """Return the SQL this state stands for (``select *`` when no column is picked)."""
        columns = {c.name: c for c in (*details.coordinates, *details.attributes)}
        if self.reduces:
            return self._reduce_sql(details, columns)
        for name in self.columns:
            if name not in columns:
                raise UnknownColumnError(f"select: no column {name!r}; columns are {', '.join(columns)}")
        select = ", ".join(sql_identifier(c) for c in self.columns) or "*"
        return self._finish(f"select {select} from {sql_identifier(details.summary.id)}", columns)

    def _finish(self, text: str, columns: Mapping[str, ColumnInfo], tail: str = "") -> str:
        if self.conditions:
            text += " where " + " and ".join(c.sql(columns) for c in self.conditions)
        text += tail
        if self.limit is not None:
            text += f" limit {self.limit}"
        return text

    def _reduce_sql(self, details: DatasetDetails, columns: Mapping[str, ColumnInfo]) -> str:
        keys = [_group_sql(g, columns) for g in self.groups]
        aggregates = [(a.sql(columns), a.name()) for a in self.aggregates] or [("count(*)", "count")]
        items, names = [], set()
        for expression, name in [*keys, *aggregates]:
            if name in names:
                raise QueryError(f"the result would have two columns named {name!r}; pick one of them")
            names.add(name)
            items.append(expression if expression == sql_identifier(name) else
                         f"{expression} as {sql_identifier(name)}")
        text = f"select {', '.join(items)} from {sql_identifier(details.summary.id)}"
        positions = ", ".join(str(i + 1) for i in range(len(keys)))
        tail = f" group by {positions} order by {positions}" if keys else ""
        return self._finish(text, columns, tail)

"""The query builder: columns and conditions picked in a form, and the SQL they stand for.

The builder's state travels in the page's URL, so a built query can be
bookmarked and its JSON twin answers for the same state::

    /datasets/ccm3/query?select=temperature&select=time&where=humidity:>:50&where=lat:between:30,40&limit=100

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

__all__ = ["OPERATORS", "BuilderState", "Condition", "sql_identifier", "sql_literal"]

OPERATORS = ("=", "<>", "<", "<=", ">", ">=", "between", "in", "is null", "is not null")

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
class BuilderState:
    """What the builder form holds: a dataset, output columns, conditions, a row limit."""

    dataset: str
    columns: tuple[str, ...] = ()
    conditions: tuple[Condition, ...] = ()
    limit: int | None = None

    @classmethod
    def parse(
        cls, dataset: str, select: Sequence[str] = (), where: Sequence[str] = (), limit: str = ""
    ) -> "BuilderState":
        """Return the state encoded in the page's query parameters."""
        n: int | None = None
        if limit.strip():
            if not limit.strip().isdigit():
                raise QueryError(f"limit={limit!r} must be a whole number of rows")
            n = int(limit)
        columns = tuple(dict.fromkeys(c.strip() for c in select if c.strip()))
        return cls(dataset, columns, tuple(Condition.parse(w) for w in where if w.strip()), n)

    def sql(self, details: DatasetDetails) -> str:
        """Return the SQL this state stands for (``select *`` when no column is picked)."""
        columns = {c.name: c for c in (*details.coordinates, *details.attributes)}
        for name in self.columns:
            if name not in columns:
                raise UnknownColumnError(f"select: no column {name!r}; columns are {', '.join(columns)}")
        select = ", ".join(sql_identifier(c) for c in self.columns) or "*"
        text = f"select {select} from {sql_identifier(details.summary.id)}"
        if self.conditions:
            text += " where " + " and ".join(c.sql(columns) for c in self.conditions)
        if self.limit is not None:
            text += f" limit {self.limit}"
        return text

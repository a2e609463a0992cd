"""Planning: from a validated query to one scan per dataset reference and the SQL DuckDB runs.

Records are grid points. The grid of each dataset reference is the union of
the dimensions of every column the query reads from it (plus the default grid
when ``*`` or ``count(*)`` reads it), in the dataset's dimension order; each
attribute is broadcast over the dimensions it lacks, as
``xarray.Dataset.to_dataframe`` does. The conjuncts the binder kept with a
reference (:mod:`._binder`) become its hyperslab (:mod:`._pushdown`); a remote
reference becomes a query to its server instead, carrying the same conjuncts
and, where it is joined on a key with a local reference, the range of that
key the local side can hold. Each scan is registered in DuckDB under its own
table name; the validated tree already names those tables, so the SQL is that
tree printed.

A matchup's right side is planned with its key dimensions whole: the index box
the left records need is decided when they have been read (:mod:`.execute`).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlglot import exp

from dstp.errors import QueryError
from dstp.query._binder import ROWID, SAMPLE_KEY
from dstp.query._exact import proven_conjuncts
from dstp.query._pushdown import Hyperslab, _index_range, _Interval, conjuncts, hyperslab_of, value_range
from dstp.query._scope import DatasetRef
from dstp.query.matchup import MatchupSpec, index_column
from dstp.query.parse import DIALECT, ValidatedQuery

__all__ = ["Hyperslab", "QueryPlan", "ROWID", "SAMPLE_KEY", "SCAN_TABLE", "ScanPlan", "plan_query",
           "_index_range", "_Interval"]

#: The table name of the first scan (a one-dataset query's only one).
SCAN_TABLE = "__dstp_scan_0"
#: Most rows a plan reports (the bound of a join can exceed any count worth sending).
ROW_BOUND = 2**62


@dataclass(frozen=True, slots=True)
class ScanPlan:
    """One dataset reference's scan: what to read, and under which table name DuckDB sees it."""

    ref: DatasetRef
    grid: tuple[str, ...]
    #: Index ranges read from files (for a remote reference: its whole grid, an upper bound).
    hyperslab: Hyperslab
    #: Columns the scan produces, including ROWID/SAMPLE_KEY (row samples) and index columns (matchups).
    columns: tuple[str, ...]
    #: The query sent to the remote server, for a remote reference.
    remote_sql: str | None = None
    #: The conditions that pruned the scan, as SQL (for --explain).
    pushed: tuple[str, ...] = ()
    #: The WHERE conjuncts the hyperslab proved true on every record it reads, left out of the SQL
    #: (:mod:`._exact`), as SQL.
    exact: tuple[str, ...] = ()

    @property
    def table(self) -> str:
        return self.ref.table

    @property
    def dataset(self) -> Any:
        return self.ref.dataset

    @property
    def size(self) -> int:
        return self.hyperslab.size

    def explain(self) -> dict[str, Any]:
        h = self.hyperslab
        info: dict[str, Any] = {
            "reference": self.ref.alias, "dataset": self.ref.dataset.id, "table": self.table, "role": self.ref.role,
            "grid": list(self.grid), "columns": [c for c in self.columns if not c.startswith("__dstp")],
            "hyperslab": {d: [r.start, r.stop, r.step] for d, r in zip(h.dims, h.ranges)},
            "grid_points": h.size, "pushdown": list(self.pushed),
        }
        if self.exact:
            info["pushdown_exact"] = list(self.exact)
        if h.strips:
            info["strips"] = len(h.strips)
        if self.ref.sampling is not None:
            info["sampling"] = self.ref.sampling.describe()
        if self.ref.strides:
            info["strides"] = dict(self.ref.strides)
        if self.remote_sql is not None:
            info["remote"] = {"server": self.ref.dataset.server, "sql": self.remote_sql}
            info.pop("hyperslab")
            info["grid_points"] = f"at most {h.size}"
        if self.ref.role == "right":
            info["note"] = "the key dimensions are narrowed at run time to the box the left records need"
        return info


@dataclass(frozen=True, slots=True)
class QueryPlan:
    """Everything needed to run a query; cheap to build, nothing read yet."""

    query: ValidatedQuery
    scans: tuple[ScanPlan, ...]
    #: The SQL DuckDB runs, generated from the validated tree.
    sql: str
    #: True when every scanned grid point is a result row (no filter, no sampling, one dataset).
    exact: bool

    @property
    def dataset(self) -> Any:
        return self.scans[0].dataset

    @property
    def grid(self) -> tuple[str, ...]:
        """The first scan's grid (a one-dataset query's grid)."""
        return self.scans[0].grid

    @property
    def hyperslab(self) -> Hyperslab:
        """The first scan's hyperslab (a one-dataset query's hyperslab)."""
        return self.scans[0].hyperslab

    @property
    def matchups(self) -> tuple[MatchupSpec, ...]:
        return self.query.matchups

    def scan_rows(self) -> int:
        """Return the grid points all scans read (an upper bound for remote and matchup scans)."""
        return sum(s.size for s in self.scans)

    def estimated_rows(self) -> int:
        """Return the exact row count when known without scanning, else -1."""
        if not self.exact:
            return -1
        rows = max(0, self.hyperslab.size - (self.query.offset or 0))
        return rows if self.query.limit is None else min(rows, self.query.limit)

    def max_rows(self) -> int:
        """Return the most rows the result can have: the scanned points (their product for joins), capped by
        LIMIT and sampling; one for an aggregate without GROUP BY."""
        q = self.query
        tree = q.tree
        if q.simple:
            rows = max(0, self.hyperslab.size - (q.offset or 0))
            sampling = q.sampling
            if sampling is not None and sampling.rows is not None:
                rows = min(rows, sampling.rows)
        elif q.matchups:
            rows = 1
            for s in self.scans:
                rows = min(ROW_BOUND, rows * max(1, self._scan_bound(s)))
        else:
            bound = None if _makes_rows(tree) else _rows_bound(tree, {}, {s.table: self._scan_bound(s)
                                                                            for s in self.scans})
            rows = ROW_BOUND if bound is None else min(ROW_BOUND, bound)
        return rows if q.limit is None else min(rows, q.limit)

    def _scan_bound(self, scan: ScanPlan) -> int:
        sampling = scan.ref.sampling
        if sampling is not None and sampling.rows is not None:
            return min(scan.size, sampling.rows)
        return scan.size


    def explain(self) -> dict[str, Any]:
        """Return the plan as plain data: the SQL, and per dataset reference its grid, hyperslab and pushdown."""
        out: dict[str, Any] = {"sql": self.sql, "scans": [s.explain() for s in self.scans]}
        if self.query.matchups:
            out["matchups"] = [{
                "alias": m.alias, "left": m.left_name, "right": m.right_name,
                "keys": [{"key": k.kind, "left": k.left, "right": k.right, "mode": k.mode,
                          **({"tolerance": _tolerance_text(k)} if k.tolerance is not None else {})} for k in m.keys],
                **({"max_km": m.max_km} if m.max_km is not None else {}),
                "left_sql": m.left_sql,
            } for m in self.query.matchups]
        return out

    def explain_json(self) -> str:
        return json.dumps(self.explain(), default=str)


def _tolerance_text(key: Any) -> str:
    if key.kind == "time":
        return f"{key.tolerance / 86_400_000_000:g} days"
    return f"{key.tolerance:g}"


def _grid(ref: DatasetRef, extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    ds = ref.dataset
    dims: set[str] = set(extra)
    for name in ref.used:
        dims.update(ds.column_dimensions(name))
    if ref.whole:
        dims.update(ds.descriptor.default_grid if not ref.remote else _remote_default_grid(ref))
    return ds.dimension_order(dims)


def _remote_default_grid(ref: DatasetRef) -> set[str]:
    dims: set[str] = set()
    for name in ref.dataset.star_columns():
        dims.update(ref.dataset.column_dimensions(name))
    return dims


def plan_query(q: ValidatedQuery) -> QueryPlan:
    """Return the plan of a validated query."""
    matchup_of = {id(m.right): m for m in q.matchups}
    scans: dict[int, ScanPlan] = {}
    for ref in sorted(q.references, key=lambda r: r.remote):  # local first: remote ones use their ranges
        scans[ref.index] = _scan(ref, matchup_of.get(id(ref)), scans)
    ordered = tuple(scans[r.index] for r in q.references)
    assert q.tree is not None
    sql, first, filtered = _without_proven(q, ordered[0])
    ordered = (first, *ordered[1:])
    exact = (q.simple and not filtered and first.ref.sampling is None and not first.ref.remote
             and not first.dataset.has_presence(first.grid))
    return QueryPlan(q, ordered, sql, exact)


def _without_proven(q: ValidatedQuery, scan: ScanPlan) -> tuple[str, ScanPlan, bool]:
    """Return the SQL without the WHERE conjuncts the scan's hyperslab proved, the scan without the columns
    only they read (:mod:`._exact`), and whether a WHERE is left; the tree's SQL and the scan as they are when
    none is proved."""
    tree = q.tree
    assert tree is not None
    ref = scan.ref

    def as_is() -> tuple[str, ScanPlan, bool]:
        return tree.sql(dialect=DIALECT, identify=True), scan, q.where is not None

    if (len(q.references) != 1 or q.matchups or ref.remote or ref.role != "scan" or ref.sampling is not None
            or not isinstance(tree, exp.Select) or tree.args.get("joins") or tree.args.get("with_")
            or tree.args.get("where") is None):
        return as_is()
    source = tree.args["from_"].this
    if not isinstance(source, exp.Table) or source.name != scan.table:
        return as_is()
    alias = source.alias or source.name
    where = tree.args["where"].this
    parts = conjuncts(where)
    if any(c.table not in ("", alias) for p in parts for c in p.find_all(exp.Column)):
        return as_is()
    proven = proven_conjuncts(ref.dataset, scan.hyperslab, where)
    if not any(proven):
        return as_is()
    kept = [p.copy() for p, ok in zip(parts, proven) if ok is None]
    # The validated tree is printed with the kept conjuncts, then given its WHERE back (a copy of the whole
    # tree cost ~3 ms a query; this one is single-threaded, planning its own ValidatedQuery).
    original = tree.args["where"]
    tree.set("where", exp.Where(this=exp.and_(*kept, copy=False)) if kept else None)
    try:
        sql = tree.sql(dialect=DIALECT, identify=True)
        read = {c.name for c in tree.find_all(exp.Column)}
    finally:
        tree.set("where", original)
    columns = tuple(c for c in scan.columns if c in read or c.startswith("__dstp"))
    if not any(not c.startswith("__dstp") for c in columns):
        columns = (*[c for c in scan.columns if not c.startswith("__dstp")][:1], *columns)
    dropped = tuple(text for text in proven if text is not None)
    return sql, dataclasses.replace(scan, columns=columns, exact=dropped), bool(kept)


def _scan(ref: DatasetRef, matchup: MatchupSpec | None, planned: dict[int, ScanPlan]) -> ScanPlan:
    ds = ref.dataset
    key_dims = matchup.dimensions if matchup is not None else ()
    grid = _grid(ref, key_dims)
    untied = None if ref.remote else ds.untied(grid, ref.columns())
    if untied is not None:
        raise QueryError(untied)
    if not ref.remote:
        _refuse_empty_product(ref, grid)
    for dim in ref.strides:
        if dim not in grid:
            raise QueryError(
                f"stride on {dim!r}, but this query's grid of {ref.dataset.id} is ({', '.join(grid) or 'scalar'}); "
                "stride a dimension the selected columns have"
            )
    conditions = [*ref.pushdown, *ref.implied] if matchup is None else list(matchup.right_pushdown)
    pushed = tuple(c.sql(dialect=DIALECT) for c in conditions)
    columns = list(ref.columns())
    if ref.sampling is not None and ref.sampling.rows is not None:
        columns += [ROWID, SAMPLE_KEY]
    elif ref.rowid:
        columns.append(ROWID)
    if matchup is not None:
        columns += [index_column(d) for d in key_dims]
    if ref.remote:
        # The other server rewrites its own calendar functions: a condition already rewritten into dstp's
        # macros (month(time) on 360_day) is not sent; the WHERE here still applies it to what arrives.
        conditions = [c for c in conditions if not _uses_macros(c)]
        whole = Hyperslab(grid, tuple(range(0, ds.dimensions[d].size) for d in grid))
        if matchup is not None:
            return ScanPlan(ref, grid, whole, tuple(columns), remote_sql="(decided at run time)", pushed=pushed)
        conditions += _key_ranges(ref, planned)
        return ScanPlan(ref, grid, whole, tuple(columns), remote_sql=remote_sql(ref, conditions),
                        pushed=tuple(c.sql(dialect=DIALECT) for c in conditions))
    hyperslab = hyperslab_of(ds, grid, conditions, ref.strides, frozen=key_dims)
    return ScanPlan(ref, grid, hyperslab, tuple(columns), pushed=pushed)


def _refuse_empty_product(ref: DatasetRef, grid: tuple[str, ...]) -> None:
    """Refuse a grid that an empty dimension makes empty although some of the query's columns have values.

    Records are the product of the grid's dimensions: a column on a dimension of
    no points (Argo's unlimited ``N_HISTORY`` before any history is written)
    would make a query that also reads ``TEMP`` return nothing, silently. The
    labels of the other dimensions are the grid itself, not values that would
    be lost; ``*`` and ``count(*)`` stand for the default grid's records.
    """
    ds = ref.dataset
    empty = [d for d in grid if ds.dimensions[d].size == 0]
    if not empty:
        return
    for dim in empty:
        on = sorted(n for n in ref.used if dim in ds.column_dimensions(n))
        lacking = sorted(n for n in ref.used if n not in ds.coordinates and dim not in ds.column_dimensions(n)
                         and ds.grid_size(ds.column_dimensions(n)) > 0)
        if ref.whole and dim not in ds.descriptor.default_grid and ds.grid_size(ds.descriptor.default_grid) > 0:
            lacking.insert(0, "*" if not lacking else "* (the default grid's records)")
        if on and lacking:
            raise QueryError(
                f"{', '.join(on)} {'is' if len(on) == 1 else 'are'} on dimension {dim!r} of {ds.id}, which has no "
                f"points in its files; read with {', '.join(lacking)}, which {'is' if len(lacking) == 1 else 'are'} "
                f"not on {dim!r}, every record would be lost. Query {', '.join(on)} apart")


def _uses_macros(condition: exp.Expression) -> bool:
    """Return whether a bound condition calls one of dstp's DuckDB macros (``__dstp_…``), which no server takes."""
    return any(f.sql_name().lower().startswith("__dstp_") or str(f.name).lower().startswith("__dstp_")
               for f in condition.find_all(exp.Func))


def remote_sql(ref: DatasetRef, conditions: list[exp.Expression], columns: tuple[str, ...] | None = None) -> str:
    """Return the dstp query that asks a remote server for a reference's records."""
    ds = ref.dataset
    names = columns if columns is not None else ref.columns()
    if not names:
        names = tuple(ds.star_columns())
    if ref.whole:  # count(*): one record per point of the default grid, so ask for its coordinates too
        grid = _remote_default_grid(ref)
        names = tuple(dict.fromkeys([*names, *(c for c, d in ds.dimension_coordinates().items() if d in grid)]))
    table: exp.Expression = exp.to_identifier(ds.remote_id, quoted=True)
    if ref.strides:
        table = exp.Anonymous(this="stride", expressions=[exp.column(ds.remote_id, quoted=True), *[
            exp.EQ(this=exp.column(d), expression=exp.Literal.number(k)) for d, k in ref.strides.items()]])
    source = exp.Table(this=table)
    if ref.sampling is not None and ref.sampling.percent is not None:
        source.set("sample", exp.TableSample(percent=exp.Literal.number(ref.sampling.percent),
                                             seed=exp.Literal.number(ref.sampling.seed)))
    select = exp.select(*[exp.column(n, quoted=True) for n in names]).from_(source)
    for condition in conditions:
        select = select.where(condition.copy())
    return select.sql(dialect=DIALECT)


def _key_ranges(ref: DatasetRef, planned: dict[int, ScanPlan]) -> list[exp.Expression]:
    """Return ``key between lo and hi`` for each key of ``ref`` equal to a key of a planned local reference."""
    out: list[exp.Expression] = []
    for other, other_column, column in ref.equal_keys:
        scan = planned.get(other.index)
        if scan is None or other.remote:
            continue
        bounds = value_range(other.dataset, other_column, scan.hyperslab)
        if bounds is None:
            continue
        lo, hi = (literal(v) for v in bounds)
        out.append(exp.Between(this=exp.column(column, quoted=True), low=lo, high=hi))
    return out


def literal(value: Any) -> exp.Expression:
    """Return a coordinate value as a SQL literal that reads back exactly (times, text, floats)."""
    if isinstance(value, np.datetime64):
        text = str(value.astype("datetime64[us]")).replace("T", " ")
        return exp.Cast(this=exp.Literal.string(text), to=exp.DataType.build("TIMESTAMP"))
    if isinstance(value, str):
        return exp.Literal.string(value)
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"no literal for {value!r}")
    text = repr(int(number)) if number == int(number) and abs(number) < 2**53 else repr(number)
    return exp.Literal.number(text) if number >= 0 else exp.Neg(this=exp.Literal.number(text.lstrip("-")))


#: Functions that can turn one row into many: a query that calls one has no row bound.
_ROW_MAKERS = {"unnest", "generate_series", "range", "generate_subscripts", "explode"}


def _makes_rows(tree: Any) -> bool:
    """Return whether a query can turn one row into many (unnest, generate_series, LATERAL): then it has no bound."""
    return tree is None or any(isinstance(n, (exp.Unnest, exp.Explode, exp.Lateral)) or
                               (isinstance(n, exp.Func) and n.sql_name().lower() in _ROW_MAKERS) for n in tree.walk())


def _rows_bound(node: Any, ctes: dict[str, int | None], tables: dict[str, int]) -> int | None:
    """Return the most rows the (bound) query ``node`` can give, or None when that cannot be known.

    ``tables`` holds each scan's bound by the table name DuckDB sees; ``ctes`` each CTE's bound by its
    name, so a CTE read twice counts twice (a self-join of one is the square of its rows). Joins
    multiply and UNION adds (INTERSECT and EXCEPT are refused before planning: unknown here); a SELECT
    gives no more rows than its sources (one when it aggregates without GROUP BY), capped by its LIMIT.
    """
    if node is None:
        return None
    with_ = node.args.get("with_")
    if with_ is not None:
        if with_.args.get("recursive"):
            return None
        ctes = dict(ctes)
        for cte in with_.expressions:
            ctes[cte.alias_or_name] = _rows_bound(cte.this, ctes, tables)
    if isinstance(node, exp.Union):
        left, right = _rows_bound(node.left, ctes, tables), _rows_bound(node.right, ctes, tables)
        rows = None if left is None or right is None else left + right
    elif isinstance(node, exp.Subquery):
        rows = _rows_bound(node.this, ctes, tables)
    elif isinstance(node, exp.Table):
        if not isinstance(node.this, exp.Identifier):
            return None  # a table function
        name = node.name
        rows = ctes[name] if name in ctes else tables.get(name)
    elif isinstance(node, exp.Values):
        rows = len(node.expressions)
    elif isinstance(node, exp.Select):
        from_ = node.args.get("from_")
        sources = ([from_.this] if from_ is not None else []) + [j.this for j in node.args.get("joins") or []]
        rows = 1
        for source in sources:
            bound = _rows_bound(source, ctes, tables)
            if bound is None:
                return None
            rows = min(ROW_BOUND, rows * bound)
        if node.args.get("group") is None and any(
                f.find_ancestor(exp.Window, exp.Select) is node for e in node.expressions for f in e.find_all(exp.AggFunc)):
            rows = 1  # an aggregate over the whole input: one row, even of no input
    else:
        return None
    if rows is None:
        return None
    limit = node.args.get("limit")
    if limit is not None and isinstance(limit.expression, exp.Literal) and limit.expression.is_int:
        rows = min(rows, int(limit.expression.this))
    return rows

"""Checking expressions: the whitelist of nodes and functions, column binding, time functions.

:class:`Checker` walks each expression of one SELECT, binds its column names to
the sources of that SELECT (:mod:`._scope`) and refuses any node not on the
whitelist, with a message naming it in SQL terms. It also

* rewrites time functions for the column's calendar (:mod:`._calendar`) and time
  literals into the column's form (ISO text or timestamp);
* rewrites ``weighted_avg(x, w)`` into ``sum(x·w) / sum(w where x is not null)``;
* hands subqueries to the binder (:mod:`._binder`), which validates them as queries
  of their own, with this SELECT's sources visible for correlated references;
* checks comparisons between keys of two datasets (:mod:`._keys`).

A tree's size (depth, terms, whole numbers) is checked before, in :mod:`._terms`.
"""

from __future__ import annotations

import difflib
from typing import Any, Callable, Iterable

from sqlglot import exp
from sqlglot.errors import ErrorLevel, UnsupportedError

from dstp.catalog.cf import time_literal
from dstp.errors import ForbiddenQueryError, QueryError, UnknownColumnError
from dstp.query import _calendar, _keys
from dstp.query._scope import ColumnMeta, DatasetSource, MatchupSource, Scope, Source
from dstp.query._text import DIALECT, error_at, operator_token, snippet, type_token

__all__ = ["AGGREGATES", "ALLOWED_FUNCTIONS", "Checker", "WINDOW_FUNCTIONS", "meta_of"]

#: Scalar functions a query may call (sqlglot expression classes).
ALLOWED_FUNCTIONS: dict[type[exp.Expression], str] = {
    exp.Abs: "abs", exp.Sqrt: "sqrt", exp.Exp: "exp", exp.Ln: "ln", exp.Log: "log/log10",
    exp.Pow: "power", exp.Floor: "floor", exp.Ceil: "ceil", exp.Round: "round", exp.Sign: "sign",
    exp.Least: "least", exp.Greatest: "greatest", exp.Coalesce: "coalesce", exp.Nullif: "nullif",
    exp.Sin: "sin", exp.Cos: "cos", exp.Tan: "tan", exp.Asin: "asin", exp.Acos: "acos",
    exp.Atan: "atan", exp.Atan2: "atan2", exp.Radians: "radians", exp.Degrees: "degrees",
    exp.Year: "year", exp.Month: "month", exp.Day: "day", exp.Hour: "hour", exp.Minute: "minute",
    exp.Second: "second", exp.Quarter: "quarter",
    exp.DayOfYear: "dayofyear", exp.Extract: "extract", exp.TimestampTrunc: "date_trunc",
    exp.DateBin: "time_bucket",
}
#: Aggregate functions (also usable as window functions with OVER).
AGGREGATES: dict[type[exp.Expression], str] = {
    exp.Count: "count", exp.Sum: "sum", exp.Avg: "avg", exp.Min: "min", exp.Max: "max",
    exp.Stddev: "stddev", exp.StddevSamp: "stddev_samp", exp.StddevPop: "stddev_pop",
    exp.Variance: "var/variance/var_samp", exp.VariancePop: "var_pop", exp.Median: "median",
    exp.PercentileCont: "quantile_cont", exp.PercentileDisc: "quantile_disc",
    exp.ApproxQuantile: "approx_quantile", exp.First: "first", exp.Last: "last",
    exp.ArgMax: "arg_max", exp.ArgMin: "arg_min", exp.Corr: "corr", exp.ApproxDistinct: "approx_count_distinct",
}
#: Functions only meaningful with OVER (…).
WINDOW_FUNCTIONS: dict[type[exp.Expression], str] = {
    exp.RowNumber: "row_number", exp.Rank: "rank", exp.DenseRank: "dense_rank", exp.PercentRank: "percent_rank",
    exp.CumeDist: "cume_dist", exp.Ntile: "ntile", exp.Lag: "lag", exp.Lead: "lead",
    exp.FirstValue: "first_value", exp.LastValue: "last_value", exp.NthValue: "nth_value",
}
#: dstp's own functions, rewritten before DuckDB sees them (name -> what it is).
DSTP_FUNCTIONS = {"weighted_avg": "aggregate", "season": "scalar", "mean": "aggregate", "var": "aggregate"}
_ALIASED = {"mean": exp.Avg, "var": exp.Variance}

# Operators and leaves allowed anywhere in an expression.
_ALLOWED_NODES: tuple[type[exp.Expression], ...] = (
    exp.Column, exp.Identifier, exp.Literal, exp.Boolean, exp.Null, exp.Paren, exp.Neg,
    exp.And, exp.Or, exp.Not, exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE,
    exp.Between, exp.In, exp.Is, exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.IntDiv,
    exp.Case, exp.If, exp.Cast, exp.DataType, exp.Var, exp.Alias, exp.Star, exp.Ordered,
    exp.NullSafeEQ, exp.NullSafeNEQ, exp.Distinct, exp.Filter, exp.Where, exp.Window, exp.WindowSpec, exp.Order,
)
_CAST_TYPES = {
    exp.DataType.Type.TIMESTAMP, exp.DataType.Type.TIMESTAMPNTZ, exp.DataType.Type.DATE,
    exp.DataType.Type.DOUBLE, exp.DataType.Type.FLOAT, exp.DataType.Type.INT,
    exp.DataType.Type.BIGINT, exp.DataType.Type.SMALLINT, exp.DataType.Type.DECIMAL,
}
# Types whose sqlglot name is not what the user wrote (hugeint and int128 are one type), said in words.
_TYPE_NAMES = {exp.DataType.Type.INT128: "a 128-bit integer", exp.DataType.Type.UINT128: "an unsigned 128-bit integer",
               exp.DataType.Type.INT256: "a 256-bit integer", exp.DataType.Type.UINT256: "an unsigned 256-bit integer",
               exp.DataType.Type.UBIGINT: "an unsigned integer", exp.DataType.Type.UINT: "an unsigned integer"}
_FILE_ACCESS = {"read_csv", "read_csv_auto", "read_parquet", "read_json", "read_json_auto", "read_text",
                "read_blob", "parquet_scan", "glob", "getenv", "current_setting", "duckdb_settings",
                "sniff_csv", "iceberg_scan", "delta_scan", "query", "query_table"}
# Time functions rewritten per calendar, by sqlglot class.
_TIME_FIELDS: dict[type[exp.Expression], str] = {
    exp.Year: "year", exp.Month: "month", exp.Day: "day", exp.Hour: "hour", exp.Minute: "minute",
    exp.Second: "second", exp.Quarter: "quarter", exp.DayOfYear: "dayofyear",
}
_CALENDAR_KEEPERS = (exp.Min, exp.Max, exp.First, exp.Last, exp.ArgMin, exp.ArgMax, exp.Paren, exp.FirstValue,
                     exp.LastValue, exp.NthValue, exp.Lag, exp.Lead)
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ, exp.NullSafeNEQ)

def meta_of(node: exp.Expression | None) -> ColumnMeta | None:
    """Return what dstp knows of an expression's values: a bound column's meta, kept through
    calendar-preserving functions (min, max, first, date_trunc, time_bucket, …); else None."""
    while node is not None:
        meta = node.meta.get("dstp")
        if isinstance(meta, ColumnMeta):
            return meta
        if isinstance(node, exp.Window):
            node = node.this
        elif isinstance(node, (exp.Alias, exp.Filter, *_CALENDAR_KEEPERS)):
            node = node.this
        else:
            return None
    return None


# -- expressions -----------------------------------------------------------------------------

# How refused expression nodes are called in messages (else the node's own SQL is quoted).
_NODE_NAMES: dict[type[exp.Expression], str] = {
    exp.Like: "LIKE", exp.ILike: "ILIKE", exp.SimilarTo: "SIMILAR TO", exp.RegexpLike: "a regular expression",
    exp.Interval: "INTERVAL arithmetic", exp.Any: "ANY (…)", exp.All: "ALL (…)",
    exp.Lambda: "a lambda function", exp.Array: "a list value",
    exp.Struct: "a struct value", exp.Bracket: "indexing with […]", exp.Dot: "field access with '.'",
    exp.Collate: "COLLATE", exp.Unnest: "UNNEST", exp.DPipe: "string concatenation with ||",
}
#: Where aggregates and window functions may stand, by clause.
_AGGREGATE_CLAUSES = {"select", "having", "order", "qualify"}
_WINDOW_CLAUSES = {"select", "order", "qualify"}
_CLAUSE_WORDS = {"where": "WHERE", "on": "a join condition", "group": "GROUP BY", "having": "HAVING",
                 "select": "the SELECT list", "order": "ORDER BY", "qualify": "QUALIFY"}

#: Binds a subquery: (query node, the scope around it) -> (bound node, its output metas).
SubqueryBinder = Callable[[exp.Expression, Scope], tuple[exp.Expression, list[ColumnMeta]]]


class Checker:
    """Checks the expressions of one SELECT node by node and binds their columns to its sources."""

    def __init__(self, sql: str, scope: Scope, subquery: SubqueryBinder) -> None:
        self.sql = sql
        self.scope = scope
        self.subquery = subquery
        #: Bound columns that name a select-list output (GROUP BY m): their names.
        self.alias_refs: set[str] = set()

    # -- columns ---------------------------------------------------------------------------

    def resolve(self, node: exp.Column, aliases: Iterable[str] = ()) -> tuple[Source, str, Scope] | str:
        """Return (source, column, scope) a column names, or the output alias it names; raise if neither."""
        table = node.args.get("table")
        if node.args.get("db") or node.args.get("catalog"):
            raise error_at(UnknownColumnError, f"{node.sql()!r} is not a column", self.sql, node)
        if node.args.get("join_mark"):
            raise error_at(ForbiddenQueryError, "(+) outer-join marks are not supported; write the join with "
                           "LEFT JOIN … ON", self.sql, node)
        if not isinstance(node.this, exp.Identifier):
            raise self._not_allowed(node.this)
        name, quoted = node.name, bool(node.this.quoted)
        qualifier = table.name if table is not None else None
        scope: Scope | None = self.scope
        while scope is not None:
            found = self._find(scope, name, quoted, qualifier, node)
            if found is not None:
                return found[0], found[1], scope
            if scope is self.scope and qualifier is None and name in aliases:
                return name
            scope = scope.parent
        if qualifier is not None:
            known = sorted({s.alias for s in self.scope.sources})
            if not any(qualifier.lower() in s.qualifiers() for sc in self._scopes() for s in sc.sources):
                raise error_at(UnknownColumnError, f"{qualifier!r} is not a dataset or name of this query "
                               f"(here: {', '.join(known) or 'none'})", self.sql, table)
        raise error_at(UnknownColumnError, self._unknown(name, qualifier), self.sql, node)

    def _scopes(self) -> list[Scope]:
        out: list[Scope] = []
        scope: Scope | None = self.scope
        while scope is not None:
            out.append(scope)
            scope = scope.parent
        return out

    def _find(self, scope: Scope, name: str, quoted: bool, qualifier: str | None,
              node: exp.Column) -> tuple[Source, str] | None:
        hits: list[tuple[Source, str]] = []
        for source in scope.sources:
            if qualifier is not None and qualifier.lower() not in source.qualifiers():
                continue
            if isinstance(source, MatchupSource):
                for prefix, side in source.side(qualifier):
                    column = side.lookup(name, quoted)
                    if column is not None:
                        hits.append((source, prefix + column))
                continue
            column = source.lookup(name, quoted)
            if column is not None:
                hits.append((source, column))
        if len(hits) > 1:
            where = ", ".join(f"{s.describe()}" if not isinstance(s, MatchupSource) else
                              (s.left_name if c.startswith("l.") else s.right_name) for s, c in hits)
            first = hits[0][1].split(".", 1)[-1]
            raise error_at(QueryError, f"column {name!r} is in more than one of {where}; say which, e.g. "
                           f"{(where.split(',')[0].split(' (')[0])}.{first}", self.sql, node)
        return hits[0] if hits else None

    def _unknown(self, name: str, qualifier: str | None) -> str:
        sources = [s for s in self.scope.sources if qualifier is None or qualifier.lower() in s.qualifiers()]
        if len(sources) == 1:
            source = sources[0]
            known = ", ".join(source.column_names() if not isinstance(source, MatchupSource)
                              else [*source.left.column_names(), *source.right.column_names()])
            because = source.missing_because(name)
            close = difflib.get_close_matches(name, known.split(", "), n=1, cutoff=0.7) if not because else []
            return (f"{source.describe().split(' (')[-1].rstrip(')')} has no column {name!r}"
                    + (f"; did you mean {close[0]}?" if close else "")
                    + (f" ({because})" if because else f" (columns: {known})"))
        names = ", ".join(s.describe() for s in sources) or "none"
        return f"no column {name!r} in {names}"

    def bind_column(self, node: exp.Column, aliases: Iterable[str] = (), use: bool = True) -> exp.Expression:
        """Return the bound form of a column: ``"alias"."column"``, or ``"output"`` for a select-list name."""
        found = self.resolve(node, aliases)
        if isinstance(found, str):
            self.alias_refs.add(found)
            bound = exp.Column(this=exp.Identifier(this=found, quoted=True))
            bound.meta.update({k: v for k, v in node.meta.items() if k != "dstp"})
            return bound
        source, column, _ = found
        if use:
            if isinstance(source, MatchupSource):
                side = source.left if column.startswith("l.") else source.right
                side.use(column[2:])
            else:
                source.use(column)
        table, name = source.sql_column(column, None)
        bound = exp.Column(this=exp.Identifier(this=name, quoted=True), table=exp.Identifier(this=table, quoted=True))
        bound.meta.update({k: v for k, v in node.meta.items() if k != "dstp"})
        bound.meta["dstp"] = source.meta(column)
        return bound

    # -- expressions -----------------------------------------------------------------------

    def check(self, node: exp.Expression, clause: str, aliases: Iterable[str] = ()) -> exp.Expression:
        """Return ``node`` with every column bound and dstp's functions rewritten, or raise."""
        self._clause, self._aliases = clause, tuple(aliases)
        bound = self._bind(node, in_aggregate=False, in_window=False)
        bound = self.normalise_time_literals(bound)
        bound = _keys.reconcile(bound, self.sql)
        try:
            bound.sql(dialect=DIALECT, unsupported_level=ErrorLevel.RAISE)
        except UnsupportedError as exc:
            raise error_at(ForbiddenQueryError, f"{snippet(node, sql=self.sql)} cannot be run as written; "
                           "write it without its options", self.sql, node) from exc
        return bound

    def _bind(self, node: exp.Expression, in_aggregate: bool, in_window: bool) -> exp.Expression:
        if isinstance(node, exp.Column):
            if isinstance(node.this, exp.Star):
                raise self._not_allowed(node.this)
            return self.bind_column(node, self._aliases)
        if isinstance(node, (exp.Subquery, exp.Exists)) or (isinstance(node, exp.In) and node.args.get("query")):
            return self._bind_subquery(node, in_aggregate, in_window)
        if isinstance(node, exp.Star):
            if isinstance(node.parent, exp.Count):
                for source in self.scope.sources:
                    source.use_all()
                return node
            raise self._not_allowed(node)
        name = node.name.lower() if isinstance(node, exp.Anonymous) else ""
        is_aggregate = isinstance(node, tuple(AGGREGATES)) or DSTP_FUNCTIONS.get(name) == "aggregate"
        is_window_only = isinstance(node, tuple(WINDOW_FUNCTIONS))
        if is_aggregate or is_window_only:
            self._check_placement(node, in_aggregate, in_window, window_only=is_window_only)
        self._allow(node)
        if isinstance(node, exp.Window) and self._clause not in _WINDOW_CLAUSES:
            raise error_at(QueryError, f"window functions (OVER …) cannot be used in {_CLAUSE_WORDS[self._clause]}; "
                           "compute them in the SELECT list of a subquery or CTE, or filter with QUALIFY",
                           self.sql, node)
        child_aggregate = in_aggregate or (is_aggregate and not isinstance(node.parent, exp.Window))
        child_window = in_window or isinstance(node, exp.Window)
        for key, value in list(node.args.items()):
            if isinstance(value, exp.Expression) and not (key == "this" and isinstance(node, exp.Column)):
                if isinstance(value, (exp.DataType, exp.Var)) or key == "_type":
                    continue
                new = self._bind(value, child_aggregate and key != "partition_by", child_window)
                if new is not value:
                    node.set(key, new)
            elif isinstance(value, list):
                items = [self._bind(v, child_aggregate, child_window) if isinstance(v, exp.Expression)
                         and not isinstance(v, exp.DataType) else v for v in value]
                node.set(key, items)
        return self._rewrite(node)

    def _check_placement(self, node: exp.Expression, in_aggregate: bool, in_window: bool, window_only: bool) -> None:
        label = _function_name(node)
        windowed = isinstance(node.parent, exp.Window) or (isinstance(node.parent, exp.Filter)
                                                            and isinstance(node.parent.parent, exp.Window))
        if window_only and not windowed:
            raise error_at(QueryError, f"{label}() needs OVER (…), e.g. {label}() over (order by time)",
                           self.sql, node)
        if in_aggregate and not windowed:
            raise error_at(QueryError, f"{label}() is inside another aggregate; aggregate in a subquery or CTE "
                           "first, then aggregate its result", self.sql, node)
        allowed = _WINDOW_CLAUSES if windowed else _AGGREGATE_CLAUSES
        if self._clause not in allowed:
            hint = {"where": "filter groups with HAVING, or aggregate in a subquery or CTE",
                    "group": "group by columns or expressions of columns",
                    "on": "aggregate in a subquery or CTE, then join it"}.get(self._clause, "")
            raise error_at(QueryError, f"{label}() is an aggregate and cannot be used in "
                           f"{_CLAUSE_WORDS[self._clause]}" + (f"; {hint}" if hint else ""), self.sql, node)

    def _bind_subquery(self, node: exp.Expression, in_aggregate: bool, in_window: bool) -> exp.Expression:
        if isinstance(node, exp.In):
            node.set("this", self._bind(node.this, in_aggregate, in_window))
            query = node.args["query"]
            inner = query.this if isinstance(query, exp.Subquery) else query
            bound, outputs = self.subquery(inner, self.scope)
            if len(outputs) != 1:
                raise error_at(QueryError, f"IN (SELECT …) takes one column; this subquery selects {len(outputs)}",
                               self.sql, query)
            node.set("query", exp.Subquery(this=bound))
            return node
        inner = node.this
        bound, outputs = self.subquery(inner, self.scope)
        if isinstance(node, exp.Subquery):
            if len(outputs) != 1:
                raise error_at(QueryError, f"a subquery used as a value selects one column; this one selects "
                               f"{len(outputs)}", self.sql, node)
            result = exp.Subquery(this=bound)
            result.meta.update(node.meta)
            if outputs[0].calendar is not None:
                result.meta["dstp"] = outputs[0]
            return result
        node.set("this", bound)
        return node

    # -- rewrites --------------------------------------------------------------------------

    def _rewrite(self, node: exp.Expression) -> exp.Expression:
        """Return dstp's functions and calendar-dependent time functions rewritten for DuckDB."""
        if isinstance(node, (exp.First, exp.Last)) and not isinstance(node.parent, exp.Window):
            return self._grid_order(node)
        if isinstance(node, exp.Anonymous):
            name = node.name.lower()
            if name in _ALIASED:
                aliased: Any = _ALIASED[name](this=node.expressions[0]) if len(node.expressions) == 1 \
                    else self._arity(node, name, 1)
                return aliased
            if name == "weighted_avg":
                return self._weighted_avg(node)
            if name == "season":
                if len(node.expressions) != 1:
                    self._arity(node, "season", 1)
                return self._time_call("season", node.expressions[0], node)
            return node
        if isinstance(node, exp.Window) and isinstance(node.this, exp.Div) and node.this.meta.get("dstp_wavg"):
            div = node.this  # weighted_avg(x, w) over (…): the window applies to both sums
            spec = {k: v for k, v in node.args.items() if k != "this"}
            return exp.Div(this=exp.Window(this=div.this, **{k: v.copy() if isinstance(v, exp.Expression) else v
                                                              for k, v in spec.items()}),
                           expression=exp.Nullif(this=exp.Window(this=div.expression.this, **spec),
                                                 expression=exp.Literal.number(0)))
        if isinstance(node, exp.Window):
            self._check_frame(node)
        if type(node) in _TIME_FIELDS:
            return self._time_call(_TIME_FIELDS[type(node)], node.this, node)
        if isinstance(node, exp.Extract):
            field = node.this.name.lower() if isinstance(node.this, (exp.Var, exp.Identifier)) else ""
            return self._time_call(field, node.expression, node)
        if isinstance(node, exp.TimestampTrunc):
            unit = node.args.get("unit")
            return self._truncate(unit.name if unit is not None else "", node.this, node)
        if isinstance(node, exp.DateBin):
            return self._bucket(node)
        return node

    def _arity(self, node: exp.Expression, name: str, count: int) -> exp.Expression:
        raise error_at(QueryError, f"{name}() takes {count} argument{'s' if count > 1 else ''}", self.sql, node)

    def _grid_order(self, node: exp.First | exp.Last) -> exp.Expression:
        """Return first(x)/last(x) as the first/last non-NULL x in grid order: arg_min/arg_max over the row id.

        DuckDB's own first/last take whichever record a thread met first, so they
        would differ from run to run; a dataset's records have an order (the grid's
        C order), and pandas' and xarray's first/last skip missing values.
        """
        word = "first" if isinstance(node, exp.First) else "last"
        columns = list(node.this.find_all(exp.Column)) if isinstance(node.this, exp.Expression) else []
        tables = {c.table.lower() for c in columns}
        sources = [s for s in self.scope.sources if isinstance(s, DatasetSource)
                   and s.alias.lower() in tables] if len(tables) == 1 else []
        if len(sources) != 1 or sources[0].ref.remote:
            raise error_at(QueryError, f"{word}() takes columns of one dataset in FROM (its records have an order: "
                           f"the grid's); over a CTE, subquery, remote dataset or join write "
                           f"{'arg_min' if word == 'first' else 'arg_max'}(x, time)", self.sql, node)
        ref = sources[0].ref
        ref.rowid = True
        rowid = exp.Column(this=exp.to_identifier("__dstp_rowid", quoted=True),
                           table=exp.to_identifier(sources[0].alias, quoted=True))
        call = exp.ArgMin if word == "first" else exp.ArgMax
        result = call(this=node.this, expression=rowid)
        result.meta.update(node.meta)
        return result

    def _weighted_avg(self, node: exp.Anonymous) -> exp.Expression:
        if len(node.expressions) != 2:
            raise error_at(QueryError, "weighted_avg(x, w) takes a value and its weight, e.g. "
                           "weighted_avg(temperature, area_weight)", self.sql, node)
        x, w = node.expressions
        total = exp.Sum(this=exp.Mul(this=exp.Paren(this=x), expression=exp.Paren(this=w)))
        weights = exp.Sum(this=exp.Case(ifs=[exp.If(this=exp.Not(this=exp.Is(this=x.copy(), expression=exp.Null())),
                                                    true=w.copy())]))
        if isinstance(node.parent, exp.Window):
            div = exp.Div(this=total, expression=weights)  # the Window rewrite wraps both sums
            div.meta["dstp_wavg"] = True
            return div
        return exp.Paren(this=exp.Div(this=total, expression=exp.Nullif(this=weights, expression=exp.Literal.number(0))))

    def _calendar(self, t: exp.Expression, node: exp.Expression) -> tuple[str, bool]:
        """Return (calendar, iso) of a time argument; standard for times dstp did not make."""
        meta = meta_of(t)
        if meta is not None and meta.calendar is not None:
            return meta.calendar, meta.iso
        for column in t.find_all(exp.Column):
            inner = column.meta.get("dstp")
            if isinstance(inner, ColumnMeta) and inner.calendar is not None and \
                    inner.calendar_family not in _calendar.STANDARD:
                raise error_at(QueryError, f"cannot tell the calendar of {snippet(t, sql=self.sql)}: it uses "
                               f"{inner.name!r} ({inner.calendar}); apply {_function_name(node)} to the time "
                               "column itself", self.sql, node)
        return "standard", False

    def _time_call(self, name: str, t: exp.Expression, node: exp.Expression) -> exp.Expression:
        calendar, iso = self._calendar(t, node)
        if calendar in _calendar.STANDARD and name != "season":
            return node
        try:
            return _calendar.time_function(name, t, calendar, iso)
        except _calendar.CalendarError as exc:
            raise error_at(QueryError, str(exc), self.sql, node) from exc

    def _truncate(self, unit: str, t: exp.Expression, node: exp.Expression) -> exp.Expression:
        calendar, iso = self._calendar(t, node)
        if calendar in _calendar.STANDARD:
            return node
        try:
            result = _calendar.trunc(unit, t, calendar, iso)
        except _calendar.CalendarError as exc:
            raise error_at(QueryError, str(exc), self.sql, node) from exc
        return _keep_meta(result, t)

    def _bucket(self, node: exp.DateBin) -> exp.Expression:
        width = _calendar.interval_of(node.this)
        if width is None:
            raise error_at(QueryError, "time_bucket takes an interval first, e.g. time_bucket(interval '5 days', "
                           "time) or time_bucket(interval '1 month', time)", self.sql, node.this)
        if width.months and width.micros or (width.months <= 0 and width.micros <= 0):
            raise error_at(QueryError, "a time_bucket width is a positive number of days (hours, minutes…) or of "
                           "months (years), not both", self.sql, node.this)
        t = node.expression
        calendar, iso = self._calendar(t, node)
        origin = node.args.get("unit")
        if isinstance(origin, exp.Var) and origin.name[:1].isdigit():
            # sqlglot keeps DuckDB's quoted origin ('2000-02-30') as a bare Var; an identifier would be upper-cased
            origin = exp.Literal.string(origin.name)
        if origin is not None:
            literal = _time_literal_node(origin)
            if literal is None:
                raise error_at(QueryError, "time_bucket's origin is a date in quotes, e.g. '2000-01-01'",
                               self.sql, origin)
            try:
                value = time_literal(literal.this, iso)
            except ValueError as exc:
                raise error_at(QueryError, str(exc), self.sql, literal) from exc
            origin = exp.Literal.string(str(value)) if iso else exp.Cast(
                this=exp.Literal.string(str(value).replace("T", " ")), to=exp.DataType.build("TIMESTAMP"))
        try:
            return _keep_meta(_calendar.bucket(width, t, origin, calendar, iso), t)
        except _calendar.CalendarError as exc:
            raise error_at(QueryError, str(exc), self.sql, node) from exc

    def _check_frame(self, window: exp.Window) -> None:
        """Refuse RANGE frames in days over a time on a non-Gregorian calendar (they count Gregorian days)."""
        spec = window.args.get("spec")
        if spec is None or not any(isinstance(spec.args.get(k), exp.Interval) for k in ("start", "end")):
            return
        order = window.args.get("order")
        keys = [o.this for o in order.expressions] if order is not None else []
        for key in keys:
            meta = meta_of(key)
            if meta is not None and meta.calendar is not None and meta.calendar_family not in _calendar.STANDARD:
                raise error_at(QueryError, f"a RANGE frame in days over {meta.name!r} would count Gregorian days, "
                               f"not {meta.calendar} days; use ROWS BETWEEN n PRECEDING AND CURRENT ROW",
                               self.sql, spec)

    # -- the whitelist ---------------------------------------------------------------------

    def _allow(self, sub: exp.Expression) -> None:
        """Return if ``sub`` (not a column) may appear in an expression, else raise."""
        if isinstance(sub, exp.Identifier) and isinstance(sub.parent, exp.Column):
            return
        if isinstance(sub, (*ALLOWED_FUNCTIONS, *AGGREGATES, *WINDOW_FUNCTIONS)):
            if isinstance(sub, exp.PercentileCont) and isinstance(sub.args.get("expression"), exp.Array):
                raise error_at(QueryError, "quantile_cont takes one fraction, e.g. quantile_cont(temperature, 0.9); "
                               "select one column per quantile", self.sql, sub)
            return
        if isinstance(sub, exp.Anonymous) and sub.name.lower() in DSTP_FUNCTIONS:
            return
        if isinstance(sub, exp.Interval) and (isinstance(sub.parent, exp.DateBin) and sub.arg_key == "this"
                                              or isinstance(sub.parent, exp.WindowSpec)):
            return
        if isinstance(sub, exp.Cast):
            to = sub.args.get("to")
            if to is None or to.this not in _CAST_TYPES:
                # Named as the query spells it, the caret under that word: hugeint is int128 to sqlglot.
                word = type_token(sub, self.sql)
                name = self.sql[word.start: word.end + 1] if word is not None else \
                    _TYPE_NAMES.get(to.this, to.sql(dialect=DIALECT).lower()) if to is not None else "?"
                raise error_at(
                    ForbiddenQueryError,
                    f"cast to {name} is not supported "
                    "(use timestamp, date, double, float, integer, bigint or decimal(p, s))",
                    self.sql,
                    word if word is not None else sub,
                )
            for param in to.expressions:
                if isinstance(param, exp.DataTypeParam):
                    self._decimal_param(param)
            return
        if isinstance(sub, exp.DataTypeParam):
            self._decimal_param(sub)
            return
        if isinstance(sub, (exp.Var, exp.DataType)) and isinstance(sub.parent, (exp.Cast, exp.Extract,
                                                                             exp.TimestampTrunc, exp.DataType)):
            return
        if isinstance(sub, exp.Is) and not isinstance(sub.expression, (exp.Null, exp.Boolean)):
            raise error_at(QueryError, "IS compares with NULL, TRUE or FALSE; to compare values write = "
                           "(or IS DISTINCT FROM, which treats NULLs as equal)", self.sql, sub.expression)
        if isinstance(sub, exp.In) and not sub.expressions and not any(
                sub.args.get(k) for k in ("query", "unnest", "field")):
            raise error_at(QueryError, "IN needs a list of values, e.g. lat in (10, 20)", self.sql, sub)
        if isinstance(sub, exp.Window):
            if sub.args.get("alias") is not None and sub.args.get("partition_by") is None \
                    and sub.args.get("order") is None:
                raise error_at(ForbiddenQueryError, "named windows (OVER w … WINDOW w AS) are not supported; "
                               "write the window in OVER (…)", self.sql, sub)
            for key in ("spec", "partition_by", "order", "this", "over", "alias"):
                pass
            return
        if isinstance(sub, exp.WindowSpec):
            return
        if isinstance(sub, (exp.Order, exp.Ordered)):
            if isinstance(sub, exp.Order) and not isinstance(sub.parent, exp.Window):
                raise error_at(ForbiddenQueryError, "ordered aggregates (… ORDER BY inside the parentheses) are "
                               "not supported; use arg_min/arg_max, or first/last over a window", self.sql, sub)
            return
        if isinstance(sub, exp.Distinct):
            if not isinstance(sub.parent, tuple(AGGREGATES)) or sub.args.get("on") is not None:
                raise self._not_allowed(sub)
            return
        if isinstance(sub, (exp.Filter, exp.Where)):
            if isinstance(sub, exp.Filter) and not (isinstance(sub.this, tuple(AGGREGATES))
                                                    or isinstance(sub.this, exp.Anonymous)):
                raise self._not_allowed(sub)
            return
        if isinstance(sub, _ALLOWED_NODES) and not isinstance(sub, (exp.Var, exp.DataType, exp.Star)):
            return
        raise self._not_allowed(sub)

    def _decimal_param(self, param: exp.DataTypeParam) -> None:
        """Accept the width and scale of decimal(p, s) within DuckDB's range (1 ≤ p ≤ 38, 0 ≤ s ≤ p)."""
        dtype = param.parent
        if not (isinstance(dtype, exp.DataType) and dtype.this == exp.DataType.Type.DECIMAL):
            shown = snippet(dtype, sql=self.sql) if isinstance(dtype, exp.Expression) else "this type"
            raise error_at(ForbiddenQueryError, f"type parameters are only accepted on decimal(p, s), not on {shown}",
                           self.sql, param)
        values = [p.this for p in dtype.expressions]
        if not all(isinstance(v, exp.Literal) and not v.is_string and v.this.isdigit() for v in values):
            raise error_at(QueryError, "decimal(p, s) takes two whole numbers", self.sql, param)
        numbers = [int(v.this) for v in values]
        width, scale = (numbers + [0])[:2]
        if len(numbers) > 2 or not 1 <= width <= 38 or not 0 <= scale <= width:
            raise error_at(QueryError, "decimal(p, s) needs 1 ≤ p ≤ 38 and 0 ≤ s ≤ p", self.sql, param)

    def _not_allowed(self, node: Any) -> QueryError:
        if isinstance(node, (exp.Subquery, exp.Select, exp.Exists)):
            return error_at(ForbiddenQueryError, "this form of subquery is not supported", self.sql, node)
        if isinstance(node, exp.Placeholder):
            return error_at(QueryError, "parameters (? or $1) are not supported; write the value in", self.sql, node)
        if isinstance(node, exp.Star):
            return error_at(QueryError, "* stands for the columns of the dataset and can only be selected "
                          "on its own (select * …) or counted (count(*)); name the columns here", self.sql, node)
        if isinstance(node, exp.Distinct):
            return error_at(ForbiddenQueryError, "DISTINCT belongs after SELECT or inside an aggregate "
                            "(count(distinct lat))", self.sql, node)
        if isinstance(node, (exp.Func, exp.Anonymous)) and not isinstance(node, tuple(_NODE_NAMES)):
            name = _function_name(node)
            if name in _FILE_ACCESS or name.startswith(("read_", "duckdb_", "pragma")):
                return error_at(
                    ForbiddenQueryError,
                    f"{name}() is not allowed: queries cannot read files, settings or the environment",
                    self.sql,
                    node,
                )
            if isinstance(node, exp.AggFunc):
                allowed = ", ".join(sorted({*AGGREGATES.values(), "weighted_avg", "mean"}))
                return error_at(ForbiddenQueryError, f"aggregate {name}() is not supported (aggregates: {allowed})",
                                self.sql, node)
            allowed = ", ".join(sorted({*ALLOWED_FUNCTIONS.values(), "season"}))
            return error_at(ForbiddenQueryError, f"function {name}() is not allowed (allowed: {allowed}; "
                            "aggregates and window functions: see the query language)", self.sql, node)
        if isinstance(node, exp.DPipe):  # at the operator, not at the first operand
            at = operator_token(node, "||", self.sql)
            return error_at(ForbiddenQueryError, f"{_NODE_NAMES[exp.DPipe]} is not supported in a dstp query",
                            self.sql, at if at is not None else node)
        what = next((label for cls, label in _NODE_NAMES.items() if isinstance(node, cls)), None)
        if what is None:
            what = repr(snippet(node, sql=self.sql)) if isinstance(node, exp.Expression) else "this"
        return error_at(ForbiddenQueryError, f"{what} is not supported in a dstp query", self.sql, node)

    # -- time literals ---------------------------------------------------------------------

    def normalise_time_literals(self, node: exp.Expression) -> exp.Expression:
        """Rewrite string/timestamp literals compared with times into the time's form (ISO text or timestamp)."""
        for cmp in list(node.find_all(*_COMPARISONS, exp.Between, exp.In)):
            if isinstance(cmp, exp.Between):
                pairs = [(cmp.this, [cmp.args["low"], cmp.args["high"]])]
            elif isinstance(cmp, exp.In):
                pairs = [(cmp.this, list(cmp.expressions))]
            else:
                pairs = [(cmp.this, [cmp.expression]), (cmp.expression, [cmp.this])]
            for target, others in pairs:
                meta = meta_of(target)
                if meta is not None and meta.calendar is None:
                    for other in others:
                        self._check_number_text(other, meta)
                if meta is None or meta.calendar is None:
                    continue
                for other in others:
                    self._normalise(other, meta)
        return node

    def _check_number_text(self, other: exp.Expression, meta: ColumnMeta) -> None:
        """Refuse text that is no number compared with a column of numbers (DuckDB's cast error has no caret)."""
        if not (isinstance(other, exp.Literal) and other.is_string) or meta.origin is None:
            return
        ref, name = meta.origin
        kind = number_type(ref.dataset, name)
        if kind is None:
            return
        try:
            float(other.this.strip())
            return
        except ValueError:
            pass
        units = f", {meta.units}" if meta.units else ""
        low = meta.value_range[0] if meta.value_range else 0
        raise error_at(QueryError, f"{sql_string(other.this)} is not a number, and {meta.name} holds numbers "
                       f"({kind}{units}); compare it with a number, e.g. {meta.name} = {low:g}", self.sql, other)

    def _normalise(self, other: exp.Expression, meta: ColumnMeta) -> None:
        literal = _time_literal_node(other)
        if literal is None:
            bare = other.this if isinstance(other, exp.Neg) else other
            if isinstance(bare, exp.Literal) and not bare.is_string:
                raise error_at(QueryError, f"{meta.name} is a time; compare it with a date in quotes, "
                               f"e.g. {meta.name} >= '2001-01-01'", self.sql, bare)
            return
        try:
            value = time_literal(literal.this, meta.iso)
        except ValueError as exc:
            raise error_at(QueryError, str(exc), self.sql, literal) from exc
        if meta.iso:
            other.replace(exp.Literal.string(str(value)))
        else:
            text = str(value).replace("T", " ")
            other.replace(exp.Cast(this=exp.Literal.string(text), to=exp.DataType.build("TIMESTAMP")))


def number_type(dataset: Any, name: str) -> str | None:
    """Return the type of a local dataset's numeric column in DuckDB's words (``FLOAT``, ``INTEGER``), else None."""
    import pyarrow as pa

    coordinates = getattr(dataset, "coordinates", None)
    readable = getattr(dataset, "readable", None)
    if coordinates is None or readable is None:  # a remote dataset: DuckDB's message says it
        return None
    column = coordinates.get(name) or readable(name)
    arrow = getattr(column, "arrow_type", None)
    if arrow is None or not (pa.types.is_floating(arrow) or pa.types.is_integer(arrow)):
        return None
    return _ARROW_SQL_TYPES.get(str(arrow), str(arrow).upper())


_ARROW_SQL_TYPES = {"float": "FLOAT", "double": "DOUBLE", "halffloat": "FLOAT", "int8": "TINYINT",
                    "int16": "SMALLINT", "int32": "INTEGER", "int64": "BIGINT", "uint8": "UTINYINT",
                    "uint16": "USMALLINT", "uint32": "UINTEGER", "uint64": "UBIGINT"}


def sql_string(text: str) -> str:
    """Return ``text`` as a SQL string literal, as the query wrote it."""
    return "'" + text.replace("'", "''") + "'"


def _keep_meta(result: exp.Expression, t: exp.Expression) -> exp.Expression:
    """Return ``result`` carrying the calendar of ``t`` (a truncated or bucketed time is a time of that calendar)."""
    meta = meta_of(t)
    if meta is not None:
        result.meta["dstp"] = ColumnMeta(meta.name, meta.calendar, meta.iso, key="time" if meta.key == "time"
                                         else None)
    return result


def _function_name(node: exp.Expr) -> str:
    if isinstance(node, exp.Anonymous):
        return node.name.lower()
    for table in (AGGREGATES, WINDOW_FUNCTIONS, ALLOWED_FUNCTIONS):
        for cls, label in table.items():
            if type(node) is cls:
                return label.split("/")[0]
    try:
        return node.sql_name().lower()  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - a node without a name
        return type(node).__name__.lower()


def _time_literal_node(node: exp.Expression) -> exp.Literal | None:
    if isinstance(node, exp.Literal) and node.is_string:
        return node
    if isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal) and node.this.is_string:
        to = node.args.get("to")
        if to is not None and to.this in {exp.DataType.Type.TIMESTAMP, exp.DataType.Type.TIMESTAMPNTZ,
                                         exp.DataType.Type.DATE}:
            return node.this
    return None

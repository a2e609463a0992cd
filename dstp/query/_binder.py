"""Binding a query: every SELECT, CTE, subquery and UNION checked, every name bound to a source.

The binder walks the parsed tree top-down. For each SELECT it builds the scope
of its FROM and JOIN sources (:mod:`._scope`), checks every clause it knows
(and refuses every other, :func:`~._clauses.refuse_unknown_args`), binds the
expressions with a :class:`~._expressions.Checker`, and rebuilds the node from
the checked parts only, so what DuckDB runs is generated from checked nodes.

Each catalog dataset named in FROM or JOIN becomes a :class:`~._scope.DatasetRef`
whose Table node is replaced by its scan table (``"__dstp_scan_0" AS "ccm3"``).
The conjuncts of WHERE (and of inner-join conditions) that constrain one
reference alone are kept with it for planning: coordinate ranges among them
become its hyperslab, and a remote dataset filters by them. They are taken only
where dropping the records they rule out cannot change the answer: never from
the null-supplying side of an outer join (except its own ON conditions), never
for the right side of an ASOF join, where they would change which record is
matched.
"""

from __future__ import annotations

import difflib
import math

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlglot import exp
from sqlglot.tokens import Token

from dstp.errors import DatasetNotFoundError, ForbiddenQueryError, QueryError, QuerySyntaxError, UnknownColumnError
from dstp.query._clauses import (
    GROUP_ARGS,
    JOIN_ARGS,
    ORDER_ARGS,
    ORDERED_ARGS,
    SELECT_ARGS,
    TABLE_ARGS,
    UNION_ARGS,
    Sampling,
    limit_clause,
    literal_number,
    refuse_unknown_args,
    sampling_clause,
)
from dstp.query._expressions import AGGREGATES, Checker, meta_of
from dstp.query._pushdown import conjuncts as _conjuncts
from dstp.query._scope import ColumnMeta, DatasetRef, DatasetSource, DerivedSource, MatchupSource, Scope, Source
from dstp.query._star import expand_star
from dstp.query._star import output as _output
from dstp.query._text import DIALECT, error_at, place, position, snippet
from dstp.query.matchup import MatchupSpec, choose_keys, index_column, parse_options

if TYPE_CHECKING:
    from dstp.catalog.registry import Catalog

__all__ = ["Binder", "ROWID", "SAMPLE_KEY", "SelectInfo"]

ROWID = "__dstp_rowid"
SAMPLE_KEY = "__dstp_key"


@dataclass
class _Cte:
    name: str
    query: exp.Expression
    outputs: list[ColumnMeta]


@dataclass
class SelectInfo:
    """What the outermost SELECT says, for the result's schema and the plan's estimates."""

    outputs: list[exp.Alias] = field(default_factory=list)
    metas: list[ColumnMeta | None] = field(default_factory=list)
    where: exp.Expression | None = None
    order: list[exp.Ordered] = field(default_factory=list)
    limit: int | None = None
    offset: int | None = None
    #: Output names of the GROUP BY keys (the result's grid), when every key is an output.
    group_keys: tuple[str, ...] = ()
    #: True for one dataset's records as grid points: no join, grouping, aggregate, DISTINCT or window.
    simple: bool = False
    aggregated: bool = False


def _unqualified(node: exp.Expression) -> exp.Expression:
    copy = node.copy()
    for column in copy.find_all(exp.Column):
        column.set("table", None)
    return copy


class Binder:
    """Binds one query's tree to the catalog; collects its dataset references and matchups."""

    def __init__(self, sql: str, tokens: list[Token], catalog: "Catalog") -> None:
        self.sql = sql
        self.tokens = tokens
        self.catalog = catalog
        self.refs: list[DatasetRef] = []
        self.matchups: list[MatchupSpec] = []
        self._subqueries = 0

    # -- queries ---------------------------------------------------------------------------

    def bind(self, tree: exp.Expression) -> tuple[exp.Expression, SelectInfo]:
        """Return the bound tree (what DuckDB runs) and what its outermost SELECT says; the datasets and
        matchups it reads are then in ``refs`` and ``matchups``."""
        bound, _, info = self.query(tree, None, {})
        return bound, info

    def query(self, node: exp.Expression, parent: Scope | None,
              ctes: dict[str, _Cte]) -> tuple[exp.Expression, list[ColumnMeta], SelectInfo]:
        """Return (bound query, its output metas, what its outermost SELECT says)."""
        while isinstance(node, exp.Subquery) and not node.args.get("alias"):
            node = node.this
        if isinstance(node, exp.Select):
            return self.select(node, parent, ctes)
        if isinstance(node, exp.Union):
            return self.union(node, parent, ctes)
        if isinstance(node, (exp.Intersect, exp.Except)):
            word = "INTERSECT" if isinstance(node, exp.Intersect) else "EXCEPT"
            raise error_at(ForbiddenQueryError, f"{word} is not supported; combine queries with UNION [ALL], or "
                           "filter with WHERE … [NOT] IN (SELECT …)", self.sql, node)
        raise error_at(ForbiddenQueryError, "expected a SELECT query here", self.sql, node)

    def union(self, node: exp.Union, parent: Scope | None,
              ctes: dict[str, _Cte]) -> tuple[exp.Expression, list[ColumnMeta], SelectInfo]:
        refuse_unknown_args(node, UNION_ARGS, self.sql, self.tokens)
        ctes, with_ = self._with(node, parent, ctes)
        left, left_metas, info = self.query(node.this, parent, ctes)
        right, right_metas, _ = self.query(node.expression, parent, ctes)
        if len(left_metas) != len(right_metas):
            raise error_at(QueryError, f"the parts of a UNION select {len(left_metas)} and {len(right_metas)} "
                           "columns; select the same number, in the same order", self.sql, node)
        metas = [a if (a.calendar == b.calendar and a.iso == b.iso) else ColumnMeta(a.name)
                 for a, b in zip(left_metas, right_metas)]
        names = [m.name for m in metas]
        bound = exp.Union(this=left, expression=right, distinct=bool(node.args.get("distinct")))
        order = self._union_order(node, names)
        limit, offset = limit_clause(node, self.sql, self.tokens)
        if with_ is not None:
            bound.set("with_", with_)
        if order:
            bound.set("order", exp.Order(expressions=order))
        if limit is not None:
            bound.set("limit", exp.Limit(expression=exp.Literal.number(limit)))
        if offset is not None:
            bound.set("offset", exp.Offset(expression=exp.Literal.number(offset)))
        outputs = [_output(exp.column(n, quoted=True), n) for n in names]
        return bound, metas, SelectInfo(outputs=outputs, metas=list(metas), order=order, limit=limit,
                                        offset=offset, aggregated=info.aggregated)

    def _union_order(self, node: exp.Expression, names: list[str]) -> list[exp.Ordered]:
        order_node = node.args.get("order")
        if order_node is None:
            return []
        refuse_unknown_args(order_node, ORDER_ARGS, self.sql, self.tokens)
        out = []
        for ordered in order_node.expressions:
            refuse_unknown_args(ordered, ORDERED_ARGS, self.sql, self.tokens)
            key = ordered.this
            if isinstance(key, exp.Literal) and not key.is_string and key.this.isdigit() \
                    and 1 <= int(key.this) <= len(names):
                name = names[int(key.this) - 1]
            elif isinstance(key, exp.Column) and not key.args.get("table") and \
                    any(key.name.lower() == n.lower() for n in names):
                name = next(n for n in names if n == key.name or n.lower() == key.name.lower())
            else:
                raise error_at(QueryError, f"ORDER BY after UNION names an output column or its position "
                               f"(1 to {len(names)}): {', '.join(names)}", self.sql, key)
            out.append(exp.Ordered(this=exp.column(name, quoted=True), desc=ordered.args.get("desc"),
                                   nulls_first=ordered.args.get("nulls_first")))
        return out

    def _with(self, node: exp.Expression, parent: Scope | None,
              ctes: dict[str, _Cte]) -> tuple[dict[str, _Cte], exp.With | None]:
        with_ = node.args.get("with_")
        if with_ is None:
            return ctes, None
        refuse_unknown_args(with_, {"expressions"}, self.sql, self.tokens)
        ctes = dict(ctes)
        bound_ctes: list[Any] = []
        for cte in with_.expressions:
            refuse_unknown_args(cte, {"this", "alias"}, self.sql, self.tokens)
            alias = cte.args.get("alias")
            if alias is not None and alias.args.get("columns"):
                raise error_at(ForbiddenQueryError, "column names after a CTE's name are not supported; name the "
                               "outputs with AS inside it", self.sql, alias)
            name = cte.alias
            if name.lower() in ctes and ctes[name.lower()].name in [c.alias for c in bound_ctes]:
                raise error_at(QueryError, f"the CTE {name!r} is defined twice", self.sql, cte)
            bound, metas, _ = self.query(cte.this, parent, ctes)
            ctes[name.lower()] = _Cte(name, bound, metas)
            bound_ctes.append(exp.CTE(this=bound, alias=exp.TableAlias(this=exp.to_identifier(name, quoted=True))))
        return ctes, exp.With(expressions=bound_ctes)

    # -- SELECT ----------------------------------------------------------------------------

    def select(self, node: exp.Select, parent: Scope | None,
               ctes: dict[str, _Cte]) -> tuple[exp.Expression, list[ColumnMeta], SelectInfo]:
        refuse_unknown_args(node, SELECT_ARGS, self.sql, self.tokens)
        ctes, with_ = self._with(node, parent, ctes)
        scope = Scope([], parent)
        from_ = node.args.get("from_")
        if from_ is None:
            raise error_at(QuerySyntaxError, "this SELECT has no FROM clause; write: select … from <dataset>",
                           self.sql, node)
        refuse_unknown_args(from_, {"this"}, self.sql, self.tokens)
        checker = Checker(self.sql, scope, lambda q, s: self._subquery(q, s, ctes))
        first, placeholders = self._source(from_.this, scope, ctes, parent)
        scope.sources.append(first)
        joins: list[tuple[exp.Join, Source, exp.Expression]] = []
        for join in node.args.get("joins") or []:
            refuse_unknown_args(join, JOIN_ARGS, self.sql, self.tokens)
            method = (join.args.get("method") or "").upper()
            if method and method != "ASOF":
                word = {"NATURAL": "NATURAL JOIN: name the keys with ON", "POSITIONAL": "POSITIONAL JOIN"}.get(
                    method, f"{method} JOIN")
                raise error_at(ForbiddenQueryError, f"{word} is not supported; write JOIN … ON a.time = b.time",
                               self.sql, join)
            source, more = self._source(join.this, scope, ctes, parent)
            placeholders += more
            scope.sources.append(source)
            joins.append((join, source, join.this))
        self._check_aliases(scope, node)
        outputs = self._outputs(node, checker)
        names = [o.alias for o in outputs]
        scope.aliases = tuple(names)
        where = self._clause(checker, node.args.get("where"), "where")
        if where is not None and any(a.find_ancestor(exp.Select) is None for a in where.find_all(exp.Alias)):
            raise error_at(QueryError, "WHERE cannot define names with AS", self.sql, where)
        bound_joins = [self._join(join, source, checker) for join, source, _ in joins]
        group = self._group(node, checker, names)
        having = self._clause(checker, node.args.get("having"), "having", names)
        qualify = self._clause(checker, node.args.get("qualify"), "qualify", names)
        order = self._order(node, outputs, checker)
        limit, offset = limit_clause(node, self.sql, self.tokens)
        distinct = node.args.get("distinct")
        if distinct is not None and distinct.args.get("on") is not None:
            raise error_at(ForbiddenQueryError, "DISTINCT ON is not supported; use GROUP BY, or "
                           "row_number() over (partition by …) with QUALIFY", self.sql, distinct)
        self._sample(node, scope)
        aggregated = group is not None or having is not None or any(
            a.find(*AGGREGATES) is not None and not _windowed_only(a) for a in outputs)
        bound = exp.Select(expressions=outputs)
        bound.set("from_", exp.From(this=self._placeholder(first)))
        if bound_joins:
            bound.set("joins", bound_joins)
        for key, value in (("where", exp.Where(this=where) if where is not None else None),
                           ("group", group), ("having", exp.Having(this=having) if having is not None else None),
                           ("qualify", exp.Qualify(this=qualify) if qualify is not None else None),
                           ("order", exp.Order(expressions=order) if order else None),
                           ("limit", exp.Limit(expression=exp.Literal.number(limit)) if limit is not None else None),
                           ("offset", exp.Offset(expression=exp.Literal.number(offset))
                            if offset is not None else None),
                           ("distinct", exp.Distinct() if distinct is not None else None),
                           ("with_", with_)):
            if value is not None:
                bound.set(key, value)
        windowed = any(o.find(exp.Window) is not None for o in outputs)
        self._pushdown(scope, where, joins, bound_joins)
        self._finish_sources(scope, bound, where, ctes, aggregated or distinct is not None or windowed or bool(order))
        metas = [self._output_meta(o) for o in outputs]
        group_keys: tuple[str, ...] = ()
        if group is not None and not group.args.get("all"):
            keys = [e.sql(dialect=DIALECT) for e in group.expressions]
            by_sql = {o.this.sql(dialect=DIALECT): o.alias for o in outputs}
            named = [by_sql.get(k) or (k.strip('"') if k.strip('"') in names else None) for k in keys]
            group_keys = tuple(n for n in named if n) if all(named) else ()
        elif group is not None:
            group_keys = tuple(o.alias for o in outputs if o.find(*AGGREGATES) is None)
        simple = (len(scope.sources) == 1 and isinstance(first, DatasetSource) and not aggregated
                  and distinct is None and not windowed and qualify is None and not bound.find(exp.Subquery))
        info = SelectInfo(outputs=outputs, metas=list(metas), where=where, order=order, limit=limit, offset=offset,
                          group_keys=group_keys, simple=simple, aggregated=aggregated)
        return bound, metas, info

    def _placeholder(self, source: Source) -> exp.Expression:
        return source.node  # type: ignore[attr-defined, no-any-return]

    def _check_aliases(self, scope: Scope, node: exp.Expression) -> None:
        seen: dict[str, Source] = {}
        for source in scope.sources:
            key = source.alias.lower()
            if key in seen:
                raise error_at(QueryError, f"{source.alias!r} names two tables of this query; give one an alias: "
                               f"… join {source.alias} as b …", self.sql, getattr(source, "origin_node", node))
            seen[key] = source

    def _output_meta(self, output: exp.Alias) -> ColumnMeta:
        meta = meta_of(output.this)
        if meta is None:
            return ColumnMeta(output.alias)
        return ColumnMeta(output.alias, meta.calendar, meta.iso, meta.key, meta.units, meta.value_range, meta.origin)

    def _subquery(self, node: exp.Expression, scope: Scope,
                  ctes: dict[str, _Cte]) -> tuple[exp.Expression, list[ColumnMeta]]:
        bound, metas, _ = self.query(node, scope, ctes)
        return bound, metas

    def _clause(self, checker: Checker, node: exp.Expression | None, clause: str,
                aliases: list[str] | tuple[str, ...] = ()) -> exp.Expression | None:
        if node is None:
            return None
        inner = node.this if isinstance(node, (exp.Where, exp.Having, exp.Qualify)) else node
        return checker.check(inner, clause, aliases)

    # -- FROM ------------------------------------------------------------------------------

    def _source(self, node: exp.Expression, scope: Scope, ctes: dict[str, _Cte],
                parent: Scope | None) -> tuple[Source, list[tuple[Source, exp.Expression]]]:
        """Return the source a FROM or JOIN item stands for; its ``node`` attribute is what DuckDB reads."""
        if isinstance(node, exp.Subquery):
            refuse_unknown_args(node, {"this", "alias"}, self.sql, self.tokens)
            alias = self._alias(node)
            self._subqueries += 1
            name = alias or f"subquery{self._subqueries}"
            bound, metas, _ = self.query(node.this, parent, ctes)
            source: Source = DerivedSource(name, metas)
            source.node = exp.Subquery(this=bound, alias=exp.TableAlias(this=exp.to_identifier(name, quoted=True)))  # type: ignore[attr-defined]
            return source, [(source, source.node)]  # type: ignore[attr-defined]
        if isinstance(node, (exp.Values, exp.Unnest, exp.Lateral)):
            what = {exp.Values: "VALUES", exp.Unnest: "UNNEST", exp.Lateral: "LATERAL"}[type(node)]
            raise error_at(ForbiddenQueryError, f"FROM must name datasets of the catalog (or CTEs, subqueries, "
                           f"matchup(…)), not {what}", self.sql, node)
        if not isinstance(node, exp.Table):
            raise error_at(ForbiddenQueryError, "FROM must name a dataset of the catalog", self.sql, node)
        if node.args.get("db") or node.args.get("catalog"):
            raise error_at(ForbiddenQueryError, "name the dataset alone, without a schema or database", self.sql, node)
        refuse_unknown_args(node, TABLE_ARGS, self.sql, self.tokens)
        alias = self._alias(node)
        target = node.this
        if isinstance(target, (exp.Anonymous, exp.Func)) and not isinstance(target, exp.Column):
            fname = (target.name if isinstance(target, exp.Anonymous) else target.sql_name()).lower()
            if fname == "matchup":
                return self._matchup(node, target, alias, scope, ctes, parent)
            if fname != "stride":
                raise error_at(ForbiddenQueryError, f"FROM {fname}(…) is not allowed: name a dataset, "
                               "stride(dataset, dim = k, …) or matchup(records, grid, …)", self.sql, target)
            return self._dataset_source(node, alias, ctes, stride=target)
        return self._dataset_source(node, alias, ctes)

    def _alias(self, node: exp.Expression) -> str | None:
        alias_node = node.args.get("alias")
        if alias_node is None:
            return None
        refuse_unknown_args(alias_node, {"this"}, self.sql, self.tokens)
        return str(alias_node.name)

    def _dataset_source(self, node: exp.Table, alias: str | None, ctes: dict[str, _Cte],
                        stride: exp.Expr | None = None) -> tuple[Source, list[tuple[Source, exp.Expression]]]:
        name_node = node.this
        strides: dict[str, int] = {}
        if stride is not None:
            args = list(stride.expressions)
            if not args or not isinstance(args[0], exp.Column):
                raise error_at(QueryError, "stride() needs the dataset first: stride(ccm3, lat = 2)", self.sql, stride)
            name_node = args[0].this
            strides = self._strides(args[1:])
        if not isinstance(name_node, exp.Identifier):
            raise error_at(ForbiddenQueryError, "FROM must name a dataset of the catalog", self.sql, name_node)
        name = name_node.name
        if name_node.quoted and any(ch in name for ch in "/\\.:") or name.startswith(("~", "/")):
            raise error_at(ForbiddenQueryError, f"{name!r} looks like a file path; FROM takes a dataset id from the "
                           "catalog (see `dstp ls`)", self.sql, name_node)
        if stride is None and name.lower() in ctes and not name_node.quoted or name in ctes:
            cte = ctes.get(name.lower()) or ctes[name]
            if node.args.get("sample") is not None:
                raise error_at(QueryError, "TABLESAMPLE applies to a dataset; sample it inside the CTE", self.sql,
                               node.args["sample"])
            source: Source = DerivedSource(alias or cte.name, cte.outputs, kind="cte")
            table = exp.Table(this=exp.to_identifier(cte.name, quoted=True))
            if alias is not None:
                table.set("alias", exp.TableAlias(this=exp.to_identifier(alias, quoted=True)))
            source.node = table  # type: ignore[attr-defined]
            return source, [(source, table)]
        dataset = self._dataset(name, name_node)
        ref = DatasetRef(len(self.refs), dataset, alias or dataset.id, node=node)
        self.refs.append(ref)
        for dim, step in strides.items():
            if dim not in dataset.dimensions:
                raise error_at(UnknownColumnError, f"stride on {dim!r}: {dataset.id} has no such dimension "
                               f"(dimensions: {', '.join(dataset.dimensions)})", self.sql,
                               next(a for a in stride.expressions[1:] if a.this.name == dim))  # type: ignore[union-attr]
            ref.strides[dim] = min(step, max(1, dataset.dimensions[dim].size))
        sample = node.args.get("sample")
        ref.sampling = sampling_clause(sample, self.sql, self.tokens)
        source = DatasetSource(ref)
        table = exp.Table(this=exp.to_identifier(ref.table, quoted=True),
                          alias=exp.TableAlias(this=exp.to_identifier(ref.alias, quoted=True)))
        source.node = table  # type: ignore[attr-defined]
        source.origin_node = node  # type: ignore[attr-defined]
        return source, [(source, table)]

    def _dataset(self, name: str, name_node: exp.Expression) -> Any:
        try:
            return self.catalog.resolve(name)
        except DatasetNotFoundError as exc:
            known = self.catalog.every_id()
            matches = [d for d in known if d.lower() == name.lower()]
            if len(matches) != 1 or name_node.quoted:  # type: ignore[attr-defined]
                line, col, token = place(name_node, self.sql)
                close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
                message = str(exc)
                if close:
                    message = f"no dataset {name!r} in this catalog; did you mean {close[0]}? (published: " \
                              + message.split("(published: ", 1)[-1]
                raise DatasetNotFoundError(message, sql=self.sql, line=line, column=col, token=token) from exc
            return self.catalog.resolve(matches[0])

    def _strides(self, args: list[exp.Expression]) -> dict[str, int]:
        strides: dict[str, int] = {}
        for arg in args:
            if not (isinstance(arg, exp.EQ) and isinstance(arg.this, exp.Column) and isinstance(arg.expression, exp.Literal)
                    and not arg.expression.is_string):
                raise error_at(QueryError, "stride() arguments look like: lat = 2", self.sql, arg)
            try:
                step = int(arg.expression.this)
            except ValueError as exc:
                raise error_at(QueryError, "a stride must be a whole number ≥ 1", self.sql, arg) from exc
            if step < 1 or str(step) != arg.expression.this:
                raise error_at(QueryError, "a stride must be a whole number ≥ 1", self.sql, arg)
            strides[arg.this.name] = step
        return strides

    def _matchup(self, node: exp.Table, call: exp.Expr, alias: str | None, scope: Scope,
                 ctes: dict[str, _Cte], parent: Scope | None) -> tuple[Source, list[tuple[Source, exp.Expression]]]:
        args = list(call.expressions)
        if len(args) < 2 or isinstance(args[0], exp.Kwarg) or isinstance(args[1], exp.Kwarg):
            raise error_at(QueryError, "matchup needs the records and the grid first: matchup(buoys, ccm3, "
                           "time => interval '1 day')", self.sql, call)
        if node.args.get("sample") is not None:
            raise error_at(QueryError, "TABLESAMPLE applies to a dataset; sample the records inside a CTE",
                           self.sql, node.args["sample"])
        left_node, right_node = args[0], args[1]
        left_alias = right_alias = None
        if isinstance(left_node, exp.Alias):  # matchup(buoys as b, …)
            left_node, left_alias = left_node.this, left_node.alias
        if isinstance(right_node, exp.Alias):
            right_node, right_alias = right_node.this, right_node.alias
        if isinstance(left_node, exp.Subquery):
            name = left_alias or (left_node.alias if left_node.args.get("alias") else "records")
            left, _ = self._source(exp.Subquery(this=left_node.this, alias=exp.TableAlias(
                this=exp.to_identifier(name))), scope, ctes, parent)
        elif isinstance(left_node, exp.Column) and isinstance(left_node.this, exp.Identifier) \
                and not left_node.args.get("table"):
            left, _ = self._dataset_source(exp.Table(this=left_node.this), left_alias, ctes)
        else:
            raise error_at(QueryError, "matchup's first argument is a dataset, a CTE or (select …)", self.sql,
                           left_node)
        if not (isinstance(right_node, exp.Column) and isinstance(right_node.this, exp.Identifier)):
            raise error_at(QueryError, "matchup's second argument is a gridded dataset", self.sql, right_node)
        right, _ = self._dataset_source(exp.Table(this=right_node.this), right_alias, {})
        assert isinstance(right, DatasetSource)
        if getattr(right.ref.dataset, "layout", None) is not None:
            raise error_at(QueryError, f"{right.ref.dataset.id} holds station or track records; the second side "
                           "of a matchup is a grid (the first side holds the records)", self.sql, right_node)
        right.ref.role = "right"
        if isinstance(left, DatasetSource):
            left.ref.role = "left"
        left_name, right_name = left.alias, right.alias
        if left_name.lower() == right_name.lower():
            raise error_at(QueryError, "a matchup's two sides need different names; wrap one in a CTE",
                           self.sql, call)
        name = alias or "matchup"
        spec = MatchupSpec(len(self.matchups), name, left, left_name, right.ref, right_name, node=call)
        parse_options(spec, args[2:], self.sql)
        self.matchups.append(spec)
        source = MatchupSource(name, left, right, left_name, right_name)
        source.spec = spec  # type: ignore[attr-defined]
        source.ctes = ctes  # type: ignore[attr-defined]
        source.node = exp.Table(this=exp.to_identifier(spec.left_table, quoted=True))  # type: ignore[attr-defined]
        return source, [(source, source.node)]  # type: ignore[attr-defined]

    # -- joins -----------------------------------------------------------------------------

    def _join(self, join: exp.Join, source: Source, checker: Checker) -> exp.Join:
        bound = exp.Join(this=self._placeholder(source))
        for key in ("side", "kind", "method"):
            if join.args.get(key):
                bound.set(key, join.args[key])
        on = join.args.get("on")
        kind = (join.args.get("kind") or "").upper()
        if on is None and (join.args.get("side") or kind in ("SEMI", "ANTI") or join.args.get("method")):
            raise error_at(QueryError, "this join needs a condition: … join b on a.time = b.time", self.sql, join)
        if on is not None:
            bound.set("on", checker.check(on, "on"))
        return bound

    # -- SELECT list -----------------------------------------------------------------------

    def _outputs(self, node: exp.Select, checker: Checker) -> list[exp.Alias]:
        outputs: list[exp.Alias] = []
        if not node.expressions:
            raise QuerySyntaxError("the query selects nothing; name columns after SELECT, or write select *")
        for item in node.expressions:
            if isinstance(item, exp.Star):
                outputs += expand_star(item, checker, None, self.sql, self.tokens)
            elif isinstance(item, exp.Column) and isinstance(item.this, exp.Star):
                refuse_unknown_args(item, {"this", "table"}, self.sql, self.tokens)
                table = item.args.get("table")
                outputs += expand_star(item.this, checker, table, self.sql, self.tokens)
            elif isinstance(item, exp.Alias):
                if not item.alias.strip():
                    raise error_at(QueryError, "an output column needs a name; write AS name", self.sql, item)
                outputs.append(_output(checker.check(item.this, "select"), item.alias))
            else:
                text = item.sql(dialect=DIALECT)
                checked = checker.check(item, "select")
                name = checked.name if isinstance(checked, exp.Column) else text
                if isinstance(checked, exp.Column) and checked.name.startswith(("l.", "r.")):
                    name = checked.name[2:]
                outputs.append(_output(checked, name))
        seen: set[str] = set()
        for out in outputs:
            if out.alias in seen:
                raise error_at(QueryError, f"column {out.alias!r} is selected twice; rename one with AS", self.sql,
                               out.this)
            seen.add(out.alias)
        return outputs

    # -- GROUP BY, ORDER BY, sampling ------------------------------------------------------

    def _group(self, node: exp.Select, checker: Checker, names: list[str]) -> exp.Group | None:
        group = node.args.get("group")
        if group is None:
            return None
        refuse_unknown_args(group, GROUP_ARGS, self.sql, self.tokens)
        if group.args.get("all"):
            return exp.Group(all=True)
        keys: list[exp.Expression] = []
        for key in group.expressions:
            if isinstance(key, (exp.Rollup, exp.Cube, exp.GroupingSets)):
                word = {exp.Rollup: "ROLLUP", exp.Cube: "CUBE", exp.GroupingSets: "GROUPING SETS"}[type(key)]
                raise error_at(ForbiddenQueryError, f"{word} is not supported in a dstp query; write one GROUP BY per "
                               "grouping, combined with UNION ALL", self.sql, key)
            if isinstance(key, exp.Literal) and not key.is_string:
                if not key.this.isdigit() or not 1 <= int(key.this) <= len(names):
                    raise error_at(QueryError, f"GROUP BY {snippet(key, 24, self.sql)}: give a column, or a position "
                                   f"from 1 to {len(names)} in the SELECT list", self.sql, key)
                keys.append(exp.column(names[int(key.this) - 1], quoted=True))
                continue
            keys.append(checker.check(key, "group", names))
        return exp.Group(expressions=keys)

    def _order(self, tree: exp.Select, outputs: list[exp.Alias], checker: Checker) -> list[exp.Ordered]:
        order_node = tree.args.get("order")
        if order_node is None:
            return []
        refuse_unknown_args(order_node, ORDER_ARGS, self.sql, self.tokens)
        names = [o.alias for o in outputs]
        order: list[exp.Ordered] = []
        for ordered in order_node.expressions:
            refuse_unknown_args(ordered, ORDERED_ARGS, self.sql, self.tokens)
            desc, nulls_first = bool(ordered.args.get("desc")), ordered.args.get("nulls_first")
            key = ordered.this
            if isinstance(key, exp.Var) and key.name.upper() == "ALL":  # ORDER BY ALL: every output, left to right
                order += [exp.Ordered(this=exp.column(n, quoted=True), desc=desc, nulls_first=nulls_first)
                          for n in names]
                continue
            place = literal_number(key)
            if place is not None:  # a position in the SELECT list
                if not math.isfinite(place) or place != int(place) or not 1 <= place <= len(names):
                    raise error_at(QueryError, f"ORDER BY {snippet(key, 24, self.sql)}: give a column, or a position "
                                   f"from 1 to {len(names)} in the SELECT list", self.sql, key)
                checked: exp.Expression = exp.column(names[int(place) - 1], quoted=True)
            elif not key.find(exp.Column) and not key.find(*AGGREGATES):
                raise error_at(QueryError, f"ORDER BY {snippet(key, 24, self.sql)} orders by a constant; give a "
                               f"column, or a position from 1 to {len(names)} in the SELECT list", self.sql, key)
            elif isinstance(key, exp.Column) and key.args.get("table") is None and \
                    any(key.name == n for n in names):
                checked = exp.column(key.name, quoted=True)  # an output first, as DuckDB orders
            else:
                checked = checker.check(key, "order", names)
            order.append(exp.Ordered(this=checked, desc=desc, nulls_first=nulls_first))
        return order

    def _sample(self, node: exp.Select, scope: Scope) -> None:
        sample = node.args.get("sample")
        if sample is None:
            return
        refs = scope.dataset_refs()
        if len(scope.sources) != 1 or len(refs) != 1:
            raise error_at(QueryError, "USING SAMPLE needs one dataset in FROM; sample a dataset with "
                           "<dataset> tablesample 1%", self.sql, sample)
        if refs[0].sampling is not None:
            raise error_at(QueryError, "sample once: use either TABLESAMPLE or USING SAMPLE", self.sql, sample)
        refs[0].sampling = sampling_clause(sample, self.sql, self.tokens)

    # -- after the clauses: pushdown, samples, matchups ------------------------------------

    def _pushdown(self, scope: Scope, where: exp.Expression | None,
                  joins: list[tuple[exp.Join, Source, exp.Expression]], bound_joins: list[exp.Join]) -> None:
        """Keep, with each dataset reference, the conjuncts that constrain it alone and may prune it."""
        by_alias = {s.alias.lower(): s for s in scope.sources}
        nullable: set[int] = set()
        no_push: set[int] = set()
        left_ids = [id(scope.sources[0])]
        for (join, source, _), _ in zip(joins, bound_joins):
            side = (join.args.get("side") or "").upper()
            if side in ("LEFT", "FULL"):
                nullable.add(id(source))
            if side in ("RIGHT", "FULL"):
                nullable.update(left_ids)
            if (join.args.get("method") or "").upper() == "ASOF":
                no_push.add(id(source))
            left_ids.append(id(source))

        def only_source(conj: exp.Expression) -> Source | None:
            if conj.find(exp.Subquery, exp.Exists, exp.Window) is not None or conj.find(*AGGREGATES) is not None:
                return None
            aliases = {c.table.lower() for c in conj.find_all(exp.Column)}
            if len(aliases) != 1 or "" in aliases:
                return None
            return by_alias.get(aliases.pop())

        def keep(source: Source | None, conj: exp.Expression, on_clause: bool) -> None:
            if source is None or id(source) in no_push or (id(source) in nullable and not on_clause):
                return
            if isinstance(source, DatasetSource):
                source.ref.pushdown.append(_unqualified(conj))
            elif isinstance(source, MatchupSource):
                self._matchup_conjunct(source, conj)

        for conj in _conjuncts(where):
            keep(only_source(conj), conj, False)
        for (join, source, _), bound in zip(joins, bound_joins):
            side = (join.args.get("side") or "").upper()
            kind = (join.args.get("kind") or "").upper()
            for conj in _conjuncts(bound.args.get("on")):
                target = only_source(conj)
                if target is source and side in ("", "LEFT") and kind != "ANTI":
                    keep(target, conj, True)
                elif target is not None and target is not source and not side and kind not in ("SEMI", "ANTI") \
                        and id(target) not in nullable:
                    keep(target, conj, False)
        self._implied(scope, where, bound_joins, nullable | no_push)

    def _implied(self, scope: Scope, where: exp.Expression | None, bound_joins: list[exp.Join],
                 excluded: set[int]) -> None:
        """Carry ranges across key equalities (a.lat = b.lat and a.lat between 30 and 40 prunes b too)."""
        by_alias = {s.alias.lower(): s for s in scope.sources if isinstance(s, DatasetSource)
                    and id(s) not in excluded}
        conjuncts = _conjuncts(where)
        for bound in bound_joins:
            if not bound.args.get("side") and not bound.args.get("method") and \
                    (bound.args.get("kind") or "").upper() not in ("SEMI", "ANTI"):
                conjuncts += _conjuncts(bound.args.get("on"))
        for conj in conjuncts:
            if not (isinstance(conj, exp.EQ) and isinstance(conj.this, exp.Column)
                    and isinstance(conj.expression, exp.Column)):
                continue
            a, b = by_alias.get(conj.this.table.lower()), by_alias.get(conj.expression.table.lower())
            if a is None or b is None or a is b:
                continue
            for src, dst, src_col, dst_col in ((a, b, conj.this.name, conj.expression.name),
                                               (b, a, conj.expression.name, conj.this.name)):
                dst.ref.equal_keys.append((src.ref, src_col, dst_col))
                for pushed in src.ref.pushdown:
                    columns = {c.name for c in pushed.find_all(exp.Column)}
                    if columns == {src_col} and isinstance(pushed, (exp.GT, exp.GTE, exp.LT, exp.LTE, exp.EQ,
                                                                    exp.Between, exp.In)):
                        copy = pushed.copy()
                        for column in copy.find_all(exp.Column):
                            column.set("this", exp.Identifier(this=dst_col, quoted=True))
                        dst.ref.implied.append(copy)

    def _matchup_conjunct(self, source: MatchupSource, conj: exp.Expression) -> None:
        """Route a conjunct on one side of a matchup: a filter of the left records, or a prune of the grid."""
        spec: MatchupSpec = source.spec  # type: ignore[attr-defined]
        names = {c.name for c in conj.find_all(exp.Column)}
        if all(n.startswith("l.") for n in names):
            copy = conj.copy()
            for column in copy.find_all(exp.Column):
                column.set("this", exp.Identifier(this=column.name[2:], quoted=True))
                column.set("table", exp.Identifier(this=source.left.alias, quoted=True))
            spec.left_filters = [*getattr(spec, "left_filters", []), copy]  # type: ignore[attr-defined]
        elif all(n.startswith("r.") for n in names):
            copy = _unqualified(conj)
            for column in copy.find_all(exp.Column):
                column.set("this", exp.Identifier(this=column.name[2:], quoted=True))
            spec.right_pushdown.append(copy)

    def _finish_sources(self, scope: Scope, select: exp.Select, where: exp.Expression | None,
                        ctes: dict[str, _Cte], ordered_otherwise: bool) -> None:
        """Check every dataset is read; rewrite row samples and matchups into what DuckDB runs."""
        for source in scope.sources:
            if isinstance(source, DatasetSource):
                ref = source.ref
                if not ref.used and not ref.whole:
                    star = ref.dataset.star_columns()
                    raise error_at(QueryError, f"the query reads no column of {ref.dataset.id}; select at least one "
                                   f"of its columns, e.g. select {star[-1] if star else '*'} from {ref.dataset.id}",
                                   self.sql, select.expressions[0] if ref.role == "scan" else ref.node)
                if ref.whole and not ref.used:  # count(*) alone: DuckDB needs a column to count the grid's rows by
                    star = ref.dataset.star_columns()
                    if star:
                        ref.used.add(star[0])
                if ref.sampling is not None and ref.sampling.rows is not None:
                    self._rows_sample(ref, source, scope, select, where, ordered_otherwise)
            elif isinstance(source, MatchupSource):
                self._finish_matchup(source, ctes)

    def _rows_sample(self, ref: DatasetRef, source: DatasetSource, scope: Scope, select: exp.Select,
                     where: exp.Expression | None, ordered_otherwise: bool) -> None:
        if len(scope.sources) != 1:
            raise error_at(QueryError, "tablesample <n> rows needs the dataset alone in FROM (it picks n of the "
                           "matching records); in a join sample by percentage: tablesample 1%", self.sql, ref.node)
        if ref.remote:
            raise error_at(QueryError, "a remote dataset samples by percentage only: tablesample 1%", self.sql,
                           ref.node)
        assert ref.sampling is not None and ref.sampling.rows is not None
        alias = exp.to_identifier(ref.alias, quoted=True)
        picked = exp.select(exp.Star()).from_(exp.Table(this=exp.to_identifier(ref.table, quoted=True),
                                                        alias=exp.TableAlias(this=alias.copy())))
        if where is not None:
            picked = picked.where(where.copy())
        picked = picked.order_by(exp.Column(this=exp.to_identifier(SAMPLE_KEY, quoted=True),
                                            table=alias.copy())).limit(ref.sampling.rows)
        select.set("from_", exp.From(this=exp.Subquery(this=picked, alias=exp.TableAlias(this=alias.copy()))))
        if not ordered_otherwise:
            select.set("order", exp.Order(expressions=[exp.Ordered(this=exp.Column(
                this=exp.to_identifier(ROWID, quoted=True), table=alias.copy()))]))

    def _finish_matchup(self, source: MatchupSource, ctes: dict[str, _Cte]) -> None:
        spec: MatchupSpec = source.spec  # type: ignore[attr-defined]
        left = source.left
        metas = {c: left.meta(c) for c in left.column_names()}
        choose_keys(spec, metas, self.sql)
        for key in spec.keys:
            left.use(key.left)
            source.right.use(key.right)
        used_left = [c for c in left.column_names() if c in self._used(left)]
        spec.left_columns = used_left
        cols = [exp.alias_(exp.Column(this=exp.to_identifier(c, quoted=True),
                                      table=exp.to_identifier(left.alias, quoted=True)),
                           exp.to_identifier(c, quoted=True)) for c in used_left]
        left_query = exp.select(*cols).from_(left.node.copy())  # type: ignore[attr-defined]
        filters = getattr(spec, "left_filters", [])
        for condition in filters:
            left_query = left_query.where(condition)
        if isinstance(left, DerivedSource) and left.kind == "cte":
            left_query.set("with_", exp.With(expressions=[
                exp.CTE(this=c.query.copy(), alias=exp.TableAlias(this=exp.to_identifier(c.name, quoted=True)))
                for c in dict.fromkeys(ctes.values())]))
        spec.left_sql = left_query.sql(dialect=DIALECT, identify=True)
        if isinstance(left, DatasetSource):
            left.ref.pushdown.extend(_unqualified(f) for f in filters)
        # What the outer query reads: left columns as "l.<c>", right columns as "r.<c>".
        right_used = [c for c in source.right.ref.dataset.column_names() if c in source.right.ref.used]
        left_alias, right_alias = exp.to_identifier("l", quoted=True), exp.to_identifier("r", quoted=True)
        projection = [exp.alias_(exp.Column(this=exp.to_identifier(c, quoted=True), table=left_alias.copy()),
                                 exp.to_identifier(f"l.{c}", quoted=True)) for c in used_left]
        projection += [exp.alias_(exp.Column(this=exp.to_identifier(c, quoted=True), table=right_alias.copy()),
                                  exp.to_identifier(f"r.{c}", quoted=True)) for c in right_used]
        on: exp.Expression | None = None
        for key in spec.keys:
            column = index_column(key.dimension)
            condition = exp.EQ(this=exp.Column(this=exp.to_identifier(column, quoted=True), table=left_alias.copy()),
                               expression=exp.Column(this=exp.to_identifier(column, quoted=True),
                                                     table=right_alias.copy()))
            on = condition if on is None else exp.And(this=on, expression=condition)
        joined = exp.select(*projection).from_(exp.Table(this=exp.to_identifier(spec.left_table, quoted=True),
                                                         alias=exp.TableAlias(this=left_alias.copy())))
        joined = joined.join(exp.Table(this=exp.to_identifier(spec.right_table, quoted=True),
                                       alias=exp.TableAlias(this=right_alias.copy())), on=on, join_type="left")
        placeholder: exp.Expression = source.node  # type: ignore[attr-defined]
        placeholder.replace(exp.Subquery(this=joined, alias=exp.TableAlias(
            this=exp.to_identifier(source.alias, quoted=True))))

    def _used(self, source: Source) -> set[str]:
        if isinstance(source, DatasetSource):
            return source.ref.used
        return getattr(source, "used", set(source.column_names()))


def _windowed_only(node: exp.Expression) -> bool:
    """Return whether every aggregate in ``node`` sits under a window (a window function, not a reduction)."""
    return all(isinstance(agg.parent, exp.Window) for agg in node.find_all(*AGGREGATES))

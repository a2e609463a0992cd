"""Reductions as partial aggregates: each worker reduces its piece, the coordinator combines the pieces.

A GROUP BY (or a global aggregate) over one local dataset is split when every output is a group key
or one of ``count``, ``sum``, ``min``, ``max``, ``avg`` (no DISTINCT, no FILTER) and nothing else
needs the records: no HAVING, no window, no subquery, no sampling. From the DuckDB SQL the
coordinator would run (``plan.sql``) two statements are made:

* the **partial** one, run by each worker over its piece of the hyperslab (the same pieces as a
  select-where, :func:`~.partitions.plan_partitions`): the group keys as ``__k0, __k1, …`` and, per
  aggregate, what combines — ``count(x)``, ``sum(x)``, ``min(x)``, ``max(x)``, and for ``avg(x)``
  both ``sum(x)`` and ``count(x)`` — grouped by the same keys;
* the **combine** one, run by the coordinator over the pieces' rows: ``sum`` of the counts (as
  BIGINT, count's type), ``sum`` of the sums, ``min`` of the minima, ``max`` of the maxima,
  ``sum(sums) / sum(counts)`` for the mean — grouped by the keys, then the query's ORDER BY, LIMIT
  and OFFSET.

With many pieces they meet in a tree (Dask's tree reduction): a **merge** statement — partial rows in,
partial rows out (``sum`` of counts and sums, ``min``/``max`` of minima/maxima, grouped by the keys,
each column cast back to its partial type) — runs on the workers over ``cluster_reduce_fan_in`` pieces
at a time until that few remain for the coordinator's combine.

The combined result must have exactly the single server's schema, and a merge exactly the partial
schema (checked on empty tables before anything runs); otherwise, or for anything else, the coordinator reduces the records itself. Sums of
floating-point values are added in another order than on one server, as DuckDB's own parallel
aggregation does: equal to the last few bits, not bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import sqlglot
from sqlglot import exp

from dstp.errors import DstpError
from dstp.query.execute import PARTIALS, PreparedQuery, sql_schema
from dstp.settings import Settings

__all__ = ["SplitReduction", "split_reduction"]

_ALLOWED = {"expressions", "from_", "where", "group", "order", "limit", "offset"}


@dataclass(frozen=True, slots=True)
class SplitReduction:
    """The two statements of a split reduction, and the partial rows' schema."""

    partial_sql: str
    combine_sql: str
    partial_schema: pa.Schema
    #: Partial rows in, partial rows out (a tree's inner node); "" when it would not keep the partial schema.
    merge_sql: str = ""


def _bare(node: exp.Expression) -> exp.Expression:
    while isinstance(node, (exp.Paren, exp.Alias)):
        node = node.this
    return node


def _aggregate(node: exp.Expression) -> exp.AggFunc | None:
    """Return ``node`` as a splittable aggregate call, None if it is no aggregate; raise ValueError if it is
    one that cannot be split."""
    node = _bare(node)
    if not isinstance(node, exp.AggFunc):
        if node.find(exp.AggFunc) is not None:
            raise ValueError("an aggregate inside an expression")
        return None
    if type(node) not in (exp.Count, exp.Sum, exp.Min, exp.Max, exp.Avg):
        raise ValueError(f"{node.key} cannot be combined from pieces")
    arg = node.this
    if isinstance(arg, exp.Distinct) or node.args.get("distinct") or any(
            isinstance(a, exp.Filter) for a in node.args.values()):
        raise ValueError("DISTINCT or FILTER inside an aggregate")
    if arg is not None and arg.find(exp.AggFunc) is not None:
        raise ValueError("an aggregate of an aggregate")
    if any(v not in (None, [], False) for k, v in node.args.items() if k not in ("this", "big_int")):
        raise ValueError("an aggregate with more than one argument")
    return node


def _q(name: str) -> exp.Column:
    return exp.column(name, quoted=True)


def split_reduction(prepared: PreparedQuery, settings: Settings) -> SplitReduction | str:
    """Return the split statements, or why this query is reduced on the coordinator instead."""
    q, plan = prepared.query, prepared.plan
    if not q.aggregated:
        return "it does not reduce records"
    if len(plan.scans) != 1 or q.matchups or plan.scans[0].ref.remote:
        return "it reads more than one dataset, or one on another server"
    scan = plan.scans[0]
    if q.sampling is not None or scan.ref.sampling is not None:
        return "it samples records"
    h = scan.hyperslab
    if not h.dims or len(h.ranges[0]) < 2 or (h.strips and h.dims[0] in h.strip_dims):
        return "its grid has no outer dimension to cut"
    try:
        tree = sqlglot.parse_one(plan.sql, read="duckdb")
    except sqlglot.errors.ParseError:
        return "its SQL could not be split"
    if not isinstance(tree, exp.Select) or set(k for k, v in tree.args.items() if v) - _ALLOWED:
        return "it has HAVING, DISTINCT, a CTE or another clause that needs every record"
    source = tree.args["from_"].this
    if not isinstance(source, exp.Table) or source.name != scan.table or tree.args.get("joins"):
        return "it joins"
    if any(tree.find(t) is not None for t in (exp.Window, exp.Subquery)) or any(
            isinstance(n, exp.Select) and n is not tree for n in tree.find_all(exp.Select)):
        return "it has a window or a subquery"
    try:
        return _split(tree, prepared, settings, set(scan.columns))
    except ValueError as exc:
        return str(exc)


def _split(tree: exp.Select, prepared: PreparedQuery, settings: Settings, columns: set[str]) -> SplitReduction:
    items = list(tree.expressions)
    aliases = {item.alias: _bare(item) for item in items if isinstance(item, exp.Alias)}
    # The GROUP BY keys as expressions (a position or an alias stands for its output's expression).
    keys: list[exp.Expression] = []
    group = tree.args.get("group")
    for key in (group.expressions if group is not None else []):
        node = _bare(key)
        if isinstance(node, exp.Literal) and not node.is_string:
            position = int(node.this)
            node = _bare(items[position - 1])
        elif isinstance(node, exp.Column) and not node.table:
            same = isinstance(aliases.get(node.name), exp.Column) and aliases[node.name].name == node.name
            if node.name in columns and node.name in aliases and not same:
                raise ValueError(f"GROUP BY {node.name!r} names both a column and an output")
            if same:
                node = aliases[node.name]
            elif node.name not in columns:
                if node.name not in aliases:
                    raise ValueError(f"GROUP BY {node.name!r} is neither a column nor an output")
                node = aliases[node.name]
        if node.find(exp.AggFunc) is not None:
            raise ValueError("GROUP BY an aggregate")
        keys.append(node)
    partial: list[Any] = [exp.alias_(k.copy(), f"__k{i}", quoted=True) for i, k in enumerate(keys)]
    outputs: list[Any] = []
    merges: dict[str, type[exp.AggFunc]] = {}  # partial column: the aggregate that merges it
    for item in items:
        name = item.alias_or_name
        agg = _aggregate(item)
        node = _bare(item)
        if agg is None:
            matches = [i for i, k in enumerate(keys) if k == node]
            if not matches:
                raise ValueError(f"output {name!r} is neither a group key nor an aggregate")
            outputs.append(exp.alias_(_q(f"__k{matches[0]}"), name, quoted=True))
            continue
        j = len(partial)
        arg = agg.this.copy() if agg.this is not None else exp.Star()
        merges[f"__p{j}"] = type(agg) if isinstance(agg, (exp.Min, exp.Max)) else exp.Sum  # how pieces merge
        if isinstance(agg, exp.Avg):
            merges[f"__p{j}c"] = exp.Sum
        if isinstance(agg, exp.Count):
            partial.append(exp.alias_(exp.Count(this=arg), f"__p{j}", quoted=True))
            combined: Any = exp.Cast(this=exp.Sum(this=_q(f"__p{j}")), to=exp.DataType.build("BIGINT"))
        elif isinstance(agg, exp.Avg):
            partial.append(exp.alias_(exp.Sum(this=arg), f"__p{j}", quoted=True))
            partial.append(exp.alias_(exp.Count(this=arg.copy()), f"__p{j}c", quoted=True))
            combined = exp.Div(this=exp.Sum(this=_q(f"__p{j}")),
                               expression=exp.Nullif(this=exp.Sum(this=_q(f"__p{j}c")),
                                                     expression=exp.Literal.number(0)))
        else:
            partial.append(exp.alias_(type(agg)(this=arg), f"__p{j}", quoted=True))
            combined = type(agg)(this=_q(f"__p{j}"))
        outputs.append(exp.alias_(combined, name, quoted=True))
    names = [item.alias_or_name for item in items]
    order = []
    order_clause = tree.args.get("order")
    for ordered in (order_clause.expressions if order_clause is not None else []):
        node = _bare(ordered.this)
        if isinstance(node, exp.Literal) and not node.is_string:
            name = names[int(node.this) - 1]
        elif isinstance(node, exp.Column) and not node.table and node.name in names:
            name = node.name
        else:
            found = [names[i] for i, item in enumerate(items) if _bare(item) == node]
            if not found:
                raise ValueError("it orders by an expression that is not an output")
            name = found[0]
        key = ordered.copy()
        key.set("this", _q(name))
        order.append(key)
    part = exp.select(*partial).from_(tree.args["from_"].copy())
    if tree.args.get("where") is not None:
        part = part.where(tree.args["where"].this.copy())
    if keys:
        part = part.group_by(*[k.copy() for k in keys])
    comb = exp.select(*outputs).from_(exp.to_table(PARTIALS))
    if keys:
        comb = comb.group_by(*[_q(f"__k{i}") for i in range(len(keys))])
    if order:
        comb = comb.order_by(*order)
    for clause in ("limit", "offset"):
        if tree.args.get(clause) is not None:
            comb.set(clause, tree.args[clause].copy())
    partial_sql, combine_sql = part.sql(dialect="duckdb"), comb.sql(dialect="duckdb")
    try:
        partial_schema = sql_schema(prepared.plan, settings, partial_sql)
        combined_schema = sql_schema(prepared.plan, settings, combine_sql, {PARTIALS: partial_schema})
    except DstpError as exc:
        raise ValueError(f"its split statements do not bind ({exc.message})") from exc
    want = prepared.schema
    if combined_schema.names != want.names or combined_schema.types != want.types:
        raise ValueError("the combined result's types would not be the single server's")
    return SplitReduction(partial_sql, combine_sql, partial_schema,
                          _merge_sql(prepared, settings, partial_schema, len(keys), merges))


def _merge_sql(prepared: PreparedQuery, settings: Settings, schema: pa.Schema, nkeys: int,
               merges: dict[str, type[exp.AggFunc]]) -> str:
    """Return the statement that merges partial rows into partial rows of the same schema ("" if none)."""
    items: list[Any] = []
    for field in schema:
        column = _q(field.name)
        if field.name not in merges:  # a group key
            items.append(column)
            continue
        merged: Any = merges[field.name](this=column)
        if merges[field.name] is exp.Sum and pa.types.is_int64(field.type):  # a count: sum() widens it
            merged = exp.Cast(this=merged, to=exp.DataType.build("BIGINT"))
        items.append(exp.alias_(merged, field.name, quoted=True))
    merge = exp.select(*items).from_(exp.to_table(PARTIALS))
    if nkeys:
        merge = merge.group_by(*[_q(f"__k{i}") for i in range(nkeys)])
    sql = merge.sql(dialect="duckdb")
    try:
        merged_schema = sql_schema(prepared.plan, settings, sql, {PARTIALS: schema})
    except (DstpError, ValueError):
        return ""
    return sql if merged_schema.equals(schema) else ""

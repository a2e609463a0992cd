"""Parsing and validating a query: user text in, a checked sqlglot tree out.

dstp accepts one SQL-like statement::

    select <columns | expressions | * [exclude (…)] [replace (… as c)] [rename (c as …)]>
      from <dataset [as alias] | stride(dataset, dim = k, ...)>
      [tablesample <p>% | tablesample <n> rows [repeatable (<seed>)]]
      [where <predicate>] [order by <expr> [asc|desc], … | all] [limit <n> | all] [offset <m>]

The text is read by :mod:`dstp.query._text` (sqlglot, DuckDB dialect) and every
node of the tree is checked against a whitelist: only a SELECT, only a catalog dataset, only its
columns, only the operators and functions listed in ``ALLOWED_FUNCTIONS``
(:mod:`dstp.query._expressions`).
Every clause the validator rebuilds (SELECT, FROM, the table, ``*``, LIMIT,
ORDER BY, TABLESAMPLE) names the sqlglot arguments it honours, and any other
argument sqlglot fills in is refused, so a clause sqlglot learns to parse can
never be dropped silently. The SQL that DuckDB later runs is generated from
this validated tree; the user's text never reaches DuckDB. Every error points
at the offending token, and no message carries a library's internals.

Size limits keep every later stage away from its own limits: parentheses nest
at most ``MAX_NESTING`` deep (sqlglot's parser recurses per level), an
expression tree is at most ``MAX_EXPRESSION_DEPTH`` deep (DuckDB stops at
1000), whole numbers fit in 64 bits, LIMIT and OFFSET are at most
``MAX_ROW_COUNT``. Long AND/OR chains are rebalanced, which changes nothing
they mean but keeps them shallow.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp
from sqlglot.tokens import Token

from dstp.catalog.dataset import GriddedDataset
from dstp.catalog.registry import Catalog
from dstp.errors import DatasetNotFoundError, ForbiddenQueryError, QueryError, QuerySyntaxError, UnknownColumnError
from dstp.query._expressions import (
    ALLOWED_FUNCTIONS,
    INT64_MAX,
    MAX_EXPRESSION_DEPTH,
    Validator,
    check_depth,
    check_integers,
    rebalance,
)
from dstp.query._text import DIALECT, MAX_NESTING, TOO_DEEP, error_at, position, read_select, snippet

__all__ = [
    "ALLOWED_FUNCTIONS",
    "DIALECT",
    "MAX_EXPRESSION_DEPTH",
    "MAX_NESTING",
    "MAX_ROW_COUNT",
    "Sampling",
    "ValidatedQuery",
    "validate_query",
]

MAX_SAMPLE_ROWS = 10_000_000
#: Largest LIMIT or OFFSET accepted (far beyond any dataset, well inside a 64-bit integer).
MAX_ROW_COUNT = 10**18

# The arguments of each clause node the validator reads; any other argument sqlglot fills in is refused.
_SELECT_ARGS = {"expressions", "from_", "where", "order", "limit", "offset", "sample"}
_TABLE_ARGS = {"this", "alias", "sample"}
_STAR_ARGS = {"except_", "replace", "rename"}
_LIMIT_ARGS = {"expression", "limit_options"}
_FETCH_ARGS = {"direction", "count", "limit_options"}
_OFFSET_ARGS = {"expression"}
_ORDER_ARGS = {"expressions"}
_ORDERED_ARGS = {"this", "desc", "nulls_first"}
_SAMPLE_ARGS = {"method", "percent", "size", "seed"}

# What a refused argument is called in a message, and what to do instead.
_CLAUSES: dict[str, tuple[str, str]] = {
    "group": ("GROUP BY", "dstp returns records; aggregate them in your client"),
    "having": ("HAVING", "dstp returns records; aggregate them in your client"),
    "distinct": ("DISTINCT", "dstp returns every matching record; remove duplicates in your client"),
    "with_": ("WITH", "write the query on the dataset itself"),
    "windows": ("WINDOW", "window functions are not supported"),
    "qualify": ("QUALIFY", "filter with WHERE"),
    "into": ("SELECT INTO", "queries cannot create tables"),
    "joins": ("JOIN", "query one dataset at a time"),
    "laterals": ("LATERAL", "query one dataset at a time"),
    "pivots": ("PIVOT/UNPIVOT", "dstp returns records; reshape them in your client"),
    "when": ("AT (VERSION => …) / time travel", "a dataset has one version; query it without AT"),
    "version": ("FOR SYSTEM_TIME / time travel", "a dataset has one version; query it without it"),
    "system_time": ("FOR SYSTEM_TIME / time travel", "a dataset has one version; query it without it"),
    "changes": ("CHANGES", "a dataset has one version"),
    "hints": ("table hints", "remove them"),
    "partition": ("PARTITION", "name the dataset alone"),
    "only": ("ONLY", "name the dataset alone"),
    "ordinality": ("WITH ORDINALITY", "name the dataset alone"),
    "rows_from": ("ROWS FROM", "name the dataset alone"),
    "sort": ("SORT BY", "use ORDER BY"),
    "cluster": ("CLUSTER BY", "use ORDER BY"),
    "distribute": ("DISTRIBUTE BY", "use ORDER BY"),
    "prewhere": ("PREWHERE", "use WHERE"),
    "connect": ("CONNECT BY", "query the records with WHERE"),
    "locks": ("FOR UPDATE / locks", "queries only read"),
    "settings": ("SETTINGS", "the server's settings are fixed"),
    "options": ("OPTION (…)", "remove it"),
    "ilike": ("* ILIKE / * LIKE", "name the columns, or write * EXCLUDE (column, …)"),
    "with_fill": ("WITH FILL", "dstp returns the records that exist"),
    "siblings": ("ORDER SIBLINGS BY", "use ORDER BY"),
    "percent": ("LIMIT … PERCENT", "for a share of the records write tablesample 10%"),
    "with_ties": ("WITH TIES", "write LIMIT n, with ORDER BY on enough columns to break ties"),
    "limit.expressions": ("LIMIT … BY", "write LIMIT n"),
    "limit.offset": ("this form of OFFSET", "write LIMIT n OFFSET m"),
    "offset.expressions": ("this form of OFFSET", "write LIMIT n OFFSET m"),
    "tablesample.rows": ("this form of TABLESAMPLE", "write tablesample 10% or tablesample 1000 rows"),
    "tablesample.expressions": ("this form of TABLESAMPLE", "write tablesample 10% or tablesample 1000 rows"),
    "columns": ("column aliases on the dataset", "rename output columns with AS in the SELECT list"),
    "bucket_numerator": ("bucket sampling", "use tablesample <p>% or <n> rows"),
}


@dataclass(frozen=True, slots=True)
class Sampling:
    """Server-side random sampling of the matching records."""

    seed: int
    percent: float | None = None
    rows: int | None = None

    def describe(self) -> str:
        size = f"{self.percent:g}%" if self.percent is not None else f"{self.rows} rows"
        return f"tablesample {size} repeatable ({self.seed})"


@dataclass(frozen=True, slots=True)
class ValidatedQuery:
    """A query that passed validation, bound to its dataset."""

    sql: str
    dataset: GriddedDataset
    #: Output expressions, each an exp.Alias naming the output column.
    outputs: tuple[exp.Alias, ...]
    where: exp.Expression | None
    order: tuple[exp.Ordered, ...]
    limit: int | None
    offset: int | None
    sampling: Sampling | None
    strides: dict[str, int] = field(default_factory=dict)
    #: Every dataset column the query reads, in dataset order.
    columns: tuple[str, ...] = ()

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(o.alias for o in self.outputs)

    @property
    def dataset_ids(self) -> tuple[str, ...]:
        """Return the ids of every catalog dataset the query reads (access checks go through this)."""
        return (self.dataset.id,)


def _empty(value: Any) -> bool:
    if value is None or value is False or (isinstance(value, list) and not value):
        return True
    # LIMIT carries LimitOptions(percent=False, rows=False, with_ties=False) when no option is given.
    return isinstance(value, exp.LimitOptions) and not any(value.args.values())


def _refuse_unknown_args(node: exp.Expr, understood: set[str], sql: str, tokens: list[Token]) -> None:
    """Raise for any argument of ``node`` the validator does not honour."""
    for key, value in node.args.items():
        if key in understood or _empty(value):
            continue
        label, hint = _CLAUSES.get(f"{node.key}.{key}") or _CLAUSES.get(key) \
            or (key.rstrip("_").replace("_", " ").upper(), "")
        first = value[0] if isinstance(value, list) else value
        at = _keyword(tokens, label) or (first if isinstance(first, exp.Expr) else node)
        message = f"{label} is not supported in a dstp query"
        raise error_at(ForbiddenQueryError, f"{message}; {hint}" if hint else message, sql, at)


def _keyword(tokens: list[Token], label: str) -> Token | None:
    """Return the first token spelling the first word of ``label`` (for a caret under a clause)."""
    word = re.split(r"[\s/(…]", label.strip("* "), maxsplit=1)[0].lower()
    return next((t for t in tokens if t.text.lower() == word), None)


# -- FROM ------------------------------------------------------------------------------------

def _resolve_table(
    tree: exp.Select, sql: str, tokens: list[Token], catalog: Catalog
) -> tuple[GriddedDataset, exp.Table, dict[str, int], str | None]:
    """Return (dataset, table node, strides, alias) of the FROM clause."""
    from_ = tree.args.get("from_")
    if from_ is None:
        raise QuerySyntaxError("the query has no FROM clause; write: select … from <dataset>")
    _refuse_unknown_args(from_, {"this"}, sql, tokens)
    table = from_.this
    if not isinstance(table, exp.Table):
        what = "VALUES" if isinstance(table, exp.Values) else "a subquery"
        raise error_at(ForbiddenQueryError, f"FROM must name one dataset of the catalog, not {what}", sql, table)
    if table.args.get("db") or table.args.get("catalog"):
        raise error_at(ForbiddenQueryError, "name the dataset alone, without a schema or database", sql, table)
    joins = tree.args.get("joins") or table.args.get("joins")
    if joins:
        raise error_at(ForbiddenQueryError, "joins are not supported; query one dataset at a time "
                       "(FROM names one dataset)", sql, joins[0])
    _refuse_unknown_args(table, _TABLE_ARGS, sql, tokens)
    alias: str | None = None
    alias_node = table.args.get("alias")
    if alias_node is not None:
        _refuse_unknown_args(alias_node, {"this"}, sql, tokens)
        alias = alias_node.name
    strides: dict[str, int] = {}
    target: exp.Expression = table.this
    if isinstance(target, (exp.Anonymous, exp.Func)) and not isinstance(target, exp.Column):
        fname = (target.name if isinstance(target, exp.Anonymous) else target.sql_name()).lower()
        if fname != "stride":
            raise error_at(
                ForbiddenQueryError,
                f"FROM {fname}(…) is not allowed: name a dataset, or stride(dataset, dim = k, …)",
                sql,
                target,
            )
        args = list(target.expressions)
        if not args or not isinstance(args[0], exp.Column):
            raise error_at(QueryError, "stride() needs the dataset first: stride(ccm3, lat = 2)", sql, target)
        name_node: exp.Expression = args[0].this
        for arg in args[1:]:
            if not (isinstance(arg, exp.EQ) and isinstance(arg.this, exp.Column) and isinstance(arg.expression, exp.Literal)
                    and not arg.expression.is_string):
                raise error_at(QueryError, "stride() arguments look like: lat = 2", sql, arg)
            try:
                step = int(arg.expression.this)
            except ValueError:
                raise error_at(QueryError, "a stride must be a whole number ≥ 1", sql, arg) from None
            if step < 1 or str(step) != arg.expression.this:
                raise error_at(QueryError, "a stride must be a whole number ≥ 1", sql, arg)
            strides[arg.this.name] = step
    else:
        name_node = target
    if not isinstance(name_node, exp.Identifier):
        raise error_at(ForbiddenQueryError, "FROM must name a dataset of the catalog", sql, name_node)
    name = name_node.name
    if name_node.quoted and any(ch in name for ch in "/\\.:") or name.startswith(("~", "/")):
        raise error_at(
            ForbiddenQueryError,
            f"{name!r} looks like a file path; FROM takes a dataset id from the catalog (see `dstp ls`)",
            sql,
            name_node,
        )
    try:
        dataset = catalog.get(name)
    except DatasetNotFoundError as exc:
        matches = [d for d in catalog if d.id.lower() == name.lower()]
        if len(matches) != 1 or name_node.quoted:
            line, col, _ = position(name_node)
            raise DatasetNotFoundError(f"{exc} (line {line}, column {col})" if line else str(exc)) from None
        dataset = matches[0]
    for dim, step in strides.items():
        if dim not in dataset.dimensions:
            raise error_at(
                UnknownColumnError,
                f"stride on {dim!r}: {dataset.id} has no such dimension (dimensions: {', '.join(dataset.dimensions)})",
                sql,
                next(a for a in table.this.expressions[1:] if a.this.name == dim),
            )
        # A step beyond the dimension keeps only its first point, as the dimension's size does.
        strides[dim] = min(step, max(1, dataset.dimensions[dim].size))
    return dataset, table, strides, alias


def _sampling(tree: exp.Select, table: exp.Table, sql: str, tokens: list[Token]) -> Sampling | None:
    if table.args.get("sample") is not None and tree.args.get("sample") is not None:
        raise error_at(QueryError, "sample once: use either TABLESAMPLE or USING SAMPLE", sql, tree.args["sample"])
    sample = table.args.get("sample") or tree.args.get("sample")
    if sample is None:
        return None
    for part in ("bucket_numerator", "bucket_denominator", "bucket_field"):
        if sample.args.get(part) is not None:
            raise error_at(QueryError, "bucket sampling is not supported; use tablesample <p>% or <n> rows", sql, sample)
    _refuse_unknown_args(sample, _SAMPLE_ARGS, sql, tokens)
    percent, size, seed = sample.args.get("percent"), sample.args.get("size"), sample.args.get("seed")
    method = sample.args.get("method")
    if isinstance(seed, exp.Expression):
        seed_value = _int_literal(seed, sql, "seed")
        if not 0 <= seed_value <= INT64_MAX:
            raise error_at(QueryError, f"a sample seed is a whole number from 0 to {INT64_MAX}", sql, seed)
    else:
        seed_value = random.SystemRandom().randrange(2**31)
    if method is not None and method.name.upper() == "BERNOULLI" and percent is None and size is not None:
        percent, size = size, None  # bernoulli(1) means 1 percent
    if percent is not None:
        value = _number(percent, sql, "sample percentage")
        if not 0 <= value <= 100:
            raise error_at(QueryError, "a sample percentage is between 0 and 100", sql, percent)
        return Sampling(seed=seed_value, percent=value)
    if size is not None:
        rows = _number(size, sql, "sample size")
        if not 0 <= rows <= MAX_SAMPLE_ROWS:
            raise error_at(QueryError, f"a sample size is between 0 and {MAX_SAMPLE_ROWS} rows", sql, size)
        return Sampling(seed=seed_value, rows=_int_literal(size, sql, "sample size"))
    raise error_at(QueryError, "say how much to sample: tablesample 1% or tablesample 1000 rows", sql, sample)


def _number(node: exp.Expression, sql: str, what: str) -> float:
    if isinstance(node, exp.Literal) and not node.is_string:
        value = float(node.this)
    elif isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string:
        value = -float(node.this.this)
    else:
        raise error_at(QueryError, f"the {what} must be a number", sql, node)
    if not math.isfinite(value):
        raise error_at(QueryError, f"the {what} must be a finite number", sql, node)
    return value


def _int_literal(node: exp.Expression, sql: str, what: str) -> int:
    literal = node.this if isinstance(node, exp.Neg) else node
    digits = literal.this.replace("_", "") if isinstance(literal, exp.Literal) and not literal.is_string else ""
    if digits.isdigit():  # exactly, not through a float
        return -int(digits) if literal is not node else int(digits)
    value = _number(node, sql, what)
    if value != int(value):
        raise error_at(QueryError, f"the {what} must be a whole number", sql, node)
    return int(value)


def _row_count(node: exp.Expression, sql: str, clause: str, tokens: list[Token]) -> int:
    """Return the number of a LIMIT/OFFSET/FETCH clause: a whole number from 0 to MAX_ROW_COUNT."""
    if not (isinstance(node, exp.Literal) and not node.is_string) and \
            not (isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal)):
        # a node without a position of its own (NULL, ALL…) is pointed at through its keyword
        at = node if any(n.meta for n in node.walk()) else _keyword(tokens, clause) or node
        raise error_at(QueryError, f"{clause} takes a whole number of records, e.g. {clause} 100", sql, at)
    value = _number(node, sql, clause.lower())
    if value < 0:
        raise error_at(QueryError, f"{clause} must be 0 or more", sql, node)
    if value > MAX_ROW_COUNT:
        instead = "leave LIMIT out to get every record" if clause == "LIMIT" else "no dataset has that many"
        raise error_at(QueryError, f"{clause} {snippet(node, 24)} is more records than dstp counts "
                       "(at most 1e18); " + instead, sql, node)
    return _int_literal(node, sql, clause.lower())


# -- the SELECT list -------------------------------------------------------------------------

def _star_outputs(dataset: GriddedDataset) -> list[str]:
    grid = dataset.descriptor.default_grid
    coords = [c.name for c in dataset.coordinates.values() if c.dimension in grid]
    coords.sort(key=lambda n: grid.index(dataset.coordinates[n].dimension))  # type: ignore[arg-type]
    index_dims = [d for d in grid if dataset.dimensions[d].coordinate is None]
    scalars = [c.name for c in dataset.coordinates.values() if c.dimension is None]
    # Auxiliary and derived coordinates on the default grid's dimensions (2-D lat/lon); bounds only on request.
    auxiliaries = [a.name for a in dataset.auxiliaries.values()
                   if a.role in ("auxiliary", "derived") and a.dimensions and set(a.dimensions) <= set(grid)]
    attrs = [a.name for a in dataset.attributes.values() if a.dimensions == grid]
    return [*index_dims, *coords, *auxiliaries, *scalars, *attrs]


def _expand_star(star: exp.Star, v: Validator, sql: str, tokens: list[Token]) -> list[exp.Alias]:
    """Return the outputs ``*`` stands for, with its EXCLUDE, REPLACE and RENAME lists applied."""
    _refuse_unknown_args(star, _STAR_ARGS, sql, tokens)
    names = _star_outputs(v.dataset)
    star_columns = ", ".join(names)

    def member(node: exp.Expression, what: str) -> str:
        if not isinstance(node, exp.Column):
            raise error_at(QueryError, f"{what} lists columns of the dataset, e.g. {what} (lat, lon)", sql, node)
        name = v.resolve(node)
        if name not in names:
            raise error_at(UnknownColumnError, f"{what} names {name!r}, which is not one of the columns "
                           f"* stands for ({star_columns})", sql, node)
        return name

    touched: dict[str, str] = {}

    def claim(name: str, what: str, node: exp.Expression) -> None:
        if name in touched:
            raise error_at(QueryError, f"{name!r} is named in both {touched[name]} and {what}"
                           if touched[name] != what else f"{name!r} is named twice in {what}", sql, node)
        touched[name] = what

    excluded: set[str] = set()
    for node in star.args.get("except_") or []:
        name = member(node, "EXCLUDE")
        claim(name, "EXCLUDE", node)
        excluded.add(name)
    replaced: dict[str, exp.Expression] = {}
    for node in star.args.get("replace") or []:
        if not isinstance(node, exp.Alias) or not node.alias:
            raise error_at(QueryError, "REPLACE takes expressions with the column they replace: "
                           "* replace (temperature - 273.15 as temperature)", sql, node)
        name = member(_alias_column(node), "REPLACE")
        claim(name, "REPLACE", node)
        replaced[name] = v.check(node.this)
    renamed: dict[str, str] = {}
    for node in star.args.get("rename") or []:
        if not isinstance(node, exp.Alias) or not isinstance(node.this, exp.Column) or not node.alias.strip():
            raise error_at(QueryError, "RENAME takes columns with their new names: * rename (temperature as t)",
                           sql, node)
        name = member(node.this, "RENAME")
        claim(name, "RENAME", node)
        renamed[name] = node.alias
    outputs: list[exp.Alias] = []
    for name in names:
        if name in excluded:
            continue
        if name in replaced:
            outputs.append(_output(replaced[name], name))
            continue
        v.used.add(name)
        outputs.append(_output(exp.column(name, quoted=True), renamed.get(name, name)))
    if not outputs:
        raise error_at(QueryError, "EXCLUDE leaves no column to select", sql, star)
    return outputs


def _output(node: exp.Expr, name: str) -> exp.Alias:
    """Return ``node AS "name"``: one output column."""
    return exp.Alias(this=node, alias=exp.to_identifier(name, quoted=True))


def _alias_column(alias: exp.Alias) -> exp.Column:
    """Return the column an ``expression AS name`` names, keeping the name's position for messages."""
    identifier = alias.args["alias"]
    column = exp.Column(this=identifier.copy())
    column.this.meta.update(identifier.meta)
    return column


def _outputs(tree: exp.Select, v: Validator, sql: str, tokens: list[Token]) -> list[exp.Alias]:
    outputs: list[exp.Alias] = []
    if not tree.expressions:
        raise QuerySyntaxError("the query selects nothing; name columns after SELECT, or write select *")
    for item in tree.expressions:
        if isinstance(item, exp.Star):
            outputs += _expand_star(item, v, sql, tokens)
        elif isinstance(item, exp.Column) and isinstance(item.this, exp.Star):
            table = item.args.get("table")
            if table is not None and table.name.lower() not in v.qualifiers:
                raise error_at(UnknownColumnError, f"{table.name!r} is not the dataset of this query", sql, table)
            _refuse_unknown_args(item, {"this", "table"}, sql, tokens)
            outputs += _expand_star(item.this, v, sql, tokens)
        elif isinstance(item, exp.Alias):
            if not item.alias.strip():
                raise error_at(QueryError, "an output column needs a name; write AS name", sql, item)
            outputs.append(_output(v.check(item.this), item.alias))
        else:
            checked = v.check(item)
            name = checked.name if isinstance(checked, exp.Column) else item.sql(dialect=DIALECT)
            outputs.append(_output(checked, name))
    seen: set[str] = set()
    for out in outputs:
        if out.alias in seen:
            raise error_at(
                QueryError, f"column {out.alias!r} is selected twice; rename one with AS", sql, out.this
            )
        seen.add(out.alias)
    return outputs


# -- ORDER BY, LIMIT, OFFSET ------------------------------------------------------------------

def _order(tree: exp.Select, outputs: list[exp.Alias], v: Validator, sql: str,
           tokens: list[Token]) -> list[exp.Ordered]:
    order_node = tree.args.get("order")
    if order_node is None:
        return []
    _refuse_unknown_args(order_node, _ORDER_ARGS, sql, tokens)
    names = [o.alias for o in outputs]
    order: list[exp.Ordered] = []
    for ordered in order_node.expressions:
        _refuse_unknown_args(ordered, _ORDERED_ARGS, sql, tokens)
        desc, nulls_first = bool(ordered.args.get("desc")), ordered.args.get("nulls_first")
        key = ordered.this
        if isinstance(key, exp.Var) and key.name.upper() == "ALL":  # ORDER BY ALL: every output, left to right
            order += [exp.Ordered(this=exp.column(n, quoted=True), desc=desc, nulls_first=nulls_first) for n in names]
            continue
        bare = key.this if isinstance(key, exp.Neg) else key
        if isinstance(bare, exp.Literal) and not bare.is_string:  # a position in the SELECT list
            place = float(bare.this) * (-1 if bare is not key else 1)
            if place != int(place) or not 1 <= place <= len(names):
                raise error_at(QueryError, f"ORDER BY {snippet(key, 24)}: give a column, or a position "
                               f"from 1 to {len(names)} in the SELECT list", sql, key)
            checked: exp.Expression = exp.column(names[int(place) - 1], quoted=True)
        elif not key.find(exp.Column):
            raise error_at(QueryError, f"ORDER BY {snippet(key, 24)} orders by a constant; give a column, "
                           f"or a position from 1 to {len(names)} in the SELECT list", sql, key)
        else:
            checked = v.check(key, aliases=names)
            for col in checked.find_all(exp.Column):
                if col.name in names and not col.this.quoted:
                    col.set("this", exp.Identifier(this=col.name, quoted=True))
        order.append(exp.Ordered(this=checked, desc=desc, nulls_first=nulls_first))
    return order


def _limit_options(node: exp.Expression, sql: str, tokens: list[Token]) -> None:
    options = node.args.get("limit_options")
    if isinstance(options, exp.LimitOptions):
        for key in ("percent", "with_ties"):
            if options.args.get(key):
                label, hint = _CLAUSES[key]
                word = "percent" if key == "percent" else "ties"
                raise error_at(ForbiddenQueryError, f"{label} is not supported in a dstp query; {hint}", sql,
                               next((t for t in tokens if t.text.lower() == word), node))


def _limit(tree: exp.Select, sql: str, tokens: list[Token]) -> tuple[int | None, int | None]:
    limit = offset = None
    limit_node = tree.args.get("limit")
    if isinstance(limit_node, exp.Fetch):
        _refuse_unknown_args(limit_node, _FETCH_ARGS, sql, tokens)
        _limit_options(limit_node, sql, tokens)
        count = limit_node.args.get("count")
        limit = 1 if count is None else _row_count(count, sql, "FETCH", tokens)
    elif limit_node is not None:
        _refuse_unknown_args(limit_node, _LIMIT_ARGS, sql, tokens)
        _limit_options(limit_node, sql, tokens)
        value = limit_node.expression
        if not (isinstance(value, exp.Var) and value.name.upper() == "ALL"):  # LIMIT ALL: no limit
            limit = _row_count(value, sql, "LIMIT", tokens)
    offset_node = tree.args.get("offset")
    if offset_node is not None:
        _refuse_unknown_args(offset_node, _OFFSET_ARGS, sql, tokens)
        offset = _row_count(offset_node.expression, sql, "OFFSET", tokens)
    return limit, offset


# -- the whole query -------------------------------------------------------------------------

def validate_query(sql: str, catalog: Catalog, *, max_length: int = 16_384) -> ValidatedQuery:
    """Return the validated form of ``sql`` against ``catalog``, or raise a typed QueryError."""
    tree, tokens = read_select(sql, max_length)
    try:
        return _validate(tree, tokens, sql, catalog)
    except RecursionError:
        raise QueryError(TOO_DEEP) from None


def _validate(tree: exp.Select, tokens: list[Token], sql: str, catalog: Catalog) -> ValidatedQuery:
    _refuse_unknown_args(tree, _SELECT_ARGS | {"joins"}, sql, tokens)
    check_integers(tree, sql)
    rebalance(tree)
    check_depth(tree, sql)
    dataset, table, strides, alias = _resolve_table(tree, sql, tokens, catalog)
    sampling = _sampling(tree, table, sql, tokens)
    v = Validator(sql, dataset, alias)
    outputs = _outputs(tree, v, sql, tokens)

    where_node = tree.args.get("where")
    where = None
    if where_node is not None:
        where = v.normalise_time_literals(v.check(where_node.this))
        if where.find(exp.Alias):
            raise error_at(QueryError, "WHERE cannot define names with AS", sql, where)

    order = _order(tree, outputs, v, sql, tokens)
    limit, offset = _limit(tree, sql, tokens)
    if not v.used:
        raise error_at(QueryError, f"the query reads no column of {dataset.id}; select at least one of its "
                       f"columns, e.g. select {_star_outputs(dataset)[-1]} from {dataset.id}",
                       sql, tree.expressions[0])

    columns = tuple(c for c in dataset.column_names() if c in v.used)
    return ValidatedQuery(
        sql=sql,
        dataset=dataset,
        outputs=tuple(outputs),
        where=where,
        order=tuple(order),
        limit=limit,
        offset=offset,
        sampling=sampling,
        strides=strides,
        columns=columns,
    )


def describe_literal(node: Any) -> str:
    """Return a short text for a node, for messages."""
    return node.sql(dialect=DIALECT) if isinstance(node, exp.Expression) else str(node)

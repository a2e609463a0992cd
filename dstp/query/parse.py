"""Parsing and validating a query: user text in, a checked sqlglot tree out.

dstp accepts one SQL-like statement::

    select <columns | expressions | *> from <dataset | stride(dataset, dim = k, ...)>
      [tablesample <p>% | tablesample <n> rows [repeatable (<seed>)]]
      [where <predicate>] [order by <expr> [asc|desc], ...] [limit <n> [offset <m>]]

The text is parsed by sqlglot (DuckDB dialect) and every node of the tree is
checked against a whitelist: only a SELECT, only a catalog dataset, only its
columns, only the operators and functions listed in ``ALLOWED_FUNCTIONS``. The
SQL that DuckDB later runs is generated from this validated tree; the user's
text never reaches DuckDB. Every error points at the offending token.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Iterable

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from dstp.catalog.cf import time_literal
from dstp.catalog.dataset import GriddedDataset
from dstp.catalog.registry import Catalog
from dstp.errors import DatasetNotFoundError, ForbiddenQueryError, QueryError, QuerySyntaxError, UnknownColumnError

__all__ = ["ALLOWED_FUNCTIONS", "Sampling", "ValidatedQuery", "validate_query"]

DIALECT = "duckdb"

#: Scalar functions a query may call (sqlglot expression classes).
ALLOWED_FUNCTIONS: dict[type[exp.Expression], str] = {
    exp.Abs: "abs", exp.Sqrt: "sqrt", exp.Exp: "exp", exp.Ln: "ln", exp.Log: "log/log10",
    exp.Pow: "power", exp.Floor: "floor", exp.Ceil: "ceil", exp.Round: "round", exp.Sign: "sign",
    exp.Least: "least", exp.Greatest: "greatest", exp.Coalesce: "coalesce", exp.Nullif: "nullif",
    exp.Sin: "sin", exp.Cos: "cos", exp.Tan: "tan", exp.Asin: "asin", exp.Acos: "acos",
    exp.Atan: "atan", exp.Atan2: "atan2", exp.Radians: "radians", exp.Degrees: "degrees",
    exp.Year: "year", exp.Month: "month", exp.Day: "day", exp.Hour: "hour",
    exp.DayOfYear: "dayofyear", exp.Extract: "extract", exp.TimestampTrunc: "date_trunc",
}

# Operators and leaves allowed anywhere in an expression.
_ALLOWED_NODES: tuple[type[exp.Expression], ...] = (
    exp.Column, exp.Identifier, exp.Literal, exp.Boolean, exp.Null, exp.Paren, exp.Neg,
    exp.And, exp.Or, exp.Not, exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE,
    exp.Between, exp.In, exp.Is, exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.IntDiv,
    exp.Case, exp.If, exp.Cast, exp.DataType, exp.Var, exp.Alias, exp.Star, exp.Ordered,
    exp.NullSafeEQ, exp.NullSafeNEQ,
)
_CAST_TYPES = {
    exp.DataType.Type.TIMESTAMP, exp.DataType.Type.TIMESTAMPNTZ, exp.DataType.Type.DATE,
    exp.DataType.Type.DOUBLE, exp.DataType.Type.FLOAT, exp.DataType.Type.INT,
    exp.DataType.Type.BIGINT, exp.DataType.Type.SMALLINT, exp.DataType.Type.DECIMAL,
}
_SELECT_ARGS = {"expressions", "from", "from_", "where", "order", "limit", "offset", "sample"}
_FILE_ACCESS = {"read_csv", "read_csv_auto", "read_parquet", "read_json", "read_json_auto", "read_text",
                "read_blob", "parquet_scan", "glob", "getenv", "current_setting", "duckdb_settings",
                "sniff_csv", "iceberg_scan", "delta_scan", "query", "query_table"}
MAX_SAMPLE_ROWS = 10_000_000


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


def _position(node: Any) -> tuple[int | None, int | None, str | None]:
    """Return (line, column, token text) of the first token inside ``node``, else of its parents."""
    probe = node
    while probe is not None:
        for sub in probe.walk():
            meta = sub.meta
            if "line" in meta and "col" in meta:
                text = sub.name if isinstance(sub, (exp.Identifier, exp.Literal)) else None
                return meta["line"], meta["col"], text
        probe = probe.parent
    return None, None, None


def _error(cls: type[QueryError], message: str, sql: str, node: Any) -> QueryError:
    line, col, token = _position(node)
    return cls(message, sql=sql, line=line, column=col, token=token)


def _parse(sql: str, max_length: int) -> exp.Select:
    if not sql or not sql.strip():
        raise QuerySyntaxError("the query is empty; try: select * from <dataset> limit 10")
    if len(sql) > max_length:
        raise QueryError(f"the query is {len(sql)} characters long; the limit is {max_length}")
    try:
        statements = [s for s in sqlglot.parse(sql, read=DIALECT) if s is not None]
    except ParseError as exc:
        first = exc.errors[0] if exc.errors else {}
        desc = str(first.get("description") or exc).split("\n")[0]
        desc = desc.replace("<Token token_type: ", "").split(", text:")[0] if "<Token" in desc else desc
        line, col, token = first.get("line"), first.get("col"), first.get("highlight")
        words = sql.split()
        if words and words[0].lower() != "select":
            desc += "; a dstp query starts with SELECT: select … from <dataset> …"
            # point at the first word, which is what is wrong
            head = sql[: len(sql) - len(sql.lstrip())]
            line = head.count("\n") + 1
            col = len(head.rsplit("\n", 1)[-1]) + len(words[0])
            token = words[0]
        raise QuerySyntaxError(
            f"cannot parse the query: {desc}", sql=sql, line=line, column=col, token=token
        ) from None
    except TokenError as exc:
        raise QuerySyntaxError(f"cannot read the query: {exc}") from None
    if len(statements) != 1:
        raise ForbiddenQueryError(
            f"send one statement at a time (got {len(statements)}); only SELECT is accepted"
        )
    tree = statements[0]
    if isinstance(tree, exp.Select):
        return tree
    if not isinstance(tree, (exp.Condition, exp.Alias, exp.Identifier)):
        kind = type(tree).__name__.upper()
        raise _error(
            ForbiddenQueryError,
            f"only SELECT queries are accepted; {kind} statements are never run",
            sql,
            tree,
        )
    raise _error(QuerySyntaxError, "a dstp query starts with SELECT: select … from <dataset> …", sql, tree)


def _resolve_table(tree: exp.Select, sql: str, catalog: Catalog) -> tuple[GriddedDataset, exp.Table, dict[str, int]]:
    from_ = tree.args.get("from") or tree.args.get("from_")
    if from_ is None:
        raise QuerySyntaxError("the query has no FROM clause; write: select … from <dataset>")
    table = from_.this
    if not isinstance(table, exp.Table):
        raise _error(ForbiddenQueryError, "FROM must name one dataset, not a subquery", sql, table)
    strides: dict[str, int] = {}
    target: exp.Expression = table.this
    if isinstance(target, (exp.Anonymous, exp.Func)) and not isinstance(target, exp.Column):
        fname = (target.name if isinstance(target, exp.Anonymous) else target.sql_name()).lower()
        if fname != "stride":
            raise _error(
                ForbiddenQueryError,
                f"FROM {fname}(…) is not allowed: name a dataset, or stride(dataset, dim = k, …)",
                sql,
                target,
            )
        args = list(target.expressions)
        if not args or not isinstance(args[0], exp.Column):
            raise _error(QueryError, "stride() needs the dataset first: stride(ccm3, lat = 2)", sql, target)
        name_node: exp.Expression = args[0].this
        for arg in args[1:]:
            if not (isinstance(arg, exp.EQ) and isinstance(arg.this, exp.Column) and isinstance(arg.expression, exp.Literal)
                    and not arg.expression.is_string):
                raise _error(QueryError, "stride() arguments look like: lat = 2", sql, arg)
            try:
                step = int(arg.expression.this)
            except ValueError:
                raise _error(QueryError, "a stride must be a whole number ≥ 1", sql, arg) from None
            if step < 1 or str(step) != arg.expression.this:
                raise _error(QueryError, "a stride must be a whole number ≥ 1", sql, arg)
            strides[arg.this.name] = step
    else:
        name_node = target
    if table.args.get("db") or table.args.get("catalog"):
        raise _error(ForbiddenQueryError, "name the dataset alone, without a schema or database", sql, table)
    if table.args.get("joins") or tree.args.get("joins"):
        raise _error(ForbiddenQueryError, "joins are not supported; query one dataset at a time", sql, table)
    if not isinstance(name_node, exp.Identifier):
        raise _error(ForbiddenQueryError, "FROM must name a dataset of the catalog", sql, name_node)
    name = name_node.name
    if name_node.quoted and any(ch in name for ch in "/\\.:") or name.startswith(("~", "/")):
        raise _error(
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
            line, col, _ = _position(name_node)
            raise DatasetNotFoundError(f"{exc} (line {line}, column {col})" if line else str(exc)) from None
        dataset = matches[0]
    for dim in strides:
        if dim not in dataset.dimensions:
            raise _error(
                UnknownColumnError,
                f"stride on {dim!r}: {dataset.id} has no such dimension (dimensions: {', '.join(dataset.dimensions)})",
                sql,
                next(a for a in table.this.expressions[1:] if a.this.name == dim),
            )
    return dataset, table, strides


def _sampling(tree: exp.Select, table: exp.Table, sql: str) -> Sampling | None:
    sample = table.args.get("sample") or tree.args.get("sample")
    if sample is None:
        return None
    percent, size, seed = sample.args.get("percent"), sample.args.get("size"), sample.args.get("seed")
    method = sample.args.get("method")
    for part in (sample.args.get("bucket_numerator"), sample.args.get("bucket_denominator"),
                 sample.args.get("bucket_field")):
        if part is not None:
            raise _error(QueryError, "bucket sampling is not supported; use tablesample <p>% or <n> rows", sql, sample)
    seed_value = random.SystemRandom().randrange(2**31) if seed is None else _int_literal(seed, sql, "seed")
    if method is not None and method.name.upper() == "BERNOULLI" and percent is None and size is not None:
        percent, size = size, None  # bernoulli(1) means 1 percent
    if percent is not None:
        value = _number(percent, sql, "sample percentage")
        if not 0 <= value <= 100:
            raise _error(QueryError, "a sample percentage is between 0 and 100", sql, percent)
        return Sampling(seed=seed_value, percent=value)
    if size is not None:
        rows = _int_literal(size, sql, "sample size")
        if not 0 <= rows <= MAX_SAMPLE_ROWS:
            raise _error(QueryError, f"a sample size is between 0 and {MAX_SAMPLE_ROWS} rows", sql, size)
        return Sampling(seed=seed_value, rows=rows)
    raise _error(QueryError, "say how much to sample: tablesample 1% or tablesample 1000 rows", sql, sample)


def _number(node: exp.Expression, sql: str, what: str) -> float:
    if isinstance(node, exp.Literal) and not node.is_string:
        return float(node.this)
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string:
        return -float(node.this.this)
    raise _error(QueryError, f"the {what} must be a number", sql, node)


def _int_literal(node: exp.Expression, sql: str, what: str) -> int:
    value = _number(node, sql, what)
    if value != int(value):
        raise _error(QueryError, f"the {what} must be a whole number", sql, node)
    return int(value)


class _Validator:
    """Checks expressions node by node and binds column names to the dataset."""

    def __init__(self, sql: str, dataset: GriddedDataset) -> None:
        self.sql = sql
        self.dataset = dataset
        self.columns = {c: c for c in dataset.column_names()}
        self.lower: dict[str, list[str]] = {}
        for c in dataset.column_names():
            self.lower.setdefault(c.lower(), []).append(c)
        self.used: set[str] = set()
        self.time_columns = {
            name: col.decoding.iso_time
            for name, col in [*dataset.coordinates.items(), *dataset.auxiliaries.items(),
                              *dataset.attributes.items()]
            if col.decoding.time_units is not None
        }

    def column(self, node: exp.Column, aliases: Iterable[str] = ()) -> str | None:
        table = node.args.get("table")
        if table is not None and table.name.lower() != self.dataset.id.lower():
            raise _error(UnknownColumnError, f"{table.name!r} is not the dataset of this query", self.sql, table)
        if node.args.get("db") or node.args.get("catalog"):
            raise _error(UnknownColumnError, f"{node.sql()!r} is not a column", self.sql, node)
        name = node.name
        if name in self.columns:
            resolved = name
        elif name in aliases:
            return None
        elif len(self.lower.get(name.lower(), [])) == 1 and not node.this.quoted:
            resolved = self.lower[name.lower()][0]
        else:
            known = ", ".join(self.dataset.column_names())
            raise _error(
                UnknownColumnError,
                f"{self.dataset.id} has no column {name!r} (columns: {known})",
                self.sql,
                node,
            )
        self.used.add(resolved)
        return resolved

    def check(self, node: exp.Expression, aliases: Iterable[str] = ()) -> exp.Expression:
        """Return a copy of ``node`` with columns bound, or raise for anything not allowed."""
        node = node.copy()
        aliases = tuple(aliases)
        for sub in list(node.walk()):
            if isinstance(sub, exp.Column):
                resolved = self.column(sub, aliases)
                if resolved is not None:
                    sub.set("table", None)
                    sub.set("this", exp.Identifier(this=resolved, quoted=True))
                continue
            if isinstance(sub, exp.Identifier) and isinstance(sub.parent, exp.Column):
                continue
            if isinstance(sub, tuple(ALLOWED_FUNCTIONS)):
                continue
            if isinstance(sub, exp.Cast):
                to = sub.args.get("to")
                if to is None or to.this not in _CAST_TYPES:
                    raise _error(
                        ForbiddenQueryError,
                        f"cast to {to.sql() if to else '?'} is not supported "
                        "(use timestamp, date, double, float, integer or bigint)",
                        self.sql,
                        sub,
                    )
                continue
            if isinstance(sub, (exp.Var, exp.DataType)) and isinstance(sub.parent, (exp.Cast, exp.Extract, exp.TimestampTrunc, exp.DataType)):
                continue
            if isinstance(sub, _ALLOWED_NODES) and not isinstance(sub, (exp.Var, exp.DataType, exp.Star)):
                continue
            raise self._not_allowed(sub)
        return node

    def _not_allowed(self, node: Any) -> QueryError:
        if isinstance(node, (exp.Subquery, exp.Select, exp.Exists)):
            return _error(ForbiddenQueryError, "subqueries are not supported", self.sql, node)
        if isinstance(node, exp.Placeholder):
            return _error(QueryError, "parameters (? or $1) are not supported; write the value in", self.sql, node)
        if isinstance(node, (exp.Func, exp.Anonymous)):
            name = (node.name if isinstance(node, exp.Anonymous) else node.sql_name()).lower()
            if name in _FILE_ACCESS or name.startswith(("read_", "duckdb_", "pragma")):
                return _error(
                    ForbiddenQueryError,
                    f"{name}() is not allowed: queries cannot read files, settings or the environment",
                    self.sql,
                    node,
                )
            if isinstance(node, exp.AggFunc):
                return _error(
                    ForbiddenQueryError,
                    f"{name}() is an aggregate; dstp returns records, aggregate them in your client",
                    self.sql,
                    node,
                )
            allowed = ", ".join(sorted(set(ALLOWED_FUNCTIONS.values())))
            return _error(ForbiddenQueryError, f"function {name}() is not allowed (allowed: {allowed})", self.sql, node)
        what = type(node).__name__
        return _error(ForbiddenQueryError, f"{what} is not supported in a dstp query", self.sql, node)

    def normalise_time_literals(self, node: exp.Expression) -> exp.Expression:
        """Rewrite string/timestamp literals compared with time columns into the column's form."""
        for cmp in list(node.find_all(exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Between, exp.In)):
            target = cmp.this
            if not (isinstance(target, exp.Column) and target.name in self.time_columns):
                others = [cmp.expression] if isinstance(cmp, exp.Binary) else []
                if isinstance(cmp, exp.Binary) and isinstance(cmp.expression, exp.Column) \
                        and cmp.expression.name in self.time_columns:
                    target, others = cmp.expression, [cmp.this]
                else:
                    continue
            elif isinstance(cmp, exp.Between):
                others = [cmp.args["low"], cmp.args["high"]]
            elif isinstance(cmp, exp.In):
                others = list(cmp.expressions)
            else:
                others = [cmp.expression]
            iso = self.time_columns[target.name]
            for other in others:
                literal = _time_literal_node(other)
                if literal is None:
                    bare = other.this if isinstance(other, exp.Neg) else other
                    if isinstance(bare, exp.Literal) and not bare.is_string:
                        raise _error(
                            QueryError,
                            f"{target.name} is a time; compare it with a date in quotes, "
                            f"e.g. {target.name} >= '2001-01-01'",
                            self.sql,
                            bare,
                        )
                    continue
                try:
                    value = time_literal(literal.this, iso)
                except ValueError as exc:
                    raise _error(QueryError, str(exc), self.sql, literal) from None
                if iso:
                    other.replace(exp.Literal.string(str(value)))
                else:
                    text = str(value).replace("T", " ")
                    other.replace(exp.Cast(this=exp.Literal.string(text), to=exp.DataType.build("TIMESTAMP")))
        return node


def _time_literal_node(node: exp.Expression) -> exp.Literal | None:
    if isinstance(node, exp.Literal) and node.is_string:
        return node
    if isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal) and node.this.is_string:
        to = node.args.get("to")
        if to is not None and to.this in {exp.DataType.Type.TIMESTAMP, exp.DataType.Type.TIMESTAMPNTZ,
                                         exp.DataType.Type.DATE}:
            return node.this
    return None


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


def validate_query(sql: str, catalog: Catalog, *, max_length: int = 16_384) -> ValidatedQuery:
    """Return the validated form of ``sql`` against ``catalog``, or raise a typed QueryError."""
    tree = _parse(sql, max_length)
    for key, value in tree.args.items():
        if value in (None, False, []) or key in _SELECT_ARGS:
            continue
        label = {"group": "GROUP BY", "having": "HAVING", "distinct": "DISTINCT", "with": "WITH",
                 "windows": "WINDOW", "qualify": "QUALIFY", "into": "SELECT INTO", "joins": "JOIN"}.get(key, key.upper())
        node = value if isinstance(value, exp.Expression) else None
        raise _error(ForbiddenQueryError, f"{label} is not supported in a dstp query", sql, node or tree)
    dataset, table, strides = _resolve_table(tree, sql, catalog)
    sampling = _sampling(tree, table, sql)
    v = _Validator(sql, dataset)

    outputs: list[Any] = []  # exp.Alias nodes
    for item in tree.expressions:
        if isinstance(item, exp.Star) or (isinstance(item, exp.Column) and isinstance(item.this, exp.Star)):
            for name in _star_outputs(dataset):
                v.used.add(name)
                outputs.append(exp.alias_(exp.column(name, quoted=True), name, quoted=True))
            continue
        if isinstance(item, exp.Alias):
            checked = v.check(item.this)
            outputs.append(exp.alias_(checked, item.alias, quoted=True))
            continue
        checked = v.check(item)
        name = checked.name if isinstance(checked, exp.Column) else item.sql(dialect=DIALECT)
        outputs.append(exp.alias_(checked, name, quoted=True))
    seen: set[str] = set()
    for out in outputs:
        if out.alias in seen:
            raise _error(
                QueryError, f"column {out.alias!r} is selected twice; rename one with AS", sql, out.this
            )
        seen.add(out.alias)

    where_node = tree.args.get("where")
    where = None
    if where_node is not None:
        where = v.normalise_time_literals(v.check(where_node.this))
        if where.find(exp.Alias):
            raise _error(QueryError, "WHERE cannot define names with AS", sql, where)

    order: list[exp.Ordered] = []
    order_node = tree.args.get("order")
    if order_node is not None:
        for ordered in order_node.expressions:
            order_key = ordered.this
            if isinstance(order_key, exp.Literal) and not order_key.is_string:
                pos = int(float(order_key.this))
                if not 1 <= pos <= len(outputs):
                    raise _error(QueryError, f"ORDER BY {pos}: there are {len(outputs)} output columns", sql, order_key)
                checked_key: Any = exp.column(outputs[pos - 1].alias, quoted=True)
            else:
                checked_key = v.check(order_key, aliases=seen)
                for col in checked_key.find_all(exp.Column):
                    if col.name in seen and not col.this.quoted:
                        col.set("this", exp.Identifier(this=col.name, quoted=True))
            order.append(exp.Ordered(this=checked_key, desc=bool(ordered.args.get("desc")),
                                     nulls_first=ordered.args.get("nulls_first")))

    limit = offset = None
    limit_node = tree.args.get("limit")
    if limit_node is not None:
        limit = _int_literal(limit_node.expression, sql, "limit")
        if limit < 0:
            raise _error(QueryError, "LIMIT must be 0 or more", sql, limit_node)
    offset_node = tree.args.get("offset")
    if offset_node is not None:
        offset = _int_literal(offset_node.expression, sql, "offset")
        if offset < 0:
            raise _error(QueryError, "OFFSET must be 0 or more", sql, offset_node)

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

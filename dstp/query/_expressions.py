"""Checking expressions: the whitelist of nodes and functions, column binding, size limits.

:class:`Validator` walks each expression of a query, binds its column names to the dataset and
refuses any node not on the whitelist, with a message naming it in SQL terms. ``check_integers``,
``rebalance`` and ``check_depth`` keep a tree within what planning and DuckDB can take.
"""

from __future__ import annotations

from typing import Any, Iterable

from sqlglot import exp
from sqlglot.errors import ErrorLevel, UnsupportedError

from dstp.catalog.cf import time_literal
from dstp.catalog.dataset import GriddedDataset
from dstp.errors import ForbiddenQueryError, QueryError, UnknownColumnError
from dstp.query._text import DIALECT, error_at, snippet

__all__ = ["ALLOWED_FUNCTIONS", "INT64_MAX", "MAX_EXPRESSION_DEPTH", "Validator", "check_depth",
           "check_integers", "rebalance"]

#: Deepest expression tree accepted, counted in sqlglot nodes.
MAX_EXPRESSION_DEPTH = 100
INT64_MAX = 2**63 - 1

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
# Types whose sqlglot name is not what the user wrote (hugeint and int128 are one type), said in words.
_TYPE_NAMES = {exp.DataType.Type.INT128: "a 128-bit integer", exp.DataType.Type.UINT128: "an unsigned 128-bit integer",
               exp.DataType.Type.INT256: "a 256-bit integer", exp.DataType.Type.UINT256: "an unsigned 256-bit integer",
               exp.DataType.Type.UBIGINT: "an unsigned integer", exp.DataType.Type.UINT: "an unsigned integer"}
_FILE_ACCESS = {"read_csv", "read_csv_auto", "read_parquet", "read_json", "read_json_auto", "read_text",
                "read_blob", "parquet_scan", "glob", "getenv", "current_setting", "duckdb_settings",
                "sniff_csv", "iceberg_scan", "delta_scan", "query", "query_table"}

# -- the tree as a whole ---------------------------------------------------------------------

def check_integers(tree: exp.Expression, sql: str) -> None:
    """Refuse whole numbers beyond 64 bits (DuckDB would type them as 128-bit and fail later)."""
    for literal in tree.find_all(exp.Literal):
        text = literal.this.replace("_", "") if isinstance(literal.this, str) else ""
        if literal.is_string or not text.isdigit():
            continue
        if int(text) > INT64_MAX:
            shown = text if len(text) <= 24 else text[:20] + "…"
            raise error_at(
                QueryError,
                f"the whole number {shown} is too large (at most {INT64_MAX}); "
                f"for a real number write it with an exponent, e.g. {float(text):.3g}".replace("e+", "e"),
                sql,
                literal,
            )


def rebalance(tree: exp.Expression) -> None:
    """Rebuild long AND/OR chains as balanced trees: same meaning, depth log2(n) instead of n."""
    roots = [node for node in tree.find_all(exp.And, exp.Or) if type(node.parent) is not type(node)]
    for root in roots:
        operands: list[exp.Expr] = []
        stack: list[exp.Expr] = [root]
        while stack:  # left-to-right, without recursion
            node = stack.pop()
            if type(node) is type(root):
                stack += [node.expression, node.this]
            else:
                operands.append(node)
        if len(operands) < 8:
            continue
        kind = type(root)
        while len(operands) > 1:
            pairs = [kind(this=a, expression=b) for a, b in zip(operands[::2], operands[1::2])]
            operands = pairs + (operands[-1:] if len(operands) % 2 else [])
        root.replace(operands[0])


def check_depth(tree: exp.Expression, sql: str) -> None:
    """Refuse expression trees deeper than MAX_EXPRESSION_DEPTH (DuckDB refuses 1000)."""
    stack: list[tuple[exp.Expression, int]] = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_EXPRESSION_DEPTH:
            raise error_at(
                QueryError,
                f"this expression is nested more than {MAX_EXPRESSION_DEPTH} levels deep; "
                "split it up, or use IN (…) for a list of values",
                sql,
                node,
            )
        stack.extend((child, depth + 1) for child in node.iter_expressions())


# -- expressions -----------------------------------------------------------------------------

# How refused expression nodes are called in messages (else the node's own SQL is quoted).
_NODE_NAMES: dict[type[exp.Expression], str] = {
    exp.Like: "LIKE", exp.ILike: "ILIKE", exp.SimilarTo: "SIMILAR TO", exp.RegexpLike: "a regular expression",
    exp.Interval: "INTERVAL arithmetic", exp.Any: "ANY (…)", exp.All: "ALL (…)",
    exp.Window: "a window function (OVER …)", exp.Lambda: "a lambda function", exp.Array: "a list value",
    exp.Struct: "a struct value", exp.Bracket: "indexing with […]", exp.Dot: "field access with '.'",
    exp.Collate: "COLLATE", exp.Unnest: "UNNEST",
}


class Validator:
    """Checks expressions node by node and binds column names to the dataset."""

    def __init__(self, sql: str, dataset: GriddedDataset, alias: str | None = None) -> None:
        self.sql = sql
        self.dataset = dataset
        self.qualifiers = {dataset.id.lower()} | ({alias.lower()} if alias else set())
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

    def resolve(self, node: exp.Column, aliases: Iterable[str] = ()) -> str | None:
        """Return the dataset column ``node`` names (None for an output alias), or raise."""
        table = node.args.get("table")
        if table is not None and table.name.lower() not in self.qualifiers:
            raise error_at(UnknownColumnError, f"{table.name!r} is not the dataset of this query", self.sql, table)
        if node.args.get("db") or node.args.get("catalog"):
            raise error_at(UnknownColumnError, f"{node.sql()!r} is not a column", self.sql, node)
        if node.args.get("join_mark"):
            raise error_at(ForbiddenQueryError, "(+) outer-join marks are not supported; query one dataset",
                           self.sql, node)
        if not isinstance(node.this, exp.Identifier):
            raise self._not_allowed(node.this)
        name = node.name
        if name in self.columns:
            return name
        if name in aliases:
            return None
        if len(self.lower.get(name.lower(), [])) == 1 and not node.this.quoted:
            return self.lower[name.lower()][0]
        known = ", ".join(self.dataset.column_names())
        raise error_at(
            UnknownColumnError,
            f"{self.dataset.id} has no column {name!r} (columns: {known})",
            self.sql,
            node,
        )

    def column(self, node: exp.Column, aliases: Iterable[str] = ()) -> str | None:
        resolved = self.resolve(node, aliases)
        if resolved is not None:
            self.used.add(resolved)
        return resolved

    def check(self, node: exp.Expression, aliases: Iterable[str] = ()) -> exp.Expression:
        """Return a copy of ``node`` with columns bound, or raise for anything not allowed."""
        aliases = tuple(aliases)
        # Check the parsed nodes themselves (their parents place the caret), then bind a copy.
        for sub in node.walk():
            if isinstance(sub, exp.Column):
                self.column(sub, aliases)
            else:
                self._allow(sub)
        copy = node.copy()
        for column in list(copy.find_all(exp.Column)):
            resolved = self.resolve(column, aliases)
            if resolved is not None:
                column.set("table", None)
                column.set("this", exp.Identifier(this=resolved, quoted=True))
        try:
            copy.sql(dialect=DIALECT, unsupported_level=ErrorLevel.RAISE)
        except UnsupportedError:
            raise error_at(ForbiddenQueryError, f"{snippet(node)} cannot be run as written; "
                           "write it without its options", self.sql, node) from None
        return copy

    def _allow(self, sub: exp.Expr) -> None:
        """Return if ``sub`` (not a column) may appear in an expression, else raise."""
        if isinstance(sub, exp.Identifier) and isinstance(sub.parent, exp.Column):
            return
        if isinstance(sub, tuple(ALLOWED_FUNCTIONS)):
            return
        if isinstance(sub, exp.Cast):
            to = sub.args.get("to")
            if to is None or to.this not in _CAST_TYPES:
                name = _TYPE_NAMES.get(to.this, to.sql(dialect=DIALECT).lower()) if to is not None else "?"
                raise error_at(
                    ForbiddenQueryError,
                    f"cast to {name} is not supported "
                    "(use timestamp, date, double, float, integer, bigint or decimal(p, s))",
                    self.sql,
                    sub,
                )
            return
        if isinstance(sub, exp.DataTypeParam):
            self._decimal_param(sub)
            return
        if isinstance(sub, (exp.Var, exp.DataType)) and isinstance(sub.parent, (exp.Cast, exp.Extract, exp.TimestampTrunc, exp.DataType)):
            return
        if isinstance(sub, exp.Is) and not isinstance(sub.expression, (exp.Null, exp.Boolean)):
            raise error_at(QueryError, "IS compares with NULL, TRUE or FALSE; to compare values write = "
                           "(or IS DISTINCT FROM, which treats NULLs as equal)", self.sql, sub.expression)
        if isinstance(sub, exp.In) and not sub.expressions and not any(
                sub.args.get(k) for k in ("query", "unnest", "field")):
            raise error_at(QueryError, "IN needs a list of values, e.g. lat in (10, 20)", self.sql, sub)
        if isinstance(sub, _ALLOWED_NODES) and not isinstance(sub, (exp.Var, exp.DataType, exp.Star)):
            return
        raise self._not_allowed(sub)

    def _decimal_param(self, param: exp.DataTypeParam) -> None:
        """Accept the width and scale of decimal(p, s) within DuckDB's range (1 ≤ p ≤ 38, 0 ≤ s ≤ p)."""
        dtype = param.parent
        if not (isinstance(dtype, exp.DataType) and dtype.this == exp.DataType.Type.DECIMAL):
            raise error_at(ForbiddenQueryError, f"type parameters are only accepted on decimal(p, s), "
                           f"not on {snippet(dtype) if isinstance(dtype, exp.Expression) else 'this type'}",
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
            return error_at(ForbiddenQueryError, "subqueries are not supported", self.sql, node)
        if isinstance(node, exp.Placeholder):
            return error_at(QueryError, "parameters (? or $1) are not supported; write the value in", self.sql, node)
        if isinstance(node, exp.Star):
            return error_at(QueryError, "* stands for the columns of the dataset and can only be selected "
                          "on its own (select * …); name the columns here", self.sql, node)
        if isinstance(node, (exp.Func, exp.Anonymous)) and not isinstance(node, tuple(_NODE_NAMES)):
            name = (node.name if isinstance(node, exp.Anonymous) else node.sql_name()).lower()
            if name in _FILE_ACCESS or name.startswith(("read_", "duckdb_", "pragma")):
                return error_at(
                    ForbiddenQueryError,
                    f"{name}() is not allowed: queries cannot read files, settings or the environment",
                    self.sql,
                    node,
                )
            if isinstance(node, exp.AggFunc):
                return error_at(
                    ForbiddenQueryError,
                    f"{name}() is an aggregate; dstp returns records, aggregate them in your client",
                    self.sql,
                    node,
                )
            allowed = ", ".join(sorted(set(ALLOWED_FUNCTIONS.values())))
            return error_at(ForbiddenQueryError, f"function {name}() is not allowed (allowed: {allowed})", self.sql, node)
        what = next((label for cls, label in _NODE_NAMES.items() if isinstance(node, cls)), None)
        if what is None:
            what = repr(snippet(node)) if isinstance(node, exp.Expression) else "this"
        return error_at(ForbiddenQueryError, f"{what} is not supported in a dstp query", self.sql, node)

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
                        raise error_at(
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
                    raise error_at(QueryError, str(exc), self.sql, literal) from None
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

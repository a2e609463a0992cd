"""The clauses around expressions: which sqlglot arguments are honoured, sampling, LIMIT/OFFSET, numbers.

Every clause the validator rebuilds (SELECT, FROM, a table, ``*``, LIMIT, ORDER
BY, TABLESAMPLE, a join) names the sqlglot arguments it honours, and
:func:`refuse_unknown_args` refuses any other argument sqlglot fills in, so a
clause sqlglot learns to parse can never be dropped silently.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass
from typing import Any

from sqlglot import exp
from sqlglot.tokens import Token

from dstp.errors import ForbiddenQueryError, QueryError
from dstp.query._terms import INT64_MAX
from dstp.query._text import error_at, snippet

__all__ = ["MAX_ROW_COUNT", "MAX_SAMPLE_ROWS", "Sampling", "limit_clause", "number", "int_literal",
           "refuse_unknown_args", "sampling_clause"]

MAX_SAMPLE_ROWS = 10_000_000
#: Largest LIMIT or OFFSET accepted (far beyond any dataset, well inside a 64-bit integer).
MAX_ROW_COUNT = 10**18

SELECT_ARGS = {"expressions", "from_", "joins", "where", "group", "having", "qualify", "order", "limit", "offset",
               "sample", "distinct", "with_"}
UNION_ARGS = {"this", "expression", "distinct", "order", "limit", "offset", "with_", "by_name"}
TABLE_ARGS = {"this", "alias", "sample"}
JOIN_ARGS = {"this", "on", "side", "kind", "method"}
STAR_ARGS = {"except_", "replace", "rename"}
LIMIT_ARGS = {"expression", "limit_options"}
FETCH_ARGS = {"direction", "count", "limit_options"}
OFFSET_ARGS = {"expression"}
ORDER_ARGS = {"expressions"}
ORDERED_ARGS = {"this", "desc", "nulls_first"}
SAMPLE_ARGS = {"method", "percent", "size", "seed"}
GROUP_ARGS = {"expressions", "all"}

# What a refused argument is called in a message, and what to do instead.
CLAUSES: dict[str, tuple[str, str]] = {
    "windows": ("WINDOW", "write the window in OVER (…)"),
    "into": ("SELECT INTO", "queries cannot create tables"),
    "laterals": ("LATERAL", "join a subquery or CTE instead"),
    "pivots": ("PIVOT/UNPIVOT", "group with GROUP BY instead, or reshape the records in your client"),
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
    "columns": ("column aliases on a table", "rename output columns with AS in the SELECT list"),
    "bucket_numerator": ("bucket sampling", "use tablesample <p>% or <n> rows"),
    "join.using": ("JOIN … USING", "name the keys with ON: join b on a.time = b.time"),
    "join.global_": ("GLOBAL JOIN", "write JOIN … ON"),
    "group.grouping_sets": ("GROUPING SETS", "write one GROUP BY per grouping, combined with UNION ALL"),
    "group.rollup": ("ROLLUP", "write one GROUP BY per grouping, combined with UNION ALL"),
    "group.cube": ("CUBE", "write one GROUP BY per grouping, combined with UNION ALL"),
    "group.totals": ("WITH TOTALS", "write one GROUP BY per grouping, combined with UNION ALL"),
    "union.by_name": ("UNION BY NAME", "select the same columns in the same order in each part"),
    "cte.materialized": ("MATERIALIZED", "remove it: dstp decides"),
    "cte.key_expressions": ("USING KEY", "remove it"),
    "with.recursive": ("WITH RECURSIVE", "write the CTEs without RECURSIVE; each may use the ones before it"),
}


@dataclass(frozen=True, slots=True)
class Sampling:
    """Server-side random sampling of the matching records of one dataset reference."""

    seed: int
    percent: float | None = None
    rows: int | None = None

    def describe(self) -> str:
        size = f"{self.percent:g}%" if self.percent is not None else f"{self.rows} rows"
        return f"tablesample {size} repeatable ({self.seed})"


def _empty(value: Any) -> bool:
    if value is None or value is False or (isinstance(value, list) and not value):
        return True
    # LIMIT carries LimitOptions(percent=False, rows=False, with_ties=False) when no option is given.
    return isinstance(value, exp.LimitOptions) and not any(value.args.values())


def refuse_unknown_args(node: exp.Expr, understood: set[str], sql: str, tokens: list[Token]) -> None:
    """Raise for any argument of ``node`` the validator does not honour."""
    for key, value in node.args.items():
        if key in understood or _empty(value):
            continue
        label, hint = CLAUSES.get(f"{node.key}.{key}") or CLAUSES.get(key) \
            or (key.rstrip("_").replace("_", " ").upper(), "")
        first = value[0] if isinstance(value, list) else value
        at = keyword(tokens, label) or (first if isinstance(first, exp.Expr) else node)
        message = f"{label} is not supported in a dstp query"
        raise error_at(ForbiddenQueryError, f"{message}; {hint}" if hint else message, sql, at)


def keyword(tokens: list[Token], label: str) -> Token | None:
    """Return the first token spelling the first word of ``label`` (for a caret under a clause)."""
    word = re.split(r"[\s/(…]", label.strip("* "), maxsplit=1)[0].lower()
    return next((t for t in tokens if t.text.lower() == word), None)


# -- numbers ---------------------------------------------------------------------------------

def literal_number(node: exp.Expression) -> float | None:
    """Return the value of a (possibly negated) number literal: None if ``node`` is none, NaN if its text is
    no number (sqlglot reads "3E", an exponent without digits, as a number literal)."""
    literal = node.this if isinstance(node, exp.Neg) else node
    if not isinstance(literal, exp.Literal) or literal.is_string:
        return None
    try:
        value = float(literal.this)
    except ValueError:
        return math.nan
    return -value if literal is not node else value


def number(node: exp.Expression, sql: str, what: str) -> float:
    value = literal_number(node)
    if value is None:
        raise error_at(QueryError, f"the {what} must be a number", sql, node)
    if math.isnan(value):
        raise error_at(QueryError, f"the {what} must be a number; {node.sql()!r} is not one", sql, node)
    if not math.isfinite(value):
        raise error_at(QueryError, f"the {what} must be a finite number", sql, node)
    return value


def int_literal(node: exp.Expression, sql: str, what: str) -> int:
    literal = node.this if isinstance(node, exp.Neg) else node
    digits = literal.this.replace("_", "") if isinstance(literal, exp.Literal) and not literal.is_string else ""
    if digits.isdigit():  # exactly, not through a float
        return -int(digits) if literal is not node else int(digits)
    value = number(node, sql, what)
    if value != int(value):
        raise error_at(QueryError, f"the {what} must be a whole number", sql, node)
    return int(value)


# -- TABLESAMPLE ----------------------------------------------------------------------------

def sampling_clause(sample: exp.Expression | None, sql: str, tokens: list[Token]) -> Sampling | None:
    """Return the sampling a TABLESAMPLE / USING SAMPLE clause asks for."""
    if sample is None:
        return None
    for part in ("bucket_numerator", "bucket_denominator", "bucket_field"):
        if sample.args.get(part) is not None:
            raise error_at(QueryError, "bucket sampling is not supported; use tablesample <p>% or <n> rows", sql, sample)
    refuse_unknown_args(sample, SAMPLE_ARGS, sql, tokens)
    percent, size, seed = sample.args.get("percent"), sample.args.get("size"), sample.args.get("seed")
    method = sample.args.get("method")
    if isinstance(seed, exp.Expression):
        seed_value = int_literal(seed, sql, "seed")
        if not 0 <= seed_value <= INT64_MAX:
            raise error_at(QueryError, f"a sample seed is a whole number from 0 to {INT64_MAX}", sql, seed)
    else:
        seed_value = random.SystemRandom().randrange(2**31)
    if method is not None and method.name.upper() == "BERNOULLI" and percent is None and size is not None:
        percent, size = size, None  # bernoulli(1) means 1 percent
    if percent is not None:
        value = number(percent, sql, "sample percentage")
        if not 0 <= value <= 100:
            raise error_at(QueryError, "a sample percentage is between 0 and 100", sql, percent)
        return Sampling(seed=seed_value, percent=value)
    if size is not None:
        rows = number(size, sql, "sample size")
        if not 0 <= rows <= MAX_SAMPLE_ROWS:
            raise error_at(QueryError, f"a sample size is between 0 and {MAX_SAMPLE_ROWS} rows", sql, size)
        return Sampling(seed=seed_value, rows=int_literal(size, sql, "sample size"))
    raise error_at(QueryError, "say how much to sample: tablesample 1% or tablesample 1000 rows", sql, sample)


# -- LIMIT, OFFSET --------------------------------------------------------------------------

def _row_count(node: exp.Expression, sql: str, clause: str, tokens: list[Token]) -> int:
    """Return the number of a LIMIT/OFFSET/FETCH clause: a whole number from 0 to MAX_ROW_COUNT."""
    if not (isinstance(node, exp.Literal) and not node.is_string) and \
            not (isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal)):
        # a node without a position of its own (NULL, ALL…) is pointed at through its keyword
        at = node if any(n.meta for n in node.walk()) else keyword(tokens, clause) or node
        raise error_at(QueryError, f"{clause} takes a whole number of records, e.g. {clause} 100", sql, at)
    value = number(node, sql, clause.lower())
    if value < 0:
        raise error_at(QueryError, f"{clause} must be 0 or more", sql, node)
    if value > MAX_ROW_COUNT:
        instead = "leave LIMIT out to get every record" if clause == "LIMIT" else "no dataset has that many"
        raise error_at(QueryError, f"{clause} {snippet(node, 24, sql)} is more records than dstp counts "
                       "(at most 1e18); " + instead, sql, node)
    return int_literal(node, sql, clause.lower())


def _limit_options(node: exp.Expression, sql: str, tokens: list[Token]) -> None:
    options = node.args.get("limit_options")
    if isinstance(options, exp.LimitOptions):
        for key in ("percent", "with_ties"):
            if options.args.get(key):
                label, hint = CLAUSES[key]
                word = "percent" if key == "percent" else "ties"
                raise error_at(ForbiddenQueryError, f"{label} is not supported in a dstp query; {hint}", sql,
                               next((t for t in tokens if t.text.lower() == word), node))


def limit_clause(tree: exp.Expression, sql: str, tokens: list[Token]) -> tuple[int | None, int | None]:
    """Return (LIMIT, OFFSET) of a SELECT or UNION, each None when absent."""
    limit = offset = None
    limit_node = tree.args.get("limit")
    if isinstance(limit_node, exp.Fetch):
        refuse_unknown_args(limit_node, FETCH_ARGS, sql, tokens)
        _limit_options(limit_node, sql, tokens)
        count = limit_node.args.get("count")
        limit = 1 if count is None else _row_count(count, sql, "FETCH", tokens)
    elif limit_node is not None:
        refuse_unknown_args(limit_node, LIMIT_ARGS, sql, tokens)
        _limit_options(limit_node, sql, tokens)
        value = limit_node.expression
        if not (isinstance(value, exp.Var) and value.name.upper() == "ALL"):  # LIMIT ALL: no limit
            limit = _row_count(value, sql, "LIMIT", tokens)
    offset_node = tree.args.get("offset")
    if offset_node is not None:
        refuse_unknown_args(offset_node, OFFSET_ARGS, sql, tokens)
        offset = _row_count(offset_node.expression, sql, "OFFSET", tokens)
    return limit, offset

"""How big a query may be: its terms counted from the text before parsing, then its parsed tree's depth, terms and
whole numbers (``check_integers``, ``rebalance``, ``check_depth``, run by :func:`dstp.query.parse.validate_query`).

Refusing a query with too many terms before it is parsed makes the planning bomb cost microseconds.

sqlglot takes about a tenth of a second of CPU (holding the GIL) to parse a
2 KB expression of 990 ``+1`` terms; sixteen clients sending it in a loop kept
a 2-core server's CPU busy and every other request waiting, even though each
query was refused once parsed (``check_depth``: MAX_EXPRESSION_TERMS). A
``+``, ``/`` or ``%`` outside string literals, quoted names and comments is a
binary operator — each one a term of the parsed tree — so more of them than
MAX_EXPRESSION_TERMS is refused from the text alone, with the same message.
``-`` and ``*`` are not counted (negative numbers, ``select *``); the count is
a lower bound, and the tree is still checked exactly after parsing: ``check_integers``, ``rebalance`` and
``check_depth`` keep it within what planning and DuckDB can take — at most MAX_EXPRESSION_DEPTH levels deep and
MAX_EXPRESSION_TERMS arithmetic operators and function calls in all (DuckDB takes about a millisecond to bind each:
16 queries of 990 ``+1`` terms kept a server busy for minutes).
"""

from __future__ import annotations

import re

from sqlglot import exp

from dstp.errors import QueryError
from dstp.query._text import error_at

__all__ = ["INT64_MAX", "MAX_EXPRESSION_DEPTH", "MAX_EXPRESSION_TERMS", "check_depth", "check_integers",
           "check_terms_before_parsing", "rebalance"]

#: Deepest expression tree accepted, counted in sqlglot nodes.
MAX_EXPRESSION_DEPTH = 100
#: Most arithmetic operators, function calls, casts and CASEs in one query. Values (-1 too), names, comparisons,
#: AND/OR/NOT and the query's clauses are free: long flat lists of conditions stay allowed (max_sql_length
#: bounds them), while ``x+1+1+…`` packs one term into every two characters.
MAX_EXPRESSION_TERMS = 500
INT64_MAX = 2**63 - 1

# String literals, quoted names, comments, and the sign of a number's exponent (1e+300): not operators.
_NOT_OPERATORS = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|--[^\n]*|/\*.*?\*/|\d[eE][+-]", re.S)


def check_terms_before_parsing(sql: str) -> None:
    """Raise QueryError if ``sql`` surely has more than MAX_EXPRESSION_TERMS arithmetic operators."""
    bare = _NOT_OPERATORS.sub(" ", sql)
    operators = bare.count("+") + bare.count("/") + bare.count("%")
    if operators > MAX_EXPRESSION_TERMS:
        raise QueryError(
            f"this query has more than {MAX_EXPRESSION_TERMS} arithmetic operators and function calls "
            f"({operators} of + / %); simplify its expressions (compute the rest in your client), or use IN (…) "
            "for a list of values"
        )


# -- the tree as a whole ---------------------------------------------------------------------


def check_integers(tree: exp.Expression, sql: str) -> None:
    """Refuse whole numbers beyond 64 bits (DuckDB would type them as 128-bit and fail later)."""
    for literal in tree.find_all(exp.Literal):
        text = literal.this.replace("_", "") if isinstance(literal.this, str) else ""
        if literal.is_string or not text.isdigit():
            continue
        digits = text.lstrip("0") or "0"
        # By length first: Python refuses int() of more than 4,300 digits, and the answer is plain anyway.
        if len(digits) > len(str(INT64_MAX)) or int(digits) > INT64_MAX:
            shown = text if len(text) <= 24 else text[:20] + "…"
            exponent = f"{float(digits):.3g}".replace("e+", "e") if len(digits) < 300 else \
                f"{digits[0]}.{digits[1:3]}".rstrip("0").rstrip(".") + f"e{len(digits) - 1}"
            raise error_at(
                QueryError,
                f"the whole number {shown} is too large (at most {INT64_MAX}); "
                f"for a real number write it with an exponent, e.g. {exponent}",
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


# Nodes not counted as terms: values, names, grouping, conditions and connectives, the query's own clauses.
_FREE_NODES = (exp.Literal, exp.Identifier, exp.Column, exp.Null, exp.Boolean, exp.Paren, exp.Alias, exp.Star,
               exp.And, exp.Or, exp.Not, exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Between, exp.In,
               exp.Is, exp.NullSafeEQ, exp.NullSafeNEQ, exp.Neg, exp.DataType, exp.DataTypeParam, exp.Var, exp.Tuple,
               exp.Query, exp.Subquery, exp.Table, exp.TableAlias, exp.From, exp.Join, exp.Where, exp.Group,
               exp.Having, exp.Order, exp.Ordered, exp.Limit, exp.Offset)


def check_depth(tree: exp.Expression, sql: str) -> None:
    """Refuse expression trees deeper than MAX_EXPRESSION_DEPTH (DuckDB refuses 1000) or with more than
    MAX_EXPRESSION_TERMS arithmetic operators and calls, before anything is planned."""
    stack: list[tuple[exp.Expression, int]] = [(tree, 0)]
    terms = 0
    while stack:
        node, depth = stack.pop()
        if not isinstance(node, _FREE_NODES):
            terms += 1
            if terms > MAX_EXPRESSION_TERMS:
                raise error_at(
                    QueryError,
                    f"this query has more than {MAX_EXPRESSION_TERMS} arithmetic operators and function calls; "
                    "simplify its expressions (compute the rest in your client), or use IN (…) for a list of values",
                    sql,
                    node,
                )
        if depth > MAX_EXPRESSION_DEPTH:
            raise error_at(
                QueryError,
                f"this expression is nested more than {MAX_EXPRESSION_DEPTH} levels deep; "
                "split it up, or use IN (…) for a list of values",
                sql,
                node,
            )
        stack.extend((child, depth + 1) for child in node.iter_expressions())

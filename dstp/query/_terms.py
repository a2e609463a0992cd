"""Refusing a query with too many terms before it is parsed: the planning bomb costs microseconds.

sqlglot takes about a tenth of a second of CPU (holding the GIL) to parse a
2 KB expression of 990 ``+1`` terms; sixteen clients sending it in a loop kept
a 2-core server's CPU busy and every other request waiting, even though each
query was refused once parsed (``check_depth``: MAX_EXPRESSION_TERMS). A
``+``, ``/`` or ``%`` outside string literals, quoted names and comments is a
binary operator — each one a term of the parsed tree — so more of them than
MAX_EXPRESSION_TERMS is refused from the text alone, with the same message.
``-`` and ``*`` are not counted (negative numbers, ``select *``); the count is
a lower bound, and the tree is still checked exactly after parsing.
"""

from __future__ import annotations

import re

from dstp.errors import QueryError
from dstp.query._expressions import MAX_EXPRESSION_TERMS

__all__ = ["check_terms_before_parsing"]

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

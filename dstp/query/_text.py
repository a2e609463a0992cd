"""Reading a query's text: tokens, then one sqlglot statement, with errors in the user's words.

Text that cannot be read gets a :class:`QuerySyntaxError` pointing at the token (an unclosed quote
is pointed at where it opens), worded without sqlglot's vocabulary. Parentheses nested deeper than
``MAX_NESTING`` are refused from the tokens, before sqlglot's parser recurses into them; anything
else too deep for the parser is refused too, never a RecursionError.
"""

from __future__ import annotations

import difflib
import re
from typing import Any

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import Token, TokenType

from dstp.errors import ForbiddenQueryError, QueryError, QuerySyntaxError

__all__ = ["DIALECT", "MAX_NESTING", "TOO_DEEP", "error_at", "operator_token", "place", "position", "read_query",
           "read_select", "snippet", "spell_types", "type_token"]

DIALECT = "duckdb"
#: Deepest nesting of parentheses accepted.
MAX_NESTING = 25


def position(node: Any) -> tuple[int | None, int | None, str | None]:
    """Return (line, column, token text) of the first token inside ``node``, else of its parents."""
    probe: exp.Expr | None = node if isinstance(node, exp.Expr) else None
    while probe is not None:
        for sub in probe.walk():
            meta = sub.meta
            if "line" in meta and "col" in meta:
                text = sub.name if isinstance(sub, (exp.Identifier, exp.Literal)) else None
                return meta["line"], meta["col"], text
        probe = probe.parent
    return None, None, None


def error_at(cls: type[QueryError], message: str, sql: str, node: Any) -> QueryError:
    """Return an error of class ``cls`` placed at a token or at the first token of a node."""
    if isinstance(node, Token):
        return cls(message, sql=sql, line=node.line, column=node.col, token=node.text)
    line, col, token = place(node, sql)
    return cls(message, sql=sql, line=line, column=col, token=token)


def operator_token(node: exp.Binary, operator: str, sql: str) -> Token | None:
    """Return the token of a binary ``node``'s ``operator`` as the query wrote it (the first one after its left
    operand's last token, so a caret sits under ``||`` and not under an operand); None if it cannot be found."""
    ends = [sub.meta["end"] for sub in node.this.walk() if isinstance(sub.meta.get("end"), int)]
    if not ends:
        return None
    at = sql.find(operator, max(ends) + 1)
    if at < 0:
        return None
    line_start = sql.rfind("\n", 0, at) + 1
    return Token(TokenType.DPIPE if operator == "||" else TokenType.VAR, operator, line=sql.count("\n", 0, at) + 1,
                 col=at - line_start + len(operator), start=at, end=at + len(operator) - 1)


def place(node: Any, sql: str) -> tuple[int | None, int | None, str | None]:
    """Return :func:`position` of ``node`` with the token as the query wrote it: a quoted name or a string with
    its quotes, so that a caret sits under all of it."""
    line, col, token = position(node)
    probe: exp.Expr | None = node if isinstance(node, exp.Expr) else None
    while probe is not None and col is not None:
        for sub in probe.walk():
            meta = sub.meta
            if "line" in meta and "col" in meta:
                start, end = meta.get("start"), meta.get("end")
                quoted = isinstance(sub, exp.Literal) and sub.is_string or isinstance(sub, exp.Identifier) and sub.quoted
                if quoted and isinstance(start, int) and isinstance(end, int) and 0 <= start <= end < len(sql) \
                        and "\n" not in sql[start: end + 1]:
                    token = sql[start: end + 1]
                return line, col, token
        probe = probe.parent
    return line, col, token


def snippet(node: exp.Expression, width: int = 40, sql: str | None = None) -> str:
    """Return a node's SQL for a message, shortened to ``width`` characters; with ``sql`` (the query), its
    types as the query spells them (``hugeint``, not sqlglot's ``INT128``)."""
    try:
        text = spell_types(node.sql(dialect=DIALECT), sql)
    except Exception:  # noqa: BLE001 - a node sqlglot cannot print: say less
        return "this part of the query"
    return text if len(text) <= width else text[: width - 1] + "…"


def _type_of(word: str) -> Any:
    """Return the type a type name means in DuckDB's SQL, or None if it names none."""
    try:
        kind = exp.DataType.build(word, dialect=DIALECT).this
    except Exception:  # noqa: BLE001 - sqlglot refuses words that are no type in many ways
        return None
    return None if kind == exp.DataType.Type.USERDEFINED else kind


def _type_tokens(sql: str) -> list[Token]:
    """Return the tokens that name a type (after AS in a cast, or after ``::``), in the query's order."""
    try:
        tokens = Dialect.get_or_raise(DIALECT).tokenize(sql)
    except Exception:  # noqa: BLE001 - text that does not tokenize has no types to spell
        return []
    return [t for before, t in zip(tokens, tokens[1:])
            if before.token_type in (TokenType.ALIAS, TokenType.DCOLON) and _type_of(t.text) is not None]


_TYPE_WORD = re.compile(r"\b[A-Z][A-Z0-9_]*\b")


def spell_types(text: str, sql: str | None) -> str:
    """Return ``text`` (sqlglot's or DuckDB's rendering of part of ``sql``) with each type name the query
    names in its own spelling: sqlglot prints ``hugeint`` as ``INT128`` and ``varchar`` as ``TEXT``."""
    if not sql:
        return text
    spelled: dict[Any, str] = {}
    for token in _type_tokens(sql):
        kind = _type_of(token.text)
        if kind is not None:
            spelled.setdefault(kind, sql[token.start: token.end + 1])
    if not spelled:
        return text

    def respell(match: re.Match[str]) -> str:
        kind = _type_of(match.group(0))
        return spelled.get(kind, match.group(0)) if kind is not None else match.group(0)

    return _TYPE_WORD.sub(respell, text)


def type_token(cast: exp.Expression, sql: str) -> Token | None:
    """Return the token of the type a cast names, as the query spells it (None if it cannot be told)."""
    ends = [sub.meta["end"] for sub in cast.this.walk() if "end" in sub.meta] if cast.this is not None else []
    after = max(ends, default=-1)
    kind = cast.args["to"].this if isinstance(cast.args.get("to"), exp.DataType) else None
    candidates = [t for t in _type_tokens(sql) if t.start > after and _type_of(t.text) == kind]
    return candidates[0] if candidates else None


_MISSING_ARG = re.compile(r"Required keyword: '(\w+)' missing for <class '[\w.]+'>")
_TOKEN_REPR = re.compile(r"<Token token_type: TokenType\.(\w+), text: (.*?), line: \d+.*?>")
_MISSING_QUOTE = re.compile(r"Missing (\S+) from (\d+):(\d+)")


def _parse_message(description: str, highlight: str | None) -> str:
    """Return sqlglot's description of a parse error in words a scientist can act on."""
    near = f" {highlight.strip()!r}" if highlight and highlight.strip() else ""
    if _MISSING_ARG.search(description):
        return f"something is missing after{near}" if near else "the query ends too early"
    token = _TOKEN_REPR.search(description)
    if token:
        kind, text = token.groups()
        got = "the end of the query" if kind == "SENTINEL" else repr(text)
        description = description[: token.start()] + got + description[token.end():]
    if description.startswith("Expected table name"):
        return "FROM needs a dataset name: select … from <dataset>"
    if description.startswith("Invalid expression / Unexpected token"):
        return f"unexpected{near}" if near else "unexpected text"
    # Never let a library's type names through, whatever sqlglot says next.
    description = re.sub(r"<class '[\w.]*?(\w+)'>", r"\1", description)
    return description.replace("TokenType.", "")


def _token_error(exc: TokenError, sql: str) -> QuerySyntaxError:
    """Return the error for text sqlglot cannot split into tokens (an unclosed quote or comment)."""
    missing = _MISSING_QUOTE.search(str(exc.__cause__ or exc))
    if missing:
        quote, offset = missing.group(1), int(missing.group(3))
        offset = min(offset, len(sql) - 1)
        line = sql.count("\n", 0, offset) + 1
        column = offset - (sql.rfind("\n", 0, offset) + 1) + len(quote)
        return QuerySyntaxError(f"cannot read the query: the {quote} opened here is never closed",
                                sql=sql, line=line, column=column, token=quote)
    if "/*" in sql and "*/" not in sql[sql.index("/*"):]:
        offset = sql.index("/*")
        line = sql.count("\n", 0, offset) + 1
        column = offset - (sql.rfind("\n", 0, offset) + 1) + 2
        return QuerySyntaxError("cannot read the query: the /* comment opened here is never closed",
                                sql=sql, line=line, column=column, token="/*")
    return QuerySyntaxError("cannot read the query: check it for an unclosed quote or comment")


def _check_nesting(tokens: list[Token], sql: str) -> None:
    """Refuse parentheses nested deeper than MAX_NESTING, before sqlglot recurses into them."""
    depth = 0
    for token in tokens:
        if token.token_type in (TokenType.L_PAREN, TokenType.L_BRACKET, TokenType.L_BRACE):
            depth += 1
            if depth > MAX_NESTING:
                raise error_at(
                    QueryError,
                    f"parentheses are nested more than {MAX_NESTING} deep here; simplify the expression",
                    sql,
                    token,
                )
        elif token.token_type in (TokenType.R_PAREN, TokenType.R_BRACKET, TokenType.R_BRACE):
            depth = max(0, depth - 1)


TOO_DEEP = f"the query is nested too deeply to read; keep parentheses, NOT and CASE under {MAX_NESTING} levels"


def read_select(sql: str, max_length: int) -> tuple[exp.Select, list[Token]]:
    """Return the one SELECT statement of ``sql`` and its tokens, or raise a typed QueryError."""
    tree, tokens = read_query(sql, max_length)
    if not isinstance(tree, exp.Select):
        raise error_at(ForbiddenQueryError, "only a single SELECT is accepted here", sql, tree)
    return tree, tokens


def read_query(sql: str, max_length: int) -> tuple[exp.Query, list[Token]]:
    """Return the one query of ``sql`` (a SELECT, or SELECTs joined by UNION) and its tokens, or raise."""
    if not sql or not sql.strip():
        raise QuerySyntaxError("the query is empty; try: select * from <dataset> limit 10")
    if len(sql) > max_length:
        raise QueryError(f"the query is {len(sql)} characters long; the limit is {max_length}")
    dialect = Dialect.get_or_raise(DIALECT)
    try:
        tokens = dialect.tokenize(sql)
    except TokenError as exc:
        raise _token_error(exc, sql) from exc
    _check_nesting(tokens, sql)
    try:
        statements = [s for s in dialect.parser().parse(tokens, sql) if s is not None]
    except ParseError as exc:
        first = exc.errors[0] if exc.errors else {}
        line, col, token = first.get("line"), first.get("col"), first.get("highlight")
        desc = _parse_message(str(first.get("description") or "").split("\n")[0], token)
        words = sql.split()
        if words and words[0].lower() not in ("select", "from"):
            desc += "; a dstp query starts with SELECT: select … from <dataset> …"
            # point at the first word, which is what is wrong
            head = sql[: len(sql) - len(sql.lstrip())]
            line = head.count("\n") + 1
            col = len(head.rsplit("\n", 1)[-1]) + len(words[0])
            token = words[0]
        typo = _keyword_typo(tokens, line, col)
        if typo is not None:
            word, keyword = typo
            desc = f"{word.text!r} is not a keyword; did you mean {keyword}?"
            line, col, token = word.line, word.col, word.text
        raise QuerySyntaxError(
            f"cannot parse the query: {desc}", sql=sql, line=line, column=col, token=token
        ) from exc
    except TokenError as exc:
        raise _token_error(exc, sql) from exc
    except RecursionError as exc:
        raise QuerySyntaxError(TOO_DEEP) from exc
    if len(statements) != 1:
        raise ForbiddenQueryError(
            f"send one statement at a time (got {len(statements)}); only SELECT is accepted"
        )
    tree = statements[0]
    if isinstance(tree, (exp.Select, exp.SetOperation)):
        _check_star_modifiers(tree, tokens, sql)
        return tree, tokens
    if not isinstance(tree, (exp.Condition, exp.Alias, exp.Identifier)):
        kind = _statement_kind(tree, tokens)
        raise error_at(
            ForbiddenQueryError,
            f"only SELECT queries are accepted; {kind} statements are never run",
            sql,
            tree,
        )
    raise error_at(QuerySyntaxError, "a dstp query starts with SELECT: select … from <dataset> …", sql, tree)


#: Keywords a query's clauses start with, for "did you mean" on a misspelt one.
_CLAUSE_KEYWORDS = ("SELECT", "FROM", "WHERE", "GROUP", "ORDER", "HAVING", "LIMIT", "OFFSET", "JOIN", "BETWEEN", "AND",
                    "DISTINCT", "UNION", "QUALIFY", "TABLESAMPLE", "EXCLUDE", "REPLACE")


def _keyword_typo(tokens: list[Token], line: Any, col: Any) -> tuple[Token, str] | None:
    """Return (the word, the keyword it misspells) when a plain word just before where parsing failed is one
    letter or two off a clause keyword (``form`` for FROM), else None."""
    if not isinstance(line, int) or not isinstance(col, int):
        return None
    at = next((i for i, t in enumerate(tokens) if (t.line, t.col) >= (line, col)), len(tokens) - 1)
    for token in tokens[max(0, at - 1): at + 1]:
        if token.token_type != TokenType.VAR or not token.text.isalpha():
            continue
        close = difflib.get_close_matches(token.text.upper(), _CLAUSE_KEYWORDS, n=1, cutoff=0.75)
        if close:
            return token, close[0]
    return None


def _statement_kind(tree: exp.Expr, tokens: list[Token]) -> str:
    """Return the statement's kind as the user wrote it (its first keyword), e.g. UNPIVOT or COPY."""
    first = next((t for t in tokens if t.token_type not in (TokenType.L_PAREN,)), None)
    if first is not None and first.text.isalpha():
        return first.text.upper()
    return tree.key.upper()


_STAR_EXAMPLES = {"exclude": "(lat, lon)", "except": "(lat, lon)", "replace": "(temperature - 273.15 as temperature)",
                  "rename": "(temperature as t)"}


def _check_star_modifiers(tree: exp.Query, tokens: list[Token], sql: str) -> None:
    """Refuse ``* exclude`` / ``* replace`` / ``* rename`` with nothing after them.

    sqlglot reads ``select * exclude from ccm3`` as ``select * from ccm3`` and drops the word.
    """
    for before, word, after in zip(tokens, tokens[1:], tokens[2:]):
        example = _STAR_EXAMPLES.get(word.text.lower())
        if before.token_type == TokenType.STAR and example is not None \
                and after.token_type in (TokenType.FROM, TokenType.COMMA, TokenType.SEMICOLON):
            keyword = word.text.upper()
            raise error_at(QuerySyntaxError, f"* {keyword} needs a list in parentheses, e.g. * {keyword} {example}",
                           sql, word)

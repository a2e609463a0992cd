"""``*`` in a SELECT list: the columns it stands for, with DuckDB's EXCLUDE, REPLACE and RENAME applied.

    expand_star(star, checker, table, sql, tokens) -> [output AS name, …]

A dataset's ``*`` is its star columns (:meth:`~._scope.Source.star`); a
matchup's is its left side's, then its right side's, a right column whose
name the left already has prefixed with the right side's name. Each column
is marked used on its source, so the scan reads it.
"""

from __future__ import annotations

from sqlglot import exp
from sqlglot.tokens import Token

from dstp.errors import QueryError, UnknownColumnError
from dstp.query._clauses import STAR_ARGS, refuse_unknown_args
from dstp.query._expressions import Checker
from dstp.query._scope import MatchupSource, Source
from dstp.query._text import error_at

__all__ = ["expand_star", "output"]


def output(node: exp.Expression, name: str) -> exp.Alias:
    """Return ``node AS "name"``: one output column."""
    return exp.Alias(this=node, alias=exp.to_identifier(name, quoted=True))


def expand_star(star: exp.Star, checker: Checker, table: exp.Expression | None, sql: str,
                tokens: list[Token]) -> list[exp.Alias]:
    """Return the outputs ``*`` stands for, with its EXCLUDE, REPLACE and RENAME lists applied."""
    refuse_unknown_args(star, STAR_ARGS, sql, tokens)
    sources = checker.scope.sources
    if table is not None:
        sources = [s for s in sources if table.name.lower() in s.qualifiers()]
        if not sources:
            raise error_at(UnknownColumnError, f"{table.name!r} is not a dataset or name of this query",
                           sql, table)
    items: list[tuple[str, Source, str]] = []  # output name, source, column
    for source in sources:
        if isinstance(source, MatchupSource):
            left = [(c, source, f"l.{c}") for c in source.left.star()]
            taken = {c for c, _, _ in left}
            right = [(f"{source.right_name}_{c}" if c in taken else c, source, f"r.{c}")
                     for c in source.right.star()]
            items += [*left, *right]
            continue
        items += [(c, source, c) for c in source.star()]
    names = [n for n, _, _ in items]
    star_columns = ", ".join(names)

    def member(node: exp.Expression, what: str) -> str:
        if not isinstance(node, exp.Column):
            raise error_at(QueryError, f"{what} lists columns of the dataset, e.g. {what} (lat, lon)",
                           sql, node)
        hits = [n for n in names if n == node.name] or [n for n in names if n.lower() == node.name.lower()]
        if len(hits) != 1:
            checker.resolve(node)  # an unknown column says so; a known one is not among *'s
            raise error_at(UnknownColumnError, f"{what} names {node.name!r}, which is not one of the columns "
                           f"* stands for ({star_columns})", sql, node)
        return hits[0]

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
        identifier = node.args["alias"]
        target = exp.Column(this=identifier.copy())
        target.this.meta.update(identifier.meta)
        name = member(target, "REPLACE")
        claim(name, "REPLACE", node)
        replaced[name] = checker.check(node.this, "select")
    renamed: dict[str, str] = {}
    for node in star.args.get("rename") or []:
        if not isinstance(node, exp.Alias) or not isinstance(node.this, exp.Column) or not node.alias.strip():
            raise error_at(QueryError, "RENAME takes columns with their new names: * rename (temperature as t)",
                           sql, node)
        name = member(node.this, "RENAME")
        claim(name, "RENAME", node)
        renamed[name] = node.alias
    outputs: list[exp.Alias] = []
    for name, source, column in items:
        if name in excluded:
            continue
        if name in replaced:
            outputs.append(output(replaced[name], name))
            continue
        if isinstance(source, MatchupSource):
            side = source.left if column.startswith("l.") else source.right
            side.use(column[2:])
        else:
            source.use(column)
        alias, sql_name = source.sql_column(column, None)
        bound = exp.Column(this=exp.Identifier(this=sql_name, quoted=True),
                           table=exp.Identifier(this=alias, quoted=True))
        bound.meta["dstp"] = source.meta(column)
        outputs.append(output(bound, renamed.get(name, name)))
    if not outputs:
        raise error_at(QueryError, "EXCLUDE leaves no column to select", sql, star)
    return outputs

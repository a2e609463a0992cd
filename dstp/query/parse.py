"""Parsing and validating a query: user text in, a checked sqlglot tree out.

dstp accepts one SQL query over the catalog's datasets::

    [with <name> as (<query>), …]
    select [distinct] <columns | expressions | aggregates | window functions | * [exclude (…)] [replace (…)] …>
      from <source> [[left|right|full|asof] join <source> on <condition>] …
      [where <predicate>] [group by <expressions> | all] [having <predicate>] [qualify <predicate>]
      [order by <expr> [asc|desc], … | all] [limit <n> | all] [offset <m>]
    [union [all] <another select> …]

    <source> := <dataset> [as alias] [tablesample <p>% | <n> rows [repeatable (<seed>)]]
              | stride(<dataset>, dim = k, …) | <cte> | (<query>) [as alias]
              | matchup(<records>, <grid>, time => …, position => …, vertical => …) [as alias]

The text is read by :mod:`dstp.query._text` (sqlglot, DuckDB dialect) and
bound by :mod:`dstp.query._binder`: every node of the tree is checked against
a whitelist (:mod:`dstp.query._expressions`) — only SELECTs and UNIONs, only
catalog datasets and the query's own CTEs as tables, only their columns, only
the operators and functions listed — and every clause names the sqlglot
arguments it honours (:mod:`dstp.query._clauses`), so a clause sqlglot learns
to parse can never be dropped silently. The SQL DuckDB later runs is generated
from this validated tree; the user's text never reaches DuckDB. Every error
points at the offending token, and no message carries a library's internals.

Size limits keep every later stage away from its own limits: parentheses nest
at most ``MAX_NESTING`` deep (sqlglot's parser recurses per level), an
expression tree is at most ``MAX_EXPRESSION_DEPTH`` deep (DuckDB stops at
1000), whole numbers fit in 64 bits, LIMIT and OFFSET are at most
``MAX_ROW_COUNT``. Long AND/OR chains are rebalanced, which changes nothing
they mean but keeps them shallow.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from sqlglot import exp

from dstp.errors import QueryError
from dstp.query._binder import Binder
from dstp.query._clauses import MAX_ROW_COUNT, MAX_SAMPLE_ROWS, Sampling
from dstp.query._expressions import AGGREGATES, ALLOWED_FUNCTIONS
from dstp.query._scope import ColumnMeta, DatasetRef
from dstp.query._text import DIALECT, MAX_NESTING, TOO_DEEP, read_query
from dstp.query._terms import (
    INT64_MAX,
    MAX_EXPRESSION_DEPTH,
    check_depth,
    check_integers,
    check_terms_before_parsing,
    rebalance,
)
from dstp.query.matchup import MatchupSpec

if TYPE_CHECKING:
    from dstp.catalog.dataset import GriddedDataset
    from dstp.catalog.registry import Catalog
    from dstp.catalog.remote import RemoteDataset

__all__ = [
    "AGGREGATES",
    "ALLOWED_FUNCTIONS",
    "DIALECT",
    "INT64_MAX",
    "MAX_EXPRESSION_DEPTH",
    "MAX_NESTING",
    "MAX_ROW_COUNT",
    "MAX_SAMPLE_ROWS",
    "Sampling",
    "ValidatedQuery",
    "validate_query",
]


@dataclass(frozen=True, slots=True)
class ValidatedQuery:
    """A query that passed validation, bound to its datasets.

    ``tree`` is what DuckDB runs: every dataset named in FROM replaced by its
    scan table (``references``), every matchup by the join of its two staged
    tables (``matchups``). The other fields describe the outermost SELECT and
    its first dataset, as a one-dataset query reads them.
    """

    sql: str
    #: The first dataset the query names (the only one of a one-dataset query).
    dataset: GriddedDataset | RemoteDataset
    #: Output expressions of the outermost SELECT, each an exp.Alias naming the output column.
    outputs: tuple[exp.Alias, ...]
    where: exp.Expression | None
    order: tuple[exp.Ordered, ...]
    limit: int | None
    offset: int | None
    sampling: Sampling | None
    strides: dict[str, int] = field(default_factory=dict)
    #: Every column of the first dataset the query reads, in dataset order.
    columns: tuple[str, ...] = ()
    tree: exp.Expression | None = None
    #: Every dataset named in the query, one reference per name (a self-join names one twice).
    references: tuple[DatasetRef, ...] = ()
    matchups: tuple[MatchupSpec, ...] = ()
    #: What is known of each output (calendar, key), in output order.
    output_metas: tuple[ColumnMeta | None, ...] = ()
    #: The outermost GROUP BY keys as output names: the result's grid.
    group_keys: tuple[str, ...] = ()
    #: One dataset's records as grid points (no join, grouping, aggregate, DISTINCT, window, subquery).
    simple: bool = True
    #: The outermost SELECT reduces records (GROUP BY, HAVING or an aggregate).
    aggregated: bool = False

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(o.alias for o in self.outputs)

    @property
    def dataset_ids(self) -> tuple[str, ...]:
        """Return the ids of every catalog dataset the query reads, local and remote, each once
        (access checks go through this)."""
        return tuple(dict.fromkeys(r.dataset.id for r in self.references))


def validate_query(sql: str, catalog: Catalog, *, max_length: int = 16_384) -> ValidatedQuery:
    """Return the validated form of ``sql`` against ``catalog``, or raise a typed QueryError."""
    if len(sql) <= max_length:  # too long is said first; then the planning bomb is refused from its text
        check_terms_before_parsing(sql)
    tree, tokens = read_query(sql, max_length)
    try:
        return _validate(cast(exp.Expression, tree), tokens, sql, catalog)  # sqlglot 30: Query is an Expr
    except RecursionError as exc:
        raise QueryError(TOO_DEEP) from exc


def _validate(tree: exp.Expression, tokens: Any, sql: str, catalog: Catalog) -> ValidatedQuery:
    check_integers(tree, sql)
    rebalance(tree)
    check_depth(tree, sql)
    binder = Binder(sql, tokens, catalog)
    bound, info = binder.bind(tree)
    first = binder.refs[0]
    return ValidatedQuery(
        sql=sql,
        dataset=first.dataset,
        outputs=tuple(info.outputs),
        where=info.where,
        order=tuple(info.order),
        limit=info.limit,
        offset=info.offset,
        sampling=first.sampling,
        strides=first.strides,
        columns=first.columns(),
        tree=bound,
        references=tuple(binder.refs),
        matchups=tuple(binder.matchups),
        output_metas=tuple(info.metas),
        group_keys=info.group_keys,
        simple=info.simple and len(binder.refs) == 1 and not binder.matchups,
        aggregated=info.aggregated,
    )

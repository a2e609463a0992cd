"""Exact pushdown: the WHERE conjuncts a scan's hyperslab already satisfies, left out of the SQL DuckDB runs.

Pushdown (:mod:`._pushdown`) turns a coordinate condition into an index
range; the scan then reads only that range. A conjunct on one dimension
coordinate (``lat between 30 and 40``, ``time <= '2000-03-16T00:00:00'``,
``lon = 90``) is *proven* when DuckDB itself, evaluating that very conjunct
on the coordinate's values at every index the scan reads — the same values,
in the same Arrow type, that the scan hands DuckDB for those records (the
catalog's, :meth:`GridScan._piece`) — finds it true at each of them. Then
every record of the scan satisfies it, and the WHERE without it selects the
same records: it is removed from the printed SQL, and a coordinate column
that only it needed is no longer scanned. A slab query (``select salinity
from ocean where time <= … and lat > … and lat < …``) becomes a plain
projection that skips DuckDB (:func:`dstp.query.execute.plain_projection`).

Nothing is assumed about monotonicity, calendars, float precision, text
order or fill values: the proof is DuckDB's own answer on the values, so a
comparison DuckDB would make in float32 or in text order is made so here too,
and a NULL or false at any read index keeps the conjunct. Only conjuncts
built of one column, literals, signs, casts to a timestamp or date, and
comparisons (=, <, <=, >, >=, BETWEEN, IN) are tried — no function, so
nothing volatile or session-dependent — and only in a query over one local
dataset reference with no join, CTE, sampling or matchup, where the WHERE
filters the scan's records and nothing else. Anything else keeps its
conjunct, and DuckDB evaluates it as before.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import duckdb
import pyarrow as pa
from sqlglot import exp

from dstp.query._pushdown import Hyperslab, conjuncts

if TYPE_CHECKING:
    from dstp.catalog.dataset import GriddedDataset

__all__ = ["proven_conjuncts"]

#: Node types a conjunct may be built of to be tried (no function: nothing volatile or session-dependent).
_PLAIN = (exp.Column, exp.Identifier, exp.Literal, exp.Neg, exp.Paren, exp.Cast, exp.DataType,
          exp.GT, exp.GTE, exp.LT, exp.LTE, exp.EQ, exp.Between, exp.In)
_COMPARISONS = (exp.GT, exp.GTE, exp.LT, exp.LTE, exp.EQ, exp.Between, exp.In)
_CASTS = {exp.DataType.Type.TIMESTAMP, exp.DataType.Type.DATE}
_TABLE = "__dstp_exact"

_lock = threading.Lock()
_database: duckdb.DuckDBPyConnection | None = None


def _connection() -> duckdb.DuckDBPyConnection:
    global _database
    if _database is None:
        _database = duckdb.connect(config={"threads": 1, "enable_external_access": False,
                                           "autoinstall_known_extensions": False,
                                           "autoload_known_extensions": False})
    return _database


def _column_of(conj: exp.Expression) -> str | None:
    """Return the one column a plain comparison of a column with literals reads, else None."""
    while isinstance(conj, exp.Paren):
        conj = conj.this
    if not isinstance(conj, _COMPARISONS):
        return None
    if isinstance(conj, exp.In) and conj.args.get("query") is not None:
        return None
    for node in conj.walk():
        if not isinstance(node, _PLAIN):
            return None
        if isinstance(node, exp.Cast) and (not isinstance(node.to, exp.DataType) or node.to.this not in _CASTS
                                           or not isinstance(node.this, exp.Literal)):
            return None
    names = {c.name for c in conj.find_all(exp.Column)}
    return names.pop() if len(names) == 1 else None


def proven_conjuncts(ds: GriddedDataset, hyperslab: Hyperslab, where: exp.Expression) -> list[bool]:
    """Return, per top-level conjunct of ``where`` (columns of the one scan), whether every record the scan
    yields is proven to satisfy it (see the module docstring)."""
    from dstp.query.scan import arrow_values  # scan imports plan, which imports this module

    parts = conjuncts(where)
    ranges = dict(zip(hyperslab.dims, hyperslab.ranges))
    by_column: dict[str, list[int]] = {}
    for i, conj in enumerate(parts):
        name = _column_of(conj)
        coord = ds.coordinates.get(name) if name is not None else None
        if coord is None or coord.dimension is None or coord.dimension not in ranges \
                or len(ranges[coord.dimension]) == 0:
            continue
        by_column.setdefault(coord.name, []).append(i)
    out = [False] * len(parts)
    for name, indices in by_column.items():
        coord = ds.coordinates[name]
        r = ranges[coord.dimension]  # type: ignore[index]
        values = arrow_values(coord.values[r.start:r.stop:r.step], None, coord.arrow_type)
        tests = []
        for i in indices:
            bare = parts[i].copy()
            for column in bare.find_all(exp.Column):
                column.set("table", None)
            tests.append(f"coalesce(bool_and(coalesce(({bare.sql(dialect='duckdb')}), false)), false)")
        try:
            with _lock:
                con = _connection().cursor()
                try:
                    con.register(_TABLE, pa.table({name: values}))
                    row: Any = con.execute(f"select {', '.join(tests)} from {_TABLE}").fetchone()
                finally:
                    con.close()
        except duckdb.Error:
            continue  # a literal of another type: leave it to DuckDB's error in the query itself
        for i, ok in zip(indices, row):
            out[i] = ok is True
    return out

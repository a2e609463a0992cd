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

import collections
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


#: Proofs kept by (coordinate column, index range, conjunct SQL): the chunks and variables of one Dataset
#: repeat them. The coordinate object is kept with its proof, so an identity is never reused for another.
_PROOFS: collections.OrderedDict[tuple[int, range, str], tuple[Any, bool]] = collections.OrderedDict()
PROOFS_KEPT = 4096


def proven_conjuncts(ds: GriddedDataset, hyperslab: Hyperslab, where: exp.Expression) -> list[str | None]:
    """Return, per top-level conjunct of ``where`` (columns of the one scan), its SQL (columns unqualified) when
    every record the scan yields is proven to satisfy it, else None (see the module docstring)."""
    from dstp.query.scan import arrow_values  # scan imports plan, which imports this module

    parts = conjuncts(where)
    ranges = dict(zip(hyperslab.dims, hyperslab.ranges))
    out: list[str | None] = [None] * len(parts)
    asked: dict[str, list[tuple[int, str]]] = {}
    for i, conj in enumerate(parts):
        name = _column_of(conj)
        coord = ds.coordinates.get(name) if name is not None else None
        if coord is None or coord.dimension is None or coord.dimension not in ranges \
                or len(ranges[coord.dimension]) == 0:
            continue
        bare = conj.copy()
        for column in bare.find_all(exp.Column):
            column.set("table", None)
        text = bare.sql(dialect="duckdb")
        with _lock:
            kept = _PROOFS.get((id(coord), ranges[coord.dimension], text))
        if kept is not None and kept[0] is coord:
            out[i] = text if kept[1] else None
            continue
        asked.setdefault(coord.name, []).append((i, text))
    if not asked:
        return out
    tables: dict[str, pa.Table] = {}
    selects: list[tuple[int, str, str]] = []  # (conjunct, its SQL, the subquery proving it)
    for k, (name, tried) in enumerate(asked.items()):
        coord = ds.coordinates[name]
        r = ranges[coord.dimension]  # type: ignore[index]
        table = f"{_TABLE}_{k}"
        tables[table] = pa.table({name: arrow_values(coord.values[r.start:r.stop:r.step], None, coord.arrow_type)})
        selects += [(i, text, f"(select coalesce(bool_and(coalesce(({text}), false)), false) from {table})")
                    for i, text in tried]
    proofs = _run(tables, [q for _, _, q in selects])
    with _lock:
        for (i, text, _), ok in zip(selects, proofs):
            coord = ds.coordinates[_column_of(parts[i])]  # type: ignore[index]
            _PROOFS[(id(coord), ranges[coord.dimension], text)] = (coord, ok)  # type: ignore[index]
            out[i] = text if ok else None
        while len(_PROOFS) > PROOFS_KEPT:
            _PROOFS.popitem(last=False)
    return out


def _run(tables: dict[str, pa.Table], subqueries: list[str]) -> list[bool]:
    """Return each subquery's answer, all in one statement (a DuckDB call costs more than the few values it
    reads); one by one when one does not run (a literal of another type: left to DuckDB's error in the query)."""
    with _lock:
        con = _connection().cursor()
        try:
            for table, values in tables.items():
                con.register(table, values)
            try:
                row: Any = con.execute(f"select {', '.join(subqueries)}").fetchone()
                return [ok is True for ok in row]
            except duckdb.Error:
                pass
            out = []
            for subquery in subqueries:
                try:
                    one: Any = con.execute(f"select {subquery}").fetchone()
                except duckdb.Error:
                    one = (False,)
                out.append(one[0] is True)
            return out
        finally:
            con.close()

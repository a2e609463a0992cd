"""From an index hyperslab of one dataset variable to the dstp query that reads exactly it.

Facades that address data by index translate here: the xarray backend
(:mod:`dstp.client._backend`) asks for ``var[k0, k1, …]`` with integers and
slices (xarray's basic indexing), ERDDAP's griddap (:mod:`dstp.erddap.dataset`)
for ``var[start:stride:stop]…``. Both end as dstp SQL run by the service:
nothing here reads data. The query language has
no index ranges, but it has the two things that make them: coordinate
predicates, which the planner pushes down into index ranges (docs/query-language.md,
"Coordinate pushdown"), and ``stride(ds, dim = k)``, which keeps the indices
0, k, 2k, … of a dimension. So an index range ``[a, b)`` of a dimension with a
monotonic coordinate becomes a predicate on that coordinate whose bounds sit
*between* the neighbouring values (halfway for floats, so no rounding can let
a neighbour in or keep a wanted value out; exact for integers, times and
text), and a step ``k`` becomes ``stride(…, dim = k)`` when ``a`` is a multiple
of ``k``. When it is not, the query strides by ``gcd(a, k)`` and the client
keeps every ``k / gcd``-th value (at most ``k`` times the values asked for).
A dimension whose coordinate is not monotonic is read whole and sliced by the caller.

:func:`slab_query` returns the SQL and what the caller does with the
records: the shape they come in (C order over the dataset's dimension
order, as the query language promises) and the slicing left to apply.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

__all__ = ["Axis", "Slab", "kept_rows", "quote_name", "slab_query", "sql_literal"]


@dataclass(frozen=True, slots=True)
class Axis:
    """One dimension as the backend knows it: size, coordinate column and values, whether they are monotonic."""

    name: str
    size: int
    #: The column holding the dimension's coordinate ("" when there is none to constrain).
    column: str = ""
    #: The coordinate values as the server compares them (numbers, datetime64[us], or ISO text).
    values: np.ndarray | None = None
    #: 1 ascending, -1 descending, 0 neither (then nothing can be pushed down).
    order: int = 0


@dataclass(frozen=True, slots=True)
class Slab:
    """A query reading one hyperslab, and how to turn its records into the array asked for."""

    sql: str
    #: Shape of the records in grid order (the dataset's dimension order).
    read_shape: tuple[int, ...]
    #: The variable's dimensions in grid order (the records' C order).
    grid: tuple[str, ...]
    #: Per grid dimension, the slice to apply to what was read (strides the server could not do).
    keep: tuple[slice, ...]


def quote_name(name: str) -> str:
    """Return ``name`` as a quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def sql_literal(value: Any) -> str:
    """Return a SQL literal that the server parses back to exactly ``value``."""
    if isinstance(value, np.datetime64):
        text = str(value.astype("datetime64[us]")).replace("T", " ")
        return f"timestamp '{text}'"
    if isinstance(value, (str, np.str_)):
        return "'" + str(value).replace("'", "''") + "'"
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"cannot select by a non-finite coordinate value {number}")
    # Seventeen significant digits in e-notation: parsed as a DOUBLE (no DECIMAL rounding), exactly.
    return f"{number:.17e}"


def _between(lower: Any, upper: Any) -> Any:
    """Return a value strictly between two neighbouring float coordinate values."""
    return (float(lower) + float(upper)) / 2.0


def _range_predicate(axis: Axis, start: int, stop: int) -> list[str]:
    """Return the predicates that keep exactly the indices [start, stop) of a monotonic coordinate."""
    assert axis.values is not None
    values = axis.values
    n = len(values)
    if start <= 0 and stop >= n:
        return []
    column = quote_name(axis.column)
    first, last = values[start], values[stop - 1]
    # Neighbours outside the range, on the low and high side of its values.
    before = values[start - 1] if start > 0 else None
    after = values[stop] if stop < n else None
    if axis.order < 0:
        first, last = last, first
        before, after = after, before
    out: list[str] = []
    floating = values.dtype.kind == "f"
    if before is not None:
        out.append(f"{column} > {sql_literal(_between(before, first))}" if floating
                   else f"{column} >= {sql_literal(first)}")
    if after is not None:
        out.append(f"{column} < {sql_literal(_between(last, after))}" if floating
                   else f"{column} <= {sql_literal(last)}")
    return out


def slab_query(
    dataset: str,
    columns: Sequence[str],
    dims: Sequence[str],
    key: Sequence[int | slice],
    axes: dict[str, Axis],
    dimension_order: Sequence[str],
) -> Slab:
    """Return the query reading ``columns`` (all on ``dims``) at the index ``key`` (ints and slices).

    ``axes`` describes every dimension, ``dimension_order`` is the dataset's
    order of dimensions (the records' C order). Integer keys keep their
    dimension in the read shape (length 1); the caller drops it.
    """
    wanted: dict[str, range] = {}
    for dim, k in zip(dims, key):
        size = axes[dim].size
        if isinstance(k, slice):
            wanted[dim] = range(size)[k]
        else:
            i = int(k)
            wanted[dim] = range(i, i + 1)
    grid = tuple(d for d in dimension_order if d in wanted)
    predicates: list[str] = []
    strides: dict[str, int] = {}
    read_shape: list[int] = []
    keep: list[slice] = []
    for dim in grid:
        r, axis = wanted[dim], axes[dim]
        if len(r) == 0:
            raise ValueError("an empty selection needs no query")
        step = r.step if len(r) > 1 else 1
        lo, hi = r.start, r[-1] + 1
        if not axis.column or axis.order == 0 or axis.values is None:
            # Nothing to push down: read the whole dimension and slice here.
            read_shape.append(axis.size)
            keep.append(slice(r.start, r[-1] + 1, step))
            continue
        server_step = math.gcd(lo, step) if step > 1 else 1
        if server_step > 1:
            strides[dim] = server_step
        predicates += _range_predicate(axis, lo, hi)
        first = -(-lo // server_step) * server_step
        count = len(range(first, hi, server_step))
        read_shape.append(count)
        keep.append(slice((lo - first) // server_step, None, step // server_step))
    table = quote_name(dataset)
    if strides:
        table = f"stride({table}, " + ", ".join(f"{quote_name(d)} = {k}" for d, k in strides.items()) + ")"
    sql = f"select {', '.join(quote_name(c) for c in columns)} from {table}"
    if predicates:
        sql += " where " + " and ".join(predicates)
    return Slab(sql, tuple(read_shape), grid, tuple(keep))


def kept_rows(slab: Slab) -> np.ndarray | None:
    """Return the positions of the records to keep (C order), or None when every record is wanted."""
    if all(k == slice(0, None, 1) or k == slice(None) for k in slab.keep):
        return None
    return np.arange(math.prod(slab.read_shape)).reshape(slab.read_shape)[slab.keep].reshape(-1)

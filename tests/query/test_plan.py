"""Pushdown turns coordinate predicates into index ranges without ever losing a matching point."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from dstp.catalog.cf import Decoding
from dstp.catalog.dataset import CoordinateColumn
from dstp.catalog.descriptor import CoordinateSpec
from dstp.query.plan import _index_range, _Interval


def _coord(values: np.ndarray) -> CoordinateColumn:
    order = 1 if values.size < 2 or values[1] > values[0] else -1
    return CoordinateColumn(CoordinateSpec("c", "c", "c"), values, pa.from_numpy_dtype(values.dtype),
                            Decoding(pa.from_numpy_dtype(values.dtype)), order)


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(1, 50),
    start=st.floats(-1000, 1000),
    step=st.floats(0.001, 10),
    descending=st.booleans(),
    dtype=st.sampled_from(["f4", "f8"]),
    lo=st.one_of(st.none(), st.floats(-1100, 1100)),
    hi=st.one_of(st.none(), st.floats(-1100, 1100)),
)
def test_index_range_keeps_every_match(n, start, step, descending, dtype, lo, hi) -> None:
    values = (start + step * np.arange(n)).astype(dtype)
    if descending:
        values = values[::-1].copy()
    values = np.unique(values)[:: -1 if descending else 1]  # float32 rounding may merge neighbours
    r = _index_range(_coord(values), _Interval(lo, hi))
    # DuckDB compares a float32 column with a double literal either way (as float or as double): both
    # readings must be inside the range. A float64 column is only ever compared as a double.
    for i, v in enumerate(values):
        for cast in (float(v), float(np.float32(v))) if values.dtype == np.float32 else (float(v),):
            inside = (lo is None or cast >= lo) and (hi is None or cast <= hi)
            if inside:
                assert i in r, (i, v, lo, hi, r)


def test_time_and_text_coordinates() -> None:
    times = np.array(["2000-01-01", "2000-02-01", "2000-03-01"], dtype="datetime64[us]")
    r = _index_range(_coord(times), _Interval(np.datetime64("2000-01-15", "us"), None))
    assert list(r) == [1, 2]
    iso = np.array(["2000-02-29T00:00:00", "2000-02-30T00:00:00", "2000-03-01T00:00:00"], dtype=object)
    c = CoordinateColumn(CoordinateSpec("t", "t", "t"), iso, pa.string(), Decoding(pa.string()), 1)
    assert list(_index_range(c, _Interval("2000-02-30T00:00:00", "2000-02-30T00:00:00"))) == [1]

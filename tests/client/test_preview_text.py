"""The terminal preview of `dstp query`: every value shown exactly, NULL as NA, one line per record."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from dstp.client._output import preview_text


@settings(deadline=None)  # the first example imports numpy's printing
@given(st.lists(st.one_of(st.none(), st.floats(width=32, allow_nan=False)), min_size=1, max_size=20),
       st.lists(st.one_of(st.none(), st.floats(allow_nan=False)), min_size=20, max_size=20))
def test_floats_read_back_as_the_same_values_of_their_type(f32: list[float | None], f64: list[float | None]) -> None:
    n = len(f32)
    table = pa.table({"a": pa.array(f32, pa.float32()), "b": pa.array(f64[:n], pa.float64())})
    lines = preview_text(table).splitlines()
    assert lines[0].split() == ["a", "b"] and len(lines) == n + 1
    for line, x, y in zip(lines[1:], f32, f64[:n]):
        a, b = line.split()
        assert (a == "NA") if x is None else np.float32(a) == np.float32(x)
        assert (b == "NA") if y is None else float(b) == y


def test_times_text_and_nulls() -> None:
    table = pa.table({
        "time": pa.array([dt.datetime(1990, 1, 16, 12), None], pa.timestamp("us")),
        "day": pa.array([dt.date(2001, 2, 3), dt.date(2001, 2, 4)], pa.date32()),
        "station": pa.array(["ALERT", None]),
        "n": pa.array([7, None], pa.int64()),
    })
    lines = preview_text(table).splitlines()
    assert lines[0].split() == ["time", "day", "station", "n"]
    assert lines[1].split() == ["1990-01-16", "12:00:00", "2001-02-03", "ALERT", "7"]
    assert lines[2].split() == ["NA", "2001-02-04", "NA", "NA"]

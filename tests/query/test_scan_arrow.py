"""Scan columns become Arrow arrays exactly as ``pyarrow.array`` makes them (NaT always missing)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from dstp.query.scan import arrow_values

NAT = np.iinfo(np.int64).min
TICKS = st.one_of(st.just(NAT), st.integers(-(2**62), 2**62))


@settings(max_examples=200, deadline=None)
@given(ticks=hnp.arrays(np.int64, st.integers(0, 300), elements=TICKS),
       masked=st.data(), unit=st.sampled_from(["s", "ms", "us", "ns"]), tz=st.sampled_from([None, "UTC"]))
def test_times_become_the_arrays_pyarrow_makes(ticks: np.ndarray, masked: st.DataObject, unit: str,
                                               tz: str | None) -> None:
    values = ticks.view(f"datetime64[{unit}]")
    mask = masked.draw(st.one_of(st.none(), hnp.arrays(np.bool_, ticks.shape)))
    arrow_type = pa.timestamp(unit, tz=tz)
    got = arrow_values(values, mask, arrow_type)
    missing = ticks == NAT if mask is None else mask | (ticks == NAT)
    # pyarrow itself: NaT is null without a mask; with one it would pass NaT on as a date, so it is given both.
    assert got.equals(pa.array(values, type=arrow_type, mask=missing if missing.any() else None))
    assert got.null_count == int(missing.sum())


def test_times_of_another_unit_than_the_column_are_converted_by_pyarrow() -> None:
    values = np.array(["2000-01-01T00:00:00.123", "NaT"], "datetime64[ms]")
    got = arrow_values(values, None, pa.timestamp("us"))
    assert got.to_pylist()[1] is None and got.type == pa.timestamp("us")
    assert got.cast(pa.int64()).to_pylist()[0] == 946_684_800_123_000


def test_broadcast_times_are_read_through_their_view() -> None:
    row = np.array(["1990-01-16T12", "1990-02-15"], "datetime64[us]")
    values = np.broadcast_to(row.reshape(1, -1), (3, 2)).reshape(-1)
    assert arrow_values(values, None, pa.timestamp("us")).equals(pa.array(values, type=pa.timestamp("us")))


NUMBERS = [(np.float32, pa.float32()), (np.float64, pa.float64()), (np.int16, pa.int16()), (np.int32, pa.int32()),
           (np.int64, pa.int64()), (np.uint8, pa.uint8())]


@settings(max_examples=200, deadline=None)
@given(kind=st.sampled_from(NUMBERS), data=st.data())
def test_masked_numbers_become_the_arrays_pyarrow_makes(kind: tuple[type, pa.DataType], data: st.DataObject) -> None:
    dtype, arrow_type = kind
    values = data.draw(hnp.arrays(dtype, st.integers(0, 300)))  # NaN and infinities included for floats
    mask = data.draw(hnp.arrays(np.bool_, values.shape))
    got = arrow_values(values, mask, arrow_type)
    want = pa.array(values, type=arrow_type, mask=mask if mask.any() else None)
    got.validate(full=True)
    assert got.type == want.type and got.null_count == want.null_count
    assert got.is_null().equals(want.is_null())
    valid = ~mask
    # Compared as numbers where valid (Arrow's equals takes NaN as unequal to itself).
    np.testing.assert_array_equal(got.filter(pa.array(valid)).to_numpy(), values[valid])

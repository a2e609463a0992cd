"""Which files a range of the aggregation axis spans: found by bisection, as every file's own check finds them.

hypothesis draws file layouts as archives have them — files of one to many steps in order, split by
variable into parts, now and then overlapping or out of order (then every file is looked at) — and
ranges with steps; the answer must be exactly what checking every file gives.
"""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from dstp.catalog.dataset import GriddedDataset


def every_file(files: list[SimpleNamespace], want: slice, part: int) -> list[tuple[int, slice]]:
    """The reference: look at every file of the part (one file takes the range as it is)."""
    if len(files) == 1:
        return [(0, want)]
    out = []
    for k, f in enumerate(files):
        if f.part != part:
            continue
        lo, hi = f.start, f.start + f.count
        start = want.start if want.start >= lo else want.start + -(-(lo - want.start) // want.step) * want.step
        stop = min(want.stop, hi)
        if start < stop:
            out.append((k, slice(start - lo, stop - lo, want.step)))
    return out


@st.composite
def layouts(draw: st.DrawFn) -> list[SimpleNamespace]:
    parts = draw(st.integers(1, 3))
    files = []
    for part in range(parts):
        start = 0
        for _ in range(draw(st.integers(1, 40))):
            count = draw(st.integers(0, 5))
            if draw(st.integers(0, 15)) == 0:  # an overlap, or a file out of order
                start = max(0, start - draw(st.integers(1, 6)))
            files.append(SimpleNamespace(part=part, start=start, count=count))
            start += count
    if draw(st.booleans()):  # parts interleaved in file order, as a split dataset lists them
        files.sort(key=lambda f: (f.start, f.part))
    return files


@settings(max_examples=400, deadline=None)
@given(layouts(), st.integers(0, 200), st.integers(0, 200), st.integers(1, 7), st.integers(0, 2))
def test_the_files_a_range_spans_are_those_every_files_check_finds(files, a, b, step, part) -> None:
    lo, hi = min(a, b), max(a, b)
    dataset = SimpleNamespace(descriptor=SimpleNamespace(aggregate="time"), files=tuple(files))
    dataset._part_files = GriddedDataset._part_files.func(dataset)  # type: ignore[attr-defined]
    got = list(GriddedDataset._file_parts(dataset, slice(lo, hi, step), part))  # type: ignore[arg-type]
    want = every_file(files, slice(lo, hi, step), part)
    assert [(k, (s.start, s.stop, s.step)) for k, s in got] == [(k, (s.start, s.stop, s.step)) for k, s in want]

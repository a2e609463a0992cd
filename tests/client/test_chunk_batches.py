"""How the chunk reads of one dask compute are grouped into box queries (dstp.client._chunk_batches.boxes).

The property: every chunk key lands in exactly one group, and a group of several keys tiles a box
exactly (no hole, no overlap) within the budget — so a box query reads each grid point of its chunks
once and nothing else. Keys are what xarray hands a backend: integers and slices, strides and
reversed slices too, on dask's regular chunk grids and on arbitrary sets of keys.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dstp.client._chunk_batches import _tiling, boxes, normalise


def _covered(box: tuple, starts: tuple, keys: list[tuple]) -> None:
    """Assert that ``keys`` cover every index of ``box`` exactly once."""
    shape = tuple(len(range(*k)) if isinstance(k, tuple) else 1 for k in box)
    hits = np.zeros(shape, dtype=int)
    for key in keys:
        index = []
        for k, b, s in zip(key, box, starts):
            if s is None:
                assert k == b
                index.append(slice(None))
            else:
                assert k[2] == 1
                index.append(slice(k[0] - s, k[1] - s))
        hits[tuple(index)] += 1
    assert (hits == 1).all()


@st.composite
def _chunk_grids(draw: st.DrawFn) -> tuple[list[tuple], tuple[int, ...]]:
    """Keys of some chunks of a regular chunk grid, maybe with a shared strided or integer key on a dimension."""
    ndim = draw(st.integers(1, 4))
    shape = tuple(draw(st.integers(1, 30)) for _ in range(ndim))
    per_dim: list[list[int | slice]] = []
    for n in shape:
        kind = draw(st.sampled_from(["chunks", "chunks", "int", "stride"]))
        if kind == "int":
            per_dim.append([draw(st.integers(0, n - 1))])
        elif kind == "stride":
            start, step = draw(st.integers(0, n - 1)), draw(st.sampled_from([2, 3, -1, -2]))
            per_dim.append([slice(start, None if step > 0 else None, step)])
        else:
            size = draw(st.integers(1, n))
            per_dim.append([slice(a, min(a + size, n)) for a in range(0, n, size)])
    every = list(itertools.product(*per_dim))
    chosen = draw(st.lists(st.sampled_from(every), min_size=1, max_size=len(every)))
    return [normalise(k, shape) for k in chosen], shape


@settings(max_examples=300, deadline=None)
@given(_chunk_grids(), st.integers(1, 5000))
def test_groups_partition_the_keys_and_tile_boxes_within_the_budget(grid: tuple, budget: int) -> None:
    keys, _ = grid
    groups = boxes(keys, budget)
    assert sorted(map(str, (k for g in groups for k in g))) == sorted(map(str, set(keys)))  # each key once
    for group in groups:
        if len(group) == 1:
            continue
        tiled = _tiling(group)
        assert tiled is not None, group
        box, starts = tiled
        assert math.prod(len(range(*k)) if isinstance(k, tuple) else 1 for k in box) <= budget
        _covered(box, starts, group)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.builds(slice, st.integers(0, 12), st.integers(0, 12), st.sampled_from([1, 1, 2, -1])),
                          st.integers(0, 2)), min_size=1, max_size=12), st.integers(1, 60))
def test_arbitrary_keys_never_loop_and_never_overlap(parts: list[tuple[slice, int]], budget: int) -> None:
    """Overlapping, gapped or duplicated keys (not a dask grid): still a partition, boxes still exact."""
    keys = [normalise(k, (12, 3)) for k in parts]
    keys = [k for k in keys if len(range(*k[0]))]
    groups = boxes(keys, budget) if keys else []
    assert sorted(map(str, (k for g in groups for k in g))) == sorted(map(str, set(keys)))
    for group in groups:
        if len(group) > 1:
            tiled = _tiling(group)
            assert tiled is not None
            _covered(tiled[0], tiled[1], group)

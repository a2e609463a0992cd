"""Receive mappings are reused only when nothing refers to their memory (transport.frames.ReceivePool).

A reused mapping still referenced by a batch would silently rewrite the user's data, so hypothesis
drives random sequences of payloads that are kept (as the memoryview itself, a slice, an Arrow buffer,
a record batch decoded zero-copy, a numpy array) or let go, and checks after every step that each kept
payload still reads exactly what was written into it.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from dstp.transport.wire.frames import LAZY_BUFFER_BYTES, ReceivePool, fresh_buffer

HOLDERS = ("view", "slice", "arrow", "batch", "numpy")


def _ipc(values: np.ndarray) -> bytes:
    batch = pa.record_batch([pa.array(values)], names=["x"])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def _hold(view: memoryview, how: str) -> object:
    if how == "view":
        return view
    if how == "slice":
        return view[7:]
    if how == "arrow":
        return pa.py_buffer(view)
    if how == "batch":
        return pa.ipc.open_stream(pa.py_buffer(view)).read_next_batch().column(0)
    return np.frombuffer(view, np.uint8)


def _read(held: object, how: str) -> bytes:
    if how == "view":
        return bytes(held)  # type: ignore[arg-type]
    if how == "slice":
        return bytes(held)  # type: ignore[arg-type]
    if how == "arrow":
        return held.to_pybytes()  # type: ignore[attr-defined]
    if how == "batch":
        return held.to_numpy().tobytes()  # type: ignore[attr-defined]
    return held.tobytes()  # type: ignore[attr-defined]


@settings(max_examples=60, deadline=None)
@given(steps=st.lists(st.tuples(st.integers(1, 3), st.sampled_from(HOLDERS + ("drop", "drop"))),
                      min_size=1, max_size=25),
       seed=st.integers(0, 2**31 - 1))
def test_a_payload_still_referenced_is_never_written_again(steps: list[tuple[int, str]], seed: int) -> None:
    pool = ReceivePool(max_bytes=6 * 2**16, grain=2**16)
    rng = np.random.default_rng(seed)
    kept: list[tuple[object, str, bytes]] = []
    for grains, how in steps:
        values = rng.integers(0, 2**62, size=(grains * 2**16 - 4096) // 8, dtype=np.int64)
        data = _ipc(values)
        view = pool.take(len(data))
        view[:] = data
        if how != "drop":
            held = _hold(view, how)
            kept.append((held, how, _read(held, how)))
        del view  # CPython frees it here: what is not kept is free for the next payload
        for held, kind, expected in kept:
            assert _read(held, kind) == expected, kind
        if len(kept) > 3:
            kept.pop(int(rng.integers(0, len(kept))))  # let go of one: its mapping becomes free
    assert pool.created + pool.reused == len(steps)


def test_a_free_mapping_is_reused_and_a_held_one_is_not() -> None:
    pool = ReceivePool(max_bytes=8 * 2**20, grain=2**20)
    first = pool.take(3 * 2**20 - 5)
    first_id = id(first.obj)
    arrow = pa.py_buffer(first[100:200])
    del first
    second = pool.take(3 * 2**20)
    assert id(second.obj) != first_id  # an Arrow buffer still points into the first mapping
    del arrow, second
    third = pool.take(2 * 2**20 + 1)  # same size class (3 MiB): the first mapping, free again
    assert id(third.obj) == first_id and pool.reused == 1 and len(third) == 2 * 2**20 + 1


def test_beyond_its_cap_the_pool_hands_out_unpooled_mappings() -> None:
    pool = ReceivePool(max_bytes=2 * 2**20, grain=2**20)
    held = [pool.take(2**20) for _ in range(4)]
    assert pool.created == 4 and sum(len(v) for v in held) == 4 * 2**20
    del held
    again = [pool.take(2**20) for _ in range(2)]
    assert pool.reused == 2 and pool.created == 4  # only the two pooled mappings came back
    del again


def test_small_payloads_stay_ordinary_buffers() -> None:
    assert isinstance(fresh_buffer(LAZY_BUFFER_BYTES).obj, bytearray)
    assert not isinstance(fresh_buffer(LAZY_BUFFER_BYTES + 1).obj, bytearray)

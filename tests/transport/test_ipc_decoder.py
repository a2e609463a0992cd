"""The batch decoder: every encoded batch back exactly, its metadata kept, no copy, damage refused.

The oracle is Arrow itself: a batch encoded by :class:`BatchEncoder` (with or
without compression) decodes to a batch ``equals`` the original whichever path
the decoder's ``compressed`` hint picks, and a message cut short or emptied is
an IntegrityError after which the next good message still decodes.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dstp.errors import IntegrityError
from dstp.transport.wire.ipc import BatchDecoder, BatchEncoder

TYPES = [pa.float32(), pa.float64(), pa.int16(), pa.int64(), pa.uint8(), pa.timestamp("us"), pa.string(), pa.bool_()]


@st.composite
def batches(draw: st.DrawFn) -> pa.RecordBatch:
    rows = draw(st.integers(0, 3000))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    columns, fields = [], []
    for i, kind in enumerate(draw(st.lists(st.sampled_from(TYPES), min_size=1, max_size=5))):
        nulls = rng.random(rows) < draw(st.sampled_from([0.0, 0.1, 1.0]))
        if pa.types.is_string(kind):
            values = [f"stn-{v}" for v in rng.integers(0, 50, rows)]
        elif pa.types.is_boolean(kind):
            values = rng.random(rows) < 0.5
        elif pa.types.is_timestamp(kind):
            values = rng.integers(-2**40, 2**40, rows).astype("datetime64[us]")
        elif pa.types.is_floating(kind):
            values = np.round(rng.normal(280, 10, rows), 1).astype(kind.to_pandas_dtype())
        else:
            values = rng.integers(0, 100, rows).astype(kind.to_pandas_dtype())
        columns.append(pa.array(values, type=kind, mask=nulls))
        fields.append(pa.field(f"c{i}", kind, metadata={"units": f"u{i}"}))
    return pa.RecordBatch.from_arrays(columns, schema=pa.schema(fields, metadata={b"dstp:dataset": b"x"}))


@settings(max_examples=60, deadline=None)
@given(batches(), st.sampled_from(["none", "lz4", "zstd"]), st.booleans(), st.integers(1, 3))
def test_every_batch_decodes_to_itself_with_its_metadata(batch: pa.RecordBatch, compression: str, hint: bool,
                                                         count: int) -> None:
    encoder = BatchEncoder(batch.schema, compression)
    decoder = BatchDecoder(compressed=hint)  # the hint picks a path; the answer must not depend on it
    decoder.decode_schema(encoder.schema_message())
    for _ in range(count):  # one reader per result, many messages through it
        got = decoder.decode(encoder.encode(batch).to_buffer())
        assert got.equals(batch)
        assert got.schema.equals(batch.schema, check_metadata=True)


@pytest.mark.parametrize("compression", ["none", "lz4"])
def test_the_planned_schema_metadata_is_kept(compression: str) -> None:
    batch = pa.record_batch({"t": pa.array([1.5, 2.5], pa.float32())})
    planned = batch.schema.with_metadata({b"dstp:dataset": b"ccm3"}).set(0, batch.schema.field(0).with_metadata(
        {b"units": b"K"}))
    message = BatchEncoder(batch.schema, compression).encode(batch).to_buffer()
    got = BatchDecoder(planned, compressed=compression != "none").decode(message)
    assert got.schema.equals(planned, check_metadata=True)
    assert got.column(0).equals(batch.column(0))


def test_uncompressed_batches_are_views_of_the_message() -> None:
    batch = pa.record_batch({"x": pa.array(np.arange(100_000, dtype="f8"))})
    message = BatchEncoder(batch.schema, "none").encode(batch).to_buffer()
    got = BatchDecoder(batch.schema).decode(message)
    data = got.column(0).buffers()[1]
    assert message.address <= data.address < message.address + message.size


@pytest.mark.parametrize("hint", [False, True])
@pytest.mark.parametrize("damage", ["cut", "empty", "schema"])
def test_a_damaged_message_is_refused_and_the_next_one_decodes(damage: str, hint: bool) -> None:
    batch = pa.record_batch({"x": pa.array(np.arange(1000, dtype="i4")), "s": pa.array(["a"] * 1000)})
    encoder = BatchEncoder(batch.schema, "lz4")
    message = encoder.encode(batch).to_buffer().to_pybytes()
    bad = {"cut": message[: len(message) // 2], "empty": b"", "schema": encoder.schema_message().to_pybytes()}[damage]
    decoder = BatchDecoder(batch.schema, compressed=hint)
    assert decoder.decode(message).equals(batch)
    with pytest.raises(IntegrityError, match="could not be decoded"):
        decoder.decode(bad)
    assert decoder.decode(message).equals(batch)


def test_a_batch_before_the_schema_is_refused() -> None:
    batch = pa.record_batch({"x": pa.array([1, 2])})
    with pytest.raises(IntegrityError, match="before the result schema"):
        BatchDecoder().decode(BatchEncoder(batch.schema, "none").encode(batch).to_buffer())

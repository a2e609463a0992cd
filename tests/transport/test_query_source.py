"""A query's messages: the schema, then each batch — compressed or not, the same records in the same order."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from dstp.catalog.registry import Catalog
from dstp.errors import CancelledError
from dstp.service import DstpService
from dstp.settings import Settings
from dstp.transport.wire.ipc import BatchDecoder

SQL = "select temperature, time, lat from ccm3 where humidity > 40"


@pytest.fixture(scope="module")
def service(catalog_root: Path) -> DstpService:
    return DstpService(Catalog.scan(catalog_root), Settings(catalog_root=catalog_root, batch_rows=1500))


def decoded(service: DstpService, compression: str) -> list[pa.RecordBatch]:
    source = service.queries.run(SQL).source(compression)
    decoder, batches = BatchDecoder(), []
    try:
        messages = source.messages()
        schema, _ = next(messages)
        decoder.decode_schema(schema.to_buffer())
        batches = [decoder.decode(message.to_buffer()) for message, _ in messages]
    finally:
        source.close()
    return batches


@pytest.mark.parametrize("compression", ["lz4", "zstd"])
def test_compressed_messages_are_the_batches_in_order(service: DstpService, compression: str) -> None:
    plain = decoded(service, "none")
    packed = decoded(service, compression)
    assert len(plain) >= 4
    assert [b.num_rows for b in packed] == [b.num_rows for b in plain]
    assert pa.Table.from_batches(packed).equals(pa.Table.from_batches(plain))


def test_a_query_cancelled_mid_result_raises_after_the_batches_made(service: DstpService) -> None:
    source = service.queries.run(SQL).source("lz4")
    messages = source.messages()
    next(messages)
    next(messages)
    source.cancel()
    with pytest.raises(CancelledError):
        for _ in messages:
            pass
    source.close()

"""Streamed partitions: a transfer that starts before its partition is computed gets exactly its records.

A worker's held partition is filled by its task batch by batch while a transfer already reads it
(dstp/cluster/worker.py). Here the store and a real striped-TCP channel server run in this process,
without Dask, and the test fills the partition itself — one batch at a time, each only after the
client has received the one before — so the transfer provably runs ahead of the computation. The
oracle is the session's single server.
"""

from __future__ import annotations

import queue
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa
import pytest

import dstp
import oracle
from dstp.catalog.registry import Catalog
from dstp.client._channels import receive_stripes
from dstp.cluster.partitions import partition_prepared, plan_partitions
from dstp.cluster.worker import PartitionStore
from dstp.query.execute import QueryExecution, prepare_query
from dstp.settings import Settings
from dstp.transport.server.channel_server import DataChannelServer
from dstp.transport.client.channels import TcpChannel
from dstp.transport.server.listeners import TcpListener

pytestmark = pytest.mark.timeout(120)

SQL = "select temperature, time, lev, lat, lon from ccm3 where humidity > 20"
WAIT_S = 30  # a bound on each hand-over, never a pause


@pytest.fixture(scope="module")
def node(catalog_root: Path) -> Iterator[tuple[Catalog, Settings, PartitionStore, TcpChannel]]:
    settings = Settings(catalog_root=catalog_root, batch_rows=512)
    catalog = Catalog.scan(catalog_root)
    store = PartitionStore(settings.ticket_ttl_s)
    server = DataChannelServer("striped", TcpListener("127.0.0.1", 0), store.open_source, window_bytes=2 * 2**20)
    server.start()
    host, port = server.endpoint.rsplit(":", 1)
    yield catalog, settings, store, TcpChannel(host, int(port))
    server.stop()
    catalog.close()


def _fetch_in_background(channel: TcpChannel, store: PartitionStore, label: str,
                         schema: pa.Schema) -> tuple[threading.Thread, "queue.Queue[Any]"]:
    """Start fetching ``label`` on a thread; every batch (then "END", or the error) goes to the queue."""
    ticket = store.issue(label, "none")
    assert ticket is not None
    arrived: queue.Queue[Any] = queue.Queue()

    def fetch() -> None:
        try:
            transfer = channel.open(ticket.token, 2, key=ticket.key)
            for batch in receive_stripes(transfer, schema, lambda *_: None, lambda _: None):
                arrived.put(batch)
            arrived.put("END")
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            arrived.put(exc)

    thread = threading.Thread(target=fetch)
    thread.start()
    return thread, arrived


def test_a_transfer_started_before_its_partition_is_computed_gets_identical_rows(node, client) -> None:
    catalog, settings, store, channel = node
    whole = prepare_query(SQL, catalog, settings)
    got: list[pa.RecordBatch] = []
    for spec in plan_partitions(whole, 3):
        piece = partition_prepared(whole, spec)
        execution = QueryExecution(piece, settings)
        label = f"stream-p{spec.index}"
        held = store.open(label, piece.schema)
        thread, arrived = _fetch_in_background(channel, store, label, piece.schema)
        streamed = 0
        for batch in execution.batches():
            held.append(batch)
            received = arrived.get(timeout=WAIT_S)  # this batch went out before the next one was computed
            assert isinstance(received, pa.RecordBatch), received
            got.append(received)
            streamed += 1
        assert streamed > 1, "the piece should span several batches"
        assert arrived.empty()  # nothing more until the piece is whole: no END yet
        held.finish(execution.summary)
        assert arrived.get(timeout=WAIT_S) == "END"
        thread.join(timeout=WAIT_S)
        # Sent whole: the worker gives the memory back once its side of the transfer closes, which can
        # follow the client's END by a moment (a bounded wait on the condition, not on a timer).
        deadline = time.monotonic() + WAIT_S
        while label in store.holds():
            assert time.monotonic() < deadline, f"{label} is still held after the transfer ended"
            time.sleep(0.005)
    want = client.query(SQL)
    oracle.assert_same_records(pa.Table.from_batches(got, schema=want.schema), want)


def test_a_partition_whose_task_fails_mid_stream_is_a_clear_error_not_a_short_result(node) -> None:
    catalog, settings, store, channel = node
    whole = prepare_query(SQL, catalog, settings)
    piece = partition_prepared(whole, plan_partitions(whole, 3)[0])
    held = store.open("broken-p0", piece.schema)
    thread, arrived = _fetch_in_background(channel, store, "broken-p0", piece.schema)
    first = next(iter(QueryExecution(piece, settings).batches()))
    held.append(first)
    assert isinstance(arrived.get(timeout=WAIT_S), pa.RecordBatch)
    held.fail(RuntimeError("the worker's disk went away"))
    store.discard(held)
    outcome = arrived.get(timeout=WAIT_S)
    thread.join(timeout=WAIT_S)
    assert isinstance(outcome, dstp.errors.TransportError), outcome
    assert "Resolve" in str(outcome) or "failed" in str(outcome)
    assert store.issue("broken-p0", "none") is None  # no new ticket for a broken partition: it is run again

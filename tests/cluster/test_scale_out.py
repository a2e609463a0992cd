"""Scale-out on a real Dask cluster (scheduler + 3 worker processes): the single server's answers, in parallel.

The oracle is the plain single server of the session (tests/conftest.py), itself checked against
xarray/DuckDB in tests/e2e; every query of the shared set (tests/query_cases.py) must come back with
exactly its records from the coordinator, whether the coordinator partitioned it or answered it itself.
"""

from __future__ import annotations

import threading

import pytest

import dstp
import oracle
from dstp.server import DstpServer
from dstp.transport.client.channels import StripedChannel
from query_cases import CASES

pytestmark = pytest.mark.timeout(180)

STREAMS = 2


@pytest.mark.parametrize("sql, dataset, attrs, extra, ordered", CASES, ids=[c[0][:70] for c in CASES])
def test_shared_query_set_returns_the_single_server_answer(cluster_client, client, sql, dataset, attrs, extra,
                                                           ordered) -> None:
    stream = cluster_client.query_batches(sql, transport="striped", streams=STREAMS)
    got = stream.read_all()
    want = client.query(sql)
    assert got.schema.equals(want.schema, check_metadata=False)
    oracle.assert_same_records(got, want, ordered=ordered)
    parts = getattr(stream, "partitions", None)
    if parts is not None:  # partitioned: every piece came back whole, from the workers
        assert sum(p.rows for p in parts) == want.num_rows
        assert stream.summary.rows == want.num_rows


def test_select_where_is_partitioned_across_every_worker(cluster_client, client, dask_cluster) -> None:
    sql = "select temperature, time from ccm3 where humidity > 50"
    stream = cluster_client.query_batches(sql, transport="striped", streams=STREAMS)
    got = stream.read_all()
    parts = stream.partitions
    assert sorted(p.index for p in parts) == [0, 1, 2]
    assert {p.worker for p in parts} == set(dask_cluster.workers)  # one piece per worker
    assert len({p.endpoint for p in parts}) == 3  # each worker serves its own data channel
    single = client.query_batches(sql, transport="grpc")
    want = single.read_all()
    oracle.assert_same_records(got, want)
    # The pieces read exactly what the single server read, no hyperslab twice.
    assert stream.summary.elements_read == single.summary.elements_read


def test_auto_is_answered_at_once_when_small_and_partitioned_when_large(cluster_client, client,
                                                                        monkeypatch) -> None:
    from dstp.client import _policy

    sql = "select temperature, time from ccm3 where humidity > 50"
    want = client.query(sql)
    small = cluster_client.query_batches(sql, transport="auto")  # under 4 MiB (32 from afar): the coordinator's own Run
    oracle.assert_same_records(small.read_all(), want)
    assert getattr(small, "partitions", None) is None and small.summary.transport == "grpc"
    monkeypatch.setitem(_policy.GRPC_MAX_BYTES, "result", 1000)
    monkeypatch.setattr(_policy, "LOOPBACK_GRPC_MAX_RESULT_BYTES", 1000)  # now "large": Run answers with partitions
    large = cluster_client.query_batches(sql, transport="auto")
    oracle.assert_same_records(large.read_all(), want)
    assert len(large.partitions) == 3


@pytest.mark.parametrize("sql", [
    "select temperature, time, lev, lat, lon from ccm3 where lat > 60 order by temperature desc, time, lev, lat, lon",
    "select humidity, time, lev, lat, lon from ccm3 where humidity is not null and lon < 40 "
    "order by 1, 2 desc, 3, 4, 5",
    "select salinity, time, depth, lat, lon from ocean where salinity > 34 order by salinity, time, depth, lat, lon",
])
def test_order_by_is_merged_across_partitions(cluster_client, client, sql) -> None:
    stream = cluster_client.query_batches(sql, transport="striped", streams=STREAMS)
    got = stream.read_all()
    assert len(stream.partitions) == 3, "the order-by query must have been partitioned"
    want = client.query(sql)
    assert got.num_rows == want.num_rows > 1000
    # The keys make the order total: the merged result must equal the single server's, row for row.
    assert got.equals(want.cast(got.schema)) or got.to_pylist() == want.to_pylist()


class _Concurrent(StripedChannel):
    """A data channel that holds each partition's first stripe until 3 are connecting at once."""

    def __init__(self, inner, gate: threading.Barrier, seen: list[int], lock: threading.Lock) -> None:  # type: ignore[no-untyped-def]
        super().__init__()
        self.inner, self.gate, self.seen, self.lock = inner, gate, seen, lock

    def connect(self, stripe: int):  # type: ignore[no-untyped-def]
        if stripe == 0 and not self.gate.broken and self.gate.n_waiting < self.gate.parties:
            with self.lock:
                first = not self.seen or self.seen[-1] < self.gate.parties
                self.seen.append(len(self.seen) + 1)
            if first:
                self.gate.wait()  # BrokenBarrierError (the test fails) unless the others connect meanwhile
        return self.inner.connect(stripe)


def test_endpoints_are_fetched_in_parallel(coordinator: DstpServer, client, tmp_path) -> None:
    from dstp.transport.client.tuning import AutoTuner

    gate = threading.Barrier(3, timeout=30)
    seen: list[int] = []
    lock = threading.Lock()
    assert coordinator.endpoints is not None
    with dstp.Client(coordinator.endpoints.grpc, tuner=AutoTuner(tmp_path / "tuning.json"),
                     wrap_channel=lambda ch: _Concurrent(ch, gate, seen, lock)) as c:
        sql = "select cloud, lev, time from ccm3 where cloud > 0.5"
        stream = c.query_batches(sql, transport="striped", streams=STREAMS)
        got = stream.read_all()
    assert not gate.broken
    assert len(stream.partitions) == 3
    # Three data connections (one per worker) were open at once: all three passed the barrier together.
    assert len(seen) >= 3
    oracle.assert_same_records(got, client.query(sql))


def test_a_query_the_coordinator_answers_itself_says_so_by_offers(cluster_client) -> None:
    info = cluster_client.plan("select avg(temperature) from ccm3", transport="striped", streams=STREAMS)
    assert not info.partitions and [o.kind for o in info.offers] == ["striped"]
    info = cluster_client.plan("select temperature from ccm3 where lat > 0", transport="striped", streams=STREAMS)
    assert len(info.partitions) == 3 and not info.offers
    # Streamed: Query answered before the pieces were computed, so their counts are not known yet (-1).
    assert all(p.rows == -1 and p.bytes == -1 for p in info.partitions)
    assert info.max_rows == info.scan_rows


def test_resolve_gives_a_fresh_ticket_for_a_held_partition(cluster_client, client) -> None:
    sql = "select temperature, lat from ccm3 where temperature > 270"
    info = cluster_client.plan(sql, transport="striped", streams=STREAMS)
    part = info.partitions[1]
    again = cluster_client._rpc.resolve(info.query_id, 1)
    assert again.worker == part.worker and again.offer.ticket != part.offer.ticket
    with pytest.raises(dstp.errors.NotFoundError):
        cluster_client._rpc.resolve("q-nosuch", 0)

"""`auto` in one round trip: Run with ``inline_max_bytes`` streams a small result at once, else answers offers.

A real server with its data channels; the protocol is checked with the generated stub, the client by
counting the rpcs it makes (the counting wrapper calls the real rpc).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import grpc
import pytest

import dstp
from dstp.client import _policy
from dstp.proto import dstp_pb2 as pb
from dstp.proto import dstp_pb2_grpc as pb_grpc
from dstp.transport.wire.proofs import fetch_proof
from dstp.transport.client.tuning import AutoTuner

SQL = "select temperature, time from ccm3 where humidity > 50 limit 700"
GRPC, STRIPED = pb.CHANNEL_KIND_GRPC_STREAM, pb.CHANNEL_KIND_STRIPED_TCP


@pytest.fixture()
def stub(data_server):  # type: ignore[no-untyped-def]
    with grpc.insecure_channel(data_server.endpoints.grpc) as channel:
        yield pb_grpc.DstpStub(channel)


def _run(stub: Any, **fields: Any) -> list[Any]:
    return list(stub.Run(pb.QueryRequest(sql=SQL, **fields)))


def _plain(stub: Any) -> list[Any]:
    """The Run stream as a client that does not let the server choose gets it."""
    return _run(stub, channels=[GRPC])


def _records(responses: list[Any]) -> list[bytes]:
    return [r.ipc_message for r in responses if r.HasField("ipc_message")]


def test_a_result_under_the_inline_limit_streams_on_the_run_call(stub) -> None:
    plain = _plain(stub)
    bound = plain[0].plan.max_bytes
    run = _run(stub, channels=[GRPC, STRIPED], inline_max_bytes=bound + 1)
    offers = run[0].plan.offers
    assert [o.kind for o in offers] == [GRPC] and offers[0].ticket == b""  # nothing issued
    assert _records(run) == _records(plain) and run[-1].summary.rows == 700


def test_a_result_that_may_reach_the_inline_limit_gets_offers_and_no_records(stub) -> None:
    bound = _plain(stub)[0].plan.max_bytes
    assert bound == 700 * 12  # LIMIT × (float32 + int64 µs): the bound the server compares
    run = _run(stub, channels=[GRPC, STRIPED], inline_max_bytes=bound)  # not under it: offers
    assert len(run) == 1 and run[0].HasField("plan")
    offers = {o.kind: o for o in run[0].plan.offers}
    assert set(offers) == {GRPC, STRIPED} and all(o.ticket and o.key for o in offers.values())
    assert offers[STRIPED].endpoint and offers[STRIPED].streams >= 1
    assert stub.Usage(pb.UsageRequest()).running == 0  # answering with offers kept no query slot
    # The ticket is Query's: Fetch redeems it for the same records.
    g = offers[GRPC]
    fetched = list(stub.Fetch(pb.FetchRequest(ticket=g.ticket, proof=fetch_proof(g.key, g.ticket))))
    assert _records(fetched) == _records(_plain(stub)) and fetched[-1].summary.rows == 700


def test_without_a_data_channel_asked_for_the_result_streams_whatever_its_size(stub) -> None:
    run = _run(stub, channels=[GRPC], inline_max_bytes=0)
    assert [o.kind for o in run[0].plan.offers] == [GRPC] and run[-1].summary.rows == 700


def test_a_bad_query_is_refused_on_the_run_call_as_before(stub) -> None:
    with pytest.raises(grpc.RpcError) as info:
        list(stub.Run(pb.QueryRequest(sql="select nosuch from ccm3", channels=[GRPC, STRIPED],
                                      inline_max_bytes=1)))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert dict(info.value.trailing_metadata())["dstp-error-code"] == "unknown_column"


class _Counted:
    """Counts the rpcs of a client's Rpc object, calling each through."""

    def __init__(self, client: dstp.Client, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: Counter[str] = Counter()
        rpc = client._rpc
        for name in ("query", "run", "fetch"):
            real = getattr(rpc, name)
            monkeypatch.setattr(rpc, name, self._counting(name, real))

    def _counting(self, name: str, real: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return real(*args, **kwargs)
        return call


def test_auto_gets_a_small_result_with_one_rpc(data_client, monkeypatch) -> None:
    want = data_client.query(SQL, transport="grpc")
    counted = _Counted(data_client, monkeypatch)
    got = data_client.query(SQL, transport="auto")
    assert got.equals(want)
    assert counted.calls == Counter(run=1)  # no Query, no Fetch: one round trip
    summary = data_client.last_summary
    assert summary is not None and summary.transport == "grpc" and summary.rows == 700


def test_auto_fetches_a_larger_result_on_a_data_channel_from_the_run_answer(data_client, monkeypatch) -> None:
    want = data_client.query(SQL, transport="grpc")
    monkeypatch.setitem(_policy.GRPC_MAX_BYTES, "result", 1000)
    monkeypatch.setattr(_policy, "LOOPBACK_GRPC_MAX_RESULT_BYTES", 1000)  # 700 records × 12 bytes: "large"
    counted = _Counted(data_client, monkeypatch)
    got = data_client.query(SQL, transport="auto")
    assert got.equals(want)
    summary = data_client.last_summary
    assert summary is not None and summary.transport in ("striped", "udt") and summary.rows == 700
    assert counted.calls == Counter(run=1)  # the offers came with Run: no Query rpc either


def _count_pings(client: dstp.Client, monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Return the list every Ping the client's policy takes is appended to (each is still sent)."""
    pings: list[float] = []
    real = client.policy._ping

    def counted() -> float:
        pings.append(seconds := real())
        return seconds

    monkeypatch.setattr(client.policy, "_ping", counted)
    return pings


def _sorted(table: Any) -> Any:
    return table.sort_by([(name, "ascending") for name in table.column_names])


def test_the_default_is_auto_and_a_small_result_on_this_host_pays_no_ping(data_server, tmp_path, monkeypatch) -> None:
    with dstp.Client(data_server.endpoints.grpc, tuner=AutoTuner(tmp_path / "t.json")) as client:
        pings = _count_pings(client, monkeypatch)
        counted = _Counted(client, monkeypatch)
        got = client.query(SQL)  # a new client, no transport named
        assert pings == []  # the server is on 127.0.0.1: no round trip measured before the query
        assert counted.calls == Counter(run=1)
        summary = client.last_summary
        assert summary is not None and summary.transport == "grpc" and summary.choice.startswith("auto: grpc")
        assert "none" in summary.choice  # no codec on loopback
        want = client.query(SQL, transport="grpc")
    assert got.equals(want)


def test_the_default_takes_a_data_channel_for_a_large_result_with_the_same_records(data_client, monkeypatch) -> None:
    sql = "select * from ccm3 where humidity > 50"
    want = data_client.query(sql, transport="grpc")
    monkeypatch.setitem(_policy.GRPC_MAX_BYTES, "result", 1000)
    monkeypatch.setattr(_policy, "LOOPBACK_GRPC_MAX_RESULT_BYTES", 1000)
    pings = _count_pings(data_client, monkeypatch)
    stream = data_client.query_batches(sql)
    got = stream.read_all()
    assert stream.transport in ("striped", "udt") and stream.choice.startswith("auto: ")
    assert pings == []
    assert got.num_rows == want.num_rows > 0
    assert _sorted(got).equals(_sorted(want))


def test_a_result_over_4_mib_from_this_host_takes_a_data_channel_by_default(data_client) -> None:
    sql = "select * from ccm3"  # 196,608 records of 13 columns: ~9 MB, under the 32 MiB a remote result stays on gRPC
    want = data_client.query(sql, transport="grpc")
    assert 4 * 2**20 < want.nbytes < 32 * 2**20
    stream = data_client.query_batches(sql)
    got = stream.read_all()
    assert stream.transport in ("striped", "udt") and stream.choice.startswith("auto: ")
    assert _sorted(got).equals(_sorted(want))

"""Hostile and broken input gets a clear typed error, and the server keeps serving."""

from __future__ import annotations

import os
import time
from pathlib import Path

import grpc
import pytest

import dstp
from dstp.proto import dstp_pb2 as pb
from dstp.proto import dstp_pb2_grpc as pb_grpc
from dstp.server import DstpServer
from dstp.settings import Settings
from dstp.transport.wire.proofs import fetch_proof
from clock import Clock
from query_cases import HOSTILE


@pytest.mark.parametrize("sql, error, words", HOSTILE, ids=[h[0][:60] for h in HOSTILE])
def test_hostile_query_gets_typed_error_and_server_keeps_serving(client, sql, error, words) -> None:
    with pytest.raises(getattr(dstp, error)) as info:
        client.query(sql)
    assert words.lower() in str(info.value).lower()
    assert "Traceback" not in str(info.value)
    assert not isinstance(info.value, dstp.ServerError)
    assert client.query("select temperature from ccm3 limit 1").num_rows == 1


def test_errors_point_at_the_offending_token(client) -> None:
    with pytest.raises(dstp.UnknownColumnError) as info:
        client.query("select temperature,\n       bogus from ccm3")
    assert (info.value.line, info.value.column) == (2, 12)
    assert "^^^^^" in str(info.value)
    assert info.value.token == "bogus"  # the word itself, as HTTP's JSON error names it (R shows it)
    with pytest.raises(dstp.UnknownColumnError) as info:
        client.query('select "tempé ratüre" from ccm3')
    assert info.value.token == '"tempé ratüre"'  # not ASCII: percent-encoded in the gRPC metadata and back


def test_hostile_queries_write_no_files(client, catalog_root: Path, tmp_path: Path) -> None:
    before = {p for p in catalog_root.rglob("*")}
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        for sql in ("copy ccm3 to 'x.csv'", "select * from ccm3 where false; copy ccm3 to 'y.csv'",
                    "export database 'dump'", "attach 'z.db'"):
            with pytest.raises(dstp.DstpError):
                client.query(sql)
    finally:
        os.chdir(cwd)
    assert {p for p in catalog_root.rglob("*")} == before
    assert list(tmp_path.iterdir()) == []
    assert not Path("/tmp/dstp-pwned.csv").exists()


def test_duckdb_sandbox_refuses_files_even_if_validation_were_bypassed() -> None:
    import duckdb

    from dstp.query.execute import _connect

    con = _connect(Settings())
    try:
        with pytest.raises(duckdb.Error, match="(?i)disabled|permission"):
            con.sql("select * from read_csv('/etc/passwd')").fetchall()
        with pytest.raises(duckdb.Error, match="(?i)locked"):
            con.execute("set enable_external_access = true")
    finally:
        con.close()


def test_broken_descriptor_and_truncated_files_are_skipped(server, client) -> None:
    ids = {d.id for d in client.datasets()}
    assert {"ccm3", "ocean", "station", "axes"} <= ids
    assert not ids & {"broken", "truncated", "truncated3"}
    problems = {p.path.parent.name: str(p) for p in server.catalog.problems}
    assert "broken.dstp.xml:7: not well-formed" in problems["broken"]
    assert "HDF error" in problems["truncated"]  # netCDF4/HDF5: the library refuses it
    assert "is truncated" in problems["truncated3"]  # netCDF3: dstp's own header check


def test_unknown_dataset_in_describe(client) -> None:
    with pytest.raises(dstp.DatasetNotFoundError, match="ccm3"):
        client.describe("nosuch")


def test_ticket_is_single_use_and_bound_to_its_channel(server) -> None:
    with grpc.insecure_channel(server.endpoints.grpc) as channel:
        stub = pb_grpc.DstpStub(channel)
        reply = stub.Query(pb.QueryRequest(sql="select temperature from ccm3 limit 3",
                                           channels=[pb.CHANNEL_KIND_GRPC_STREAM]))
        ticket, key = reply.offers[0].ticket, reply.offers[0].key
        assert len(list(stub.Fetch(pb.FetchRequest(ticket=ticket, proof=fetch_proof(key, ticket))))) >= 2
        for bad in (ticket, b"garbage", ticket[:-1] + bytes([ticket[-1] ^ 1])):
            with pytest.raises(grpc.RpcError) as info:
                list(stub.Fetch(pb.FetchRequest(ticket=bad, proof=fetch_proof(key, bad))))
            assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED


def test_unavailable_channel_is_refused_not_downgraded(client) -> None:
    with pytest.raises(dstp.TransportUnavailableError, match="offers: grpc"):
        client.plan("select temperature from ccm3", transport="udt")


def _strict(catalog_root: Path, clock: Clock | None = None, **limits) -> DstpServer:
    return DstpServer(Settings(catalog_root=catalog_root, port=0, http_port=-1, data_port=-1, udt_port=-1,
                               batch_rows=512, **limits), clock=clock or time.time)


def test_results_are_truncated_at_the_row_limit(catalog_root: Path) -> None:
    with _strict(catalog_root, max_result_rows=1000) as srv, dstp.connect(srv.endpoints.grpc) as c:
        sql = "select temperature from ccm3 where lat > 80 and lev < 100"
        with pytest.raises(dstp.TruncatedResultError, match="max_result_rows"):
            c.query(sql)  # a cut result is never silent
        with pytest.warns(dstp.DstpTruncationWarning):
            table = c.query(sql, allow_truncated=True)
        assert table.num_rows == 1000 and c.last_summary["truncated"]
        assert "max_result_rows" in c.last_summary["truncated_reason"]


def test_long_queries_time_out_and_the_server_goes_on(catalog_root: Path) -> None:
    with _strict(catalog_root, query_time_limit_s=0.001) as srv, dstp.connect(srv.endpoints.grpc) as c:
        with pytest.raises(dstp.QueryTimeoutError, match="longer than"):
            c.query("select temperature, humidity, cloud, time from ccm3 order by temperature, humidity")
        with pytest.raises(dstp.QueryTimeoutError):
            c.query("select temperature, humidity, cloud, time from ccm3 order by temperature, humidity")
        assert len(c.datasets()) >= 4


def test_expired_ticket_is_refused(catalog_root: Path) -> None:
    clock = Clock()
    with _strict(catalog_root, clock=clock) as srv, grpc.insecure_channel(srv.endpoints.grpc) as channel:
        stub = pb_grpc.DstpStub(channel)
        reply = stub.Query(pb.QueryRequest(sql="select temperature from ccm3 limit 1"))
        clock.advance(srv.settings.ticket_ttl_s + 1)
        with pytest.raises(grpc.RpcError) as info:
            list(stub.Fetch(pb.FetchRequest(ticket=reply.offers[0].ticket,
                                            proof=fetch_proof(reply.offers[0].key, reply.offers[0].ticket))))
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "expired" in info.value.details()


def test_concurrent_query_limit(catalog_root: Path) -> None:
    # admission_wait_s=0: refused at once (tests/service/test_admission.py covers the fair queue)
    with _strict(catalog_root, max_concurrent_queries=1, admission_wait_s=0) as srv, \
            dstp.connect(srv.endpoints.grpc) as c:
        first = c.query_batches("select temperature from ccm3")
        next(iter(first))  # holds the only slot
        with pytest.raises(dstp.LimitExceededError, match="maximum of 1"):
            c.query("select temperature from ccm3 limit 1")
        first.close()
        assert srv.service is not None
        assert srv.service.wait_idle(timeout=10), "the cancelled stream kept its slot"
        assert c.query("select temperature from ccm3 limit 1").num_rows == 1


def test_a_file_cut_short_while_serving_fails_loudly(tmp_path: Path) -> None:
    import shutil

    from dstp.samples import generate_samples

    generate_samples(tmp_path, "small")
    with DstpServer(Settings(catalog_root=tmp_path, port=0, http_port=-1, data_port=-1, udt_port=-1)) as srv, \
            dstp.connect(srv.endpoints.grpc) as c:
        assert c.query("select salinity from ocean limit 5").num_rows == 5
        victim = tmp_path / "ocean" / "ocean_2000-07.nc"
        data = victim.read_bytes()
        victim.write_bytes(data[: int(len(data) * 0.95)])  # netCDF3: the library would invent fill values
        with pytest.raises(dstp.DataFileError, match="cut short"):
            c.query("select salinity from ocean")
        # A bulk download of it is refused too, rather than delivered short and "verified" against its own bytes.
        copy = tmp_path / "copy.nc"
        with pytest.raises(dstp.DataFileError, match="cut short"):
            c.get("ocean", victim.name, copy)
        # Rewritten in place at its old size (cp over it): another version than the catalog describes.
        other = tmp_path / "ocean" / "ocean_2000-01.nc"
        other.write_bytes(bytes(reversed(other.read_bytes())))
        with pytest.raises(dstp.DataFileError, match="changed on disk"):
            c.get("ocean", other.name, copy)
        assert not copy.exists() and not list(tmp_path.glob("copy.nc*"))
        assert c.query("select temperature from ccm3 limit 2").num_rows == 2  # everyone else is served
    shutil.rmtree(tmp_path)


def test_run_sends_the_plan_then_what_fetch_sends(server) -> None:
    sql = "select temperature, time from ccm3 where humidity > 50 limit 700"
    with grpc.insecure_channel(server.endpoints.grpc) as channel:
        stub = pb_grpc.DstpStub(channel)
        run = list(stub.Run(pb.QueryRequest(sql=sql, channels=[pb.CHANNEL_KIND_STRIPED_TCP], streams=8)))
        plan = run[0].plan
        assert run[0].HasField("plan") and [o.kind for o in plan.offers] == [pb.CHANNEL_KIND_GRPC_STREAM]
        assert plan.max_rows == 700  # LIMIT caps the bound the client sizes its channel by
        with pytest.raises(grpc.RpcError) as info:  # Run redeemed its own ticket
            list(stub.Fetch(pb.FetchRequest(ticket=plan.offers[0].ticket)))
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
        reply = stub.Query(pb.QueryRequest(sql=sql, channels=[pb.CHANNEL_KIND_GRPC_STREAM]))
        offer = reply.offers[0]
        fetched = list(stub.Fetch(pb.FetchRequest(ticket=offer.ticket, proof=fetch_proof(offer.key, offer.ticket))))
        assert plan.arrow_schema == reply.arrow_schema
        assert [m.ipc_message for m in run[1:-1]] == [m.ipc_message for m in fetched[:-1]]
        assert run[-1].summary.rows == fetched[-1].summary.rows == 700
        with pytest.raises(grpc.RpcError) as info:
            list(stub.Run(pb.QueryRequest(sql="select nosuch from ccm3")))
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert dict(info.value.trailing_metadata())["dstp-error-code"] == "unknown_column"


@pytest.mark.parametrize("filler", ["x", "é"], ids=["ascii", "non-ascii"])
def test_an_error_quoting_a_long_literal_arrives_as_dstps_error(client, filler: str) -> None:
    # The message quotes the literal; whole, it would pass gRPC's 16 KiB metadata limit and the client would get
    # gRPC's own "metadata size exceeds hard limit" instead of the error.
    sql = "select lat from ccm3 where time = '" + filler * 16000 + "'"
    with pytest.raises(dstp.QueryError) as info:
        client.query(sql)
    text = str(info.value)
    assert "bytes of this message cut" in text and "metadata size" not in text
    assert "is not a date" in text  # the validator's own words, start and end kept

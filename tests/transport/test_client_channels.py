"""The client on every data channel: the gRPC stream's records, and faults survived behind its public seams.

The channels themselves are tested alone in test_channels.py; here a real
server and ``dstp.Client`` are in the loop: the client's channel policy opens
the channel an offer names, and ``Client(wrap_channel=...)`` puts a
fault-injecting channel, or a real TCP proxy that damages bytes, between it
and the server's data port.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

import dstp
from dstp.server import DstpServer
from dstp.transport.client.channels import DataChannel
from dstp.transport.wire.frames import Kind, recv_frame
from dstp.transport.client.channels import TcpChannel
from dstp.transport.wire.tcp import TcpConn
from dstp.transport.client.tuning import AutoTuner
from faults import Fault, FaultyChannel
from proxy import Fault as ProxyFault
from proxy import Proxy

BIG = "select time, lev, lat, lon, temperature, humidity, cloud from ccm3"
QUERIES = [
    "select temperature, time from ccm3 where humidity > 50",
    "select * from ocean where depth < 50",
    "select lat, lon, temperature from ccm3 where lat between 30 and 40 limit 100",
]
FILE = "ccm3_1990-01.nc"


def _client(server: DstpServer, tmp_path: Path, wrap: Any) -> dstp.Client:
    assert server.endpoints is not None
    return dstp.Client(server.endpoints.grpc, tuner=AutoTuner(tmp_path / "tuning.json"), wrap_channel=wrap)


@pytest.mark.parametrize("transport, streams, compression",
                         [("striped", 1, "none"), ("striped", 4, "lz4"), ("udt", 0, "none"), ("auto", 0, "zstd")])
def test_every_channel_gives_the_grpc_streams_records(data_client, transport, streams, compression) -> None:
    for sql in QUERIES:
        reference = data_client.query(sql)
        table = data_client.query(sql, transport=transport, streams=streams, compression=compression)
        assert table.equals(reference) and table.schema.equals(reference.schema, check_metadata=True), sql
        summary = data_client.last_summary
        assert summary is not None and summary.rows == reference.num_rows
        assert summary.transport == transport or transport == "auto"
        assert summary.choice


def test_a_broken_stripe_is_resumed_behind_the_clients_seam(data_server, data_client, tmp_path) -> None:
    fault = Fault(stripe=1, abort_at=50_000)
    with _client(data_server, tmp_path, lambda channel: FaultyChannel(channel, fault)) as c:
        table = c.query(BIG, transport="striped", streams=2)
        summary = c.last_summary
    assert fault.fired == ["abort"] and summary is not None and summary.reconnects >= 1
    assert table.equals(data_client.query(BIG))


def test_a_download_resumes_a_broken_stripe(data_server, catalog_root, tmp_path) -> None:
    fault = Fault(stripe=0, abort_at=100_000)  # inside the first 256 KiB block
    out = tmp_path / "copy.nc"
    with _client(data_server, tmp_path, lambda channel: FaultyChannel(channel, fault)) as c:
        summary = c.get("ccm3", FILE, out, transport="striped", streams=1)
    assert fault.fired == ["abort"]
    assert out.read_bytes() == (catalog_root / "ccm3" / FILE).read_bytes()
    assert summary["bytes"] == out.stat().st_size


@pytest.mark.parametrize("fault", [ProxyFault(flip_at=5), ProxyFault(flip_at=100_000), ProxyFault(cut_at=50_000)],
                         ids=["flip-header", "flip-payload", "cut"])
def test_a_real_proxy_damaging_bytes(data_server, data_client, tmp_path, fault) -> None:
    proxies: list[Proxy] = []

    def via_proxy(channel: DataChannel) -> DataChannel:
        assert isinstance(channel, TcpChannel)
        proxies.append(Proxy((channel.host, channel.port), fault))
        return TcpChannel("127.0.0.1", proxies[-1].port, timeout=channel.timeout, buffer_bytes=channel.buffer_bytes)

    try:
        with _client(data_server, tmp_path, via_proxy) as c:
            table = c.query(BIG, transport="striped", streams=1)
            summary = c.last_summary
    finally:
        for proxy in proxies:
            proxy.close()
    assert len(proxies) == 1 and proxies[0].flipped + proxies[0].cut == 1
    assert summary is not None and summary.reconnects >= 1
    assert table.equals(data_client.query(BIG))


def test_random_bytes_on_the_servers_data_port(data_server, data_client) -> None:
    host, port = data_server.endpoints.data.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(bytes(range(256)) * 20)
        s.shutdown(socket.SHUT_WR)
        frame = recv_frame(TcpConn(s))
    assert frame is not None and frame.kind == Kind.ERROR and frame.json()["code"] == "protocol_error"
    assert data_client.query("select temperature from ccm3 limit 5", transport="striped", streams=2).num_rows == 5

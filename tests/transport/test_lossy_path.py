"""Every data channel returns the gRPC stream's records exactly across a lossy emulated path.

A real ``dstp serve`` runs in the server namespace of a WAN emulator path (20 ms RTT,
200 Mb/s, 0.1 % random loss each way) and a real client in the client namespace asks the
same queries over the gRPC stream, striped TCP and UDT. The relay's counters prove packets
were dropped while it ran. Skipped only where network namespaces cannot be created.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pytest

from namespaces import skip_without_namespaces

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

QUERIES = [
    "select temperature, time from ccm3 where humidity > 50",
    "select * from ccm3 where lat between -30 and 30",
    "select * from ocean where depth < 50",
]

CLIENT = """
import json, sys
import pyarrow as pa
import dstp
target, out, queries = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
c = dstp.connect(target, timeout=60)
for i, sql in enumerate(queries):
    for transport, streams in (("grpc", 0), ("striped", 4), ("udt", 0)):
        table = c.query(sql, transport=transport, streams=streams)
        assert c.last_summary["transport"] == transport, c.last_summary
        with pa.OSFile(f"{out}/{i}-{transport}.arrow", "wb") as f, pa.ipc.new_file(f, table.schema) as w:
            w.write_table(table)
print("ok")
"""


@pytest.fixture(scope="module")
def lossy_path() -> Iterator[object]:
    skip_without_namespaces(f"dstpwan-l{os.getpid() % 100000}p")
    from bench.wan import WanPath

    name = f"dstpwan-l{os.getpid() % 100000}{secrets.token_hex(2)}"
    with WanPath.up(rtt_ms=20, rate_bps=200e6, loss=1e-3, name=name) as path:
        yield path


@pytest.mark.netns
@pytest.mark.timeout(300)
def test_udt_and_striped_equal_the_grpc_stream_under_loss(lossy_path, catalog_root: Path, tmp_path: Path) -> None:
    from dstp.transport.wire import udt

    assert udt.available(), f"the UDT channel is {udt.unavailable_reason()}"
    from bench.dstp_process import serve

    path = lossy_path
    before = path.stats()
    prefix = ["ip", "netns", "exec", path.server_ns]
    with serve(catalog_root, "--host", path.server_addr, prefix=prefix) as server:
        run = subprocess.run(["ip", "netns", "exec", path.client_ns, sys.executable, "-c", CLIENT,
                              server.endpoints["grpc"], str(tmp_path), json.dumps(QUERIES)],
                             capture_output=True, text=True, timeout=240, cwd=REPO)
    assert run.returncode == 0, run.stderr[-3000:]
    after = path.stats()
    dropped = sum(after["dirs"][d]["drop_loss"] - before["dirs"][d]["drop_loss"] for d in after["dirs"])
    assert dropped > 0, "the relay dropped nothing: the path was not lossy"
    for i, sql in enumerate(QUERIES):
        tables = {t: pa.ipc.open_file(tmp_path / f"{i}-{t}.arrow").read_all() for t in ("grpc", "striped", "udt")}
        assert tables["grpc"].num_rows > 1000, sql
        for transport in ("striped", "udt"):
            assert tables[transport].equals(tables["grpc"], check_metadata=True), f"{transport}: {sql}"

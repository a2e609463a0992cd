"""Scale-out with the workers behind an emulated WAN: a lossy path between them and the client.

The scheduler, three ``dask worker --preload dstp.cluster`` processes and the ``dstp serve --cluster``
coordinator run in the server namespace of a WAN emulator path (20 ms RTT, 200 Mb/s, 0.1 % random loss
each way; bench/wan); a real client runs in the client namespace, so every partition crosses the path
from its worker's own data channel. The oracle is the session's single server on loopback.

One worker is SIGKILLed the moment the client first dials its data endpoint (the client pauses there
until the test has killed it): its partition must come back whole from the worker Dask reran it on.
The relay's counters prove packets were dropped while the queries ran. Skipped only where network
namespaces cannot be created (CI runs as root and creates them).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa
import pytest

import oracle
from namespaces import skip_without_namespaces

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

pytestmark = [pytest.mark.netns, pytest.mark.timeout(420)]

DASK = str(Path(sys.executable).parent / "dask")
WORKERS = 3
SCHEDULER_PORT = 8786  # inside the server namespace: nothing else listens there
QUERIES = [
    "select temperature, time from ccm3 where humidity > 50",
    "select * from ocean where depth < 50",
    "select temperature, time, lev, lat, lon from ccm3 where lat > 60 order by temperature desc, time, lev, lat, lon",
]
LARGE = "select * from ccm3"

# The client, run inside the client namespace. argv: coordinator, scheduler, out dir, queries (JSON),
# and "pause" to stop at the first dial of each data endpoint and wait for a line on stdin.
CLIENT = """
import json, sys, threading
import distributed, pyarrow as pa
import dstp
from dstp.transport.client.channels import StripedChannel
target, scheduler, out, queries, pause = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4]), sys.argv[5]
with distributed.Client(scheduler, timeout=60) as dask_client:
    dask_client.wait_for_workers(int(sys.argv[6]), timeout=120)
dialled, lock = set(), threading.Lock()

class Pause(StripedChannel):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner
    def connect(self, stripe):
        endpoint = f"{self.inner.host}:{self.inner.port}"
        with lock:
            if pause == "pause" and not dialled:
                dialled.add(endpoint)
                print("DIAL", endpoint, flush=True)
                sys.stdin.readline()  # the test has killed the worker behind it
        return self.inner.connect(stripe)

with dstp.Client(target, timeout=120, wrap_channel=Pause) as c:
    for i, sql in enumerate(queries):
        stream = c.query_batches(sql, transport="striped", streams=2)
        table = stream.read_all()
        with pa.OSFile(f"{out}/{i}.arrow", "wb") as f, pa.ipc.new_file(f, table.schema) as w:
            w.write_table(table)
        parts = [{"index": p.index, "worker": p.worker, "endpoint": p.endpoint, "rows": p.rows,
                  "attempts": p.attempts} for p in (stream.partitions or [])]
        with open(f"{out}/{i}.json", "w") as f:
            json.dump(parts, f)
print("ok", flush=True)
"""


@pytest.fixture(scope="module")
def wan_cluster(catalog_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The path, and a scheduler, 3 workers and a coordinator in its server namespace."""
    skip_without_namespaces(f"dstpwan-c{os.getpid() % 100000}p")
    from bench.dstp_process import serve, stop
    from bench.wan import WanPath

    tmp = tmp_path_factory.mktemp("wan-dask")
    name = f"dstpwan-c{os.getpid() % 100000}{secrets.token_hex(2)}"
    env = {**os.environ, "DSTP_CATALOG_ROOT": str(catalog_root), "DSTP_BATCH_ROWS": "4096",
           "DASK_DISTRIBUTED__WORKER__DAEMON": "False"}
    with WanPath.up(rtt_ms=20, rate_bps=200e6, loss=1e-3, name=name) as path, ExitStack() as stack:
        host = path.server_addr
        scheduler = f"tcp://{host}:{SCHEDULER_PORT}"
        log = stack.enter_context(open(tmp / "dask.log", "ab"))
        procs: list[subprocess.Popen[Any]] = []
        stack.callback(lambda: [stop(p) for p in reversed(procs)])
        procs.append(subprocess.Popen(path.exec_argv(path.server_ns, [
            DASK, "scheduler", "--host", host, "--port", str(SCHEDULER_PORT), "--no-dashboard"]),
            stdout=log, stderr=log, env=env))
        for k in range(WORKERS):
            procs.append(subprocess.Popen(path.exec_argv(path.server_ns, [
                DASK, "worker", scheduler, "--host", host, "--no-nanny", "--nthreads", "1", "--no-dashboard",
                "--preload", "dstp.cluster", "--name", f"w{k}"]), stdout=log, stderr=log, env=env))
        # `dstp serve --cluster` waits (bounded) for the scheduler and a first worker before it listens.
        server = stack.enter_context(serve(catalog_root, "--host", host, "--cluster", scheduler, "--udt-port", "-1",
                                           prefix=path.exec_argv(path.server_ns, [])))
        yield {"path": path, "grpc": server.endpoints["grpc"], "scheduler": scheduler, "tmp": tmp}


def _client(wan: dict[str, Any], out: Path, queries: list[str], pause: bool) -> subprocess.Popen[str]:
    path = wan["path"]
    argv = path.exec_argv(path.client_ns, [sys.executable, "-c", CLIENT, wan["grpc"], wan["scheduler"], str(out),
                                           json.dumps(queries), "pause" if pause else "-", str(WORKERS)])
    return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=REPO)


def _results(out: Path, n: int) -> list[tuple[pa.Table, list[dict[str, Any]]]]:
    return [(pa.ipc.open_file(out / f"{i}.arrow").read_all(), json.loads((out / f"{i}.json").read_text()))
            for i in range(n)]


def _dropped(path: Any, before: dict[str, Any]) -> int:
    after = path.stats()
    return sum(after["dirs"][d]["drop_loss"] - before["dirs"][d]["drop_loss"] for d in after["dirs"])


def test_partitions_from_workers_across_a_lossy_path_equal_the_single_server(wan_cluster, client,
                                                                             tmp_path: Path) -> None:
    path = wan_cluster["path"]
    before = path.stats()
    proc = _client(wan_cluster, tmp_path, QUERIES, pause=False)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    assert _dropped(path, before) > 0, "the relay dropped nothing: the path was not lossy"
    for (got, parts), sql in zip(_results(tmp_path, len(QUERIES)), QUERIES):
        want = client.query(sql)
        assert want.num_rows > 1000, sql
        assert got.schema.equals(want.schema, check_metadata=False), sql
        oracle.assert_same_records(got, want, ordered="order by" in sql)
        # Partitioned: one piece per worker, each from its own data channel behind the path.
        assert sorted(p["index"] for p in parts) == list(range(WORKERS)), sql
        assert len({p["endpoint"] for p in parts}) == WORKERS, sql
        assert all(p["endpoint"].startswith(f"{path.server_addr}:") for p in parts), parts
        assert sum(p["rows"] for p in parts) == want.num_rows, sql


def test_worker_killed_behind_the_path_is_refetched_from_another(wan_cluster, client, tmp_path: Path) -> None:
    path = wan_cluster["path"]
    proc = _client(wan_cluster, tmp_path, [LARGE], pause=True)
    assert proc.stdout is not None and proc.stdin is not None
    line = proc.stdout.readline()
    if not line.startswith("DIAL "):
        proc.kill()
        _, err = proc.communicate(timeout=60)
        pytest.fail(f"the client never dialled a data endpoint: {line!r} {err[-3000:]}")
    port = line.split()[1].rsplit(":", 1)[1]
    # The process listening on that port in the server namespace is the worker holding the partition.
    ss = subprocess.run(path.exec_argv(path.server_ns, ["ss", "-Hltnp", f"sport = :{port}"]),
                        capture_output=True, text=True, timeout=30, check=True).stdout
    pids = {int(p) for p in re.findall(r"pid=(\d+)", ss)}
    assert len(pids) == 1, ss
    victim = pids.pop()
    os.kill(victim, signal.SIGKILL)
    proc.stdin.write("go\n")
    proc.stdin.flush()
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    (got, parts), = _results(tmp_path, 1)
    oracle.assert_same_records(got, client.query(LARGE))
    lost = [p for p in parts if p["attempts"] > 1]
    assert len(lost) == 1, parts
    assert not lost[0]["endpoint"].endswith(f":{port}"), parts  # refetched from another worker's channel

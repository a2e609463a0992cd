"""``dstp query`` through ``dstp agent``: the command hands its options and its stdout/stderr to the agent.

Every test runs real ``dstp query`` processes against a real server on loopback; the oracle is the same
command run in its own process (``--no-agent``), whose records tests/query checks against xarray and
DuckDB, and for saved files the Python client's own result.
"""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from agents import DSTP, agent_env, gated_agent, refusing_agent

SQL = "select time, lat, lon, temperature, humidity from ccm3 where humidity > 50"


def _query(server: str, sock: Path | str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*DSTP, "query", *args, "--server", server], env=agent_env(sock), capture_output=True,
                          text=True, timeout=120)


def _timeless(text: str) -> str:
    """``text`` without what differs from run to run: seconds, rates and query ids."""
    return re.sub(r'"query_id": "[^"]*"', '"query_id": …', re.sub(r"\d+\.\d+ (s|MiB/s)", "…", text))


@pytest.mark.parametrize("args", [
    [SQL],
    [SQL, "--max-rows", "5"],
    [SQL + " limit 300", "--format", "csv"],
    [SQL, "--format", "csv", "--transport", "striped", "--streams", "2"],
    ["select count(*) as n, avg(temperature) as t from ccm3"],
    [SQL, "--explain"],
    ["select nothing from ccm3"],
    ["select temperature from no_such_dataset"],
    [SQL, "-o", "out.xyz"],
    [SQL, "--ca-file", "/nonexistent/ca.pem"],
], ids=["preview", "preview-cut", "csv", "csv-striped", "aggregate", "explain", "bad-column", "bad-dataset",
        "bad-extension", "no-client"])
def test_a_query_through_the_agent_prints_exactly_what_it_prints_without(data_server, tmp_path, agent_process,
                                                                         args) -> None:
    sock, proc = agent_process
    server = data_server.endpoints.grpc
    via = _query(server, sock, *args)
    direct = _query(server, sock, *args, "--no-agent")
    assert via.returncode == direct.returncode, (via.stderr, direct.stderr)
    assert _timeless(via.stdout) == _timeless(direct.stdout)
    assert _timeless(via.stderr) == _timeless(direct.stderr)
    assert via.stdout or via.returncode != 0
    assert "no agent answers" not in via.stderr
    assert proc.poll() is None


@pytest.mark.parametrize("suffix", [".parquet", ".arrow", ".csv", ".nc"])
def test_a_file_saved_through_the_agent_is_the_clients_result(data_server, data_client, tmp_path, agent_process,
                                                              suffix) -> None:
    sock, _ = agent_process
    out = tmp_path / "sub" / f"result{suffix}"
    out.parent.mkdir()
    relative = out.relative_to(tmp_path)
    sql = SQL.replace("time, lat", "time, lev, lat") if suffix == ".nc" else SQL  # netCDF rebuilds the whole grid
    run = subprocess.run([*DSTP, "query", sql, "-o", str(relative), "--server", data_server.endpoints.grpc, "-v"],
                         env=agent_env(sock), capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    expected = data_client.query(sql)
    assert f"{expected.num_rows:,} records → {out} (" in run.stderr  # -o relative to the command's folder
    assert re.search(r"^agent: .*, on a (new client of|client kept from)", run.stderr, re.M), run.stderr
    direct = tmp_path / f"direct{suffix}"
    again = subprocess.run([*DSTP, "query", sql, "-o", str(direct), "--server", data_server.endpoints.grpc,
                            "--no-agent"], env=agent_env(sock), capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    if suffix == ".parquet":
        assert pq.read_table(out).equals(expected)
    elif suffix == ".arrow":
        with pa.ipc.open_file(out) as f:
            assert f.read_all().equals(expected)
    elif suffix == ".csv":
        assert out.read_bytes() == direct.read_bytes()
    else:
        import xarray as xr

        with xr.open_dataset(out) as a, xr.open_dataset(direct) as b:
            when = [d.attrs.pop("history").split("Z ", 1) for d in (a, b)]  # "<UTC time>Z dstp query: …"
            assert when[0][1] == when[1][1]
            xr.testing.assert_identical(a, b)
    assert sorted(p.name for p in out.parent.iterdir()) == [out.name]  # no partial file left beside it


def test_queries_through_the_agent_share_its_client_and_load_no_grpc_or_arrow(data_server, tmp_path,
                                                                              agent_process) -> None:
    sock, _ = agent_process
    server = data_server.endpoints.grpc
    first = _query(server, sock, SQL, "--max-rows", "3", "-v")
    assert first.returncode == 0, first.stderr
    program = ("import sys\nfrom dstp.cli import main\n"
               f"code = main(['query', {SQL!r}, '--max-rows', '3', '-v', '--server', {server!r}])\n"
               "sys.stdout.flush()\n"
               "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('grpc', 'google', 'pyarrow', 'numpy'))\n"
               "print('EXIT', code, heavy)\n")
    run = subprocess.run([sys.executable, "-c", program], env=agent_env(sock), capture_output=True, text=True, timeout=60)
    assert run.stdout.splitlines()[-1] == "EXIT 0 []", run.stdout + run.stderr
    assert run.stdout.split("EXIT")[0] == first.stdout  # the agent wrote the records to this process's stdout
    assert re.search(r"^agent: .*, on a new client of ", first.stderr, re.M), first.stderr
    assert re.search(r"^agent: .*, on a client kept from an earlier request$", run.stderr, re.M), run.stderr


def test_a_query_whose_stdout_is_closed_early_does_not_stop_the_agent(data_server, tmp_path, agent_process) -> None:
    """``dstp query … --format csv | head -1``: the reader leaves; the agent's writes fail, it carries on serving."""
    sock, proc = agent_process
    server = data_server.endpoints.grpc
    pipeline = subprocess.run(f"{' '.join(DSTP)} query '{SQL}' --format csv --server {server} | head -1",
                              shell=True, env=agent_env(sock), capture_output=True, text=True, timeout=120)
    whole = _query(server, sock, SQL, "--format", "csv", "--no-agent")
    assert whole.returncode == 0 and len(whole.stdout.splitlines()) > 1000
    assert pipeline.stdout == whole.stdout.splitlines(keepends=True)[0]
    after = _query(server, sock, "select count(*) as n from ccm3")
    assert after.returncode == 0 and after.stdout == _query(server, sock, "select count(*) as n from ccm3",
                                                            "--no-agent").stdout
    assert proc.poll() is None


@pytest.mark.parametrize("data, says", [
    (b'{"dstp_agent": 1, "op": "query", "server": "h:1", "query": {"sql": "select 1"}}\n', "file descriptors"),
])
def test_a_query_request_without_its_outputs_is_refused(data_server, agent_process, data, says) -> None:
    sock, proc = agent_process
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(sock))
        s.sendall(data)
        answer = s.makefile("rb").readline().decode()
    assert "bad request to the agent" in answer and says in answer, answer
    assert proc.poll() is None


def test_query_options_this_dstp_does_not_send_are_refused(data_server, tmp_path, agent_process) -> None:
    sock, _ = agent_process
    import json

    request = {"dstp_agent": 1, "op": "query", "server": data_server.endpoints.grpc, "query": {"sql": SQL}}
    with socket.socket(socket.AF_UNIX) as s, open(tmp_path / "o", "w") as o, open(tmp_path / "e", "w") as e:
        s.connect(str(sock))
        socket.send_fds(s, [json.dumps(request).encode() + b"\n"], [o.fileno(), e.fileno()])
        answer = json.loads(s.makefile("rb").readline())
    assert "'query' must hold sql, output" in answer["error"] and "restart the agent" in answer["error"]
    assert (tmp_path / "o").read_text() == (tmp_path / "e").read_text() == ""


@pytest.mark.parametrize("sig, status, said", [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")])
def test_stopping_a_query_stops_it_in_the_agent_and_writes_nothing(own_server, tmp_path, sig, status, said) -> None:
    """Ctrl-C (or SIGTERM) on `dstp query -o`: the agent stops at the next batch and says what the command says."""
    sock = tmp_path / "agent.sock"
    out = tmp_path / "result.parquet"
    argv = ["query", SQL, "-o", str(out), "--server", own_server.endpoints.grpc, "--transport", "striped",
            "--streams", "1"]
    with gated_agent(sock, tmp_path, f"was {said}; stopping at the next batch") as (_, stop):
        code, err = stop(argv, sig)
    assert code == status, err
    assert f"dstp: {said}; the partial result was discarded and nothing was written to {out}" in err
    assert list(tmp_path.glob("*result*")) == []


def test_the_progress_bar_is_drawn_on_the_commands_stderr(data_server, tmp_path, agent_process) -> None:
    sock, proc = agent_process
    out = tmp_path / "p.parquet"
    run = _query(data_server.endpoints.grpc, sock, SQL, "-o", str(out), "--progress")
    assert run.returncode == 0, run.stderr
    assert "fetching" in run.stderr and " rows · " in run.stderr, run.stderr
    assert proc.poll() is None
    proc.terminate()
    _, agent_err = proc.communicate(timeout=30)
    assert "fetching" not in agent_err


def test_an_agent_that_does_not_know_queries_is_passed_over_with_a_message(data_server, tmp_path) -> None:
    """An agent started by an older dstp refuses op "query" before running anything: the command says so and
    runs the query itself, rather than failing."""
    sock = tmp_path / "old.sock"
    with refusing_agent(sock, "unknown op 'query'; this agent runs: get"):
        run = _query(data_server.endpoints.grpc, sock, SQL, "--max-rows", "4")
    direct = _query(data_server.endpoints.grpc, sock, SQL, "--max-rows", "4", "--no-agent")
    assert run.returncode == 0 and run.stdout == direct.stdout, run.stderr
    assert f"the agent at {sock} refused the query (unknown op 'query'" in run.stderr
    assert "querying without it (restart the agent if it is older than this dstp)" in run.stderr

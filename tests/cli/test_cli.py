"""The dstp command, run as a user would: a real `dstp serve` process and client commands."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pyarrow.parquet as pq
import pytest

import builders

DSTP = [sys.executable, "-m", "dstp.cli"]


def run(*args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([*DSTP, *args], capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"dstp {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture(scope="module")
def served(catalog_root: Path) -> Iterator[str]:
    proc = subprocess.Popen([*DSTP, "serve", str(catalog_root), "--port", "0", "--http-port", "-1",
                             "--data-port", "-1", "--udt-port", "-1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        address = None
        assert proc.stdout is not None
        while time.monotonic() < deadline and address is None:
            line = proc.stdout.readline()
            if not line:
                break
            m = re.match(r"\s+grpc\s+(\S+)", line)
            if m:
                address = m.group(1)
        assert address, "dstp serve did not report its address"
        yield address
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream:
                stream.close()


def test_query_prints_records(served: str) -> None:
    out = run("query", "select temperature, time from ccm3 where humidity > 50 limit 5", "--server", served).stdout
    lines = out.strip().splitlines()
    assert lines[0].split() == ["temperature", "time"]
    assert len(lines) == 6
    for line in lines[1:]:
        assert 150 < float(line.split()[0]) < 350


def test_query_saves_what_the_client_gets(served: str, client, tmp_path: Path) -> None:
    sql = "select temperature, lat, time from ccm3 where lat > 70"
    target = tmp_path / "out.parquet"
    proc = run("query", sql, "--server", served, "-o", str(target))
    assert "records" in proc.stderr
    assert pq.read_table(target).equals(client.query(sql))
    csv = run("query", sql, "--server", served, "--format", "csv").stdout
    assert len(csv.strip().splitlines()) == client.query(sql).num_rows + 1


def test_query_takes_auto_by_default_and_says_so(served: str, client, tmp_path: Path) -> None:
    sql = "select temperature, lat, time from ccm3 where lat > 70"
    target = tmp_path / "auto.parquet"
    proc = run("query", sql, "--server", served, "-o", str(target), "-v", "--no-agent")
    # a small result on this host: the gRPC stream, chosen by auto (not asked for), no codec
    assert "data channel: grpc — auto: grpc (result at most" in proc.stderr, proc.stderr
    assert ", none (" in proc.stderr
    assert pq.read_table(target).equals(client.query(sql, transport="grpc"))


def test_ls_and_describe(served: str) -> None:
    out = run("ls", "--server", served).stdout
    assert "ccm3" in out and "ocean" in out
    described = run("describe", "ccm3", "--server", served).stdout
    assert "temperature" in described and "K" in described and "noleap" in described


@pytest.mark.parametrize("width", [60, 80, 100, 132, 200])
def test_ls_gives_each_dataset_one_line_that_fits_the_terminal(served: str, width: int) -> None:
    import json

    from rich.cells import cell_len

    listed = json.loads(run("ls", "--json", "--server", served).stdout)
    proc = subprocess.run([*DSTP, "ls", "--server", served], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "COLUMNS": str(width)})
    lines = proc.stdout.rstrip("\n").split("\n")
    assert len(lines) == 1 + len(listed) and len(listed) >= 4, proc.stdout  # a header, then one line each
    assert all(cell_len(line.rstrip()) < width for line in lines), proc.stdout
    header = lines[0].split()
    for d, line in zip(listed, lines[1:]):
        cells = line.split()
        assert cells[0] == d["id"] and f"{d['default_grid_rows']:,}" in cells, line  # never shortened
        assert line.split(d["id"], 1)[1].strip()[:12] == d["title"][:12], line
        if width >= 80 and d["time_start"]:
            assert f"{d['time_start'][:10]} … {d['time_end'][:10]}" in line, line
        if "attributes" in header:
            assert d["attributes"][0] in line, line
    assert ("attributes" in header) == (width >= 132) and ("grid" in header) == (width >= 100), lines[0]


def test_errors_are_one_line_messages_not_tracebacks(served: str) -> None:
    proc = run("query", "select nosuch from ccm3", "--server", served, check=False)
    assert proc.returncode == 1
    assert "no column 'nosuch'" in proc.stderr and "Traceback" not in proc.stderr
    proc = run("query", "select 1 from ccm3", "--server", "127.0.0.1:1", check=False)
    assert proc.returncode == 1 and "cannot reach" in proc.stderr and "Traceback" not in proc.stderr


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


GRPC_WORDS = ("ipv4:", "failed to connect to all addresses", "UNKNOWN", "UNAVAILABLE", "last error")


@pytest.mark.parametrize("command", [["ls"], ["describe", "ccm3"], ["query", "select lat from ccm3"],
                                     ["get", "ccm3", "ccm3_1990-01.nc", "--no-progress"]])
def test_no_server_says_how_to_start_or_name_one(command: list[str], tmp_path: Path) -> None:
    port = _closed_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DSTP_SERVER", "DSTP_AGENT_SOCK")}
    for flags, extra, origin in ([["--server", f"127.0.0.1:{port}"], {}, "given with --server"],
                                 [[], {"DSTP_SERVER": f"127.0.0.1:{port}"}, "from $DSTP_SERVER"]):
        proc = subprocess.run([*DSTP, *command, *flags], capture_output=True, text=True, timeout=60,
                              env={**env, **extra}, cwd=tmp_path)
        err = proc.stderr
        assert proc.returncode == 1, err
        assert f"cannot reach the dstp server at 127.0.0.1:{port}: nothing listens there (connection refused)" in err
        assert "`dstp serve`" in err and "--server HOST:PORT" in err and "DSTP_SERVER=HOST:PORT" in err, err
        assert f"(tried 127.0.0.1:{port}, {origin})" in err, err
        assert not [w for w in GRPC_WORDS if w in err], err
        assert not list(tmp_path.iterdir())  # nothing written


def test_an_address_that_is_no_dstp_server_is_said_so() -> None:
    import http.server
    import threading

    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    try:
        for server, why in ((f"127.0.0.1:{web.server_address[1]}", "an HTTP/1 server answers there, not dstp's gRPC"),
                            ("nosuch.invalid:50051", "the host name does not resolve")):
            proc = run("ls", "--server", server, check=False)
            assert proc.returncode == 1 and f"cannot reach the dstp server at {server}: {why}" in proc.stderr, proc.stderr
            assert not [w for w in GRPC_WORDS if w in proc.stderr], proc.stderr
    finally:
        web.shutdown()
        web.server_close()


def test_publish_then_validate(tmp_path: Path) -> None:
    files = builders.edge_station(tmp_path / "st")
    out = run("publish", *map(str, files), "--id", "station", "--rename", "t2m=temperature_2m").stdout
    assert "station.dstp.xml" in out
    assert 'name="temperature_2m" variable="t2m"' in (tmp_path / "st" / "station.dstp.xml").read_text()
    ok = run("catalog", "validate", str(tmp_path))
    assert "1 dataset(s) valid, 0 problem(s)" in ok.stdout
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "bad.dstp.xml").write_text("<dataset>")
    bad = run("catalog", "validate", str(tmp_path), check=False)
    assert bad.returncode == 1 and "bad.dstp.xml:1" in bad.stdout


def test_the_program_ends_at_once_with_its_status_and_all_its_output(tmp_path: Path) -> None:
    """After the command, no interpreter teardown (it aborted a finished get once); stdout to a pipe is flushed."""
    marker = tmp_path / "teardown-ran"
    run("publish", *map(str, builders.edge_station(tmp_path / "good" / "st")), "--id", "station")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "bad.dstp.xml").write_text("<dataset>")
    for root, status, words in ((tmp_path / "good", 0, "1 dataset(s) valid, 0 problem(s)"),
                                (tmp_path / "bad", 1, "bad.dstp.xml:1")):
        program = ("import atexit, pathlib, sys; "
                   f"atexit.register(lambda: pathlib.Path({str(marker)!r}).write_text('ran')); "
                   f"sys.argv = ['dstp', 'catalog', 'validate', {str(root)!r}]; "
                   "from dstp.cli import entry; entry()")
        buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
        proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60,
                              env=buffered)
        assert proc.returncode == status, proc.stderr
        assert words in proc.stdout  # block-buffered (a pipe): it was flushed before the process ended
        assert not marker.exists()


def test_a_terminal_preview_stops_the_query_after_the_rows_it_shows(served: str) -> None:
    proc = run("query", "select time, lat, lon, temperature from ccm3", "--server", served, "--max-rows", "3")
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert len(lines) == 1 + 3  # header and three records
    assert "more records than the 3 shown" in proc.stderr and "-o FILE" in proc.stderr
    everything = run("query", "select time from ccm3 limit 3", "--server", served)
    assert len([line for line in everything.stdout.splitlines() if line.strip()]) == 4
    assert "more records" not in everything.stderr


def test_the_serve_hint_names_a_dataset_the_catalog_has(tmp_path: Path) -> None:
    from dstp.catalog.publish import publish

    publish(builders.edge_station(tmp_path / "station"), "station")
    proc = subprocess.Popen([*DSTP, "serve", str(tmp_path), "--port", "0", "--http-port", "-1",
                             "--data-port", "-1", "--udt-port", "-1"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        hint = next((line for line in proc.stdout if line.startswith("try:")), "")
    finally:
        proc.terminate()
        proc.wait(10)
        if proc.stdout:
            proc.stdout.close()
    assert 'dstp query "select t2m from station limit 5" --server 127.0.0.1:' in hint, hint


def _stacks_at_sigbus(proc: subprocess.Popen[str]) -> str:
    """Send SIGBUS to a running ``dstp`` process; return its stderr once it died of it, printing its stacks."""
    import signal

    try:
        proc.send_signal(signal.SIGBUS)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == -signal.SIGBUS, (proc.returncode, err[-2000:])
    assert "Fatal Python error: Bus error" in err, err[-2000:]
    return err


def test_a_server_killed_by_a_native_crash_says_where_every_thread_was(catalog_root: Path) -> None:
    """SIGBUS (or SIGSEGV) inside netCDF-C, HDF5 or DuckDB ends the process with no Python exception: the
    server must print each thread's Python stack to its log first, or the crash cannot be traced."""
    proc = subprocess.Popen([*DSTP, "serve", str(catalog_root), "--port", "0", "--http-port", "-1",
                             "--data-port", "-1", "--udt-port", "-1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    started = any(line.startswith("try:") for line in proc.stdout)
    err = _stacks_at_sigbus(proc)
    assert started, err[-2000:]
    assert re.search(r'File ".*dstp[/\\]cli\.py", line \d+ in cmd_serve', err), err[-2000:]


def test_a_client_command_killed_by_a_native_crash_says_where_it_was() -> None:
    """The same for every dstp command: ``dstp query`` waiting on a server that accepted its connection
    and never answers is killed with SIGBUS, and stderr shows the command's Python stack."""
    import socket

    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(60)
        port = listener.getsockname()[1]
        proc = subprocess.Popen([*DSTP, "query", "select time from ccm3 limit 1", "--server", f"127.0.0.1:{port}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            conn, _ = listener.accept()  # the command is running: it dialled the "server"
        except BaseException:
            proc.kill()
            proc.communicate()
            raise
        with conn:
            err = _stacks_at_sigbus(proc)
    assert re.search(r'File ".*dstp[/\\]cli\.py", line \d+ in cmd_query', err), err[-2000:]


def test_a_command_runs_with_its_stderr_closed() -> None:
    """``dstp … 2>&-`` (cron, some batch systems): no stderr for the crash handler is no reason to fail."""
    proc = subprocess.run(f"{sys.executable} -m dstp.cli --help 2>&-", shell=True, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and "usage: dstp" in proc.stdout, (proc.returncode, proc.stdout[-500:])

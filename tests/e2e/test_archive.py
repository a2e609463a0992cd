"""An archive that grows while it is served: a real server, real clients, files renamed into place.

A file renamed into the catalog folder is noticed by the file watch (inotify) or, without one, on
``SIGHUP`` / ``dstp catalog reload``; the next query answers over it, equal to the oracle (xarray on each
file), with the dataset's new version in its schema. The tests wait on the server's refreshes (events),
never on a timer.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pytest

import dstp
from builders import daily
from oracle import assert_same_records
from oracle import daily_records as oracle

from dstp.catalog.publish import publish
from dstp.server import DstpServer
from dstp.settings import Settings

SQL = "select time, lat, lon, t2m from daily"
#: Longest a test waits for the server to publish a file (the goal is 5 s; generous on a loaded CI machine).
WAIT_S = 60.0


def _archive(root: Path, days: int = 5) -> Path:
    folder = root / "daily"
    publish([daily(folder / f"d_{d:04d}.nc", d) for d in range(days)], "daily")
    return folder


def _settings(root: Path, state: Path, **changes: object) -> Settings:
    return Settings(catalog_root=root, port=0, http_port=-1, data_port=-1, udt_port=-1, state_dir=state,
                    catalog_settle_s=0.0, **changes)  # type: ignore[arg-type]


def _wait_for(server: DstpServer, files: int) -> None:
    """Wait (on refreshes, not on a clock) until ``daily`` has ``files`` files."""
    assert server.watch is not None and server.catalog is not None
    deadline = time.monotonic() + WAIT_S
    while len(server.catalog.get("daily").files) != files:
        seen = server.watch.refreshes
        assert time.monotonic() < deadline, f"the new file was not published within {WAIT_S:g} s"
        server.watch.wait_refresh(seen, max(0.0, deadline - time.monotonic()))


def _plain(table: pa.Table) -> pa.Table:
    return table.cast(pa.schema([f.remove_metadata() for f in table.schema])).replace_schema_metadata(None)


def test_a_file_renamed_into_the_folder_is_queryable_with_the_next_version(tmp_path: Path) -> None:
    folder = _archive(tmp_path / "root")
    with DstpServer(_settings(tmp_path / "root", tmp_path / "state")) as server, \
            dstp.connect(server.endpoints.grpc) as client:  # type: ignore[union-attr]
        first = client.query(SQL)
        assert first.schema.metadata[b"dstp:version"] == b"1"
        daily(folder / "d_0005.nc", 5)  # written under another name, renamed into place
        _wait_for(server, 6)
        after = client.query(SQL)
        assert after.schema.metadata[b"dstp:version"] == b"2"
        assert_same_records(_plain(after), oracle(sorted(folder.glob("d_*.nc"))))
        assert server.service is not None
        [summary] = server.service.datasets()
        assert summary.version == 2


def test_sighup_publishes_what_changed_when_nothing_watches(tmp_path: Path) -> None:
    folder = _archive(tmp_path / "root")
    settings = _settings(tmp_path / "root", tmp_path / "state", catalog_watch=False, catalog_poll_s=0.0)
    with DstpServer(settings) as server, dstp.connect(server.endpoints.grpc) as client:  # type: ignore[union-attr]
        (folder / "d_0001.nc").unlink()
        daily(folder / "d_0007.nc", 7)
        assert server.watch is not None
        seen = server.watch.refreshes
        server.reload()  # what SIGHUP calls
        assert server.watch.wait_refresh(seen, WAIT_S)
        assert_same_records(_plain(client.query(SQL)), oracle(sorted(folder.glob("d_*.nc"))))


@pytest.fixture()
def served(tmp_path: Path) -> Iterator[tuple[str, Path, dict[str, str]]]:
    """``dstp serve`` in its own process, on a daily archive, without a file watch (so only a reload publishes)."""
    folder = _archive(tmp_path / "root")
    env = {**os.environ, "DSTP_STATE_DIR": str(tmp_path / "state"), "DSTP_CATALOG_WATCH": "false",
           "DSTP_CATALOG_POLL_S": "0", "DSTP_CATALOG_SETTLE_S": "0"}
    proc = subprocess.Popen([sys.executable, "-m", "dstp.cli", "serve", str(tmp_path / "root"), "--port", "0",
                             "--http-port", "-1", "--data-port", "-1", "--udt-port", "-1"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        assert proc.stdout is not None
        address = None
        while address is None:
            line = proc.stdout.readline()
            assert line, "dstp serve ended before it reported its address"
            m = re.match(r"\s+grpc\s+(\S+)", line)
            address = m.group(1) if m else None
        yield address, folder, env
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


def test_dstp_catalog_reload_makes_the_server_publish_and_says_what_changed(served, tmp_path: Path) -> None:
    address, folder, env = served
    daily(folder / "d_0005.nc", 5)
    done = subprocess.run([sys.executable, "-m", "dstp.cli", "catalog", "reload", str(tmp_path / "root")],
                          capture_output=True, text=True, env=env, timeout=WAIT_S + 30)
    assert done.returncode == 0, done.stderr
    assert "catalog version 1 → 2" in done.stdout, done.stdout
    assert "daily changed, version 2: 1 file(s) added (daily/d_0005.nc)" in done.stdout, done.stdout
    with dstp.connect(address) as client:
        assert_same_records(_plain(client.query(SQL)), oracle(sorted(folder.glob("d_*.nc"))))


def test_dstp_catalog_reload_says_when_no_server_serves_the_catalog(tmp_path: Path) -> None:
    _archive(tmp_path / "root")
    env = {**os.environ, "DSTP_STATE_DIR": str(tmp_path / "state")}
    done = subprocess.run([sys.executable, "-m", "dstp.cli", "catalog", "reload", str(tmp_path / "root")],
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 1
    assert "no dstp server is serving" in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_publish_a_folder_by_glob_then_validate_it_from_the_index(tmp_path: Path) -> None:
    folder = tmp_path / "root" / "daily"
    for d in range(300):  # enough for the helper processes to read the headers
        daily(folder / f"d_{d:04d}.nc", d, lat=2, lon=2, compress=False)
    (folder / "notes.txt").write_text("not part of it")
    env = {**os.environ, "DSTP_STATE_DIR": str(tmp_path / "state")}

    def dstp_(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "dstp.cli", *args], capture_output=True, text=True, env=env,
                              timeout=300)

    done = dstp_("publish", str(folder), "--glob", "d_*.nc", "--id", "daily", "--processes", "2")
    assert done.returncode == 0, done.stderr
    assert 'glob="d_*.nc"' in (folder / "daily.dstp.xml").read_text()
    for _ in range(2):  # the second run from the index the first one built
        done = dstp_("catalog", "validate", str(tmp_path / "root"))
        assert done.returncode == 0, done.stdout + done.stderr
        assert re.search(r"ok\s+daily\s+300 file\(s\)", done.stdout), done.stdout
    (folder / "d_0300.nc").write_bytes(b"CDF\x01" + b"\x00" * 12)  # a file cut short
    done = dstp_("catalog", "validate", str(tmp_path / "root"))
    assert done.returncode == 1
    assert "HELD    " in done.stdout and "d_0300.nc cannot be opened" in done.stdout, done.stdout
    assert "1 file(s) held back" in done.stdout
    refused = dstp_("publish", str(folder / "d_0000.nc"), "--glob", "d_*.nc", "--id", "x")
    assert refused.returncode == 2 and "--glob takes one folder" in refused.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_dstp_serve_stops_gracefully_on_a_signal_sent_as_soon_as_it_speaks(tmp_path: Path, sig: int) -> None:
    """A supervisor that waits for the first line and stops the server at once gets the graceful stop, status 0."""
    _archive(tmp_path / "root")
    env = {**os.environ, "DSTP_STATE_DIR": str(tmp_path / "state"), "DSTP_CATALOG_WATCH": "false"}
    proc = subprocess.Popen([sys.executable, "-m", "dstp.cli", "serve", str(tmp_path / "root"), "--port", "0",
                             "--http-port", "-1", "--data-port", "-1", "--udt-port", "-1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("dstp serving"), "dstp serve did not report what it serves"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, f"dstp serve ended by the signal's default action ({proc.returncode}): {err}"
    assert "stopping" in err

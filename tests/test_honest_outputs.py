"""Honest output files: `dstp query -o` and `dstp get` never leave a file that looks complete but is not.

Real processes on real sockets: the CLI runs as a subprocess against a real
server, through a real TCP proxy that can hold the server's bytes (so the
client is provably mid-transfer when it is interrupted) or cut the
connection; the server crash kills a real `dstp serve` process.
"""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import netCDF4
import numpy as np
import pytest

from dstp.catalog.publish import publish
from dstp.server import DstpServer
from dstp.settings import Settings
from dstp.transport.client.files import STATE_SUFFIX, partial_path

DSTP = [sys.executable, "-m", "dstp.cli"]
BIG_QUERY = "select * from ccm3"  # 196,608 records, about 8 MB of Arrow


class GateProxy:
    """A TCP proxy whose server→client bytes stop after ``hold_after`` bytes (until ``release``) or are cut
    after ``cut_after`` bytes (both sides closed)."""

    def __init__(self, target: str, *, hold_after: int | None = None, cut_after: int | None = None) -> None:
        host, _, port = target.rpartition(":")
        self.target = (host, int(port))
        self.hold_after, self.cut_after = hold_after, cut_after
        self.held = threading.Event()
        self.release = threading.Event()
        self.cut = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self._socks: list[socket.socket] = []
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target)
            except OSError:  # the server is gone (killed by the test): refuse, as a real proxy would
                client.close()
                continue
            self._socks += [client, server]
            for src, dst, down in ((client, server, False), (server, client, True)):
                t = threading.Thread(target=self._pump, args=(src, dst, down), daemon=True)
                t.start()
                self._threads.append(t)

    def _pump(self, src: socket.socket, dst: socket.socket, down: bool) -> None:
        seen = 0
        try:
            while data := src.recv(65536):
                if down and self.cut_after is not None and seen + len(data) > self.cut_after:
                    dst.sendall(data[: self.cut_after - seen])
                    self.cut.set()
                    break
                if down and self.hold_after is not None and not self.release.is_set() \
                        and seen + len(data) > self.hold_after:
                    dst.sendall(data[: self.hold_after - seen])
                    self.held.set()
                    self.release.wait()
                    data = data[self.hold_after - seen:]
                    seen = self.hold_after
                seen += len(data)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.release.set()
        try:
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread (close alone does not)
        except OSError:
            pass
        self.listener.close()
        for s in self._socks:
            s.close()
        for t in self._threads:
            t.join(timeout=5)


def _wait_for(what: str, condition: Callable[[], bool], proc: subprocess.Popen[str], seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"the client ended ({proc.returncode}) before {what}:\n{out}\n{err}")
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.01)


def _start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([*DSTP, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen[str]) -> tuple[int, str]:
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err


@pytest.fixture()
def proxy_factory() -> Iterator[Callable[..., GateProxy]]:
    made: list[GateProxy] = []

    def make(target: str, **kwargs: int) -> GateProxy:
        made.append(GateProxy(target, **kwargs))
        return made[-1]

    yield make
    for p in made:
        p.close()


# -- dstp query -o ------------------------------------------------------------------------


def test_ctrl_c_mid_transfer_leaves_the_old_file_and_no_partial(server: DstpServer, proxy_factory, tmp_path) -> None:
    proxy = proxy_factory(server.endpoints.grpc, hold_after=1_000_000)
    out = tmp_path / "result.parquet"
    out.write_bytes(b"an older result the user keeps")
    proc = _start("query", BIG_QUERY, "--server", proxy.address, "-o", str(out))
    partial = out.with_name(f".{out.name}.dstp-partial-{proc.pid}")  # partial_name() in the client process
    _wait_for("the transfer is under way", lambda: proxy.held.is_set() and partial.exists(), proc)
    proc.send_signal(signal.SIGINT)
    code, err = _finish(proc)
    assert code == 130, err
    assert "interrupted" in err and f"{out} was left as it was" in err and "Traceback" not in err
    assert out.read_bytes() == b"an older result the user keeps"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.parquet"]


def test_broken_connection_leaves_no_file(server: DstpServer, proxy_factory, tmp_path) -> None:
    proxy = proxy_factory(server.endpoints.grpc, cut_after=1_500_000)
    out = tmp_path / "result.csv"
    code, err = _finish(_start("query", BIG_QUERY, "--server", proxy.address, "-o", str(out)))
    assert proxy.cut.is_set()
    assert code == 1, err
    assert re.search(r"the result from \S+ broke off (after [\d,]+ records|before its first records arrived) "
                     r"\(.*\); it is incomplete", err), err
    assert f"nothing was written to {out}" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_server_crash_mid_transfer_leaves_no_file(catalog_root: Path, proxy_factory, tmp_path) -> None:
    serve = subprocess.Popen([*DSTP, "serve", str(catalog_root), "--port", "0", "--http-port", "-1",
                              "--data-port", "-1", "--udt-port", "-1"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert serve.stdout is not None
        address = None
        for line in serve.stdout:
            if m := re.match(r"\s+grpc\s+(\S+)", line):
                address = m.group(1)
                break
        assert address, "dstp serve did not report its address"
        proxy = proxy_factory(address, hold_after=1_000_000)
        out = tmp_path / "result.nc"
        proc = _start("query", "select * from ccm3", "--server", proxy.address, "-o", str(out))
        _wait_for("the transfer is under way", proxy.held.is_set, proc)
        serve.kill()  # the server dies with the result half sent
        serve.wait(10)
        proxy.release.set()
        code, err = _finish(proc)
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait(10)
        if serve.stdout:
            serve.stdout.close()
    assert code == 1, err
    assert "dstp: error:" in err and f"nothing was written to {out}" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


# -- dstp get -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def big_file_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DstpServer, Path]]:
    """A server publishing one 6 MiB file (three gRPC chunks of 2 MiB), so a download can be caught mid-way."""
    folder = tmp_path_factory.mktemp("bigcat") / "big"
    folder.mkdir()
    path = folder / "big_2000.nc"
    with netCDF4.Dataset(path, "w", format="NETCDF3_64BIT_OFFSET") as nc:
        nc.createDimension("time", 6)
        nc.createDimension("x", 256 * 1024)
        t = nc.createVariable("time", "f8", ("time",))
        t.units, t.calendar, t.standard_name = "days since 2000-01-01", "standard", "time"
        t[:] = np.arange(6.0)
        x = nc.createVariable("x", "f4", ("x",))
        x[:] = np.arange(256 * 1024, dtype=np.float32)
        v = nc.createVariable("noise", "f4", ("time", "x"))
        v.units = "1"
        v[:] = np.random.default_rng(3).random((6, 256 * 1024), dtype=np.float32)
    publish([path], "big")
    srv = DstpServer(Settings(catalog_root=folder.parent, port=0, http_port=-1, data_port=-1, udt_port=-1))
    srv.start()
    yield srv, path
    srv.stop()


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "SIGINT"])
def test_killed_download_never_has_the_final_name_and_resumes(big_file_server, proxy_factory, tmp_path,
                                                             sig: signal.Signals) -> None:
    server, source = big_file_server
    proxy = proxy_factory(server.endpoints.grpc, hold_after=3 * 2**20)
    out = tmp_path / "copy.nc"
    state = out.with_name(out.name + STATE_SUFFIX)
    get = ("get", "big", source.name, "-o", str(out), "--transport", "grpc", "--no-progress")
    proc = _start(*get, "--server", proxy.address)
    # the state file is written once the first 2 MiB block is on disk; the proxy holds the rest
    _wait_for("a block is on disk", lambda: proxy.held.is_set() and state.exists(), proc)
    proc.send_signal(sig)
    code, err = _finish(proc)
    assert code == (130 if sig == signal.SIGINT else -signal.SIGKILL), err
    if sig == signal.SIGINT:
        assert "interrupted" in err and "run the same command again to resume" in err and "Traceback" not in err
    assert not out.exists(), "a killed download left a file under its final name"
    assert partial_path(out).stat().st_size == source.stat().st_size  # pre-sized, holes and all: not under OUT

    proxy.release.set()
    code, err = _finish(_start(*get, "--server", server.endpoints.grpc))
    assert code == 0, err
    m = re.search(r"resumed after ([\d,]+) bytes", err)
    assert m is not None and int(m.group(1).replace(",", "")) >= 2 * 2**20, err
    assert out.read_bytes() == source.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy.nc"]

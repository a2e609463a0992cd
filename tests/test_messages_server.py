"""A server that cannot do its job refuses to start, in one line, and leaves nothing running."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import dstp.server as server_module
from dstp.errors import CatalogError
from dstp.server import DstpServer
from dstp.settings import Settings


def _settings(root: Path, **ports: int) -> Settings:
    return Settings(catalog_root=root, **{"port": 0, "http_port": -1, "data_port": -1, "udt_port": -1, **ports})


def _port(endpoint: str) -> int:
    return int(endpoint.rsplit(":", 1)[1])


def _new_threads(before: set[int | None]) -> list[str]:
    return [t.name for t in threading.enumerate() if t.ident not in before and t.is_alive() and not t.daemon]


@pytest.mark.parametrize("is_file, words", [(False, "no such folder"), (True, "a file, not a folder")],
                         ids=["missing", "file"])
def test_a_catalog_root_that_is_not_a_folder_refuses_to_start(tmp_path: Path, is_file, words) -> None:
    root = tmp_path / "ccm3_1990-01.nc"
    if is_file:
        root.write_bytes(b"CDF\x01")
    server = DstpServer(_settings(root))
    with pytest.raises(CatalogError) as info:
        server.start()
    message = str(info.value)
    assert str(root) in message and words in message and "\n" not in message
    assert server.endpoints is None


def test_a_taken_grpc_port_is_one_line_and_the_running_server_goes_on(server, client, catalog_root) -> None:
    port = _port(server.endpoints.grpc)
    before = {t.ident for t in threading.enumerate()}
    second = DstpServer(_settings(catalog_root, port=port))
    with pytest.raises(OSError) as info:
        second.start()
    assert str(info.value) == (f"cannot listen on 127.0.0.1:{port}: address already in use "
                               "(is another dstp server running? use --port)")
    assert second.catalog is None  # refused before scanning anything
    assert _new_threads(before) == []
    assert client.query("select temperature from ccm3 limit 1").num_rows == 1


def test_a_taken_http_port_names_the_http_option(server, catalog_root) -> None:
    port = _port(server.endpoints.grpc)
    with pytest.raises(OSError, match=rf"^cannot listen on 127\.0\.0\.1:{port} \(HTTP\): address already in use "
                                      r"\(is another dstp server running\? use --http-port\)$"):
        DstpServer(_settings(catalog_root, http_port=port)).start()


def test_a_port_taken_after_the_check_still_gives_one_line(server, catalog_root, monkeypatch) -> None:
    """gRPC itself says only "Failed to bind"; a start that fails half-way stops what it started."""
    monkeypatch.setattr(server_module, "_check_port_free", lambda *args: None)
    taken = _port(server.endpoints.grpc)
    with pytest.raises(OSError, match=rf"^cannot listen on 127\.0\.0\.1:{taken}: address already in use"):
        DstpServer(_settings(catalog_root, port=taken)).start()
    half = DstpServer(_settings(catalog_root, http_port=taken))  # gRPC starts, then HTTP cannot bind
    with pytest.raises(OSError, match=f"{taken}"):
        half.start()
    assert half.endpoints is not None and half._stopped.is_set()
    with socket.create_server(("127.0.0.1", _port(half.endpoints.grpc))):
        pass  # the gRPC port it had opened is free again


def _serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dstp.cli", "serve", *args], capture_output=True, text=True,
                          timeout=120)


def test_dstp_serve_refuses_in_one_line(server, catalog_root, tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    done = _serve(str(missing))
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.splitlines() == [
        f"dstp: error: cannot serve {missing}: no such folder; give the folder that holds the datasets "
        "and their *.dstp.xml descriptors"]
    port = _port(server.endpoints.grpc)
    done = _serve(str(catalog_root), "--port", str(port), "--http-port", "-1", "--data-port", "-1", "--udt-port", "-1")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.splitlines() == [
        f"dstp: error: cannot listen on 127.0.0.1:{port}: address already in use "
        "(is another dstp server running? use --port)"]

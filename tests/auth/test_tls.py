"""TLS on gRPC and HTTP; sealed data channels; clients that refuse what TLS does not protect."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

import dstp
from dstp.auth.tls import load_tls, self_signed
from dstp.cli import main
from dstp.server import DstpServer, tls_material
from dstp.service import ChannelInfo
from dstp.settings import Settings


def test_a_plaintext_client_of_a_tls_server_fails_clearly(auth_server: DstpServer, tls: Any) -> None:
    with dstp.connect(auth_server.endpoints.grpc) as c:
        with pytest.raises(dstp.TransportError, match="cannot reach the dstp server"):
            c.datasets()
    with dstp.connect(auth_server.endpoints.grpc, tls=True) as c:  # the system's roots do not know it
        with pytest.raises(dstp.TransportError):
            c.datasets()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"https://{auth_server.endpoints.http}/datasets.json", timeout=10)


def test_sealed_striped_transfers_carry_the_same_bytes(auth_server: DstpServer, tls: Any, tokens: Any,
                                                       auth_catalog: Path, tmp_path: Path) -> None:
    with dstp.connect(auth_server.endpoints.grpc, token=tokens.alice, ca_file=str(tls.cert_path)) as c:
        sql = "select time, lat, lon, salinity from polar where depth < 20"
        sealed = c.query(sql, transport="striped", streams=4)
        assert sealed.equals(c.query(sql)) and sealed.num_rows > 1000
        summary = c.get("polar", "ocean_2000-07.nc", tmp_path / "o.nc", transport="striped", streams=4)
        assert summary["transport"] == "striped"
        assert (tmp_path / "o.nc").read_bytes() == (auth_catalog / "polar" / "ocean_2000-07.nc").read_bytes()


def test_a_tls_client_refuses_a_plaintext_data_channel(auth_catalog: Path, tls: Any, tokens: Any) -> None:
    settings = Settings(catalog_root=auth_catalog, port=0, http_port=-1, data_port=0, udt_port=-1,
                        tls_cert=tls.cert_path, tls_key=tls.key_path, token_store=tokens.path)
    with DstpServer(settings) as srv:
        assert srv.service is not None and srv.endpoints is not None
        # A server misconfigured to offer its striped channel unsealed behind TLS.
        srv.service.register_channel(ChannelInfo("striped", srv.endpoints.data, max_streams=8))
        with dstp.connect(srv.endpoints.grpc, token=tokens.alice, ca_file=str(tls.cert_path)) as c:
            with pytest.raises(dstp.TransportUnavailableError, match="plaintext"):
                c.query("select humidity from ccm3", transport="striped")
            assert c.query("select humidity from ccm3 limit 2").num_rows == 2  # the gRPC stream is TLS's


def test_self_signed_dev_certificates_are_made_once_and_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = tls_material(Settings(tls_self_signed=True, host="127.0.0.1"))
    assert first is not None and first.cert_path.is_relative_to(tmp_path)
    again = tls_material(Settings(tls_self_signed=True, host="127.0.0.1"))
    assert again is not None and again.fingerprint == first.fingerprint
    moved = self_signed(first.cert_path.parent, ["localhost", "127.0.0.1", "data.example.org"])
    assert moved.fingerprint != first.fingerprint  # a name it did not cover: a new certificate
    assert load_tls(moved.cert_path, moved.key_path).fingerprint == moved.fingerprint
    assert re.fullmatch(r"([0-9A-F]{2}:){31}[0-9A-F]{2}", moved.fingerprint)
    elsewhere = self_signed(tmp_path / "elsewhere", ["localhost"])
    with pytest.raises(ValueError, match="does not belong"):
        load_tls(moved.cert_path, elsewhere.key_path)
    with pytest.raises(ValueError, match="both a certificate and its key"):
        tls_material(Settings(tls_cert=moved.cert_path))


def test_serve_tls_self_signed_prints_the_fingerprint_and_the_cli_trusts_it(tmp_path: Path, catalog_root: Path,
                                                                            tokens: Any, capsys: Any) -> None:
    shutil.copytree(catalog_root / "ccm3", tmp_path / "cat" / "ccm3")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "DSTP_TOKEN_STORE": str(tokens.path)}
    cmd = [sys.executable, "-m", "dstp.cli", "serve", str(tmp_path / "cat"), "--port", "0", "--http-port", "-1",
           "--data-port", "-1", "--udt-port", "-1", "--tls-self-signed", "--allow-anonymous", "false"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("try:"):
                break
        text = "".join(lines)
        grpc_address = re.search(r"^\s+grpc\s+(\S+)", text, re.M).group(1)  # type: ignore[union-attr]
        m = re.search(r"TLS certificate (\S+) \(SHA-256 ([0-9A-F:]+)\)", text)
        assert m is not None and "requests need a token" in text, text
        assert load_tls(Path(m.group(1)), Path(m.group(1)).with_name("dstp-dev-key.pem")).fingerprint == m.group(2)
        assert main(["ls", "--server", grpc_address, "--ca-file", m.group(1), "--token", tokens.alice, "--json"]) == 0
        assert '"id": "ccm3"' in capsys.readouterr().out
        assert main(["ls", "--server", grpc_address, "--ca-file", m.group(1)]) == 1
        assert "needs a token" in capsys.readouterr().err
    finally:
        proc.terminate()
        proc.wait(15)
        if proc.stdout:
            proc.stdout.close()

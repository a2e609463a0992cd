"""Federation is no confused deputy (issue 33, item 2): two real servers on loopback.

Server B serves ``secret``, restricted to group polar, and gives server A's operator a token in polar.
Server A publishes B's dataset with ``<remote>`` several ways. Before: A's client to B was made with
``token=None``, which fell back to the ``$DSTP_TOKEN`` of A's process — an operator who had exported their
own token re-published B's restricted rows to anonymous users of A; without it, a caller with a valid token
of A heard B's 401 as "this server needs a token". Now a ``<remote>`` presents only the credential it names
(from A's ``remote_credentials`` file), and A serves it no more openly than B does.

The oracle is netCDF4 on B's files, each file read on its own.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Iterator

import netCDF4
import numpy as np
import pytest

import dstp
from dstp.auth import TokenStore
from dstp.server import DstpServer
from dstp.settings import Settings

SQL = "select temperature from {id} where lat > 80 and lev > 900"
REMOTE = """<?xml version="1.0"?>
<dataset xmlns="urn:dstp:descriptor:1" id="{id}" version="1">
  <title>B's restricted grid</title>
  <remote server="{server}" dataset="secret"{credential}/>
  {access}
</dataset>
"""


def _oracle(folder: Path) -> tuple[int, float]:
    """Return (rows, sum of temperature) of SQL over ``folder``'s files, from netCDF4 alone."""
    rows, total = 0, 0.0
    for path in sorted(folder.glob("ccm3_*.nc")):
        with netCDF4.Dataset(path) as nc:
            lat, lev = nc["lat"][:], nc["lev"][:]
            values = np.asarray(nc["T"][:, lev > 900, :, :][:, :, lat > 80, :], dtype="f8")
            rows += values.size
            total += float(values.sum())
    return rows, total


@pytest.fixture(scope="module")
def federation(tmp_path_factory: pytest.TempPathFactory, catalog_root: Path
               ) -> Iterator[tuple[DstpServer, DstpServer, dict[str, str], Path]]:
    root_b = tmp_path_factory.mktemp("b")
    shutil.copytree(catalog_root / "ccm3", root_b / "secret")
    descriptor = root_b / "secret" / "ccm3.dstp.xml"
    text = descriptor.read_text().replace('id="ccm3"', 'id="secret"')
    descriptor.write_text(text.replace('<access policy="public"/>', '<access policy="restricted" groups="polar"/>'))
    store_b = TokenStore(root_b.parent / "b_tokens.json")
    a_operator = store_b.create("a_operator", ["polar"]).secret  # the token A's operator exported for the CLI
    a_server = store_b.create("a_server", ["polar"]).secret  # what B gave server A
    server_b = DstpServer(Settings(catalog_root=root_b, port=0, http_port=-1, data_port=0, udt_port=-1,
                                   token_store=store_b.path))
    server_b.start()
    assert server_b.endpoints is not None
    b = server_b.endpoints.grpc

    root_a = tmp_path_factory.mktemp("a")
    for name, credential, access in (
        ("open_env", "", ""),  # the old way: no credential named, public
        ("open_cred", ' credential="b_reader"', ""),  # a credential, but published to everyone
        ("polar_cred", ' credential="b_reader"', '<access policy="restricted" groups="polar"/>'),
        ("polar_bad", ' credential="b_stale"', '<access policy="restricted" groups="polar"/>'),
    ):
        (root_a / name).mkdir()
        (root_a / name / f"{name}.dstp.xml").write_text(REMOTE.format(id=name, server=b, credential=credential,
                                                                      access=access))
    credentials = root_a.parent / "a_remote_credentials.json"
    credentials.write_text(json.dumps({"b_reader": {"token": a_server}, "b_stale": "dstp_revoked_or_mistyped"}))
    credentials.chmod(0o600)
    store_a = TokenStore(root_a.parent / "a_tokens.json")
    users = {"alice": store_a.create("alice", ["polar"]).secret}
    server_a = DstpServer(Settings(catalog_root=root_a, port=0, http_port=-1, data_port=0, udt_port=-1,
                                   token_store=store_a.path, allow_anonymous="true",
                                   remote_credentials=credentials))
    mp = pytest.MonkeyPatch()
    mp.setenv("DSTP_TOKEN", a_operator)  # in A's process, as an operator who uses the CLI has it
    try:
        server_a.start()
        yield server_a, server_b, users, root_b / "secret"
    finally:
        mp.undo()
        server_a.stop()
        server_b.stop()


def test_an_operators_token_in_the_environment_is_never_presented(federation) -> None:
    # Before: an anonymous user of A read B's restricted rows through open_env, with A's $DSTP_TOKEN.
    server_a, _, users, _ = federation
    with dstp.connect(server_a.endpoints.grpc, token="") as anonymous, pytest.raises(dstp.DstpError) as info:
        anonymous.query(SQL.format(id="open_env"))
    assert not isinstance(info.value, dstp.AuthenticationError)
    assert "refused anonymous requests" in info.value.message
    assert "needs a token" not in info.value.message
    with dstp.connect(server_a.endpoints.grpc, token=users["alice"]) as alice, pytest.raises(dstp.DstpError) as info:
        alice.query(SQL.format(id="open_env"))  # a valid token of A is not what is at fault
    assert "refused anonymous requests" in info.value.message and "remote_credentials" in info.value.message


def test_a_descriptor_looser_than_the_remote_dataset_is_refused(federation, caplog) -> None:
    server_a, _, _, _ = federation
    with dstp.connect(server_a.endpoints.grpc, token="") as anonymous, pytest.raises(dstp.DstpError) as info:
        anonymous.query(SQL.format(id="open_cred"))
    assert "would publish it more openly than" in info.value.message
    assert any("publishes it as public" in r.getMessage() and "serves it as restricted" in r.getMessage()
               for r in caplog.records)


def test_the_named_credential_reads_for_callers_the_local_policy_admits(federation) -> None:
    server_a, _, users, folder = federation
    rows, total = _oracle(folder)
    assert rows > 0
    with dstp.connect(server_a.endpoints.grpc, token=users["alice"]) as alice:
        for transport in ("grpc", "striped"):
            table = alice.query(SQL.format(id="polar_cred"), transport=transport)
            assert table.num_rows == rows
            assert np.isclose(float(np.asarray(table.column("temperature"), dtype="f8").sum()), total, rtol=1e-9)
    with dstp.connect(server_a.endpoints.grpc, token="") as anonymous, pytest.raises(dstp.DatasetNotFoundError):
        anonymous.query(SQL.format(id="polar_cred"))


def test_a_refused_server_credential_names_the_servers_configuration(federation) -> None:
    # Before: B's 401 reached a caller with a valid token as "this server needs a token: pass token=…".
    server_a, server_b, users, _ = federation
    with dstp.connect(server_a.endpoints.grpc, token=users["alice"]) as alice, pytest.raises(dstp.DstpError) as info:
        alice.query(SQL.format(id="polar_bad"))
    assert not isinstance(info.value, dstp.AuthenticationError)
    assert f"{server_b.endpoints.grpc}, which serves a dataset of this query, refused the credential 'b_stale'" \
        in info.value.message and "needs a token" not in info.value.message

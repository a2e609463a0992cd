"""A server whose datasets live in an S3 store: users present only dstp's own access (here: anonymous), never the
store's credentials, and see neither them nor the store's endpoint in any answer, page, STAC asset or log line;
restricted datasets stay restricted; a store that cannot be reached is a problem while the others are served."""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from oracle import frame
from store_servers import S3Server, free_port

import dstp
from dstp.server import DstpServer
from dstp.settings import Settings


@pytest.fixture(scope="module")
def s3(samples: Path) -> Iterator[S3Server]:
    server = S3Server()
    server.client().create_bucket(Bucket="era5-private")
    server.upload_tree("era5-private", samples, "copies")
    yield server
    server.stop()


def descriptor(samples: Path, root: Path, dataset_id: str, new_id: str, store: str, access: str = "") -> None:
    xml = (samples / dataset_id / f"{dataset_id}.dstp.xml").read_text()
    xml = re.sub(r'<files glob="([^"]+)"', rf'<files store="{store}" glob="{dataset_id}/\1"', xml)
    xml = xml.replace(f'id="{dataset_id}"', f'id="{new_id}"')
    if access:
        xml = xml.replace('<access policy="public"/>', access)
        assert access in xml
    (root / new_id).mkdir(parents=True)
    (root / new_id / f"{new_id}.dstp.xml").write_text(xml)


@pytest.fixture(scope="module")
def served(samples: Path, s3: S3Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DstpServer]:
    root = tmp_path_factory.mktemp("store-catalog")
    descriptor(samples, root, "ccm3", "era5", "era5")
    descriptor(samples, root, "ocean", "polar", "era5", '<access policy="restricted" groups="polar"/>')
    descriptor(samples, root, "ocean", "lost", "vault")
    os.environ["DSTP_TEST_KEY"], os.environ["DSTP_TEST_SECRET"] = s3.access_key, s3.secret_key
    stores = {
        "era5": {"url": "s3://era5-private/copies", "endpoint": s3.endpoint, "region": "us-east-1",
                 "access_key_id_env": "DSTP_TEST_KEY", "secret_access_key_env": "DSTP_TEST_SECRET"},
        "vault": {"url": "s3://vault/x", "endpoint": f"http://127.0.0.1:{free_port()}", "region": "us-east-1",
                  "access_key_id_env": "DSTP_TEST_KEY", "secret_access_key_env": "DSTP_TEST_SECRET"},
    }
    settings = Settings(catalog_root=root, port=0, http_port=0, data_port=-1, udt_port=-1, batch_rows=4096,
                        stores=json.dumps(stores), state_dir=tmp_path_factory.mktemp("state"), allow_anonymous="true")
    with DstpServer(settings) as srv:
        yield srv


def test_queries_answer_and_nothing_shows_the_store_s_secret(served: DstpServer, samples: Path, s3: S3Server,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    assert served.endpoints is not None and served.endpoints.http
    seen: list[str] = []
    with dstp.connect(served.endpoints.grpc) as client:
        ids = {d.id for d in client.datasets()}
        assert "era5" in ids and "polar" not in ids and "lost" not in ids
        table = client.query("select count(*) as n from era5 where humidity > 50")
        want = frame(samples, "ccm3", ["humidity"])
        assert table.column("n")[0].as_py() == int((want["humidity"] > 50).sum())
        for sql in ("select salinity from polar", "select salinity from lost", "select nope from era5"):
            with pytest.raises(dstp.DstpError) as caught:
                client.query(sql)
            seen.append(str(caught.value))
    assert "polar" in seen[0] and "lost" in seen[1]
    base = f"http://{served.endpoints.http}"
    with httpx.Client(base_url=base, timeout=30) as http:
        for path in ("/", "/datasets/era5", "/stac/collections", "/stac/collections/era5",
                     "/stac/collections/era5/items", "/datasets/polar", "/datasets/lost", "/stac/collections/polar"):
            response = http.get(path)
            seen.append(response.text)
            assert response.status_code < 500, (path, response.status_code)
    upstream = ("moto", "werkzeug", "botocore", "boto3", "s3transfer", "urllib3")  # the S3 server's own, in-process
    logged = [r for r in caplog.records if not r.name.startswith(upstream)]
    leaks = [(r.name, r.getMessage()[:200]) for r in logged if s3.secret_key in r.getMessage()
             or s3.access_key in r.getMessage()]
    assert not leaks
    seen += [r.getMessage() for r in logged]
    seen += [str(p) for p in served.catalog.problems]
    text = "\n".join(seen)
    assert s3.secret_key not in text and s3.access_key not in text
    assert s3.endpoint not in text and f"127.0.0.1:{s3.port}" not in text
    assert any("store 'vault' (s3://vault/x) cannot be reached" in str(p) for p in served.catalog.problems)


def test_get_of_a_store_file_streams_the_object_s_bytes(served: DstpServer, samples: Path, tmp_path: Path) -> None:
    """``dstp get`` of a file that lives in a store (netCDF-4: its header was read by ranges into an image) delivers
    the object's bytes, whole and as a range, checked by CRC-32C — never the image's zeros."""
    assert served.endpoints is not None
    want = (samples / "ccm3" / "ccm3_1990-05.nc").read_bytes()
    with dstp.connect(served.endpoints.grpc) as client:
        client.get("era5", "ccm3_1990-05.nc", tmp_path / "whole.nc")
        assert (tmp_path / "whole.nc").read_bytes() == want
        client.get("era5", "ccm3_1990-05.nc", tmp_path / "part.nc", offset=70_000, length=100_000)
        assert (tmp_path / "part.nc").read_bytes() == want[70_000:170_000]

"""``dstp publish s3://bucket/prefix/ --glob PATTERN``: a descriptor drafted from objects of a configured store,
their headers read by ranged GETs (moto's S3 server on loopback counts them), naming the store by reference."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from builders import daily
from in_process import answer_table
from oracle import assert_same_records, daily_records
from store_servers import S3Server

from dstp.catalog.objects import ObjectFiles
from dstp.catalog.publish_store import publish_from_store
from dstp.catalog.registry import Catalog
from dstp.catalog.stores import StoreConfig, open_store
from dstp.errors import CatalogError
from dstp.settings import Settings


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[S3Server, list[Path]]]:
    server = S3Server()
    server.client().create_bucket(Bucket="reanalysis")
    local = tmp_path_factory.mktemp("files")
    # objects of ~0.8 MB of random int16: a header read by ranges is a small part of each
    paths = [daily(local / f"era5_{d:03d}.nc", d, steps=4, lat=240, lon=480) for d in (0, 1, 2)]
    daily(local / "other_000.nc", 9)
    server.upload_tree("reanalysis", local, "netcdf/daily")
    os.environ["DSTP_TEST_S3_KEY"], os.environ["DSTP_TEST_S3_SECRET"] = server.access_key, server.secret_key
    yield server, paths
    server.stop()


def store(server: S3Server) -> StoreConfig:
    return StoreConfig("era5", "s3://reanalysis/netcdf", endpoint=server.endpoint, region="us-east-1",
                       access_key_id_env="DSTP_TEST_S3_KEY", secret_access_key_env="DSTP_TEST_S3_SECRET")


def test_publish_drafts_a_servable_descriptor_from_headers_read_by_ranges(s3: tuple[S3Server, list[Path]],
                                                                           tmp_path: Path) -> None:
    server, paths = s3
    objects = ObjectFiles({"era5": open_store(store(server))}, tmp_path / "cache")
    server.log.reset()
    try:
        path = publish_from_store("s3://reanalysis/netcdf/daily/", "era5_*.nc", "era5", objects, tmp_path / "root")
        stats = objects.stores["era5"].stats  # type: ignore[attr-defined]
    finally:
        objects.close()
    assert path == (tmp_path / "root" / "era5" / "era5.dstp.xml").resolve()
    text = path.read_text()
    assert '<files store="era5" glob="daily/era5_*.nc" aggregate="time"/>' in text
    for secret in (server.access_key, server.secret_key, server.endpoint, "127.0.0.1"):
        assert secret not in text
    # one LIST, then each object's header by one ranged GET of 64 KiB: never a whole object
    assert dict(server.log.counts) == {"LIST": 1, "GET": 3}, server.log.counts
    size = sum(p.stat().st_size for p in paths)
    assert stats.bytes == 3 * 64 * 2**10 < size / 10, (stats.bytes, size)
    catalog = Catalog.scan(tmp_path / "root", objects=ObjectFiles({"era5": open_store(store(server))},
                                                                   tmp_path / "cache2"))
    try:
        assert not catalog.problems, catalog.problems
        got = answer_table(catalog, "select time, lat, lon, t2m from era5", Settings(batch_rows=4096))
    finally:
        catalog.close()
    want = daily_records(paths)
    assert_same_records(got, want)


def test_a_url_in_no_configured_store_is_refused_naming_the_setting(s3: tuple[S3Server, list[Path]],
                                                                    tmp_path: Path) -> None:
    server, _ = s3
    objects = ObjectFiles({"era5": open_store(store(server))}, tmp_path / "cache")
    try:
        with pytest.raises(CatalogError) as refused:
            publish_from_store("s3://other-bucket/cmip6/", "tas_*.nc", "tas", objects, tmp_path / "root")
    finally:
        objects.close()
    assert str(refused.value) == (
        's3://other-bucket/cmip6/ is in no store the server knows (era5 (s3://reanalysis/netcdf)): add it to the '
        'stores setting (DSTP_STORES), e.g. {"NAME": {"url": "s3://other-bucket/cmip6"}}, with its region, endpoint '
        "and the names of the environment variables holding its credentials (docs/object-stores.md)")
    assert not (tmp_path / "root").exists()


def test_the_command_publishes_from_a_store(s3: tuple[S3Server, list[Path]], tmp_path: Path) -> None:
    server, _ = s3
    stores = {"era5": {"url": "s3://reanalysis/netcdf", "endpoint": server.endpoint, "region": "us-east-1",
                       "access_key_id_env": "DSTP_TEST_S3_KEY", "secret_access_key_env": "DSTP_TEST_S3_SECRET"}}
    env = {**os.environ, "DSTP_STORES": json.dumps(stores), "DSTP_STATE_DIR": str(tmp_path / "state")}
    done = subprocess.run([sys.executable, "-m", "dstp.cli", "publish", "s3://reanalysis/netcdf/daily",
                           "--glob", "other_*.nc", "--id", "other", "--catalog", str(tmp_path / "root")],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done
    assert '<files store="era5" glob="daily/other_*.nc"/>' in (tmp_path / "root/other/other.dstp.xml").read_text()
    refused = subprocess.run([sys.executable, "-m", "dstp.cli", "publish", "s3://elsewhere/x/", "--glob", "*.nc",
                              "--id", "x", "--catalog", str(tmp_path / "root")],
                             capture_output=True, text=True, timeout=300, env=env)
    assert refused.returncode == 1 and "add it to the stores setting (DSTP_STORES)" in refused.stderr, refused


def test_publish_from_an_https_store_lists_its_manifest(s3: tuple[S3Server, list[Path]], tmp_path: Path) -> None:
    """An HTTP(S) server cannot be listed: the store's manifest names its objects (without one, a glob is refused)."""
    from store_servers import RangeHTTPServer

    _, paths = s3
    served = tmp_path / "served"
    (served / "daily").mkdir(parents=True)
    for p in paths:
        (served / "daily" / p.name).write_bytes(p.read_bytes())
    (served / "files.txt").write_text("".join(f"daily/{p.name}\n" for p in paths))
    web = RangeHTTPServer(served)
    try:
        listed = ObjectFiles({"web": open_store(StoreConfig("web", f"{web.url}/", manifest="files.txt"))},
                             tmp_path / "cache")
        web.log.reset()
        try:
            path = publish_from_store(f"{web.url}/daily/", "era5_*.nc", "era5", listed, tmp_path / "root")
        finally:
            listed.close()
        assert '<files store="web" glob="daily/era5_*.nc" aggregate="time"/>' in path.read_text()
        # the manifest, a HEAD per object, and each header by one ranged GET
        assert dict(web.log.counts) == {"GET": 4, "HEAD": 3}, web.log.counts
        unlisted = ObjectFiles({"web": open_store(StoreConfig("web", f"{web.url}/"))}, tmp_path / "cache2")
        try:
            with pytest.raises(CatalogError, match=r"cannot list objects: configure its \"manifest\""):
                publish_from_store(f"{web.url}/daily/", "era5_*.nc", "again", unlisted, tmp_path / "root")
        finally:
            unlisted.close()
    finally:
        web.stop()

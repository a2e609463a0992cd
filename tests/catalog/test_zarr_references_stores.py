"""kerchunk reference files whose targets live in an S3 store (moto's server on loopback, with SigV4 and IAM
checks): read through the configured store — its endpoint and credentials, never the reference's — and
answering as xarray on the original netCDF files; the reference files local, or objects of the store themselves
with targets relative to them."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Iterator

import pytest

from store_servers import S3Server
from test_aggregation_oracle import dstp_answer, oracle_records, write_archive
from test_zarr_references import SPEC, make_references, publish_references, reference_oracle
from oracle import assert_same_records, run_sql

from dstp.catalog.objects import ObjectFiles
from dstp.catalog.registry import Catalog
from dstp.catalog.stores import StoreConfig, open_store

QUERIES = ("select time, lat, lon, temp, humid from arch",
           "select time, temp from arch where humid is null",
           "select time, lat, humid from arch where time >= '2000-01-03' and lon = 90")


@pytest.fixture(scope="module")
def s3_archive(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[S3Server, Path, list[Path]]]:
    local = tmp_path_factory.mktemp("refs-s3")
    (local / "nc").mkdir()
    paths = write_archive(SPEC, local / "nc")
    server = S3Server()
    server.client().create_bucket(Bucket="arco")
    server.upload_tree("arco", local / "nc", "era5/nc", "*.nc")
    # references as kerchunk writes them of the files in the bucket: absolute s3:// URLs …
    absolute = make_references(paths, local / "refs-absolute")
    for ref in absolute:
        spec = json.loads(ref.read_text())
        for value in spec["refs"].values():
            if isinstance(value, list):
                value[0] = f"s3://arco/era5/nc/{Path(value[0]).name}"
        ref.write_text(json.dumps(spec))
    # … and relative to the reference file, beside the files in the bucket
    relative = make_references(paths, local / "refs", relative=True)
    server.upload_tree("arco", local / "refs", "era5/refs", "*.json")
    os.environ["DSTP_TEST_REFS_KEY"], os.environ["DSTP_TEST_REFS_SECRET"] = server.access_key, server.secret_key
    yield server, local, paths
    server.stop()


def _objects(server: S3Server, cache: Path) -> ObjectFiles:
    config = StoreConfig("arco", "s3://arco/era5", endpoint=server.endpoint, region="us-east-1",
                         access_key_id_env="DSTP_TEST_REFS_KEY", secret_access_key_env="DSTP_TEST_REFS_SECRET")
    return ObjectFiles({"arco": open_store(config)}, cache)


@pytest.mark.parametrize("where", ["local references, s3:// targets", "references in the store, relative targets"])
def test_references_to_netcdf_in_a_store_answer_as_xarray(s3_archive: tuple[S3Server, Path, list[Path]],
                                                          tmp_path: Path, where: str) -> None:
    server, local, paths = s3_archive
    root = tmp_path / "root"
    (root / "refs").mkdir(parents=True)
    if where.startswith("local"):
        for ref in sorted((local / "refs-absolute").glob("*.json")):
            (root / "refs" / ref.name).write_bytes(ref.read_bytes())
        publish_references(root, paths, "refs/arch_*.json")
        assert "s3://arco/era5/nc/arch_00.nc" in (root / "refs" / "arch_00.json").read_text()
        assert server.secret_key not in (root / "refs" / "arch_00.json").read_text()
    else:
        publish_references(root, paths, "refs/arch_*.json", store="arco")
    objects = _objects(server, tmp_path / "cache")
    server.log.reset()
    catalog = Catalog.scan(root, objects=objects)
    try:
        assert not catalog.problems, catalog.problems
        assert [f.path.name for f in catalog.get("arch").files] == ["arch_00.json", "arch_01.json"]
        records = oracle_records(reference_oracle(paths), ["temp", "humid"], ["time", "lat", "lon"])
        for sql in QUERIES:
            assert_same_records(dstp_answer(catalog, sql), run_sql(records, sql, "arch"))
        assert any("/nc/arch_01.nc" in path for path in server.log.gets)  # chunks came from the bucket
        assert objects.fetched == 0  # by ranges: no whole copy
    finally:
        catalog.close()
        objects.close()


def test_a_target_missing_from_the_store_is_refused_naming_reference_key_and_store(
        s3_archive: tuple[S3Server, Path, list[Path]], tmp_path: Path) -> None:
    server, local, paths = s3_archive
    root = tmp_path / "root"
    (root / "refs").mkdir(parents=True)
    spec = json.loads((local / "refs-absolute" / "arch_01.json").read_text())
    for value in spec["refs"].values():
        if isinstance(value, list):
            value[0] = "s3://arco/era5/nc/gone.nc"
    (root / "refs" / "arch_01.json").write_text(json.dumps(spec))
    (root / "refs" / "arch_00.json").write_bytes((local / "refs-absolute" / "arch_00.json").read_bytes())
    publish_references(root, paths, "refs/arch_*.json")
    objects = _objects(server, tmp_path / "cache")
    catalog = Catalog.scan(root, objects=objects)
    try:
        text = "\n".join(h.reason for h in catalog.held_back)
        assert "reference file arch_01.json: key " in text and "names target s3://arco/era5/nc/gone.nc: nc/gone.nc " \
               "is no longer in store 'arco' (s3://arco/era5)" in text, text
        assert server.endpoint not in text and server.secret_key not in text
    finally:
        catalog.close()
        objects.close()


def test_a_reference_file_in_the_store_whose_target_is_gone_is_refused_naming_it(
        s3_archive: tuple[S3Server, Path, list[Path]], tmp_path: Path) -> None:
    server, local, paths = s3_archive
    spec = json.loads((local / "refs" / "arch_00.json").read_text())
    for value in spec["refs"].values():
        if isinstance(value, list):
            value[0] = "../nc/gone.nc"
    server.client().put_object(Bucket="arco", Key="era5/refs-bad/arch_00.json", Body=json.dumps(spec).encode())
    root = tmp_path / "root"
    root.mkdir()
    publish_references(root, paths[:1], "refs-bad/arch_*.json", store="arco")
    objects = _objects(server, tmp_path / "cache")
    catalog = Catalog.scan(root, objects=objects)
    try:
        text = "\n".join(h.reason for h in catalog.held_back)
        assert re.search(r"@arco/refs-bad/arch_00\.json cannot be opened \(reference file arch_00\.json: key '[^']+' "
                         r"names target \.\./nc/gone\.nc: nc/gone\.nc is no longer in store 'arco' \(s3://arco/era5\)\)",
                         text), text
    finally:
        catalog.close()
        objects.close()

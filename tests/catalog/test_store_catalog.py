"""Datasets whose files live in an S3-compatible store (moto's server on loopback) and on an HTTP server with
ranges answer every query of the shared set exactly as xarray does on the same files on local disk."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Iterator

import pytest

from in_process import answer_table
from oracle import assert_same_records, frame, run_sql
from query_cases import CASES, ORACLE_SQL
from store_servers import RangeHTTPServer, S3Server

from dstp.catalog.objects import ObjectFiles
from dstp.catalog.registry import Catalog
from dstp.catalog.stores import StoreConfig, open_store
from dstp.errors import DataFileError, StoreUnavailableError
from dstp.settings import Settings

SETTINGS = Settings(batch_rows=4096)
SAMPLE_CASES = [c for c in CASES if c[1] in ("ccm3", "ocean")]


def s3_store(server: S3Server, name: str = "models") -> StoreConfig:
    os.environ["DSTP_TEST_S3_KEY"], os.environ["DSTP_TEST_S3_SECRET"] = server.access_key, server.secret_key
    return StoreConfig(name, "s3://archive/cmip/samples", endpoint=server.endpoint, region="us-east-1",
                       access_key_id_env="DSTP_TEST_S3_KEY", secret_access_key_env="DSTP_TEST_S3_SECRET")


def store_catalog(samples: Path, root: Path, configs: list[StoreConfig], store: str = "models",
                  datasets: tuple[str, ...] = ("ccm3", "ocean"), index: Path | None = None) -> Catalog:
    """A catalog whose descriptors are the samples', with ``<files store=…>`` naming the objects."""
    for dataset_id in datasets:
        xml = (samples / dataset_id / f"{dataset_id}.dstp.xml").read_text()
        xml, n = re.subn(r'<files glob="([^"]+)"', rf'<files store="{store}" glob="{dataset_id}/\1"', xml)
        assert n == 1
        (root / dataset_id).mkdir(parents=True, exist_ok=True)
        (root / dataset_id / f"{dataset_id}.dstp.xml").write_text(xml)
    objects = ObjectFiles({c.name: open_store(c) for c in configs}, root.parent / f"{root.name}-cache")
    return Catalog.scan(root, index=index, objects=objects)


@pytest.fixture(scope="module")
def s3_catalog(samples: Path, s3: S3Server, tmp_path_factory: pytest.TempPathFactory) -> Catalog:
    catalog = store_catalog(samples, tmp_path_factory.mktemp("s3cat"), [s3_store(s3)])
    assert not catalog.problems, catalog.problems
    return catalog


@pytest.mark.parametrize("sql, dataset_id, attributes, extra_dims, ordered", SAMPLE_CASES,
                         ids=[c[0][:60] for c in SAMPLE_CASES])
def test_queries_over_s3_equal_the_oracle_on_local_files(s3_catalog: Catalog, samples: Path, sql: str,
                                                          dataset_id: str, attributes: list[str],
                                                          extra_dims: tuple[str, ...], ordered: bool) -> None:
    got = answer_table(s3_catalog, sql, SETTINGS)
    want = run_sql(frame(samples, dataset_id, attributes, extra_dims), ORACLE_SQL.get(sql, sql), dataset_id)
    assert_same_records(got, want, ordered=ordered)


def test_compressed_chunks_are_read_in_place_by_ranges(samples: Path, s3: S3Server, tmp_path: Path) -> None:
    catalog = store_catalog(samples, tmp_path / "root", [s3_store(s3)], datasets=("ccm3",))
    objects = catalog.handles.objects
    assert objects is not None and catalog.handles.chunks is not None
    shutil.rmtree(objects.cache_dir)  # the whole copies made while reading headers are gone (an evicted cache)
    s3.log.reset()
    sql = "select temperature, time from ccm3 where time >= '1990-06-01' and time < timestamp '1990-09-01'"
    got = answer_table(catalog, sql, SETTINGS)
    want = run_sql(frame(samples, "ccm3", ["temperature"]), sql, "ccm3")
    assert_same_records(got, want)
    assert s3.log.counts["GET"] > 0 and catalog.handles.chunks.reads > 0
    assert not objects.cache_dir.exists() or not any(objects.cache_dir.rglob("*.nc")), "a whole copy was fetched"


def test_a_restart_with_the_index_makes_no_get(samples: Path, s3: S3Server, tmp_path: Path) -> None:
    first = store_catalog(samples, tmp_path / "root", [s3_store(s3)], index=tmp_path / "index.sqlite")
    assert not first.problems
    answer_table(first, "select temperature from ccm3 where lev > 900", SETTINGS)
    first.close()
    s3.log.reset()
    again = store_catalog(samples, tmp_path / "root", [s3_store(s3)], index=tmp_path / "index.sqlite")
    try:
        assert not again.problems and {"ccm3", "ocean"} <= {ds.id for ds in again}
        assert s3.log.counts["GET"] == 0 and s3.log.counts["HEAD"] == 0, (s3.log.counts, s3.log.gets)
        assert s3.log.counts["LIST"] >= 1
        # the first query on the warm index: chunk listings are kept, so only the chunks' ranges are fetched
        sql = "select temperature, lat from ccm3 where lev > 900"
        assert_same_records(answer_table(again, sql, SETTINGS),
                            run_sql(frame(samples, "ccm3", ["temperature"]), sql, "ccm3"))
        assert again.handles.objects is not None and again.handles.objects.fetched == 0
    finally:
        again.close()


def test_a_replaced_object_is_a_new_version(samples: Path, s3: S3Server, tmp_path: Path) -> None:
    """The catalog publishes the replacement as a new version; a query on the old snapshot answers from the old
    version's bytes (its whole copy, still cached: netCDF-3) or is refused (chunks by ranges: If-Match fails),
    never from a mixture."""
    catalog = store_catalog(samples, tmp_path / "root", [s3_store(s3)])
    objects = catalog.handles.objects
    assert objects is not None
    before = catalog.snapshot()
    versions = {d: catalog.resolve(d).version for d in ("ocean", "ccm3")}  # type: ignore[union-attr]
    replaced = {"ocean": ("ocean_2000-07.nc", "ocean_2000-01.nc"), "ccm3": ("ccm3_1990-09.nc", "ccm3_1990-05.nc")}
    for dataset_id, (target, source) in replaced.items():
        s3.client().upload_file(str(samples / dataset_id / source), "archive", f"cmip/samples/{dataset_id}/{target}")
    try:
        old_ocean = "select salinity, time from ocean where time > '2000-07-01'"
        shutil.rmtree(objects.cache_dir / "models")  # ccm3's chunks are then read by ranges (ocean's copy: below)
        objects.expire()
        catalog.refresh()
        for dataset_id in versions:
            assert catalog.resolve(dataset_id).version > versions[dataset_id]  # type: ignore[union-attr]
        # the new version serves the new bytes: July of ocean now holds January's values
        got = answer_table(catalog, "select count(*) as n from ocean where time > '2000-07-01'", SETTINGS)
        assert got.column("n")[0].as_py() == 0  # both files now say January
        with pytest.raises(DataFileError, match="ccm3_1990-09.nc.*replaced|replaced.*ccm3_1990-09.nc"):
            answer_table(before, "select temperature from ccm3 where time > '1990-08-20'", SETTINGS)
        with pytest.raises(DataFileError, match="ocean_2000-07.nc"):
            answer_table(before, old_ocean, SETTINGS)  # its copy was dropped and the store has another version
    finally:
        for dataset_id, (target, _) in replaced.items():
            s3.client().upload_file(str(samples / dataset_id / target), "archive",
                                    f"cmip/samples/{dataset_id}/{target}")


def test_an_unreachable_store_is_a_problem_naming_it_and_the_others_are_served(samples: Path, s3: S3Server,
                                                                                tmp_path: Path) -> None:
    from store_servers import free_port

    dead = StoreConfig("vault", "s3://archive/cmip/samples", endpoint=f"http://127.0.0.1:{free_port()}",
                       region="us-east-1", anonymous=True)
    root = tmp_path / "root"
    store_catalog(samples, root / "a", [s3_store(s3)], datasets=("ccm3",))
    catalog = store_catalog(samples, root, [s3_store(s3), dead], store="vault", datasets=("ocean",))
    problems = [str(p) for p in catalog.problems]
    assert len(problems) == 1 and "store 'vault' (s3://archive/cmip/samples) cannot be reached" in problems[0]
    assert s3.secret_key not in problems[0]
    got = answer_table(catalog, "select count(*) as n from ccm3", SETTINGS)
    assert got.column("n")[0].as_py() == len(frame(samples, "ccm3", ["temperature"]))


@pytest.fixture(scope="module")
def http(samples: Path) -> Iterator[RangeHTTPServer]:
    (samples / "manifest.txt").write_text("\n".join(p.relative_to(samples).as_posix()
                                                    for p in sorted(samples.rglob("*.nc"))) + "\n")
    server = RangeHTTPServer(samples)
    yield server
    server.stop()


def test_queries_over_https_ranges_equal_the_oracle(samples: Path, http: RangeHTTPServer, tmp_path: Path) -> None:
    catalog = store_catalog(samples, tmp_path / "root", [StoreConfig("models", http.url, manifest="manifest.txt")])
    assert not catalog.problems, catalog.problems
    for sql, dataset_id, attributes, extra_dims, ordered in SAMPLE_CASES[::4]:
        got = answer_table(catalog, sql, SETTINGS)
        want = run_sql(frame(samples, dataset_id, attributes, extra_dims), ORACLE_SQL.get(sql, sql), dataset_id)
        assert_same_records(got, want, ordered=ordered)


# ------------------------------------------------ generated multi-file archives: packing, fill values, calendars

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from test_aggregation_oracle import (ArchiveSpec, _iso, _literal, archives, oracle_dataset,  # noqa: E402
                                     oracle_records, write_archive)


@pytest.fixture(scope="module")
def bucket(s3: S3Server) -> Iterator[S3Server]:
    s3.client().create_bucket(Bucket="generated")
    yield s3


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(spec=archives(), pick=st.randoms(use_true_random=False))
def test_generated_archives_in_s3_answer_as_xarray_on_the_local_files(bucket: S3Server, tmp_path_factory:
                                                                       pytest.TempPathFactory, spec: ArchiveSpec,
                                                                       pick: object) -> None:
    import tempfile

    from dstp.catalog.publish import publish

    with tempfile.TemporaryDirectory(prefix="dstp-s3arch-") as tmp:
        local, root = Path(tmp) / "files", Path(tmp) / "root"
        local.mkdir()
        paths = write_archive(spec, local)
        publish(sorted(local.glob("arch_*.nc")), "arch")
        prefix = f"gen/{Path(tmp).name}"
        bucket.upload_tree("generated", local, prefix)
        xml, n = re.subn(r'<files glob="[^"]+"', f'<files store="gen" glob="{Path(tmp).name}/arch_*.nc"',
                         (local / "arch.dstp.xml").read_text())
        assert n == 1
        (root / "arch").mkdir(parents=True)
        (root / "arch" / "arch.dstp.xml").write_text(xml)
        os.environ["DSTP_TEST_S3_KEY"], os.environ["DSTP_TEST_S3_SECRET"] = bucket.access_key, bucket.secret_key
        config = StoreConfig("gen", "s3://generated/gen", endpoint=bucket.endpoint, region="us-east-1",
                             access_key_id_env="DSTP_TEST_S3_KEY", secret_access_key_env="DSTP_TEST_S3_SECRET",
                             coalesce_bytes=pick.choice([0, 1 << 20]))  # type: ignore[attr-defined]
        objects = ObjectFiles({"gen": open_store(config)}, Path(tmp) / "cache")
        catalog = Catalog.scan(root, direct_chunks=spec.direct_chunks, objects=objects)
        try:
            assert not catalog.problems, catalog.problems
            shutil.rmtree(Path(tmp) / "cache")  # what can be read by ranges is read by ranges
            truth = oracle_dataset(paths)
            records = oracle_records(truth, ["temp", "humid"], ["time", "lat", "lon"])
            queries = ["select time, lat, lon, temp, humid from arch"]
            temps = records["temp"].dropna().to_numpy()
            if temps.size:
                queries.append(f"select time, temp from arch where temp > {_literal(pick.choice(list(temps)))}")  # type: ignore[attr-defined]
            t = _iso(pick.choice(sorted(set(records["time"]))))  # type: ignore[attr-defined]
            queries.append(f"select time, lat, humid from arch where time >= '{t}'")
            queries.append("select time, temp from arch where humid is null order by time desc, temp")
            for sql in queries:
                got = answer_table(catalog, sql, SETTINGS)
                want = run_sql(records, sql, "arch")
                assert_same_records(got, want, ordered="order by" in sql)
            if spec.direct_chunks and any(f.deflate and f.has_humid for f in spec.files):
                assert catalog.handles.chunks is not None and catalog.handles.chunks.reads > 0
        finally:
            catalog.close()
            objects.close()


def test_whole_copies_are_private_to_the_server(samples: Path, s3: S3Server, tmp_path: Path) -> None:
    catalog = store_catalog(samples, tmp_path / "root", [s3_store(s3)], datasets=("ocean",))
    objects = catalog.handles.objects
    assert objects is not None
    copies = [p for p in objects.cache_dir.rglob("*") if p.is_file()]
    assert copies and all(p.stat().st_mode & 0o077 == 0 for p in copies)
    assert all(p.stat().st_mode & 0o077 == 0 for p in [objects.cache_dir, *{c.parent for c in copies}])


def test_a_long_dimension_is_believed_from_the_object_s_size(s3: S3Server, tmp_path: Path) -> None:
    """A dimension beyond 4 Mi points is believed when the files hold a byte per 8 points: for an object, its size in
    the listing (there is no file to stat)."""
    import netCDF4
    import numpy as np

    from dstp.catalog.publish import publish

    local = tmp_path / "files"
    local.mkdir()
    values = np.random.default_rng(7).integers(-100, 100, 5_000_000).astype(np.int8)
    with netCDF4.Dataset(local / "long.nc", "w") as nc:
        nc.createDimension("x", values.size)
        nc.createVariable("x", "i4", ("x",))[:] = np.arange(values.size)
        nc.createVariable("v", "i1", ("x",), zlib=True)[:] = values
    publish([local / "long.nc"], "long")
    s3.upload_tree("archive", local, "cmip/samples/long")
    xml = (local / "long.dstp.xml").read_text().replace('<files glob="long.nc"', '<files store="models" glob="long/long.nc"')
    (tmp_path / "root" / "long").mkdir(parents=True)
    (tmp_path / "root" / "long" / "long.dstp.xml").write_text(xml)
    objects = ObjectFiles({"models": open_store(s3_store(s3))}, tmp_path / "cache")
    catalog = Catalog.scan(tmp_path / "root", objects=objects)
    try:
        assert not catalog.problems, catalog.problems
        got = answer_table(catalog, "select count(*) as n, sum(v) as total from long where x >= 4000000", SETTINGS)
        assert got.to_pylist() == [{"n": 1_000_000, "total": int(values[4_000_000:].astype(np.int64).sum())}]
    finally:
        catalog.close()
        objects.close()


def test_credentials_revoked_while_serving_fail_the_query_naming_the_store(samples: Path, s3: S3Server,
                                                                           tmp_path: Path) -> None:
    """Keys that stop working after start (rotated, expired, revoked) make a query fail with the store's name and
    what to check — never the key — and cost nothing to the next query once valid keys are back."""
    import boto3

    iam = boto3.client("iam", endpoint_url=s3.endpoint, aws_access_key_id=s3.access_key,
                       aws_secret_access_key=s3.secret_key, region_name="us-east-1")
    user = f"dstp-{s3.port}"
    key = iam.create_access_key(UserName=user)["AccessKey"]
    os.environ["DSTP_TEST_ROTATING_KEY"], os.environ["DSTP_TEST_ROTATING_SECRET"] = \
        key["AccessKeyId"], key["SecretAccessKey"]
    config = StoreConfig("models", "s3://archive/cmip/samples", endpoint=s3.endpoint, region="us-east-1",
                         access_key_id_env="DSTP_TEST_ROTATING_KEY", secret_access_key_env="DSTP_TEST_ROTATING_SECRET")
    catalog = store_catalog(samples, tmp_path / "root", [config], datasets=("ccm3",))
    assert not catalog.problems
    objects = catalog.handles.objects
    assert objects is not None
    shutil.rmtree(objects.cache_dir)
    iam.delete_access_key(UserName=user, AccessKeyId=key["AccessKeyId"])
    with pytest.raises(StoreUnavailableError) as caught:
        answer_table(catalog, "select temperature from ccm3 where lev > 900", SETTINGS)
    message = str(caught.value)
    assert message.startswith("store 'models' (s3://archive/cmip/samples) refused access (HTTP 403) reading ccm3/")
    assert key["SecretAccessKey"] not in message and key["AccessKeyId"] not in message
    assert StoreUnavailableError.grpc_status == "UNAVAILABLE"


def test_a_server_answering_503_is_retried_with_backoff(samples: Path, http: RangeHTTPServer, tmp_path: Path) -> None:
    catalog = store_catalog(samples, tmp_path / "root", [StoreConfig("models", http.url, manifest="manifest.txt")],
                            datasets=("ccm3",))
    assert not catalog.problems
    objects = catalog.handles.objects
    assert objects is not None
    shutil.rmtree(objects.cache_dir)
    http.fail_next(2, 503)  # the next two requests are refused as a busy server refuses them
    sql = "select temperature, lat from ccm3 where lev > 900"
    got = answer_table(catalog, sql, SETTINGS)
    assert_same_records(got, run_sql(frame(samples, "ccm3", ["temperature"]), sql, "ccm3"))
    assert http.failed == 2
    # more than the retries of the read-ahead and then of the read itself: a clear refusal naming the store
    http.fail_next(10_000, 503)
    try:
        with pytest.raises(StoreUnavailableError, match=r"store 'models' \(http://127\.0\.0\.1:\d+\) answered HTTP 503 "
                                                         "after retries reading ccm3/"):
            answer_table(catalog, "select humidity, lat from ccm3 where lev < 100", SETTINGS)  # chunks not yet read
    finally:
        http.fail_next(0, 503)


def test_the_copy_cache_keeps_to_its_budget_and_reads_stay_right(samples: Path, s3: S3Server, tmp_path: Path) -> None:
    """Whole copies beyond ``store_cache_bytes`` are deleted, least recently used first; a netCDF-3 read whose copy
    was deleted fetches it again (the same version, If-Match) and answers as xarray does."""
    one = max(p.stat().st_size for p in (samples / "ocean").glob("*.nc"))
    for dataset_id in ("ocean",):
        xml = (samples / dataset_id / f"{dataset_id}.dstp.xml").read_text()
        xml = re.sub(r'<files glob="([^"]+)"', rf'<files store="models" glob="{dataset_id}/\1"', xml)
        (tmp_path / "root" / dataset_id).mkdir(parents=True)
        (tmp_path / "root" / dataset_id / f"{dataset_id}.dstp.xml").write_text(xml)
    objects = ObjectFiles({"models": open_store(s3_store(s3))}, tmp_path / "cache", cache_bytes=one)
    catalog = Catalog.scan(tmp_path / "root", objects=objects, open_files=1)  # netCDF handles let go too
    try:
        assert not catalog.problems
        copies = [p for p in (tmp_path / "cache").rglob("*.nc")]
        assert len(copies) == 1  # two files, room for one
        sql = "select salinity, time from ocean where depth = 5"
        want = run_sql(frame(samples, "ocean", ["salinity"]), sql, "ocean")
        for _ in range(2):
            assert_same_records(answer_table(catalog, sql, SETTINGS), want)
            assert sum(p.stat().st_size for p in (tmp_path / "cache").rglob("*.nc")) <= one
        assert objects.fetched > 2
    finally:
        catalog.close()
        objects.close()

"""Icechunk repositories (local filesystem storage) as the files of a dataset: every answer equals xarray's
``open_zarr`` on each repository's branch ``main``, each decoded on its own and concatenated along time; a commit
makes a new version of the dataset, answered as the new snapshot."""

from __future__ import annotations

import re
from pathlib import Path

import icechunk
import pytest
import xarray as xr

from in_process import answer_table
from oracle import assert_same_records, run_sql
from test_aggregation_oracle import oracle_records
from test_store_zarr import SETTINGS, era5_like

from dstp.catalog.publish import publish
from dstp.catalog.registry import Catalog


QUERIES = ("select time, lat, lon, temp, humid from era5",
           "select time, temp from era5 where temp > 275",
           "select lat, lon, humid from era5 where humid is null",
           "select time, lat, temp from era5 where time >= '2001-02-01' and lon = 10")


def _repo(path: Path) -> object:
    storage = icechunk.local_filesystem_storage(str(path))
    return icechunk.Repository.open_or_create(storage)


def _truth(repos: list[Path]) -> xr.Dataset:
    coder = xr.coders.CFDatetimeCoder(use_cftime=True)
    parts = [xr.open_zarr(_repo(r).readonly_session(branch="main").store, decode_times=coder,  # type: ignore[attr-defined]
                          consolidated=False).load() for r in repos]
    return xr.concat(parts, dim="time", data_vars="minimal", coords="minimal", compat="override")


def test_icechunk_repositories_answer_as_xarray_and_a_commit_is_a_new_version(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "repos").mkdir(parents=True)
    parts = [era5_like(1, 1, offset=0.0), era5_like(2, 2, offset=5.0)]
    repos = [root / "repos" / f"era5_2001-{m:02d}.icechunk" for m in (1, 2)]
    for repo_path, part in zip(repos, parts):
        session = _repo(repo_path).writable_session("main")  # type: ignore[attr-defined]
        part.to_zarr(session.store, zarr_format=3, consolidated=False)
        session.commit("first month")
    parts[0].to_netcdf(tmp_path / "template.nc")
    drafted = publish([tmp_path / "template.nc"], "era5")
    xml, n = re.subn(r'<files glob="[^"]+"', '<files glob="repos/era5_*.icechunk" aggregate="time"',
                     drafted.read_text())
    assert n == 1
    (root / "era5.dstp.xml").write_text(re.sub(r' aggregate="time" aggregate="time"', ' aggregate="time"', xml))
    catalog = Catalog.scan(root, settle_s=0)  # a commit is published at the next look (no settling to wait out)
    try:
        assert not catalog.problems, catalog.problems
        assert [f.path.name for f in catalog.get("era5").files] == [r.name for r in repos]
        before = catalog.get("era5").version
        records = oracle_records(_truth(repos), ["temp", "humid"], ["time", "lat", "lon"])
        for sql in QUERIES:
            assert_same_records(answer_table(catalog, sql, SETTINGS), run_sql(records, sql, "era5"))
        # a commit to the second month's repository: new values, the same shape
        session = _repo(repos[1]).writable_session("main")  # type: ignore[attr-defined]
        changed = era5_like(2, 7, offset=9.0)
        changed.to_zarr(session.store, mode="a", zarr_format=3, consolidated=False)
        session.commit("second month corrected")
        catalog.refresh()
        assert not catalog.problems, catalog.problems
        assert catalog.get("era5").version != before
        records = oracle_records(_truth(repos), ["temp", "humid"], ["time", "lat", "lon"])
        for sql in QUERIES:
            assert_same_records(answer_table(catalog, sql, SETTINGS), run_sql(records, sql, "era5"))
    finally:
        catalog.close()


def _truth_at(repos: list[Path], **at: str) -> xr.Dataset:
    coder = xr.coders.CFDatetimeCoder(use_cftime=True)
    parts = [xr.open_zarr(_repo(r).readonly_session(**at).store, decode_times=coder,  # type: ignore[attr-defined]
                          consolidated=False).load() for r in repos]
    return xr.concat(parts, dim="time", data_vars="minimal", coords="minimal", compat="override")


@pytest.mark.parametrize("ref", ["tag:v1", "snapshot", "branch:dev", "dev"])
def test_a_descriptor_ref_reads_each_repository_at_that_branch_tag_or_snapshot(tmp_path: Path, ref: str) -> None:
    root = tmp_path / "root"
    (root / "repos").mkdir(parents=True)
    repos = [root / "repos" / f"era5_2001-{m:02d}.icechunk" for m in (1, 2)]
    first: dict[Path, str] = {}
    for k, repo_path in enumerate(repos):
        repo = _repo(repo_path)
        session = repo.writable_session("main")  # type: ignore[attr-defined]
        era5_like(k + 1, k + 1, offset=5.0 * k).to_zarr(session.store, zarr_format=3, consolidated=False)
        first[repo_path] = session.commit("first")
        repo.create_tag("v1", first[repo_path])  # type: ignore[attr-defined]
        repo.create_branch("dev", first[repo_path])  # type: ignore[attr-defined]
        session = repo.writable_session("main")  # type: ignore[attr-defined]
        era5_like(k + 1, 10 + k, offset=9.0).to_zarr(session.store, mode="a", zarr_format=3, consolidated=False)
        session.commit("main moves on")
    template = tmp_path / "template.nc"
    era5_like(1, 1, offset=0.0).to_netcdf(template)
    drafted = publish([template], "era5")
    # a snapshot ref names one repository's snapshot: publish the first month only then
    glob = "repos/era5_2001-01.icechunk" if ref == "snapshot" else "repos/era5_*.icechunk"
    named = f"snapshot:{first[repos[0]]}" if ref == "snapshot" else ref
    xml, n = re.subn(r'<files glob="[^"]+"', f'<files glob="{glob}" ref="{named}" aggregate="time"',
                     drafted.read_text())
    assert n == 1
    (root / "era5.dstp.xml").write_text(re.sub(r' aggregate="time" aggregate="time"', ' aggregate="time"', xml))
    catalog = Catalog.scan(root, settle_s=0)
    try:
        assert not catalog.problems, catalog.problems
        served = repos[:1] if ref == "snapshot" else repos
        assert [f.path.name for f in catalog.get("era5").files] == [f"{r.name}@{named}" for r in served]
        at = {"snapshot_id": first[repos[0]]} if ref == "snapshot" else \
            {"tag": "v1"} if ref.startswith("tag") else {"branch": "dev"}
        records = oracle_records(_truth_at(served, **at), ["temp", "humid"], ["time", "lat", "lon"])
        main = oracle_records(_truth_at(served, branch="main"), ["temp", "humid"], ["time", "lat", "lon"])
        assert not main["temp"].equals(records["temp"])  # main moved on: reading main would be wrong
        for sql in QUERIES:
            assert_same_records(answer_table(catalog, sql, SETTINGS), run_sql(records, sql, "era5"))
        before = catalog.get("era5").version
        session = _repo(repos[0]).writable_session("main")  # type: ignore[attr-defined]
        era5_like(1, 20, offset=2.0).to_zarr(session.store, mode="a", zarr_format=3, consolidated=False)
        session.commit("main moves again")
        catalog.refresh()
        assert catalog.get("era5").version == before  # a commit to main changes no tag, snapshot or other branch
    finally:
        catalog.close()


def test_a_tag_the_repository_lacks_is_refused_naming_repository_and_tag(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "repos").mkdir(parents=True)
    session = _repo(root / "repos" / "era5_2001-01.icechunk").writable_session("main")  # type: ignore[attr-defined]
    era5_like(1, 1, offset=0.0).to_zarr(session.store, zarr_format=3, consolidated=False)
    session.commit("first")
    era5_like(1, 1, offset=0.0).to_netcdf(tmp_path / "template.nc")
    drafted = publish([tmp_path / "template.nc"], "era5")
    xml = re.sub(r'<files glob="[^"]+"', '<files glob="repos/*.icechunk" ref="tag:v9"', drafted.read_text())
    (root / "era5.dstp.xml").write_text(xml)
    catalog = Catalog.scan(root, settle_s=0)
    try:
        text = "\n".join(h.reason for h in catalog.held_back)
        assert "era5_2001-01.icechunk: the Icechunk repository cannot be read at tag 'v9' (IcechunkError: ref not found `v9`)" in text, text
    finally:
        catalog.close()


def _sync(server: object, local: Path, uploaded: set[str]) -> None:
    """Upload what a commit wrote, as icechunk writing to the bucket would: its new objects, and the branch refs
    it rewrites (snapshots, manifests and chunks are never rewritten; tags never change)."""
    client = server.client()  # type: ignore[attr-defined]
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        key = f"era5/repos/{path.relative_to(local).as_posix()}"
        if key not in uploaded or "/refs/branch." in key:
            client.upload_file(str(path), "arco", key)
            uploaded.add(key)


def test_icechunk_repositories_in_an_s3_store_answer_as_xarray_at_their_ref(tmp_path: Path) -> None:
    import os

    from store_servers import S3Server

    from dstp.catalog.objects import ObjectFiles
    from dstp.catalog.stores import StoreConfig, open_store

    local = tmp_path / "local"
    repos = [local / f"era5_2001-{m:02d}.icechunk" for m in (1, 2)]
    for k, repo_path in enumerate(repos):
        repo = _repo(repo_path)
        session = repo.writable_session("main")  # type: ignore[attr-defined]
        era5_like(k + 1, k + 1, offset=5.0 * k).to_zarr(session.store, zarr_format=3, consolidated=False)
        repo.create_tag("v1", session.commit("first"))  # type: ignore[attr-defined]
        session = repo.writable_session("main")  # type: ignore[attr-defined]
        era5_like(k + 1, 10 + k, offset=9.0).to_zarr(session.store, mode="a", zarr_format=3, consolidated=False)
        session.commit("main moves on")
    era5_like(1, 1, offset=0.0).to_netcdf(tmp_path / "template.nc")
    server = S3Server()
    try:
        server.client().create_bucket(Bucket="arco")
        uploaded = set(server.upload_tree("arco", local, "era5/repos", "*"))
        os.environ["DSTP_TEST_ICE_KEY"], os.environ["DSTP_TEST_ICE_SECRET"] = server.access_key, server.secret_key
        config = StoreConfig("arco", "s3://arco/era5", endpoint=server.endpoint, region="us-east-1",
                             access_key_id_env="DSTP_TEST_ICE_KEY", secret_access_key_env="DSTP_TEST_ICE_SECRET")
        for ref, at in ((None, {"branch": "main"}), ("tag:v1", {"tag": "v1"})):
            root = tmp_path / f"root-{ref or 'main'}".replace(":", "-")
            root.mkdir()
            drafted = publish([tmp_path / "template.nc"], "era5")
            named = f' ref="{ref}"' if ref else ""
            xml = re.sub(r'<files glob="[^"]+"', f'<files store="arco" glob="repos/era5_*.icechunk"{named} aggregate="time"',
                         drafted.read_text())
            drafted.unlink()
            (root / "era5.dstp.xml").write_text(re.sub(r' aggregate="time" aggregate="time"', ' aggregate="time"', xml))
            objects = ObjectFiles({"arco": open_store(config)}, tmp_path / "cache")
            catalog = Catalog.scan(root, objects=objects)
            try:
                assert not catalog.problems, catalog.problems
                suffix = f"@{ref}" if ref else ""
                assert [f.path.name for f in catalog.get("era5").files] == [r.name + suffix for r in repos]
                records = oracle_records(_truth_at(repos, **at), ["temp", "humid"], ["time", "lat", "lon"])
                for sql in QUERIES:
                    assert_same_records(answer_table(catalog, sql, SETTINGS), run_sql(records, sql, "era5"))
                text = "".join(str(f.path) for f in catalog.get("era5").files)
                assert server.endpoint not in text and server.access_key not in text
                # a commit to main, uploaded: a new version at the next listing for main, none for the tag
                before = catalog.get("era5").version
                session = _repo(repos[1]).writable_session("main")  # type: ignore[attr-defined]
                era5_like(2, 30 + len(ref or ""), offset=3.0).to_zarr(session.store, mode="a", zarr_format=3,
                                                                      consolidated=False)
                session.commit("second month corrected")
                _sync(server, local, uploaded)
                objects.expire()
                catalog.refresh()
                assert not catalog.problems, catalog.problems
                assert (catalog.get("era5").version != before) == (ref is None)
                records = oracle_records(_truth_at(repos, **at), ["temp", "humid"], ["time", "lat", "lon"])
                for sql in QUERIES:
                    assert_same_records(answer_table(catalog, sql, SETTINGS), run_sql(records, sql, "era5"))
            finally:
                catalog.close()
                objects.close()
        root = tmp_path / "root-missing"
        root.mkdir()
        drafted = publish([tmp_path / "template.nc"], "era5")
        (root / "era5.dstp.xml").write_text(re.sub(r'<files glob="[^"]+"', '<files store="arco" glob='
                                                   '"repos/era5_2001-01.icechunk" ref="tag:v9"', drafted.read_text()))
        drafted.unlink()
        objects = ObjectFiles({"arco": open_store(config)}, tmp_path / "cache")
        catalog = Catalog.scan(root, objects=objects)
        try:
            text = "\n".join(h.reason for h in catalog.held_back)
            assert "repos/era5_2001-01.icechunk in store 'arco' (s3://arco/era5): the Icechunk repository cannot be " \
                   "read at tag 'v9' (IcechunkError)" in text, text
            assert server.endpoint not in text and server.access_key not in text
        finally:
            catalog.close()
            objects.close()
    finally:
        server.stop()

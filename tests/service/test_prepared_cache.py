"""Prepared queries reused by their exact text (dstp/service/prepared.py) never give a stale or another caller's
answer: a file published between two equal queries is in the second answer, and a restricted dataset stays
hidden from an identity that may not read it, in either order. The oracle is xarray on each file
(tests/oracle.py); every test also checks that the cache was used, so it tests the reuse and not its absence.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pytest

import oracle
from builders import daily
from dstp.auth import ANONYMOUS, Principal
from dstp.catalog.publish import publish
from dstp.catalog.registry import Catalog
from dstp.errors import DatasetNotFoundError
from dstp.service import DstpService
from dstp.service.prepared import cacheable
from dstp.settings import Settings

POLAR = Principal("alice", frozenset({"polar"}), authenticated=True, via="token")
ALL = "select time, lat, lon, t2m from daily"
SLAB = "select time, lat, lon, t2m from daily where lat > -1 and time >= '2000-01-02'"


def _records(service: DstpService, sql: str, principal: Principal = ANONYMOUS) -> pa.Table:
    execution = service.queries.run(sql, principal=principal)
    try:
        batches = list(execution.batches())
    finally:
        execution.close()
    return pa.Table.from_batches(batches, schema=execution.schema)


def _expected(files: list[Path], sql: str) -> pa.Table:
    return oracle.run_sql(oracle.daily_records(files).to_pandas(), sql, "daily")


@pytest.mark.parametrize("sql", [ALL, SLAB])
def test_a_file_published_between_two_equal_queries_is_in_the_second_answer(tmp_path: Path, sql: str) -> None:
    root = tmp_path / "root"
    files = [daily(root / "daily" / f"d_{d:04d}.nc", d, steps=2) for d in (0, 1, 2)]
    publish(files, "daily")
    catalog = Catalog.scan(root, index=tmp_path / "index.sqlite", settle_s=0.0)
    service = DstpService(catalog, Settings(catalog_root=root))
    try:
        first = _records(service, sql)
        oracle.assert_same_records(first, _expected(files, sql))
        oracle.assert_same_records(_records(service, sql), _expected(files, sql))
        assert service.queries.prepared.hits == 1  # the equal query reused the plan

        files.append(daily(root / "daily" / "d_0003.nc", 3, steps=2))
        changes = catalog.refresh() + catalog.refresh()  # seen, then settled (settle_s=0)
        assert changes, "the new file was not published"
        second = _records(service, sql)
        oracle.assert_same_records(second, _expected(files, sql))
        assert second.num_rows > first.num_rows

        files[0].unlink()  # a file withdrawn
        catalog.refresh()
        catalog.refresh()
        oracle.assert_same_records(_records(service, sql), _expected(files[1:], sql))

        daily(files[1], 9, steps=3)  # and one rewritten in place: other times, more of them, other values
        catalog.refresh()
        catalog.refresh()
        oracle.assert_same_records(_records(service, sql), _expected(files[1:], sql))
    finally:
        service.close()
        catalog.close()


@pytest.fixture()
def restricted(catalog_root: Path, tmp_path: Path) -> Iterator[DstpService]:
    root = tmp_path / "root"
    shutil.copytree(catalog_root / "ocean", root / "ocean")
    xml = root / "ocean" / "ocean.dstp.xml"
    text = xml.read_text()
    assert '<access policy="public"/>' in text
    xml.write_text(text.replace('<access policy="public"/>', '<access policy="restricted" groups="polar"/>'))
    catalog = Catalog.scan(root)
    service = DstpService(catalog, Settings(catalog_root=root))
    yield service
    service.close()
    catalog.close()


@pytest.mark.parametrize("first", [POLAR, ANONYMOUS])
def test_a_restricted_dataset_stays_hidden_from_an_identity_that_may_not_read_it(
        restricted: DstpService, catalog_root: Path, first: Principal) -> None:
    sql = "select time, depth, lat, lon, salinity from ocean where lat < -40"
    frame = oracle.frame(catalog_root, "ocean", ["salinity"])
    want = oracle.run_sql(frame, sql, "ocean")
    order = [first, POLAR if first is ANONYMOUS else ANONYMOUS, POLAR, ANONYMOUS]
    for principal in order:
        if principal is POLAR:
            oracle.assert_same_records(_records(restricted, sql, POLAR), want)
        else:
            with pytest.raises(DatasetNotFoundError, match="ocean"):
                _records(restricted, sql, principal)
    assert restricted.queries.prepared.hits >= 1  # polar's second query reused its own plan


def test_a_sampled_query_is_prepared_afresh(catalog_root: Path) -> None:
    catalog = Catalog.scan(catalog_root)
    service = DstpService(catalog, Settings(catalog_root=catalog_root))
    try:
        sampled = service.queries.prepare("select t2m from station tablesample 10%")
        assert not cacheable(sampled)  # an unseeded sample draws its seed when prepared
        assert cacheable(service.queries.prepare("select t2m from station where lat > 40"))
    finally:
        service.close()
        catalog.close()

"""A cold look at a store dataset fetches several objects' headers at once, and indexes what a serial look does.

Through moto's S3 server on loopback (``store_servers.S3Server``). The server is made to prove the overlap
rather than time it: the first GET of each of the first three objects is held at a barrier until three
objects' first GETs have arrived — which can only happen when their headers are fetched at once (the barrier
breaks after :data:`BARRIER_S` otherwise, and that look finds the objects unreadable).
"""

from __future__ import annotations

import re
import sqlite3
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest

from store_servers import S3Server
from test_parallel_build import TABLES, state
from test_store_catalog import s3_store

from dstp.catalog.objects import ObjectFiles
from dstp.catalog.registry import Catalog
from dstp.catalog.stores import open_store

#: Longest the server holds a first GET waiting for the others (a safety net: a passing look never waits it out).
BARRIER_S = 20.0


class FirstGets:
    """Holds the first GET of each of ``parties`` objects until all of them have asked (an S3 server hook)."""

    def __init__(self, parties: int) -> None:
        self.barrier = threading.Barrier(parties, timeout=BARRIER_S)
        self.seen: set[str] = set()
        self.lock = threading.Lock()
        self.met = False

    def wrap(self, app: Any) -> Any:
        def held(environ: dict[str, Any], start_response: Any) -> Any:
            path = environ.get("PATH_INFO", "")
            first = False
            if environ["REQUEST_METHOD"] == "GET" and path.endswith(".nc"):
                with self.lock:
                    first = path not in self.seen and len(self.seen) < self.barrier.parties
                    self.seen.add(path)
            if first:
                try:
                    self.barrier.wait()
                    self.met = True
                except threading.BrokenBarrierError:
                    pass
            return app(environ, start_response)

        return held


@pytest.fixture()
def s3(samples: Path) -> Iterator[S3Server]:
    server = S3Server()
    server.client().create_bucket(Bucket="archive")
    server.upload_tree("archive", samples, "cmip/samples")
    yield server
    server.stop()


def look(samples: Path, root: Path, server: S3Server, store_reads: int, index: Path) -> tuple[dict[str, Any],
                                                                                            list[str], dict[str, Any]]:
    """Return (state of each dataset, problems, index tables) of a cold look at ccm3 (netCDF-4: images by ranges)
    and ocean (netCDF-3: whole copies) in the store."""
    for dataset_id in ("ccm3", "ocean"):
        xml = (samples / dataset_id / f"{dataset_id}.dstp.xml").read_text()
        xml = re.sub(r'<files glob="([^"]+)"', rf'<files store="models" glob="{dataset_id}/\1"', xml)
        (root / dataset_id).mkdir(parents=True, exist_ok=True)
        (root / dataset_id / f"{dataset_id}.dstp.xml").write_text(xml)
    objects = ObjectFiles({"models": open_store(s3_store(server))}, index.with_suffix(".cache"))  # its own: all fetched
    catalog = Catalog.scan(root, index=index, objects=objects, store_reads=store_reads, wall=lambda: 1.0e9)
    try:
        datasets = {ds.id: state(ds) for ds in catalog}
        problems = sorted(str(p) for p in catalog.problems)
    finally:
        catalog.close()
    with sqlite3.connect(index) as db:
        tables = {name: db.execute(sql).fetchall() for name, sql in TABLES.items()}
    return datasets, problems, tables


def test_object_headers_are_fetched_at_once_and_indexed_as_one_after_another(samples: Path, s3: S3Server,
                                                                              tmp_path: Path) -> None:
    serial = look(samples, tmp_path / "root", s3, 1, tmp_path / "serial.sqlite")
    assert not serial[1], serial[1]
    wsgi = s3._server._server  # type: ignore[attr-defined]  # werkzeug's server running moto's app
    gets = FirstGets(3)
    wsgi.app = gets.wrap(wsgi.app)
    at_once = look(samples, tmp_path / "root", s3, 4, tmp_path / "at-once.sqlite")
    assert gets.met, "three objects' headers were never asked for at the same time"
    assert not at_once[1], at_once[1]
    assert serial[0].keys() == at_once[0].keys() == {"ccm3", "ocean"}
    for dataset_id in serial[0]:
        for part in serial[0][dataset_id]:
            assert repr(serial[0][dataset_id][part]) == repr(at_once[0][dataset_id][part]), (dataset_id, part)
    for name in TABLES:
        assert serial[2][name] == at_once[2][name], name
    assert len(serial[2]["files"]) == 5  # ccm3: 3 objects, ocean: 2

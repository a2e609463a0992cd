"""What a cold ERDDAP griddap request and a dataset page cost the engine (issue 34): their axis values come from the
catalog's memory (``service.axis_values``), so neither runs a query for them nor takes an admission slot.

Counted through public seams of a real server on loopback: the audit log (one line per query the service runs)
and the catalog's ``resolve``/``get`` (every lookup of a dataset by id), wrapped to count and otherwise unchanged.
Before, a cold griddap request ran 5 queries and a ``/datasets/ID.json`` 4, one per axis; once they came from
memory, each axis still cost an access check and a lookup of its own (13 and 20 lookups), now one for all.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx
import pytest

from dstp.catalog.registry import Catalog
from dstp.server import DstpServer
from dstp.settings import Settings

GRIDDAP = "/erddap/griddap/ccm3.csv?temperature[last][1:3:7][(30):1:(50)][0:16:63]"


@pytest.fixture()
def cold(catalog_root: Path, tmp_path: Path) -> Iterator[str]:
    """A server of its own (nothing cached yet) over a copy of ccm3."""
    shutil.copytree(catalog_root / "ccm3", tmp_path / "ccm3")
    settings = Settings(catalog_root=tmp_path, port=0, http_port=0, data_port=-1, udt_port=-1, flight_port=-1)
    with DstpServer(settings) as srv:
        assert srv.endpoints is not None
        yield f"http://{srv.endpoints.http}"


def _counting(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    counts = {"resolve": 0, "get": 0}
    for name in ("resolve", "get"):
        original: Callable[..., Any] = getattr(Catalog, name)

        def counted(self: Catalog, *args: Any, _original: Callable[..., Any] = original, _name: str = name,
                    **kwargs: Any) -> Any:
            counts[_name] += 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(Catalog, name, counted)
    return counts


def _cost(base: str, path: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> tuple[int, int]:
    counts = _counting(monkeypatch)
    with caplog.at_level(logging.INFO, logger="dstp.audit"):
        caplog.clear()
        r = httpx.get(base + path, timeout=60)
        assert r.status_code == 200, r.text
    runs = [json.loads(rec.getMessage()) for rec in caplog.records if rec.name == "dstp.audit"]
    print(counts, end=" ")
    return len([line for line in runs if line.get("sql")]), counts["resolve"] + counts["get"]


def test_a_cold_griddap_request_runs_only_its_own_query(cold: str, monkeypatch: pytest.MonkeyPatch,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    runs, resolves = _cost(cold, GRIDDAP, monkeypatch, caplog)
    print(f"griddap: {runs} service runs, {resolves} catalog resolves")
    assert runs == 1  # the data; no query per axis
    assert resolves <= 7  # one access check and one lookup for all the axes, not two per axis (13 before)


def test_a_dataset_page_runs_no_query(cold: str, monkeypatch: pytest.MonkeyPatch,
                                      caplog: pytest.LogCaptureFixture) -> None:
    runs, resolves = _cost(cold, "/datasets/ccm3.json", monkeypatch, caplog)
    print(f"/datasets/ccm3.json: {runs} service runs, {resolves} catalog resolves")
    assert runs == 0
    assert resolves <= 6  # the description, then every listed axis under one access check (20 before)

"""The most rows a query can give (``Plan.max_rows``) is a promise: HTTP's ``X-Dstp-Truncated: false`` and the
scale-out coordinator's early answer rest on it, so it must never be below what the query returns.

Shapes that read one dataset several times are the hard part: a CTE read twice is scanned once but
counts twice (a self-join of it is the square of its rows), UNION adds, INTERSECT and EXCEPT do not.
Each bound is checked against the rows the query really returns on the small samples, and shapes
whose row count follows from the grid alone must be bounded exactly, not by "unknown".
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

import httpx
import pyarrow as pa
import pytest

from dstp.catalog.registry import Catalog
from dstp.query.execute import QueryExecution, prepare_query
from dstp.query.plan import ROW_BOUND
from dstp.server import DstpServer
from dstp.settings import Settings

SETTINGS = Settings(batch_rows=4096)
LATITUDES = "select distinct lat from ccm3"

# (sql, the rows the shape gives for n = the rows of LATITUDES, or None when only bounded)
SHAPES = [
    (f"with x as ({LATITUDES}) select x.lat from x, x as y", lambda n: n * n),
    (f"with x as ({LATITUDES}) select lat from x union all select lat from x", lambda n: 2 * n),
    (f"with x as ({LATITUDES}) select a.lat from x a join x b on a.lat >= b.lat", lambda n: n * (n + 1) // 2),
    (f"with x as ({LATITUDES}), y as (select lat from x union all select lat from x) select y.lat from y, x",
     lambda n: 2 * n * n),
    (f"select count(*) from (select a.lat from ({LATITUDES}) a, ({LATITUDES}) b)", lambda n: 1),
    (f"with x as ({LATITUDES}) select lat from x where lat in (select lat from x)", lambda n: n),
]


@pytest.fixture(scope="module")
def catalog(catalog_root: Path) -> Iterator[Catalog]:
    cat = Catalog.scan(catalog_root)
    yield cat
    cat.close()


def _rows(catalog: Catalog, sql: str) -> tuple[int, int]:
    prepared = prepare_query(sql, catalog, SETTINGS)
    table = pa.Table.from_batches(list(QueryExecution(prepared, SETTINGS).batches()), schema=prepared.schema)
    return table.num_rows, prepared.plan.max_rows()


@pytest.mark.parametrize("sql, count", SHAPES, ids=range(len(SHAPES)))
def test_the_row_bound_holds_for_datasets_read_several_times(catalog: Catalog, sql: str,
                                                              count: Callable[[int], int]) -> None:
    n, _ = _rows(catalog, LATITUDES)
    got, bound = _rows(catalog, sql)
    assert got == count(n)  # the shape does what it says
    assert got <= bound < ROW_BOUND, (got, bound)


@pytest.fixture(scope="module")
def capped_http(catalog_root: Path) -> Iterator[httpx.Client]:
    settings = Settings(catalog_root=catalog_root, port=0, http_port=0, data_port=0, udt_port=0, batch_rows=64,
                        max_result_rows=30)
    with DstpServer(settings) as srv, httpx.Client(base_url=f"http://{srv.endpoints.http}", timeout=30) as http:
        yield http


@pytest.mark.parametrize("sql", [SHAPES[0][0], SHAPES[1][0]], ids=["self-join", "union-all"])
def test_http_never_promises_a_complete_result_it_then_cuts(capped_http: httpx.Client, sql: str) -> None:
    r = capped_http.get("/query", params={"sql": sql, "format": "csv"})
    assert r.status_code == 200, r.text
    cut = r.text.rstrip("\n").rsplit("\n", 1)[-1].startswith("# dstp-truncated: ")
    assert cut, "the capped server should have cut this result"
    assert r.headers["x-dstp-truncated"] != "false"

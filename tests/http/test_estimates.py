"""A query's size before it runs — records and bytes from the plan — in the HTTP API, ``dstp query --explain``,
the builder page (whose preview then runs by itself), and a ``-o`` download's progress bar with its total.

The promise checked against what the query really returns: an exact estimate is the record count, a bound
is never below it.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from dstp.commands import progress_display
from dstp.client import Progress
from test_web_browser import CHROMIUM, page  # noqa: F401 - the browser fixture

QUERIES = [
    ("select temperature, time from ccm3 limit 10", True),
    ("select * from ccm3 where lat > 60", True),  # the hyperslab proves lat > 60: the count is its size
    ("select * from ccm3 where lat > 60 or lon < 10", False),
    ("select temperature, lat from ccm3 where humidity > 50", False),
    ("select lev, avg(temperature) as t from ccm3 group by lev", False),
    ("select * from ocean tablesample 100 rows repeatable (2)", False),
    ("select temperature from ccm3", True),
]


@pytest.mark.parametrize("sql, exact", QUERIES)
def test_the_estimate_is_the_count_or_a_bound_of_it(http, client, sql: str, exact: bool) -> None:
    answer = http.get("/query/estimate", params={"sql": sql})
    assert answer.status_code == 200, answer.text
    estimate = answer.json()
    got = client.query(sql)
    assert estimate["exact"] is exact
    if exact:
        assert estimate["records"] == got.num_rows and estimate["text"].startswith(f"{got.num_rows:,} records")
    else:
        assert got.num_rows <= estimate["records"] and estimate["text"].startswith(f"at most {estimate['records']:,}")
    assert estimate["bytes"] >= estimate["records"] > 0 and estimate["scan_rows"] > 0
    assert estimate["over_max_result_rows"] is False  # far under the test server's cap


def test_a_query_that_does_not_plan_gets_its_error_not_an_estimate(http) -> None:
    answer = http.get("/query/estimate", params={"sql": "select temprature from ccm3"})
    assert answer.status_code == 400
    assert "did you mean temperature?" in answer.json()["error"]["message"]


def _explain(served: str, sql: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "dstp.cli", "query", "--explain", sql, "--server", served],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout))


@pytest.mark.parametrize("sql, exact", QUERIES[:3])
def test_explain_shows_the_same_estimate(http, web_server, sql: str, exact: bool) -> None:
    explained = _explain(web_server.endpoints.grpc, sql)["estimate"]
    over_http = http.get("/query/estimate", params={"sql": sql}).json()
    assert {k: explained[k] for k in ("records", "bytes", "exact", "scan_rows", "text")} == \
        {k: over_http[k] for k in ("records", "bytes", "exact", "scan_rows", "text")}


def test_the_builder_shows_the_estimate_of_its_sql(http) -> None:
    state = http.get("/datasets/ccm3/query.json", params=[("select", "temperature"), ("where", "humidity:>:50")]).json()
    assert state["estimate"]["text"].startswith("at most ") and state["estimate"]["records"] > 0
    html = http.get("/datasets/ccm3/query", params=[("select", "temperature"), ("where", "humidity:>:50")]).text
    assert f'<p id="estimate" class="muted">Estimated before it runs: {state["estimate"]["text"]}</p>' in html
    broken = http.get("/datasets/ccm3/query.json", params={"sql": "select nosuch from ccm3"}).json()
    assert "no column 'nosuch'" in broken["estimate"]["error"]


# -- the progress bar of a -o download ---------------------------------------------------------

def _drawn(monkeypatch: pytest.MonkeyPatch, reports: list[Progress], complete: bool) -> str:
    out = io.StringIO()
    monkeypatch.setattr(sys, "stderr", out)
    draw, finish = progress_display(True)
    assert draw is not None
    for p in reports:
        draw(p)
    finish(complete=complete)
    return out.getvalue()


def test_the_bar_has_a_total_and_a_percentage(monkeypatch: pytest.MonkeyPatch) -> None:
    exact = _drawn(monkeypatch, [Progress(1_000, 40_000, 0.5, 1, "grpc", 1, 4_000, 4_000)], complete=False)
    assert "25%" in exact and "1,000 of 4,000 rows" in exact, exact
    bound = _drawn(monkeypatch, [Progress(3_072, 100_000, 0.5, 1, "striped", 2, -1, 30_720)], complete=False)
    assert "10%" in bound and "3,072 of ≤ 30,720 rows" in bound, bound
    done = _drawn(monkeypatch, [Progress(3_072, 100_000, 0.5, 1, "striped", 2, -1, 30_720)], complete=True)
    assert "100%" in done, done  # the result ended under its bound: complete


def test_a_saved_query_s_bar_ends_at_its_total(web_server, tmp_path: Path) -> None:
    out = tmp_path / "north.parquet"
    proc = subprocess.run([sys.executable, "-m", "dstp.cli", "query", "select * from ccm3 where lat > 60", "-o",
                           str(out), "--progress", "--server", web_server.endpoints.grpc],
                          capture_output=True, text=True, timeout=120, env={"COLUMNS": "160", "PATH": "/usr/bin"})
    assert proc.returncode == 0, proc.stderr
    rows = pq.read_table(out).num_rows
    bar = next(line for line in proc.stderr.splitlines() if line.startswith("fetching"))
    assert "100%" in bar and f"{rows:,} rows" in bar, proc.stderr


# -- the builder previews without a click ---------------------------------------------------------

@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed at /usr/bin/chromium")
def test_the_builder_previews_as_the_query_changes(page, base_url: str, artifacts: Path) -> None:  # noqa: F811
    page.goto(base_url + "/datasets/ccm3/query?select=temperature&select=lat")
    page.wait_for_function("() => document.querySelectorAll('#preview-table tbody tr').length === 100")
    assert page.locator("#estimate").inner_text().startswith("Estimated before it runs: 196,608 records")
    page.click("#add-condition")
    page.select_option(".condition .cond-column", "lat")
    page.select_option(".condition .cond-op", ">")
    page.fill(".condition .cond-value", "85")  # no click: the preview follows the form
    page.wait_for_function("() => { const cells = [...document.querySelectorAll('#preview-table tbody tr td:nth-child(2)')];"
                           " return cells.length > 0 && cells.every(c => parseFloat(c.textContent) > 85); }")
    # lat > 85 is proven on the one latitude it reads (87.86): exact, 12 times × 8 levels × 64 longitudes
    assert page.locator("#estimate").inner_text().startswith("Estimated before it runs: 6,144 records")
    page.locator("main").screenshot(path=str(artifacts / "builder-estimate-preview.png"))
    assert not page.problems  # type: ignore[attr-defined]

"""A real browser (Debian's Chromium, headless, via Playwright) through the catalog, a dataset and the builder.

Screenshots of every step are saved to ``test-artifacts/http/`` (gitignored);
``docs/web.md`` describes them.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed at /usr/bin/chromium")


@pytest.fixture()
def page(base_url):  # type: ignore[no-untyped-def]
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
        page = context.new_page()
        page.set_default_timeout(15_000)
        page.problems = []  # type: ignore[attr-defined]
        page.on("pageerror", lambda exc: page.problems.append(f"page error: {exc}"))
        page.on("console", lambda m: m.type == "error" and page.problems.append(f"console: {m.text}"))
        local = urlsplit(base_url).netloc

        def offline_only(route):  # type: ignore[no-untyped-def]
            if urlsplit(route.request.url).netloc != local:
                page.problems.append(f"request to another host: {route.request.url}")
                route.abort()
            else:
                route.continue_()

        page.route("**/*", offline_only)
        yield page
        context.close()
        browser.close()


def _loaded(page, selector: str) -> None:  # type: ignore[no-untyped-def]
    page.wait_for_function(
        "s => { const i = document.querySelector(s); return i && i.complete && i.naturalWidth > 0 "
        "&& !i.classList.contains('loading'); }", arg=selector)


def test_catalog_to_dataset_to_quicklook_to_builder_to_download(page, base_url, client, artifacts) -> None:
    shot = lambda name: page.screenshot(path=str(artifacts / name), full_page=True)  # noqa: E731

    # 1. the catalog lists every dataset
    page.goto(base_url + "/")
    assert page.locator(".dataset-card").count() == 4
    shot("01-catalog.png")

    # 2. full-text search
    page.fill("#search-q", "salinity")
    page.press("#search-q", "Enter")
    page.wait_for_url(re.compile(r"\?q=salinity"))
    assert page.locator(".dataset-card").evaluate_all("cards => cards.map(c => c.dataset.id)") == ["ocean"]
    shot("02-search.png")

    # 3. the dataset page: attributes with units, dimensions, files
    page.click("a.dataset-link")
    page.wait_for_url(base_url + "/datasets/ocean")
    assert page.inner_text('#attributes-table tr[data-name="temperature"] td.units') == "degC"
    assert page.inner_text('#attributes-table tr[data-name="salinity"] td.units') == "0.001"
    assert "360_day" in page.inner_text("#dimensions-table")
    _loaded(page, "#quicklook-img")
    _loaded(page, "#series-img")
    shot("03-dataset.png")

    # 4. a quicklook of another attribute at another time and depth
    page.select_option("#quicklook-attribute", "salinity")
    page.select_option("#quicklook-time", "2000-06-16T00:00:00")
    page.select_option("#quicklook-depth", "25.0")
    page.click("#quicklook-form button[type=submit]")
    page.wait_for_function("() => document.querySelector('#quicklook-img').src.includes('depth=25.0')")
    _loaded(page, "#quicklook-img")
    src = page.get_attribute("#quicklook-img", "src")
    assert "attribute=salinity" in src and "time=2000-06-16" in src
    assert page.eval_on_selector("#quicklook-img", "i => i.naturalWidth") > 400
    assert page.is_hidden("#quicklook-error")
    page.locator("#quicklook").screenshot(path=str(artifacts / "04-quicklook.png"))

    # 5. the query builder: pick columns, add a condition, see the SQL and the snippets follow
    page.goto(base_url + "/datasets/ccm3/query")
    page.check('input[name=select][value="temperature"]')
    page.check('input[name=select][value="time"]')
    page.click("#add-condition")
    row = page.locator(".condition").last
    row.locator(".cond-column").select_option("humidity")
    row.locator(".cond-op").select_option(">")
    row.locator(".cond-value").fill("50")
    sql = "select time, temperature from ccm3 where humidity > 50"
    page.wait_for_function("s => document.querySelector('#sql').value === s", arg=sql)
    page.wait_for_function("s => document.querySelector('#snippet-python').textContent.includes(s)", arg=sql)
    assert "dstp_query(con, " in page.inner_text("#snippet-r")
    assert "where=humidity" in page.url  # the builder's state is in the URL
    shot("05-builder.png")

    # 6. preview: the first rows appear in the table
    page.click("#preview-btn")
    # the table names the query its rows answer (the page's own preview on open answered another)
    page.wait_for_function("s => document.querySelector('#preview-table').dataset.sql === s", arg=sql)
    assert "stale" not in (page.get_attribute("#preview-table", "class") or "")
    headers = page.locator("#preview-table thead th").all_inner_texts()
    assert headers == ["time", "temperature"]
    assert page.locator("#preview-table tbody tr").count() == 100
    assert "first 100" in page.inner_text("#preview-status")
    shot("06-preview.png")

    # 7. download as CSV: the file holds every row of the result
    with page.expect_download() as info:
        page.click('#downloads a[data-format="csv"]')
    download = info.value
    assert re.fullmatch(r"ccm3-[0-9a-f]{8}\.csv", download.suggested_filename)
    lines = Path(download.path()).read_text().splitlines()
    assert lines[0] == '"time","temperature"'
    assert len(lines) - 1 == client.query(sql).num_rows
    shot("07-download.png")

    # 8. a bad query shows the server's message, pointing at the token
    page.fill("#sql", "select nosuch from ccm3")
    page.click("#preview-btn")
    page.wait_for_selector("#query-error:not([hidden])")
    assert "nosuch" in page.inner_text("#query-error")
    page.wait_for_selector("#reset-sql:not([hidden])")  # the SQL was edited by hand
    assert "nosuch" in page.inner_text("#query-error")  # and the message stays
    shot("08-error.png")

    assert page.problems == [] or all("status of 400" in p for p in page.problems), page.problems

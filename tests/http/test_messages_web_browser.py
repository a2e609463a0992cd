"""In a real browser (Debian's Chromium, headless), code snippets wrap inside their panel instead of being cut."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlencode

import pytest

CHROMIUM = Path("/usr/bin/chromium")

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed at /usr/bin/chromium")

LONG_SQL = ("select temperature, humidity, cloud, time, lev, lat, lon from ccm3 where humidity > 50 and "
            "lat between 30 and 40 and lon between 0 and 40 and time >= '1990-06-01' and lev < 900 limit 100")


@pytest.mark.parametrize("width", [1280, 700])
def test_code_snippets_wrap_inside_their_panel(base_url, artifacts, width) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu"],
                                    headless=True)
        try:
            page = browser.new_page(viewport={"width": width, "height": 900})
            page.goto(f"{base_url}/datasets/ccm3/query?{urlencode({'sql': LONG_SQL})}")
            page.screenshot(path=str(artifacts / f"snippets-{width}.png"), full_page=True)
            boxes = page.evaluate("""() => [...document.querySelectorAll('.snippet pre')].map(pre => {
                const panel = pre.closest('.panel').getBoundingClientRect(), box = pre.getBoundingClientRect();
                return {id: pre.id, text: pre.textContent, scroll: pre.scrollWidth, client: pre.clientWidth,
                        right: box.right, panel: panel.right};
            })""")
            page_width = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
        finally:
            browser.close()
    assert [b["id"] for b in boxes] == ["snippet-python", "snippet-r", "snippet-curl"]
    for b in boxes:
        assert "humidity > 50" in b["text"]  # the whole query is there …
        assert b["scroll"] <= b["client"], b  # … and all of it shows: nothing hidden to the right
        assert b["right"] <= b["panel"], b
    assert page_width[0] <= page_width[1]  # the page itself does not scroll sideways

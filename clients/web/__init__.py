"""The browser client and the HTTP API's helpers (installed as ``dstp.web``).

Nothing here imports the web framework: :mod:`dstp.http_app` is the only
module that knows about FastAPI. The modules below turn the service's
answers into what a browser or an HTTP client sees:

* :mod:`dstp.web.shapes` — the JSON shapes of summaries and descriptions (the R client reads them);
* :mod:`dstp.web.search` — full-text catalog search and facets;
* :mod:`dstp.web.pages` — page models (one dict per page, rendered as HTML or sent as JSON);
* :mod:`dstp.web.builder` — the query builder's state and the SQL it stands for;
* :mod:`dstp.web.snippets` — Python, R and curl snippets for a query;
* :mod:`dstp.web.formats` — result encoders (CSV, JSON, NDJSON, Arrow, Parquet, netCDF);
* :mod:`dstp.web.streaming` — pulling encoded chunks from a running query without blocking the event loop;
* :mod:`dstp.web.quicklook` — map and time-series PNGs drawn from the query engine's answers.

Templates live in ``templates/`` and every asset in ``static/``: pages work
offline, with no CDN.
"""

from pathlib import Path

__all__ = ["STATIC_DIR", "TEMPLATES_DIR"]

TEMPLATES_DIR = Path(__file__).parent / "templates"
STATIC_DIR = Path(__file__).parent / "static"

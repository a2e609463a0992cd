"""The HTTP adapter: the browser catalog and the HTTP API (installed as ``dstp.http``).

Two modules know about the web framework (FastAPI on uvicorn):
:mod:`dstp.http.app` (the routes; ``create_app`` and ``start_http_server``)
and :mod:`dstp.http.error_responses` (every failure as a response, from the
error tree). The modules below turn the service's answers into what a
browser or an HTTP client sees, and import no web framework:

* :mod:`dstp.http.shapes` — the JSON shapes of summaries and descriptions (the R client reads them);
* :mod:`dstp.http.search` — full-text catalog search and facets;
* :mod:`dstp.http.pages` — page models (one dict per page, rendered as HTML or sent as JSON);
* :mod:`dstp.http.builder` — the query builder's state and the SQL it stands for;
* :mod:`dstp.http.snippets` — Python, R and curl snippets for a query;
* :mod:`dstp.http.formats` — result encoders (CSV, JSON, NDJSON, Arrow, Parquet, netCDF);
* :mod:`dstp.http.streaming` — pulling encoded chunks from a running query without blocking the event loop;
* :mod:`dstp.http.quicklook` — map and time-series PNGs drawn from the query engine's answers.

Templates live in ``templates/`` and every asset in ``static/``: pages work
offline, with no CDN.
"""

from pathlib import Path

__all__ = ["STATIC_DIR", "TEMPLATES_DIR"]

TEMPLATES_DIR = Path(__file__).parent / "templates"
STATIC_DIR = Path(__file__).parent / "static"

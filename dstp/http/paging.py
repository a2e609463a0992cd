"""Pages of the HTTP listings, and the version header of query results (no web framework here).

    version_header(schema)                   -> "ccm3=4" (X-Dstp-Version: each dataset the result was computed on)
    next_offset(page)                        -> the offset of the page after ``page`` (None: it is the last)
    link_header(path, params, page, limit)   -> 'Link: <…?offset=100&limit=100>; rel="next", <…>; rel="prev"'
"""

from __future__ import annotations

from typing import Any, Mapping
from urllib.parse import urlencode

import pyarrow as pa

from dstp.catalog.registry import CatalogPage

__all__ = ["DEFAULT_PAGE", "VERSION_HEADER", "link_header", "next_offset", "page_url", "version_header"]

#: The response header naming the dataset versions a query result was computed on.
VERSION_HEADER = "X-Dstp-Version"
#: Datasets a listing page holds when the request names no limit.
DEFAULT_PAGE = 100


def version_header(schema: pa.Schema) -> str:
    """Return ``<dataset>=<version>`` for each dataset a result read, space-separated ("-": a remote dataset's)."""
    meta = schema.metadata or {}
    ids = meta.get(b"dstp:datasets", b"").decode().split()
    versions = meta.get(b"dstp:version", b"").decode().split()
    return " ".join(f"{i}={v}" for i, v in zip(ids, versions))


def next_offset(page: CatalogPage) -> int | None:
    """Return the offset of the page after ``page``, None when it is the last."""
    end = page.offset + len(page.datasets)
    return end if end < page.total and page.datasets else None


def page_url(path: str, params: Mapping[str, Any], offset: int, limit: int) -> str:
    """Return ``path`` asking for the page at ``offset``, keeping the request's other parameters."""
    kept = [(k, v) for k, v in params.items() if k not in ("offset", "limit", "page", "itemsPerPage") and v != ""]
    return f"{path}?{urlencode([*kept, ('offset', offset), ('limit', limit)], doseq=True)}"


def link_header(path: str, params: Mapping[str, Any], page: CatalogPage, limit: int) -> str:
    """Return the RFC 8288 ``Link`` header of a listing page: its next and previous pages, where there are."""
    links = []
    nxt = next_offset(page)
    if nxt is not None:
        links.append(f'<{page_url(path, params, nxt, limit)}>; rel="next"')
    if page.offset > 0:
        links.append(f'<{page_url(path, params, max(0, page.offset - limit), limit)}>; rel="prev"')
    return ", ".join(links)

"""Pages of the HTTP listings, and the version header of query results (no web framework here).

    version_header(schema)                   -> "ccm3=4" (X-Dstp-Version: each dataset the result was computed on)
    next_offset(page)                        -> the offset of the page after ``page`` (None: it is the last)
    link_header(path, params, page, limit)   -> 'Link: <…?offset=100&limit=100>; rel="next", <…>; rel="prev"'
    summaries(page)                          -> the DatasetSummary of each dataset of a page
    erddap_page(params)                      -> (offset, limit) of ERDDAP's page=/itemsPerPage= (None: not given)

Every listing pages from :meth:`DstpService.page <dstp.service.DstpService.page>` (the catalog's datasets by id,
from memory, those the caller may read); a page holds at most ``MAX_PAGE`` (1,000) datasets.
"""

from __future__ import annotations

from typing import Any, Mapping
from urllib.parse import urlencode

import pyarrow as pa

from dstp.catalog.dataset import GriddedDataset
from dstp.catalog.registry import CatalogPage
from dstp.errors import QueryError
from dstp.metadata import DatasetSummary, dataset_summary
from dstp.service.feed import MAX_PAGE

__all__ = ["DEFAULT_PAGE", "VERSION_HEADER", "erddap_page", "link_header", "next_offset", "page_url", "summaries",
           "version_header"]

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


def summaries(page: CatalogPage) -> list[DatasetSummary]:
    """Return the listing entries of a page's datasets (local ones; a page from the service holds no other)."""
    return [dataset_summary(d) for d in page.datasets if isinstance(d, GriddedDataset)]


def erddap_page(params: Mapping[str, str], most: int | None = MAX_PAGE) -> tuple[int, int] | None:
    """Return (offset, limit) of ERDDAP's ``page`` (from 1) and ``itemsPerPage`` parameters, the limit at most
    ``most`` (None: as asked, for listings sliced from memory); None when neither is given. A value that is not a
    whole number from 1 is refused, quoting it."""
    if "page" not in params and "itemsPerPage" not in params:
        return None
    numbers = []
    for name, default in (("page", "1"), ("itemsPerPage", "1000")):
        text = params.get(name, default)
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value < 1:
            raise QueryError(f"{name}={text[:40]!r} is not a whole number from 1 (ERDDAP pages are {name}=1, 2, …)")
        numbers.append(value)
    page, per = numbers
    return (page - 1) * per, per if most is None else min(per, most)

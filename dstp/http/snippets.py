"""Ready-to-paste code for a query: Python, R and curl, and download links.

The Python client speaks gRPC (``dstp.connect("host:port")``); the R
client and curl speak the HTTP API, so their snippets name the HTTP base.
On a server that speaks TLS the Python snippet asks for it (``tls=True``);
on one that knows tokens, each snippet takes the token from ``DSTP_TOKEN``
(never from the page: a snippet is pasted, shared and committed).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from urllib.parse import urlencode

__all__ = ["FORMAT_LABELS", "Endpoints", "download_links", "query_url", "snippets"]

#: Download formats of ``GET /query`` in the order the pages offer them, with a label.
FORMAT_LABELS = {
    "csv": "CSV",
    "json": "JSON",
    "ndjson": "NDJSON",
    "parquet": "Parquet",
    "arrow": "Arrow IPC stream",
    "nc": "netCDF (gridded results)",
}


@dataclass(frozen=True, slots=True)
class Endpoints:
    """Where clients reach this server: the HTTP base URL and the gRPC target."""

    http_base: str
    grpc_target: str
    #: The gRPC server speaks TLS.
    tls: bool = False
    #: The reader is signed in (or the server needs a token): snippets pass $DSTP_TOKEN.
    token: bool = False


def query_url(sql: str, fmt: str, base: str = "", limit: int | None = None) -> str:
    """Return the ``GET /query`` URL of ``sql`` in format ``fmt`` (relative when ``base`` is empty)."""
    params: dict[str, str | int] = {"sql": sql, "format": fmt}
    if limit is not None:
        params["limit"] = limit
    return f"{base}/query?{urlencode(params)}"


def download_links(sql: str, base: str = "") -> list[dict[str, str]]:
    """Return one download link per result format."""
    return [{"format": f, "label": label, "url": query_url(sql, f, base)} for f, label in FORMAT_LABELS.items()]


def _r_string(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def snippets(sql: str, endpoints: Endpoints) -> dict[str, str]:
    """Return the Python, R and curl code that runs ``sql`` against this server."""
    tls = ", tls=True" if endpoints.tls else ""
    note = "  # the token comes from DSTP_TOKEN" if endpoints.token else ""
    python = (
        "import dstp\n\n"
        f"con = dstp.connect({endpoints.grpc_target!r}{tls}){note}\n"
        f"table = con.query({sql!r})  # a pyarrow.Table\n"
        "df = table.to_pandas()\n"
    )
    r = (
        "library(dstp)\n\n"
        f"con <- dstp_connect({_r_string(endpoints.http_base)}){note}\n"
        f"df <- dstp_query(con, {_r_string(sql)})\n"
    )
    header = '-H "Authorization: Bearer $DSTP_TOKEN" ' if endpoints.token else ""
    curl = (
        f"curl -G -OJ {header}--data-urlencode {shlex.quote('sql=' + sql)} \\\n"
        f"     -d format=csv {shlex.quote(endpoints.http_base + '/query')}\n"
    )
    return {"python": python, "r": r, "curl": curl}

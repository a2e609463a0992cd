"""``/docs``: the OpenAPI description as one self-contained page with a copy-paste example per route.

FastAPI's Swagger UI and ReDoc load their scripts from a CDN, so the app
turns them off; this page is rendered on the server from ``app.openapi()``
with inline styles and no script, so it works offline and behind firewalls.
Each operation shows its parameters and a ``curl`` line built from the
parameters' examples (their OpenAPI ``examples``, else a documented default).
"""

from __future__ import annotations

import html
from typing import Any, Mapping
from urllib.parse import quote, urlencode

__all__ = ["docs_page", "example_url"]

#: Examples for parameters whose schema has none (the sample catalog's datasets exist on every fresh server).
FALLBACK_EXAMPLES = {
    "sql": "select temperature, time from ccm3 where humidity > 50 limit 5",
    "format": "csv", "dataset_id": "ccm3", "name": "ccm3.csv", "attribute": "temperature", "q": "temperature",
    "ext": "csv", "page": "index", "searchFor": "temperature", "limit": "5",
}

_STYLE = """body{font-family:system-ui,sans-serif;max-width:70rem;margin:2rem auto;padding:0 1rem;color:#1b1f24}
section{border:1px solid #d0d7de;border-radius:6px;padding:.6rem 1rem;margin:1rem 0}
code,pre{background:#f6f8fa;border-radius:4px}pre{padding:.5rem;overflow-x:auto}
.method{font-weight:700;text-transform:uppercase;margin-right:.5rem}table{border-collapse:collapse}
td,th{border-bottom:1px solid #d0d7de;padding:.2rem .6rem;text-align:left;vertical-align:top}
nav a{margin-right:1rem}"""


def _example(param: Mapping[str, Any]) -> str | None:
    """Return an example value of an OpenAPI parameter, or None if it has none and is optional."""
    schema = param.get("schema", {})
    for source in (param, schema):
        if "example" in source:
            return str(source["example"])
        examples = source.get("examples")
        if isinstance(examples, list) and examples:
            return str(examples[0])
        if isinstance(examples, dict) and examples:
            first = next(iter(examples.values()))
            return str(first.get("value", first)) if isinstance(first, dict) else str(first)
    if param.get("name") in FALLBACK_EXAMPLES:
        return FALLBACK_EXAMPLES[param["name"]]
    if param.get("required"):
        if "enum" in schema:
            return str(schema["enum"][0])
        return str(schema.get("default", "…"))
    return None


def example_url(base: str, path: str, op: Mapping[str, Any]) -> str:
    """Return a URL calling ``path`` with example values for its path and required (or exampled) parameters."""
    query: dict[str, str] = {}
    for param in op.get("parameters", []):
        value = _example(param)
        if value is None:
            continue
        if param.get("in") == "path":
            path = path.replace("{" + param["name"] + "}", quote(value, safe=".,()[]:"))
        elif param.get("in") == "query" and (param.get("required") or param["name"] in FALLBACK_EXAMPLES):
            query[param["name"]] = value
    return base + path + ("?" + urlencode(query) if query else "")


def docs_page(spec: Mapping[str, Any], base: str) -> str:
    """Return the HTML of the docs page for an OpenAPI description."""
    info = spec.get("info", {})
    out = ["<!DOCTYPE html><html lang='en'><head><meta charset='UTF-8'>",
           f"<title>{html.escape(info.get('title', 'API'))}</title><style>{_STYLE}</style></head><body>",
           "<nav><a href='/'>Catalog</a><a href='/api'>API overview</a><a href='/openapi.json'>openapi.json</a>"
           "<a href='/stac'>STAC</a><a href='/erddap/index.html'>ERDDAP</a></nav>",
           f"<h1>{html.escape(info.get('title', 'API'))} <small>{html.escape(str(info.get('version', '')))}</small></h1>",
           f"<p>{html.escape(info.get('description', ''))}</p>",
           f"<p>Machine-readable: <a href='/openapi.json'><code>/openapi.json</code></a> "
           f"(OpenAPI {html.escape(str(spec.get('openapi', '')))}).</p>"]
    for path, operations in spec.get("paths", {}).items():
        for method, op in operations.items():
            out.append(f"<section id='{html.escape(op.get('operationId', ''))}'>")
            out.append(f"<h2><span class='method'>{html.escape(method)}</span><code>{html.escape(path)}</code></h2>")
            out.append(f"<p><b>{html.escape(op.get('summary', ''))}</b></p>")
            if op.get("description"):
                out.append(f"<p>{html.escape(op['description'])}</p>")
            params = op.get("parameters", [])
            if params:
                out.append("<table><tr><th>parameter</th><th>in</th><th>required</th><th>description</th>"
                           "<th>example</th></tr>")
                for p in params:
                    ex = _example(p)
                    out.append(f"<tr><td><code>{html.escape(p['name'])}</code></td><td>{html.escape(p.get('in', ''))}"
                               f"</td><td>{'yes' if p.get('required') else ''}</td>"
                               f"<td>{html.escape(p.get('description', ''))}</td>"
                               f"<td>{'<code>' + html.escape(ex) + '</code>' if ex else ''}</td></tr>")
                out.append("</table>")
            if method == "get":
                out.append(f"<pre>curl -s '{html.escape(example_url(base, path, op))}'</pre>")
            elif method == "post" and path == "/query":
                body = '{"sql": "' + FALLBACK_EXAMPLES["sql"] + '", "format": "csv"}'
                out.append(f"<pre>curl -s {html.escape(base)}/query -H 'Content-Type: application/json' "
                           f"-d '{html.escape(body)}'</pre>")
            statuses = ", ".join(html.escape(str(s)) for s in op.get("responses", {}))
            out.append(f"<p>Responses: {statuses}</p></section>")
    out.append("</body></html>")
    return "\n".join(out)

"""Sizes at the HTTP boundary (audit): response headers every client reads; requests over a size limit answered
with a message naming that limit, never a connection reset or the web framework's words.

Findings reproduced against a real server: 300 chained CTEs (8.8 kB of SQL) made a 120 kB ``X-Dstp-Arrow-Schema``
header (curl: "Out of memory", httpx: "Receive buffer too long"); a GET of 16,000 non-ASCII characters, under
``max_sql_length``, got uvicorn's bare "Invalid HTTP request received."; a 1 MB URL or a 300 kB header got a TCP
reset; a chunked body over ``http_max_body_bytes`` got "There was an error parsing the body".
"""

from __future__ import annotations

import base64
import csv
import http.client
import io
import json
from typing import Any, Iterator
from urllib.parse import urlencode

import httpx
import pyarrow as pa
import pytest

import dstp
from dstp.http.app import HttpServer, _bind
from dstp.http.error_responses import Boundary
from dstp.http.formats import HEADER_OMITS
from dstp.http.limits import MAX_RESPONSE_HEAD_BYTES, MAX_RESPONSE_HEADER_BYTES, Guard, HttpLimits
from dstp.server import DstpServer


@pytest.fixture(scope="module")
def grpc(web_server: DstpServer) -> Iterator[dstp.Client]:
    """The gRPC client of the same server: the answer HTTP must agree with."""
    assert web_server.endpoints is not None
    with dstp.connect(web_server.endpoints.grpc) as c:
        yield c


def cte_chain(n: int) -> str:
    """Return a query of ``n`` chained CTEs over ccm3 (its plan quotes each)."""
    chain = ", ".join(f"c{i} as (select * from {f'c{i - 1}' if i else 'ccm3'})" for i in range(n))
    return f"with {chain} select lat, temperature from c{n - 1} order by lat, temperature limit 3"


def header_sizes(r: httpx.Response) -> tuple[int, int]:
    """Return the longest header line of ``r`` and all its header lines together, in bytes."""
    lines = [len(name) + 2 + len(value) for name, value in r.headers.raw]
    return max(lines), sum(line + 2 for line in lines)


def header_schema(r: httpx.Response) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(r.headers["x-dstp-arrow-schema"])))


def without_bulk(schema: pa.Schema) -> dict[bytes, bytes]:
    return {k: v for k, v in (schema.metadata or {}).items() if k not in HEADER_OMITS}


def get(srv: DstpServer, target: str, **headers: str) -> tuple[int, http.client.HTTPMessage, Any]:
    """Return the status, headers and JSON body of ``GET target`` sent with Python's http.client.

    httpx refuses to send a URL component over 64 KiB, so long URLs go this way (the server must read them).
    """
    assert srv.endpoints is not None
    host, port = srv.endpoints.http.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request("GET", target, headers=headers)
        r = conn.getresponse()
        return r.status, r.headers, json.loads(r.read())
    finally:
        conn.close()


# -- response headers ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["arrow", "csv"])
def test_a_long_cte_chain_answers_with_headers_every_client_reads(web_server, http, grpc, fmt: str) -> None:
    sql = cte_chain(400)
    assert len(sql) <= web_server.settings.max_sql_length
    expected = grpc.query(sql)
    r = http.get("/query", params={"sql": sql, "format": fmt})
    assert r.status_code == 200, r.text[:300]
    longest, total = header_sizes(r)
    assert longest <= MAX_RESPONSE_HEADER_BYTES and total <= MAX_RESPONSE_HEAD_BYTES, (longest, total)
    # The header keeps every field with its units and CF names, and the schema's metadata but the SQL and plan.
    schema = header_schema(r)
    assert schema.equals(expected.schema, check_metadata=False)
    assert [f.metadata for f in schema] == [f.metadata for f in expected.schema]
    assert schema.metadata == without_bulk(expected.schema) and b"dstp:grid" in schema.metadata
    if fmt == "arrow":
        body = pa.ipc.open_stream(r.content).read_all()
        assert body.equals(expected)
        # What the header leaves out is in the body's schema.
        assert body.schema.metadata[b"dstp:plan"] == expected.schema.metadata[b"dstp:plan"]
        assert body.schema.metadata[b"dstp:sql"] == expected.schema.metadata[b"dstp:sql"]
    else:
        header, *rows = list(csv.reader(io.StringIO(r.text)))
        assert header == expected.column_names
        for i, name in enumerate(header):  # CSV text read back as the column's type (float32: shortest form)
            column = pa.array([float(row[i]) for row in rows], expected.schema.field(name).type)
            assert column.to_pylist() == expected[name].to_pylist()


def test_a_schema_too_long_for_a_header_is_left_out_saying_where_it_is(http, grpc) -> None:
    sql = "select " + ", ".join(f"temperature t{i}" for i in range(100)) + " from ccm3 order by t0 limit 2"
    expected = grpc.query(sql)
    r = http.get("/query", params={"sql": sql, "format": "csv"})
    assert r.status_code == 200, r.text[:300]
    longest, total = header_sizes(r)
    assert longest <= MAX_RESPONSE_HEADER_BYTES and total <= MAX_RESPONSE_HEAD_BYTES, (longest, total)
    assert "x-dstp-arrow-schema" not in r.headers
    assert "format=arrow" in r.headers["x-dstp-arrow-schema-omitted"]
    assert len(list(csv.reader(io.StringIO(r.text)))) == 1 + expected.num_rows
    # Where the header says: the schema alone, whole, in an Arrow body.
    alone = http.get("/query", params={"sql": sql, "format": "arrow", "limit": 0})
    assert alone.status_code == 200
    schema = pa.ipc.open_stream(alone.content).schema
    assert schema.equals(expected.schema, check_metadata=False)
    assert [f.metadata for f in schema] == [f.metadata for f in expected.schema]
    assert without_bulk(schema) == without_bulk(expected.schema) and b"dstp:plan" in schema.metadata


def test_a_response_header_too_long_is_never_sent() -> None:
    """A header over the bound is a bug of ours: 500 with an incident id, not a response clients fail on."""
    async def oversized(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        await send({"type": "http.response.start", "status": 200, "headers": [(b"x-big", b"a" * 20_000)]})
        await send({"type": "http.response.body", "body": b"never sent"})

    sock = _bind("127.0.0.1", 0)
    server = HttpServer(Guard(Boundary(oversized), HttpLimits()), sock,  # type: ignore[arg-type]
                        "127.0.0.1:%d" % sock.getsockname()[1])
    server.start()
    try:
        r = httpx.get(f"http://{server.endpoint}/", timeout=30)
    finally:
        server.stop()
    assert r.status_code == 500 and r.json()["error"]["code"] == "internal"
    assert "incident" in r.json()["error"]["message"] and "x-big" not in r.headers


# -- requests over a limit -------------------------------------------------------------------------------------------

def test_a_get_url_holds_max_sql_length_characters_of_any_kind(web_server, http, grpc) -> None:
    frame = "select lat from ccm3 where '{}' <> '' order by lat limit 2"
    # U+1D54F is 4 bytes of UTF-8, 12 percent-encoded: the most a character takes in a URL.
    sql = frame.format("\U0001d54f" * (web_server.settings.max_sql_length - len(frame) + 2))
    assert len(sql) == web_server.settings.max_sql_length
    status, _, body = get(web_server, "/query?" + urlencode({"sql": sql, "format": "json"}))
    assert status == 200, body
    assert [row["lat"] for row in body] == grpc.query(sql)["lat"].to_pylist()


# Refused by h11 as the request arrives (over the cap and still incomplete), or by the Guard once h11 has it whole
# (a read of up to 256 KiB can complete it): the same answer either way.
@pytest.mark.parametrize("length", [300_000, 1_000_000])
def test_a_url_over_the_cap_is_414_naming_max_sql_length_and_post(web_server, http, length: int) -> None:
    target = "/query?" + urlencode({"sql": "select lat from ccm3 where '" + "x" * length + "' <> ''"})
    status, headers, body = get(web_server, target)
    assert status == 414, body
    assert body["error"]["code"] == "invalid_query"
    assert "max_sql_length=16,384" in body["error"]["message"] and "POST /query" in body["error"]["message"]
    assert headers["x-frame-options"] == "DENY"
    assert http.get("/datasets.json").status_code == 200  # the server goes on


@pytest.mark.parametrize("length", [300_000, 1_000_000])
def test_request_headers_over_the_cap_are_431_naming_the_limit(web_server, length: int) -> None:
    status, headers, body = get(web_server, "/datasets.json", **{"X-Padding": "a" * length})
    assert status == 431, body
    assert body["error"]["code"] == "invalid_query" and "max_sql_length" in body["error"]["message"]
    assert "headers" in body["error"]["message"] and headers["x-frame-options"] == "DENY"


def test_a_chunked_body_over_the_limit_is_refused_as_it_arrives_naming_the_limit(web_server, http, grpc) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"sql": "select temperature from ccm3 where ' + b" " * 2**16
        for _ in range(1000):  # 64 MB if it were all read
            yield b" " * 2**16

    r = http.post("/query", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_query"
    limit = web_server.settings.http_max_body_bytes
    assert f"at most {limit:,} (http_max_body_bytes)" in r.json()["error"]["message"]
    # A chunked body under the limit is read as before.
    sql = "select lat from ccm3 order by lat limit 2"
    r = http.post("/query", content=iter([b'{"sql": "%s",' % sql.encode(), b' "format": "json"}']),
                  headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text[:300]
    assert [row["lat"] for row in r.json()] == grpc.query(sql)["lat"].to_pylist()

"""The HTTP API against a real server: results equal the gRPC client's, errors share one shape."""

from __future__ import annotations

import io
import json
import logging
import re

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest

import dstp
from dstp.http.app import create_app, start_http_server
from dstp.service import DstpService

SAME_ROWS = [
    "select temperature, time from ccm3 where humidity > 50",
    "select * from ocean where depth < 20 and lat > 60",  # 360_day text times, descending lat, land NULLs
    "select * from station",  # fill values, scalar coordinate
    "select temperature, humidity, lat from ccm3 where lat between 30 and 40 and time >= '1990-06-01'",
    "select sst, step, xc from axes order by sst desc, step, xc limit 50",  # every column: ties have no order
]


def _get(http: httpx.Client, sql: str, fmt: str, **params: object) -> httpx.Response:
    response = http.get("/query", params={"sql": sql, "format": fmt, **params})
    assert response.status_code == 200, response.text
    return response


def _read_csv(data: bytes, schema: pa.Schema) -> pa.Table:
    options = pa_csv.ConvertOptions(
        column_types={f.name: f.type for f in schema}, strings_can_be_null=True, quoted_strings_can_be_null=False
    )
    return pa_csv.read_csv(io.BytesIO(data), convert_options=options)


@pytest.mark.parametrize("sql", SAME_ROWS)
def test_csv_parquet_arrow_return_exactly_the_rows_of_the_python_client(http, client, sql) -> None:
    expected = client.query(sql)
    assert expected.num_rows > 0

    csv = _get(http, sql, "csv")
    assert csv.headers["content-type"] == "text/csv; charset=utf-8"
    assert _read_csv(csv.content, expected.schema).equals(expected)

    parquet = pq.read_table(io.BytesIO(_get(http, sql, "parquet").content))
    assert parquet.equals(expected)
    assert parquet.schema.field(0).metadata == expected.schema.field(0).metadata  # units, calendar travel

    arrow = pa.ipc.open_stream(_get(http, sql, "arrow").content).read_all()
    assert arrow.equals(expected)
    assert arrow.schema.equals(expected.schema, check_metadata=True)


def _comparable(records: list[dict], schema: pa.Schema) -> list[dict]:
    """Return records with times as ISO text and float32 values rounded to float32 (JSON writes them shortest)."""
    single = {f.name for f in schema if f.type == pa.float32()}
    return [
        {k: v.isoformat() if hasattr(v, "isoformat") else float(np.float32(v)) if k in single and v is not None
         else v for k, v in row.items()}
        for row in records
    ]


@pytest.mark.parametrize("sql", [SAME_ROWS[0] + " limit 3000", *SAME_ROWS[1:3]])
def test_json_and_ndjson_hold_the_same_records(http, client, sql) -> None:
    table = client.query(sql)
    expected = _comparable(table.to_pylist(), table.schema)
    assert _comparable(_get(http, sql, "json").json(), table.schema) == expected
    lines = _get(http, sql, "ndjson").text.splitlines()
    assert _comparable([json.loads(line) for line in lines], table.schema) == expected


def test_download_headers_name_the_dataset_and_format(http) -> None:
    sql = "select temperature from ccm3 limit 3"
    names = set()
    for fmt, media, ext in [
        ("csv", "text/csv", "csv"), ("json", "application/json", "json"), ("ndjson", "application/x-ndjson", "ndjson"),
        ("arrow", "application/vnd.apache.arrow.stream", "arrows"), ("parquet", "application/vnd.apache.parquet",
                                                                     "parquet"),
    ]:
        r = _get(http, sql, fmt)
        assert r.headers["content-type"].startswith(media)
        m = re.fullmatch(r'attachment; filename="ccm3-([0-9a-f]{8})\.' + ext + '"', r.headers["content-disposition"])
        assert m, r.headers["content-disposition"]
        names.add(m[1])
        assert r.headers["x-dstp-query-id"]
    assert len(names) == 1  # the hash names the query, not the format


def test_limit_sends_at_most_that_many_rows(http) -> None:
    sql = "select temperature, time from ccm3 where humidity > 50"
    assert len(_get(http, sql, "json", limit=7).json()) == 7
    assert len(_get(http, sql, "csv", limit=7).text.splitlines()) == 8
    assert pq.read_table(io.BytesIO(_get(http, sql, "parquet", limit=7).content)).num_rows == 7
    assert pa.ipc.open_stream(_get(http, sql, "arrow", limit=0).content).read_all().num_rows == 0


def test_empty_result_is_a_valid_file_in_every_format(http) -> None:
    sql = "select temperature, time from ccm3 where lat > 100"
    assert _get(http, sql, "csv").text == '"temperature","time"\n'
    assert _get(http, sql, "json").json() == []
    assert _get(http, sql, "ndjson").text == ""
    assert pa.ipc.open_stream(_get(http, sql, "arrow").content).read_all().num_rows == 0
    assert pq.read_table(io.BytesIO(_get(http, sql, "parquet").content)).column_names == ["temperature", "time"]


@pytest.mark.parametrize(
    "sql, calendar, units_of",
    [
        ("select * from ccm3 where lat > 60 and lev > 500", "noleap", ("temperature", "K")),
        ("select * from ocean where depth < 20 and lat < -40", "360_day", ("salinity", "0.001")),
    ],
)
def test_netcdf_is_cf_with_calendar_and_units(http, client, tmp_path, sql, calendar, units_of) -> None:
    import netCDF4
    import xarray as xr

    r = _get(http, sql, "nc")
    assert r.headers["content-type"] == "application/x-netcdf"
    path = tmp_path / "result.nc"
    path.write_bytes(r.content)
    with netCDF4.Dataset(path) as nc:
        assert nc.Conventions.startswith("CF-")
        assert nc.variables["time"].calendar == calendar
        assert " since " in nc.variables["time"].units
        assert nc.variables[units_of[0]].units == units_of[1]
    expected = dstp.to_xarray(client.query(sql))
    with xr.open_dataset(path, decode_times=xr.coders.CFDatetimeCoder(use_cftime=True)) as got:
        name = units_of[0]
        np.testing.assert_array_equal(got[name].values, expected[name].values)
        assert [_iso(t) for t in got["time"].values] == [_iso(t) for t in expected["time"].values]
        assert list(got["lat"].values) == list(expected["lat"].values)  # descending latitudes kept


def _iso(t: object) -> str:
    if isinstance(t, np.datetime64):
        return str(t.astype("datetime64[s]"))
    return t.isoformat()  # type: ignore[attr-defined]  # cftime


def test_netcdf_refuses_results_without_the_grid_coordinates(http) -> None:
    r = http.get("/query", params={"sql": "select temperature from ccm3", "format": "nc"})
    assert r.status_code == 400
    body = r.json()
    assert body["error"]["code"] == "invalid_query"
    assert "coordinate columns" in body["error"]["message"] and "lat" in body["error"]["message"]


HOSTILE = [
    ("drop table ccm3", 400, "forbidden"),
    ("copy ccm3 to '/tmp/dstp-pwned.csv'", 400, "forbidden"),
    ("select * from read_csv('/etc/passwd')", 400, "forbidden"),
    ("select getenv('HOME') from ccm3", 400, "forbidden"),
    ("select * from '/etc/passwd'", 400, "forbidden"),
    ("with recursive r(n) as (select 1 union all select n + 1 from r) select n from r", 400, "forbidden"),
    ("select temperature from ccm3; drop table ccm3", 400, "forbidden"),
    ("selec temperature from ccm3", 400, "syntax_error"),
    ("select temperature from ccm3 where", 400, "syntax_error"),
    ("select nosuch from ccm3", 400, "unknown_column"),
    ("select temperature from ccm3 where time > '1990-13-45'", 400, "invalid_query"),
    ("select * from nosuch", 404, "dataset_not_found"),
    ("select " + "temperature+" * 1500 + "1 from ccm3", 400, "invalid_query"),  # > max_sql_length
]


@pytest.mark.parametrize("sql, status, code", HOSTILE, ids=[h[0][:50] for h in HOSTILE])
@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_hostile_or_bad_sql_gets_a_4xx_json_error(http, sql, status, code, fmt) -> None:
    r = http.get("/query", params={"sql": sql, "format": fmt})
    assert r.status_code == status
    assert r.headers["content-type"] == "application/json"
    error = r.json()["error"]
    assert error["code"] == code
    assert error["message"] and "Traceback" not in error["message"]
    assert set(error) <= {"code", "message", "line", "column", "token"}
    if code == "syntax_error":
        assert error["line"] == 1 and error["column"] >= 1
    assert http.get("/query", params={"sql": "select temperature from ccm3 limit 1"}).status_code == 200


@pytest.mark.parametrize(
    "params",
    [{}, {"sql": "select temperature from ccm3", "format": "xls"},
     {"sql": "select temperature from ccm3", "limit": "-1"}, {"sql": "select temperature from ccm3", "limit": "x"}],
)
def test_bad_parameters_get_the_shared_error_shape(http, params) -> None:
    r = http.get("/query", params=params)
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "invalid_query"


def test_post_takes_long_sql_in_a_json_body(http, client) -> None:
    sql = "select temperature from ccm3 where lat > 80 and " + " and ".join(["humidity >= 0"] * 600)
    assert len(sql) > 8000
    r = http.post("/query", json={"sql": sql, "format": "arrow"})
    assert r.status_code == 200, r.text
    assert pa.ipc.open_stream(r.content).read_all().equals(client.query(sql))
    r = http.post("/query", json={"sql": "drop table ccm3"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "forbidden"
    r = http.post("/query", json={"format": "csv"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_query"


def test_unknown_path_and_method_get_the_shared_error_shape(http) -> None:
    r = http.get("/no/such/page.json")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = http.put("/query", params={"sql": "select temperature from ccm3"})
    assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"


def test_openapi_describes_parameters_and_errors(http) -> None:
    spec = http.get("/openapi.json").json()
    assert spec["openapi"].startswith("3.")
    assert http.get("/api.json").json() == spec
    query = spec["paths"]["/query"]["get"]
    params = {p["name"]: p for p in query["parameters"]}
    assert set(params) == {"sql", "format", "limit"}
    assert all(p.get("description") for p in params.values())
    assert params["format"]["schema"]["enum"] == ["csv", "json", "ndjson", "arrow", "parquet", "nc"]
    for status in ("400", "404", "429", "500", "504"):
        ref = query["responses"][status]["content"]["application/json"]["schema"]["$ref"]
        assert ref.endswith("/ErrorBody")
    assert "ErrorBody" in spec["components"]["schemas"]
    for path, ops in spec["paths"].items():
        for op in ops.values():
            assert op.get("summary"), path
            for p in op.get("parameters", []):
                assert p.get("description") or p["in"] == "path", (path, p["name"])
    # Swagger UI would load from a CDN: /docs is dstp's own self-contained page, and /api describes the API offline.
    docs = http.get("/docs")
    assert docs.status_code == 200 and "<script src=" not in docs.text and "https://" not in docs.text
    assert "/query" in docs.text
    page = http.get("/api").text
    assert "/query" in page and 'src="http' not in page and 'href="http' not in page.replace('href="http://testserver', '')


def test_cors_follows_settings(web_server, http) -> None:
    origin = {"Origin": "https://notebook.example.org"}
    assert "access-control-allow-origin" not in http.get("/datasets.json", headers=origin).headers
    settings = web_server.settings.replace(http_port=0, cors_origins=("https://notebook.example.org",))
    server = start_http_server(web_server.service, settings)
    try:
        with httpx.Client(base_url=f"http://{server.endpoint}") as c:
            r = c.get("/datasets.json", headers=origin)
            assert r.headers["access-control-allow-origin"] == "https://notebook.example.org"
            r = c.get("/datasets.json", headers={"Origin": "https://evil.example.com"})
            assert "access-control-allow-origin" not in r.headers
            r = c.get("/query", params={"sql": "drop table ccm3"}, headers=origin)
            assert r.status_code == 400 and r.headers["access-control-allow-origin"]  # errors readable too
    finally:
        server.stop()


class _BrokenService(DstpService):
    def datasets(self):  # type: ignore[no-untyped-def]
        raise RuntimeError("secret internal detail")


def test_unexpected_error_is_500_with_an_incident_id_and_no_traceback(web_server, caplog) -> None:
    service = _BrokenService(web_server.catalog, web_server.settings)
    assert create_app(service, web_server.settings) is not None
    server = start_http_server(service, web_server.settings.replace(http_port=0))
    try:
        with httpx.Client(base_url=f"http://{server.endpoint}") as c, caplog.at_level(logging.ERROR, "dstp.http"):
            r = c.get("/datasets.json")
            page = c.get("/", headers={"Accept": "text/html"})
    finally:
        server.stop()
    assert r.status_code == 500
    error = r.json()["error"]
    assert error["code"] == "internal"
    incident = re.search(r"incident ([0-9a-f]{12})", error["message"])
    assert incident and "secret" not in r.text and "Traceback" not in r.text
    assert page.status_code == 500 and "text/html" in page.headers["content-type"] and "secret" not in page.text
    logged = [rec for rec in caplog.records if incident[1] in rec.getMessage()]
    assert logged and logged[0].exc_info is not None  # the traceback stays in the server log


def test_server_json_says_where_every_channel_listens(web_server, http) -> None:
    info = http.get("/server.json").json()
    assert info["grpc"] == web_server.endpoints.grpc
    assert info["http"].startswith("http://") and info["version"]
    assert "grpc" in info["channels"]


def test_query_responses_carry_the_typed_schema(http) -> None:
    import base64

    import pyarrow as pa

    r = http.get("/query", params={"sql": "select temperature, time from ccm3 limit 3", "format": "csv"})
    schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(r.headers["x-dstp-arrow-schema"])))
    assert schema.field("temperature").metadata[b"units"] == b"K"
    assert schema.field("time").type == pa.timestamp("us")

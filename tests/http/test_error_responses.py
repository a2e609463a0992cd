"""HTTP errors come from the error tree: framework refusals as classes, OpenAPI texts from error_table()."""

from __future__ import annotations

import httpx

from dstp.errors import BadRequestError, MethodNotAllowedError, RouteNotFoundError, error_table
from dstp.http.error_responses import FRAMEWORK_ERRORS, STATUS_DESCRIPTIONS, framework_error


def test_framework_refusals_map_to_classes_of_the_tree() -> None:
    assert FRAMEWORK_ERRORS == {400: BadRequestError, 404: RouteNotFoundError, 405: MethodNotAllowedError}
    assert type(framework_error(404, "no page at /x")) is RouteNotFoundError
    assert type(framework_error(405, "Method Not Allowed")) is MethodNotAllowedError
    # any other refusal (an unreadable body) is a bad request, never a bare DstpError with a patched status
    err = framework_error(401, "Unauthorized")
    assert type(err) is BadRequestError and (err.http_status, err.code) == (400, "invalid_query")


def test_every_status_is_described_by_the_codes_that_carry_it() -> None:
    for row in error_table()[1:]:
        assert f"`{row.code}`" in STATUS_DESCRIPTIONS[row.http_status], row.name


def test_openapi_error_responses_come_from_the_tree(http: httpx.Client) -> None:
    responses = http.get("/openapi.json").json()["paths"]["/query"]["get"]["responses"]
    assert "`syntax_error`" in responses["400"]["description"]
    assert "`dataset_not_found`" in responses["404"]["description"]
    assert "`limit_exceeded`" in responses["429"]["description"]


def test_unknown_path_and_wrong_method_keep_their_codes(http: httpx.Client) -> None:
    r = http.get("/no/such/page")
    assert r.status_code == 404 and r.json()["error"] == {"code": "not_found", "message": "no page at /no/such/page"}
    r = http.delete("/datasets.json")
    assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"
    r = http.get("/query", params={"sql": "select gw from ccm3", "format": "xls"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_query"

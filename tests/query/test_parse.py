"""Whatever text arrives, validation answers with a dstp QueryError family member or a valid query."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dstp.catalog.registry import Catalog
from dstp.errors import DstpError
from dstp.query.parse import validate_query

WORDS = ["select", "from", "where", "ccm3", "ocean", "temperature", "humidity", "time", "lat", "*", ",", "(",
         ")", "and", "or", "not", "between", "in", "is", "null", ">", "<", "=", "'1990-01-01'", "1", "-2.5",
         "limit", "order", "by", "tablesample", "%", "rows", "stride", "lat = 2", ";", "drop", "copy",
         "read_csv('x')", "getenv('x')", "::", "as", "x", "union", "group", "having", "$1", "?", "--", "/*"]


@pytest.fixture(scope="module")
def catalog(catalog_root) -> Catalog:
    cat = Catalog.scan(catalog_root)
    yield cat
    cat.close()


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(words=st.lists(st.sampled_from(WORDS), min_size=0, max_size=14))
def test_token_soup_never_crashes(catalog, words) -> None:
    sql = " ".join(["select", *words]) if words and words[0] != "select" else " ".join(words)
    try:
        validate_query(sql, catalog)
    except DstpError:
        pass


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=200))
def test_arbitrary_text_never_crashes(catalog, text) -> None:
    try:
        validate_query(text, catalog)
    except DstpError:
        pass

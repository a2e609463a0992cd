"""Whatever text arrives, validation answers with a valid query or a QueryError a scientist can act on."""

from __future__ import annotations

from typing import Iterator

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sqlglot import exp, parse_one

from dstp.catalog.registry import Catalog
from dstp.errors import DatasetNotFoundError, QueryError
from dstp.query.parse import DIALECT, ValidatedQuery, validate_query
from dstp.query.plan import plan_query
from test_hostile import assert_actionable

WORDS = ["select", "from", "where", "ccm3", "ocean", "temperature", "humidity", "time", "lat", "*", ",", "(",
         ")", "and", "or", "not", "between", "in", "is", "null", ">", "<", "=", "'1990-01-01'", "1", "-2.5",
         "limit", "order", "by", "tablesample", "%", "rows", "stride", "lat = 2", ";", "drop", "copy",
         "read_csv('x')", "getenv('x')", "::", "as", "x", "union", "group", "having", "$1", "?", "--", "/*",
         "exclude", "replace", "pivot", "at", "version", "=>", "1e300", "99999999999999999999", "all",
         "qualify", "distinct", "offset", "fetch", "first", "percent", "ties", "with", "'", '"']


@pytest.fixture(scope="module")
def catalog(catalog_root) -> Iterator[Catalog]:
    cat = Catalog.scan(catalog_root)
    yield cat
    cat.close()


def assert_valid(q: ValidatedQuery, catalog: Catalog) -> None:
    """Fail unless a validated query is bound to the catalog and plans to SQL DuckDB can read."""
    assert catalog.get(q.dataset.id) is q.dataset
    assert q.outputs and len(set(q.output_names)) == len(q.output_names)
    assert q.columns and set(q.columns) <= set(q.dataset.column_names())
    assert q.limit is None or 0 <= q.limit <= 10**18
    assert q.offset is None or 0 <= q.offset <= 10**18
    for node in [*q.outputs, *q.order, *([q.where] if q.where is not None else [])]:
        for column in node.find_all(exp.Column):
            assert column.name in q.dataset.column_names() or column.name in q.output_names
    sql = plan_query(q).sql
    assert isinstance(parse_one(sql, read=DIALECT), exp.Select)


def check(text: str, catalog: Catalog) -> None:
    try:
        q = validate_query(text, catalog)
    except (QueryError, DatasetNotFoundError) as exc:
        assert_actionable(exc, text)
        return
    assert_valid(q, catalog)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(words=st.lists(st.sampled_from(WORDS), min_size=0, max_size=14))
def test_token_soup_validates_or_gets_an_actionable_error(catalog, words) -> None:
    sql = " ".join(["select", *words]) if words and words[0] != "select" else " ".join(words)
    check(sql, catalog)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=200))
def test_arbitrary_text_validates_or_gets_an_actionable_error(catalog, text) -> None:
    check(text, catalog)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prefix=st.text(max_size=40), suffix=st.text(max_size=40))
@example(prefix="", suffix="E")  # found by this test: "limit 3E" raised Python's ValueError
def test_text_around_a_valid_query_validates_or_gets_an_actionable_error(catalog, prefix, suffix) -> None:
    check(f"{prefix}select temperature, lat from ccm3 where lat > 10 limit 3{suffix}", catalog)


@pytest.mark.parametrize("sql", ["select temperature from ccm3 limit 3E", "select temperature from ccm3 limit 3 offset 2E",
                                 "select temperature from ccm3 order by 3E", "select temperature from ccm3 order by -1E",
                                 "select temperature from ccm3 tablesample 3E percent"])
def test_a_number_with_an_empty_exponent_is_refused_where_it_counts(catalog, sql) -> None:
    # sqlglot reads "3E" as a number literal that Python's float() refuses.
    with pytest.raises(QueryError) as info:
        validate_query(sql, catalog)
    assert_actionable(info.value, sql)

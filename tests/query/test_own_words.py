"""A message quotes the query's own words, with a caret under them: its type names, literals and names.

sqlglot prints ``hugeint`` as ``INT128`` and ``varchar`` as ``TEXT``; DuckDB calls ``int4`` ``INT32`` and
says ``Could not convert string 'north' to DOUBLE`` with no caret; a misspelt keyword or dataset was
"unexpected". A word the user never wrote cannot be found in their query, so each of these is said in
the query's words, at the place it stands.
"""

from __future__ import annotations

import re
from typing import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dstp import errors
from dstp.catalog.registry import Catalog
from dstp.query.execute import QueryExecution, prepare_query
from dstp.query.parse import validate_query
from dstp.settings import Settings

SETTINGS = Settings(max_result_rows=2000, query_time_limit_s=60)

# Every spelling DuckDB accepts for a type dstp does not cast to, in the cases users type them.
REFUSED_TYPES = ["hugeint", "HUGEINT", "int128", "Int128", "uhugeint", "uint128", "ubigint", "uinteger", "utinyint",
                 "tinyint", "int1", "varchar", "VARCHAR", "string", "text", "char", "bpchar", "blob", "bytea",
                 "bool", "boolean", "logical", "uuid", "interval", "time"]
# How sqlglot and DuckDB print those types: none may appear unless the query wrote it.
RENDERINGS = ["INT128", "UINT128", "HUGEINT", "UHUGEINT", "UBIGINT", "UINT", "UINTEGER", "UTINYINT", "TINYINT", "TEXT",
              "VARCHAR", "CHAR", "BLOB", "VARBINARY", "BOOLEAN", "UUID", "INTERVAL", "TIME", "128-bit"]


@pytest.fixture(scope="module")
def catalog(catalog_root) -> Iterator[Catalog]:
    cat = Catalog.scan(catalog_root)
    yield cat
    cat.close()


def head(exc: BaseException) -> str:
    """The message without the query line and caret under it."""
    return str(exc).split("\n", 1)[0]


def under_caret(err: errors.QueryError) -> str:
    assert err.sql is not None and err.line is not None and err.column is not None and err.token
    line = err.sql.splitlines()[err.line - 1]
    return line[err.column - len(err.token): err.column]


def foreign_renderings(message: str, sql: str) -> list[str]:
    return [r for r in RENDERINGS
            if re.search(rf"(?<![\w-]){re.escape(r)}(?![\w-])", message, re.IGNORECASE)
            and not re.search(rf"(?<![\w-]){re.escape(r)}(?![\w-])", sql, re.IGNORECASE)]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(word=st.sampled_from(REFUSED_TYPES), form=st.sampled_from([
    "select cast(lat as {t}) from ccm3",
    "select lat::{t} from ccm3",
    "select cast(cast(lat as int) as {t}) as x from ccm3",
    "select lat from ccm3 where cast(temperature as {t}) is not null",
    "select lat, temperature\n  from ccm3\n  order by cast(temperature as {t})",
    "select cast(null as {t}) + lat as x from ccm3",
]))
def test_a_refused_cast_names_the_type_as_the_query_spells_it(catalog, word, form) -> None:
    sql = form.format(t=word)
    with pytest.raises(errors.ForbiddenQueryError) as info:
        validate_query(sql, catalog)
    err = info.value
    assert f"cast to {word} is not supported" in head(err), str(err)
    assert under_caret(err) == word, str(err)
    assert not foreign_renderings(head(err), sql), str(err)


@pytest.mark.parametrize("sql, quoted", [
    ("select lat from ccm3 order by cast(1 as int4)", "CAST(1 AS int4)"),
    ("select lat from ccm3 order by 1.5::float4", "CAST(1.5 AS float4)"),
    ("select lat from ccm3 order by lat, cast(2 as int2)", "CAST(2 AS int2)"),
])
def test_a_quoted_expression_keeps_the_query_s_type_names(catalog, sql, quoted) -> None:
    with pytest.raises(errors.QueryError) as info:
        validate_query(sql, catalog)
    assert quoted in head(info.value), str(info.value)  # sqlglot alone: CAST(1 AS INT), REAL, BIGINT


@pytest.mark.parametrize("sql, word", [
    ("select cast(temperature * 1e10 as int4) as t from ccm3", "int4"),  # DuckDB: INT32
    ("select cast(lat as int2) * 1000 as t from ccm3", "int2"),  # DuckDB: INT16
])
def test_duckdb_s_messages_name_the_query_s_types(catalog, sql, word) -> None:
    prepared = prepare_query(sql, catalog, SETTINGS)
    with pytest.raises(errors.QueryError) as info:
        list(QueryExecution(prepared, SETTINGS).batches())
    assert re.search(rf"\b{word}\b", head(info.value)), str(info.value)
    assert not re.search(r"\b(INT16|INT32|SMALLINT|INTEGER)\b", head(info.value)), str(info.value)


# -- an operator dstp does not run ------------------------------------------------------------

@pytest.mark.parametrize("sql", [
    "select 'a' || 'b' as x from ccm3",
    "select lat::hugeint || 1 as x from ccm3",
    "select cast(lat as HUGEINT) || 'x' as x from ccm3",
    "select lat from ccm3 where 'x||y' || lon = 'x'",
    "select lat,\n       lon || lat as x\n  from ccm3",
])
def test_string_concatenation_is_refused_at_the_operator_in_the_query_s_words(catalog, sql) -> None:
    with pytest.raises(errors.ForbiddenQueryError) as info:  # was: 'CAST(lat AS hugeint) || 1' is not supported
        validate_query(sql, catalog)
    err = info.value
    assert head(err).startswith("string concatenation with || is not supported"), str(err)
    assert under_caret(err) == "||", str(err)
    assert "CAST(" not in head(err) and not foreign_renderings(head(err), sql), str(err)


# -- text where a number belongs ---------------------------------------------------------------

@pytest.mark.parametrize("sql, text, column, kind", [
    ("select * from ccm3 where lat = 'north'", "'north'", "lat", "DOUBLE, degrees_north"),
    ("select lat from ccm3 where 'north' < lat", "'north'", "lat", "DOUBLE, degrees_north"),
    ("select lat from ccm3\n where lev in (850, 'top')", "'top'", "lev", "DOUBLE, hPa"),
    ("select lat from ccm3 where temperature between 'cold' and 300", "'cold'", "temperature", "FLOAT, K"),
    ("select lat from ccm3 where humidity <> 'it''s dry'", "'it''s dry'", "humidity", "FLOAT, %"),
])
def test_text_compared_with_a_number_column_is_refused_at_the_text(catalog, sql, text, column, kind) -> None:
    with pytest.raises(errors.QueryError) as info:
        validate_query(sql, catalog)
    err = info.value
    assert head(err).startswith(f"{text} is not a number, and {column} holds numbers ({kind}); compare it with "
                                f"a number, e.g. {column} = "), str(err)
    assert under_caret(err) == text, str(err)


def test_text_a_number_column_needs_is_said_so_by_dstp_where_duckdb_finds_it(catalog) -> None:
    sql = "select lat from ccm3 where lat + 'north' > 3"
    with pytest.raises(errors.QueryError) as info:  # DuckDB's own: "Could not convert string 'north' to DOUBLE"
        prepared = prepare_query(sql, catalog, SETTINGS)
        list(QueryExecution(prepared, SETTINGS).batches())
    err = info.value
    assert head(err).startswith("'north' is not a number, which this part of the query needs (DOUBLE)"), str(err)
    assert under_caret(err) == "'north'" and "Could not convert" not in str(err)


def test_a_number_in_quotes_still_compares_as_the_number(catalog) -> None:
    prepared = prepare_query("select lat from ccm3 where lat = '87.8638' or lat > '87'", catalog, SETTINGS)
    table = list(QueryExecution(prepared, SETTINGS).batches())
    assert sum(b.num_rows for b in table) > 0


# -- misspelt names and keywords ------------------------------------------------------------

@pytest.mark.parametrize("sql, word, keyword", [
    ("select * form ccm3", "form", "FROM"),
    ("select temperature form ccm3 where lat > 3", "form", "FROM"),
    ("select lat from ccm3 were lat > 3", "were", "WHERE"),
    ("select lat from ccm3\n grup by lat", "grup", "GROUP"),
    ("select lat from ccm3 ordr by lat", "ordr", "ORDER"),
    ("select lat from ccm3 limt 5", "limt", "LIMIT"),
])
def test_a_misspelt_keyword_is_named_with_the_keyword_meant(catalog, sql, word, keyword) -> None:
    with pytest.raises(errors.QuerySyntaxError) as info:
        validate_query(sql, catalog)
    err = info.value
    assert f"{word!r} is not a keyword; did you mean {keyword}?" in head(err), str(err)
    assert under_caret(err) == word


@pytest.mark.parametrize("sql, name, meant", [
    ("select * from ccm4", "ccm4", "ccm3"),
    ("select * from ocaen where lat > 0", "ocaen", "ocean"),
    ('select * from "Ocean"', '"Ocean"', "ocean"),
])
def test_a_misspelt_dataset_has_a_caret_and_a_suggestion(catalog, sql, name, meant) -> None:
    with pytest.raises(errors.DatasetNotFoundError) as info:
        validate_query(sql, catalog)
    err = info.value
    assert f"did you mean {meant}?" in head(err) and "published: " in head(err), str(err)
    lines = str(err).split("\n")
    assert len(lines) == 3 and lines[1].strip() == sql.strip()
    start = lines[2].index("^")
    assert lines[1][start: start + len(name)] == name and lines[2].count("^") == len(name), str(err)
    assert (err.line, err.column) == (1, sql.index(name) + len(name))
    assert err.to_dict()["error"]["line"] == 1  # the HTTP body says where, as for a QueryError


def test_a_dataset_named_nowhere_near_gets_no_suggestion(catalog) -> None:
    with pytest.raises(errors.DatasetNotFoundError) as info:
        validate_query("select * from zzzz", catalog)
    assert "did you mean" not in str(info.value) and "^^^^" in str(info.value)

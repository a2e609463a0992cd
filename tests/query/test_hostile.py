"""Hostile and odd queries, in-process: honoured exactly, or refused with a message a scientist can act on.

Every refusal is a typed :class:`dstp.errors.QueryError` whose message names the problem in the
query's own words (with a caret under the token where one exists) and carries nothing of the
libraries underneath: no sqlglot or DuckDB names, no Python exception classes, no 128-bit integer
types. The same holds for what execution raises. A grammar of odd queries (hypothesis) checks it
for queries nobody thought of; the shared ``HOSTILE`` list (also run through a live server by
``tests/e2e/test_errors.py``) pins the messages of the ones somebody did.
"""

from __future__ import annotations

import re
from typing import Iterator

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from dstp import errors
from dstp.catalog.registry import Catalog
from dstp.query.execute import QueryExecution, prepare_query
from dstp.query._terms import MAX_EXPRESSION_TERMS
from dstp.query.parse import MAX_EXPRESSION_DEPTH, MAX_NESTING, validate_query
from dstp.settings import Settings
from query_cases import HOSTILE

SETTINGS = Settings(max_result_rows=2000, query_time_limit_s=60, max_sql_length=10**6)

_LEAK_WORDS = ("<class", "sqlglot", "duckdb", "traceback", "int128", "hugeint", "tokentype", "token_type",
               "__dstp", "recursion", "int32", "int64", "bool ")
# Python exception classes (OverflowError) and sqlglot node classes (DataTypeParam, SimilarTo).
_CLASS_NAME = re.compile(r"\b[A-Z][a-z]+(?:[A-Z][a-z]*)+\b")


def assert_actionable(exc: BaseException, sql: str) -> None:
    """Fail unless ``exc`` is a dstp error whose message shows no library internals."""
    assert isinstance(exc, errors.DstpError), f"{type(exc).__name__} escaped for {sql!r}: {exc}"
    assert not isinstance(exc, errors.ServerError), f"server fault for {sql!r}: {exc}"
    text = str(exc)
    head = text.split("\n", 1)[0].split(" — in: ", 1)[0]  # the message, without the query echoed back
    # Words the user wrote may come back; anything else of the libraries' vocabulary may not.
    leaked = [w for w in _LEAK_WORDS if w in head.lower() and w not in sql.lower()]
    leaked += [w for w in _CLASS_NAME.findall(head) if w not in sql]
    assert not leaked, f"{leaked} in the message for {sql!r}: {text}"
    if isinstance(exc, errors.QueryError) and exc.line is not None:
        lines = sql.splitlines() or [sql]
        assert 1 <= exc.line <= len(lines) and exc.column is not None and exc.column >= 1, text
        assert "^" in text


@pytest.fixture(scope="module")
def catalog(catalog_root) -> Iterator[Catalog]:
    cat = Catalog.scan(catalog_root)
    yield cat
    cat.close()


def run(sql: str, catalog: Catalog) -> pa.Table:
    """Return the whole result of ``sql``: validation, planning and execution, in-process."""
    prepared = prepare_query(sql, catalog, SETTINGS)
    batches = list(QueryExecution(prepared, SETTINGS).batches())
    return pa.Table.from_batches(batches, schema=prepared.schema)


# -- the shared hostile list -----------------------------------------------------------------

@pytest.mark.parametrize("sql, error, words", HOSTILE, ids=[h[0][:60] for h in HOSTILE])
def test_hostile_query_is_refused_by_the_validator(catalog, sql, error, words) -> None:
    with pytest.raises(getattr(errors, error)) as info:
        validate_query(sql, catalog)
    assert words.lower() in str(info.value).lower()
    assert_actionable(info.value, sql)


@pytest.mark.parametrize("sql, token", [
    ("select * from ccm3 pivot (sum(temperature) for lat in (1, 2))", "pivot"),
    ("select * from ccm3 at (version => 1)", "at"),
    ("select temperature from ccm3 limit 1e300", "1e300"),
    ("select temperature from ccm3 limit 10 percent", "percent"),
    ("select temperature\n  from ccm3 where time > '1990", "'"),
    ("select temperature from ccm3 window w as (order by lat)", "window"),
    ("select lev, avg(temperature) from ccm3 where avg(temperature) > 1 group by lev", "avg"),
    ("select * exclude (nosuch) from ccm3", "nosuch"),
    ("select temperature + 99999999999999999999999 from ccm3", "99999999999999999999999"),
    ("select " + "(" * 30 + "temperature" + ")" * 30 + " from ccm3", "("),
])
def test_refusals_point_at_the_token(catalog, sql, token) -> None:
    with pytest.raises(errors.QueryError) as info:
        validate_query(sql, catalog)
    err = info.value
    assert err.line is not None and err.column is not None
    line = sql.splitlines()[err.line - 1]
    assert line[err.column - len(token): err.column] == token, str(err)


# -- odd forms that are honoured: each gives exactly what its plain form gives ---------------

AND_CHAIN = " and ".join(f"lat > {i / 10:g}" for i in range(800))  # ≡ lat > 79.9, 800 terms
OR_CHAIN = " or ".join(f"humidity > {99 - i / 100:g}" for i in range(700))  # ≡ humidity > 92.01
HONOURED = [
    ("select * exclude (temperature, cloud) from ccm3 where lat > 80",
     "select time, lev, lat, lon, humidity from ccm3 where lat > 80"),
    ("select * except (temperature) from ccm3 where lat > 80",
     "select time, lev, lat, lon, humidity, cloud from ccm3 where lat > 80"),
    ("select * replace (temperature - 273.15 as temperature) from ccm3 where lat > 80",
     "select time, lev, lat, lon, temperature - 273.15 as temperature, humidity, cloud from ccm3 where lat > 80"),
    ("select * exclude (cloud) rename (temperature as t) from ccm3 where lat > 80",
     "select time, lev, lat, lon, temperature as t, humidity from ccm3 where lat > 80"),
    ("select ccm3.* exclude (lev) from ccm3 where lat > 80",
     "select time, lat, lon, temperature, humidity, cloud from ccm3 where lat > 80"),
    ("select t.temperature, t.lat from ccm3 as t where t.lat > 60 order by t.temperature, t.lat limit 20",
     "select temperature, lat from ccm3 where lat > 60 order by temperature, lat limit 20"),
    ("select temperature, lat from ccm3 where lat > 80 order by all desc",
     "select temperature, lat from ccm3 where lat > 80 order by temperature desc, lat desc"),
    ("select temperature from ccm3 where lat > 85 limit all", "select temperature from ccm3 where lat > 85"),
    ("select temperature from ccm3 order by temperature fetch first 3 rows only",
     "select temperature from ccm3 order by temperature limit 3"),
    ("from ccm3 select temperature where lat > 85", "select temperature from ccm3 where lat > 85"),
    ("select temperature from ccm3 limit 5 offset 3 rows", "select temperature from ccm3 limit 5 offset 3"),
    (f"select temperature, lat from ccm3 where {AND_CHAIN}", "select temperature, lat from ccm3 where lat > 79.9"),
    (f"select humidity from ccm3 where {OR_CHAIN}", "select humidity from ccm3 where humidity > 92.01"),
]


@pytest.mark.parametrize("sql, plain", HONOURED, ids=[h[0][:60] for h in HONOURED])
def test_odd_form_gives_what_its_plain_form_gives(catalog, sql, plain) -> None:
    got, want = run(sql, catalog), run(plain, catalog)
    assert got.num_rows > 0
    assert got.schema.names == want.schema.names
    assert got.equals(want)


def test_long_and_chains_still_prune_the_hyperslab(catalog) -> None:
    prepared = prepare_query(f"select temperature from ccm3 where {AND_CHAIN}", catalog, SETTINGS)
    lat = dict(zip(prepared.plan.hyperslab.dims, prepared.plan.hyperslab.ranges))["lat"]
    assert 0 < len(lat) < catalog.get("ccm3").dimensions["lat"].size


# -- sizes past what the parser, the planner or DuckDB can take -------------------------------

@pytest.mark.parametrize("sql", [
    "select " + "(" * 5000 + "lat" + ")" * 5000 + " from ccm3",
    "select " + "abs(" * 3000 + "lat" + ")" * 3000 + " from ccm3",
    "select " + "1+" * 10000 + "lat from ccm3",
    "select " + "- " * 5000 + "lat from ccm3",
    "select " + "not " * 5000 + "lat from ccm3",
    "select " + "case when lat > 0 then " * 1000 + "1" + " end" * 1000 + " from ccm3",
    "select lat from ccm3 where " + " and ".join(["(lat > 1"] * 3000) + ")" * 3000,
    "select lat from ccm3 order by " + "lat + " * 5000 + "1",
], ids=["parens", "functions", "plus", "minus", "not", "case", "and-parens", "order"])
def test_deep_queries_are_refused_with_a_limit(catalog, sql) -> None:
    with pytest.raises(errors.QueryError) as info:
        validate_query(sql, catalog, max_length=10**6)
    limits = f"{MAX_NESTING}|{MAX_EXPRESSION_DEPTH}|{MAX_EXPRESSION_TERMS}"  # nesting, depth, or operator count
    assert re.search(rf"\b({limits})\b", str(info.value)), str(info.value)
    assert_actionable(info.value, sql)


def test_wide_queries_within_the_limits_run(catalog) -> None:
    """Long flat lists are not deep: IN with 5000 values and 3000 ANDs are honoured."""
    values = ", ".join(f"{v:g}" for v in catalog.get("ccm3").coordinates["lev"].values[:3])
    table = run(f"select lev, temperature from ccm3 where lev in ({values}, " + ", ".join(["-1"] * 5000) + ") limit 5",
                catalog)
    assert table.num_rows == 5
    table = run("select lat from ccm3 where " + " and ".join(["lat > 87"] * 3000), catalog)
    assert table.num_rows > 0 and min(table.column("lat").to_pylist()) > 87


# -- a grammar of odd queries: validation and execution answer only with typed errors ---------

# Mostly plausible pieces, with odd ones mixed in: a query must get far enough to meet the odd part.
PLAIN = ["temperature", "humidity", "cloud", "lat", "lon", "lev", "time", "1", "-2.5", "0.1", "'1990-06-01'"]
COLUMNS = ["gw", "nosuch", "ccm3.lat", "t.lat", "\"lat\"", "LAT"]
NUMBERS = ["0", "1e300", "1e400", "1.5", "9223372036854775807", "9223372036854775808",
           "99999999999999999999999", "1e-400", "-0", "1_000", ".5", "1e18", "1e19"]
STRINGS = ["'1990-13-45'", "'a'", "''", "'1990-06-01 12:00'", "timestamp '1990-03-01'", "date '1990-02-01'"]
OTHER_LEAVES = ["null", "true", "false", "*", "?", "$1", "interval 1 day", "[1, 2]", "{'a': 1}", "now()",
                "random()", "(select 1)", "all"]
TYPES = ["double", "int", "bigint", "varchar", "int128", "hugeint", "decimal(50, 2)", "decimal(10, 2)",
         "timestamp", "date", "smallint", "float", "ubigint", "blob"]
FUNCTIONS = ["abs", "sqrt", "ln", "exp", "floor", "round", "sign", "sin", "year", "month", "count", "sum",
             "read_csv", "getenv", "upper", "coalesce", "least", "power", "atan2", "nullif"]
BINARY = ["+", "-", "*", "/", "%", "//", "=", "<>", "<", ">", "<=", ">=", "and", "or", "is", "is not",
          "like", "||", "is distinct from", "^", "&", "<<"]

leaves = st.sampled_from(PLAIN * 4 + COLUMNS + NUMBERS + STRINGS + OTHER_LEAVES)


def _compound(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.tuples(children, st.sampled_from(BINARY), children).map(" ".join),
        st.tuples(st.sampled_from(["-", "not ", "+"]), children).map("".join),
        children.map("({})".format),
        st.tuples(st.sampled_from(FUNCTIONS), st.lists(children, min_size=0, max_size=3))
        .map(lambda f: f"{f[0]}({', '.join(f[1])})"),
        st.tuples(children, st.sampled_from(TYPES)).map(lambda c: f"cast({c[0]} as {c[1]})"),
        st.tuples(children, st.sampled_from(TYPES)).map(lambda c: f"{c[0]}::{c[1]}"),
        st.tuples(children, children, children).map(lambda c: f"{c[0]} between {c[1]} and {c[2]}"),
        st.tuples(children, st.lists(children, max_size=4)).map(lambda c: f"{c[0]} in ({', '.join(c[1])})"),
        st.tuples(children, children, children).map(lambda c: f"case when {c[0]} then {c[1]} else {c[2]} end"),
        st.tuples(st.sampled_from(["year", "month", "foo"]), children).map(lambda c: f"extract({c[0]} from {c[1]})"),
        st.tuples(st.sampled_from(["'month'", "'foo'", "1"]), children).map(lambda c: f"date_trunc({c[0]}, {c[1]})"),
    )


expressions = st.recursive(leaves, _compound, max_leaves=6)
select_items = st.one_of(
    expressions,
    st.tuples(expressions, st.sampled_from(["x", "lat", "\"\"", "time"])).map(lambda c: f"{c[0]} as {c[1]}"),
    st.sampled_from(["*", "ccm3.*", "t.*", "* exclude (lat)", "* exclude (nosuch)", "* exclude lat",
                     "* replace (lat + 1 as lat)", "* replace (lat as nosuch)", "* rename (lat as y)",
                     "* ilike '%a%'", "columns('t.*')", "* exclude (time, lev, lat, lon, temperature, humidity, cloud)"]),
)
sources = st.sampled_from(["ccm3"] * 12 + [
    "ccm3 as t", "ccm3 t", "ccm3 as t(a)", "stride(ccm3, lat = 4)", "stride(ccm3, lat = 0)",
    "stride(ccm3, lat = 99999999999)", "stride(ccm3, nosuch = 2)", "ccm3, ocean", "ccm3 join ocean on true",
    "ccm3 pivot (sum(temperature) for lat in (1, 2))", "ccm3 at (version => 1)", "(select * from ccm3)",
    "(values (1))", "read_csv('/etc/passwd')", "main.ccm3", "nosuch", "ccm3 tablesample 1%",
    "ccm3 tablesample 10 rows repeatable (3)", "ccm3 tablesample 1e300 rows", "ccm3 tablesample system(5)",
    "ccm3 tablesample bernoulli(2)", "ccm3 tablesample 200%", "ccm3 tablesample (bucket 1 out of 2 on lat)",
    "ccm3 using sample 1% (bernoulli, 4)", "ccm3 using sample 10 percent (bernoulli)",
])
tails = st.lists(st.sampled_from(["limit 5"] * 8 + [
    "limit 5", "limit 0", "limit all", "limit 1e300", "limit 1.5", "limit -1", "limit 10 percent",
    "limit 9223372036854775807", "offset 3", "offset 1e300", "offset 1.5 rows", "order by all",
    "order by 1", "order by 2 desc", "order by 1.5", "order by lat nulls first", "order by x",
    "order by lat with fill", "fetch first 3 rows only", "fetch first 3 rows with ties", "qualify lat > 0",
    "group by lat", "having lat > 0", "window w as (order by lat)", "using sample 5 rows", ";", "; select 1",
]), max_size=2, unique=True)


@st.composite
def odd_queries(draw: st.DrawFn) -> str:
    items = draw(st.lists(select_items, min_size=1, max_size=3)) if draw(st.integers(0, 20)) else []
    distinct = draw(st.sampled_from([""] * 12 + ["distinct ", "distinct on (lat) "]))
    sql = f"select {distinct}{', '.join(items)} from {draw(sources)}"
    if draw(st.booleans()):
        sql += f" where {draw(expressions)}"
    return " ".join([sql, *draw(tails)])


def test_an_error_raised_while_streaming_is_a_query_error(catalog) -> None:
    with pytest.raises(errors.QueryError) as info:
        run("select case when humidity then temperature else '1990-06-01' end as t from ccm3", catalog)
    assert_actionable(info.value, "")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sql=odd_queries())
# Found by this test in one fresh-clone run out of several (a rare draw, not the machine's load): the
# message quoted sqlglot's 'CAST(temperature AS INT128) & …' for the query's hugeint.
@example(sql="select cast(temperature as hugeint) & temperature from ccm3")
def test_odd_queries_answer_with_records_or_an_actionable_error(catalog, sql) -> None:
    try:
        validated = validate_query(sql, catalog)
    except errors.QueryError as exc:
        assert_actionable(exc, sql)
        return
    except errors.DatasetNotFoundError as exc:
        assert_actionable(exc, sql)
        return
    assert validated.outputs and validated.columns
    assert set(validated.columns) <= set(validated.dataset.column_names())
    try:
        table = run(sql, catalog)
    except (errors.QueryError, errors.LimitExceededError) as exc:
        assert_actionable(exc, sql)
        return
    assert table.schema.names == list(validated.output_names)
    if validated.limit is not None:
        assert table.num_rows <= validated.limit

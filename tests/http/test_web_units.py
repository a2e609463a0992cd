"""The web helpers on their own: builder SQL, snippets, search facets, result file names."""

from __future__ import annotations

import ast
import shlex

import pyarrow as pa
import pytest

from dstp.errors import QueryError, UnknownColumnError
from dstp.metadata import ColumnInfo
from dstp.http.builder import BuilderState, Condition, sql_identifier, sql_literal
from dstp.http.formats import check_gridded, result_filename
from dstp.http.search import CatalogFilter, _lon_overlap
from dstp.http.snippets import Endpoints, query_url, snippets


def _column(name: str, arrow_type: str) -> ColumnInfo:
    return ColumnInfo(name, name, ("time",), "", "", arrow_type, (), False, True, False)


@pytest.mark.parametrize(
    "name, sql", [("temperature", "temperature"), ("Temperature", '"Temperature"'), ("order", '"order"'),
                  ('we"ird', '"we""ird"'), ("2m", '"2m"')],
)
def test_identifiers_are_quoted_only_when_needed(name, sql) -> None:
    assert sql_identifier(name) == sql


def test_literals_follow_the_column_type() -> None:
    assert sql_literal(_column("t", "float"), " 273.15 ") == "273.15"
    assert sql_literal(_column("t", "int64"), "-4e2") == "-4e2"
    assert sql_literal(_column("time", "timestamp[us]"), "1990-06-01") == "'1990-06-01'"
    assert sql_literal(_column("s", "string"), "O'Brien") == "'O''Brien'"
    with pytest.raises(QueryError, match="not a number"):
        sql_literal(_column("t", "double"), "1; drop table x")


@pytest.mark.parametrize(
    "text, sql",
    [
        ("t:>:5", "t > 5"), ("t:!=:5", "t <> 5"), ("t:between:1, 2", "t between 1 and 2"),
        ("t:in:1,2,3", "t in (1, 2, 3)"), ("t:is null:", "t is null"), ("t:IS  NOT NULL", "t is not null"),
        ("time:>=:1990-01-16T12:00:00", "time >= '1990-01-16T12:00:00'"),
    ],
)
def test_conditions(text, sql) -> None:
    columns = {"t": _column("t", "float"), "time": _column("time", "timestamp[us]")}
    assert Condition.parse(text).sql(columns) == sql


@pytest.mark.parametrize("text", ["t", "t:~:5", "t:between:1", "t:>:"])
def test_bad_conditions(text) -> None:
    columns = {"t": _column("t", "float")}
    with pytest.raises(QueryError):
        Condition.parse(text).sql(columns)
    with pytest.raises(UnknownColumnError):
        Condition.parse("x:>:1").sql(columns)


def test_builder_state_parses_the_page_parameters() -> None:
    state = BuilderState.parse("ccm3", ["temperature", "time", "temperature", ""], ["humidity:>:50"], "10")
    assert state.columns == ("temperature", "time")
    assert state.limit == 10 and state.conditions[0].encode() == "humidity:>:50"
    with pytest.raises(QueryError, match="whole number"):
        BuilderState.parse("ccm3", limit="ten")


SQL = "select temperature, time from ccm3 where time >= '1990-06-01' and \"Odd\" > 1 -- $HOME `x`\nlimit 5"


def test_snippets_carry_the_sql_exactly() -> None:
    code = snippets(SQL, Endpoints("http://h:8080", "h:50051"))
    tree = ast.parse(code["python"])
    strings = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    assert SQL in strings and "h:50051" in strings
    words = shlex.split(code["curl"].replace("\\\n", " "))
    assert f"sql={SQL}" in words and "http://h:8080/query" in words and "-OJ" in words
    assert 'dstp_connect("http://h:8080")' in code["r"]
    r_literal = code["r"].split("dstp_query(con, ", 1)[1].rsplit(")", 1)[0]
    assert r_literal == '"' + SQL.replace('"', '\\"').replace("\n", "\\n") + '"'
    assert query_url("select 1 from x", "csv", limit=3) == "/query?sql=select+1+from+x&format=csv&limit=3"


def test_result_filename_is_safe() -> None:
    schema = pa.schema([("a", pa.int8())], metadata={"dstp:dataset": "../../etc/pass wd"})
    name = result_filename(schema, "select a from x", "csv")
    assert "/" not in name and " " not in name and name.endswith(".csv")
    assert result_filename(schema, "select a from x", "csv") == name
    assert result_filename(schema, "select a from y", "csv") != name


def test_check_gridded_names_the_missing_coordinates() -> None:
    meta = {"dstp:grid": "time lat"}
    time = pa.field("time", pa.timestamp("us"), metadata={"dstp:dimension": "time"})
    check_gridded(pa.schema([time, pa.field("lat", pa.float64()), pa.field("t", pa.float32())], metadata=meta))
    with pytest.raises(QueryError, match="lat"):
        check_gridded(pa.schema([time, pa.field("t", pa.float32())], metadata=meta))


@pytest.mark.parametrize(
    "dataset, box, overlaps",
    [((0, 354), (-10, 10), True), ((0, 354), (350, 359), True), ((0, 354), (355, 359), False), ((-180, 180), (190, 200), True),
     ((10, 20), (30, 40), False), ((350, 359), (-12, -5), True), ((100, 120), (-100, -50), False)],
)
def test_longitudes_overlap_on_the_circle(dataset, box, overlaps) -> None:
    assert _lon_overlap(*dataset, *box) is overlaps


@pytest.mark.parametrize("params", [{"start": "yesterday"}, {"end": "1990-1-1"}, {"bbox": "a,b,c,d"},
                                    {"bbox": "-100,0,0,10"}])
def test_catalog_filter_rejects_malformed_values(params) -> None:
    with pytest.raises(QueryError):
        CatalogFilter.parse(**params)
    assert CatalogFilter.parse(start="1990", end="1990-06-01 12:00", bbox="60, 30, -10, 10").bbox == (30, 60, -10, 10)

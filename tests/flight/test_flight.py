"""The Arrow Flight endpoint, through stock clients: pyarrow.flight, ADBC's Flight SQL driver, polars.

Every result is compared with what the gRPC client gets for the same query
(the shared query set of tests/query_cases.py), which tests/e2e checks
against the xarray/DuckDB oracle.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.flight as fl
import pytest

import dstp
from dstp.server import DstpServer
from dstp.settings import Settings
from query_cases import CASES


def _settings(root: Path, **changes: object) -> Settings:
    return Settings(catalog_root=root, port=0, http_port=-1, data_port=-1, udt_port=-1, flight_port=0,
                    batch_rows=4096).replace(**changes)


@pytest.fixture(scope="module")
def flight_server(catalog_root: Path) -> Iterator[DstpServer]:
    with DstpServer(_settings(catalog_root)) as srv:
        yield srv


@pytest.fixture(scope="module")
def flight(flight_server: DstpServer) -> Iterator[fl.FlightClient]:
    assert flight_server.endpoints is not None and flight_server.endpoints.flight
    with fl.connect(f"grpc://{flight_server.endpoints.flight}") as c:
        yield c


@pytest.fixture(scope="module")
def native(flight_server: DstpServer) -> Iterator[dstp.Client]:
    assert flight_server.endpoints is not None
    with dstp.connect(flight_server.endpoints.grpc) as c:
        yield c


def fetch(flight: fl.FlightClient, sql: str) -> pa.Table:
    info = flight.get_flight_info(fl.FlightDescriptor.for_command(sql))
    assert len(info.endpoints) == 1
    return flight.do_get(info.endpoints[0].ticket).read_all()


def test_list_flights_is_the_catalog(flight: fl.FlightClient, native: dstp.Client) -> None:
    infos = {f.descriptor.path[0].decode(): f for f in flight.list_flights()}
    summaries = {s.id: s for s in native.datasets()}
    assert set(infos) == set(summaries)
    for name, info in infos.items():
        assert info.total_records == summaries[name].default_grid_rows
        assert info.schema == native.plan(f'select * from "{name}"').schema
        assert info.endpoints == []  # the catalog issues no tickets


@pytest.mark.parametrize("sql", [c[0] for c in CASES], ids=[c[0][:60] for c in CASES])
def test_flight_results_equal_the_grpc_clients(flight: fl.FlightClient, native: dstp.Client, sql: str) -> None:
    got, want = fetch(flight, sql), native.query(sql)
    assert got.schema == want.schema
    if "(select" in sql and "order by" not in sql:  # a subquery's semi-join comes in no set order
        keys = [(name, "ascending") for name in got.column_names]
        got, want = got.sort_by(keys), want.sort_by(keys)
    assert got.equals(want)


def test_get_flight_info_is_the_plan(flight: fl.FlightClient, native: dstp.Client) -> None:
    sql = "select temperature, lev from ccm3 where lat > 80"
    info = flight.get_flight_info(fl.FlightDescriptor.for_command(sql))
    plan = native.plan(sql)
    assert info.schema == plan.schema
    # lat > 80 holds on every record of the hyperslab (docs/query-language.md): the count is known
    assert info.total_records == flight.do_get(info.endpoints[0].ticket).read_all().num_rows > 0
    data = flight.get_flight_info(fl.FlightDescriptor.for_command("select temperature from ccm3 where temperature > 250"))
    assert data.total_records == -1  # a WHERE on data decides how many
    whole = flight.get_flight_info(fl.FlightDescriptor.for_path("ocean"))
    assert whole.total_records == 186_624 and whole.total_bytes > 0
    assert flight.get_schema(fl.FlightDescriptor.for_command(sql)).schema == plan.schema
    table = flight.do_get(whole.endpoints[0].ticket).read_all()
    assert table.num_rows == 186_624


def test_tickets_are_single_use_and_errors_carry_dstp_codes(flight: fl.FlightClient) -> None:
    info = flight.get_flight_info(fl.FlightDescriptor.for_command("select gw from ccm3"))
    flight.do_get(info.endpoints[0].ticket).read_all()
    with pytest.raises(fl.FlightError, match=r"\[dstp:bad_ticket\]"):
        flight.do_get(info.endpoints[0].ticket).read_all()
    with pytest.raises(fl.FlightError, match=r"\[dstp:unknown_column\].*nosuch") as caught:
        flight.get_flight_info(fl.FlightDescriptor.for_command("select nosuch from ccm3"))
    assert "Traceback" not in str(caught.value)
    with pytest.raises(fl.FlightError, match=r"\[dstp:forbidden\]"):
        flight.get_flight_info(fl.FlightDescriptor.for_command("drop table ccm3"))
    with pytest.raises(fl.FlightError, match=r"\[dstp:dataset_not_found\]"):
        flight.get_flight_info(fl.FlightDescriptor.for_path("nosuch"))


def test_a_cut_result_ends_with_an_error(catalog_root: Path) -> None:
    with DstpServer(_settings(catalog_root, max_result_rows=5000)) as srv:
        assert srv.endpoints is not None
        with fl.connect(f"grpc://{srv.endpoints.flight}") as c:
            info = c.get_flight_info(fl.FlightDescriptor.for_command("select temperature from ccm3"))
            reader = c.do_get(info.endpoints[0].ticket)
            with pytest.raises(fl.FlightError, match=r"\[dstp:truncated\].*5,000 records"):
                reader.read_all()


def test_adbc_flight_sql_driver(flight_server: DstpServer, native: dstp.Client) -> None:
    import adbc_driver_flightsql.dbapi as dbapi
    import polars

    assert flight_server.endpoints is not None
    sql = "select time, lat, lon, salinity from ocean where lat > 60 and depth < 20"
    # dstp is read-only, with no transactions: say autocommit, or ADBC warns it cannot turn it off.
    with dbapi.connect(f"grpc://{flight_server.endpoints.flight}", autocommit=True) as conn:
        with conn.cursor() as cur:
            cur.execute(sql)
            got = cur.fetch_arrow_table()
        assert got.equals(native.query(sql))
        objects = conn.adbc_get_objects(depth="tables").read_all().to_pylist()
        tables = {t["table_name"] for c in objects for s in c["catalog_db_schemas"] for t in s["db_schema_tables"]}
        assert tables == {s.id for s in native.datasets()}
        assert conn.adbc_get_table_schema("station") == native.plan('select * from "station"').schema
        assert conn.adbc_get_info()["vendor_name"] == "dstp"
        frame = polars.read_database(sql, conn)
        assert frame.shape == (got.num_rows, 4)
        assert frame["salinity"].to_list() == got.column("salinity").to_pylist()

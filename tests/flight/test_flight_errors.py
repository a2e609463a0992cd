"""What a Flight client sees when dstp refuses a call: dstp's message and a Flight status, never Python.

pyarrow sends a Python traceback (this server's file paths, line numbers,
exception class names) to the client for any exception a Flight method
lets out that is not a Flight error, and for every error of GetSchema;
these tests ask each entry point something it must refuse, through a stock
pyarrow.flight client against a real server on a loopback port.
"""

from __future__ import annotations

import re
import traceback
from pathlib import Path
from typing import Callable, Iterator

import pyarrow as pa
import pyarrow.flight as fl
import pytest
from google.protobuf import any_pb2

from dstp import _flight_sql as sql_
from dstp.flight import META_TICKET
from dstp.server import DstpServer
from dstp.settings import Settings

#: What must never reach a client: traceback lines, source paths, Python (and pyarrow) exception class names.
LEAKS = re.compile(r"Traceback|File \"|\.pyx?\", line|\b\w*(Error|Exception|Refusal)\b(?!\w)|incident")


def _settings(root: Path) -> Settings:
    return Settings(catalog_root=root, port=0, http_port=-1, data_port=-1, udt_port=-1, flight_port=0,
                    batch_rows=4096)


@pytest.fixture(scope="module")
def flight(catalog_root: Path) -> Iterator[fl.FlightClient]:
    with DstpServer(_settings(catalog_root)) as srv:
        assert srv.endpoints is not None and srv.endpoints.flight
        with fl.connect(f"grpc://{srv.endpoints.flight}") as client:
            yield client


def client_message(error: BaseException) -> str:
    """Return what the server said: the message without the context pyarrow's client appends of its own."""
    return str(error).split(". Client context:")[0]


def assert_dstp_words(error: BaseException, code: str, *words: str) -> None:
    message = client_message(error)
    leaked = LEAKS.search(message)
    assert leaked is None, f"{leaked.group(0)!r} reached the client: {message}"
    assert message.startswith(f"[dstp:{code}] "), message
    for word in words:
        assert word in message


def _any(type_url: str, value: bytes = b"") -> bytes:
    return any_pb2.Any(type_url=type_url, value=value).SerializeToString()


def _statement_not_utf8() -> bytes:
    """A Flight SQL CommandStatementQuery whose query is not UTF-8."""
    return _any("type.googleapis.com/arrow.flight.protocol.sql.CommandStatementQuery", b"\x0a\x02\xff\xfe")


# -- GetSchema: pyarrow's callback passes no Flight error through cleanly ---------------------------------

@pytest.mark.parametrize(("descriptor", "status", "code", "words"), [
    (fl.FlightDescriptor.for_command("selec temperature from ccm3"), pa.ArrowInvalid, "syntax_error",
     ["not a keyword; did you mean SELECT?"]),
    (fl.FlightDescriptor.for_command("select nosuch from ccm3"), pa.ArrowInvalid, "unknown_column", ["nosuch"]),
    (fl.FlightDescriptor.for_path("nosuch"), pa.ArrowKeyError, "dataset_not_found", ["no dataset 'nosuch'"]),
    (fl.FlightDescriptor.for_path("ccm3", "temperature"), pa.ArrowInvalid, "invalid_query",
     ["names one dataset"]),
    (fl.FlightDescriptor.for_command(_statement_not_utf8()), pa.ArrowInvalid, "protocol_error",
     ["CommandStatementQuery is malformed"]),
], ids=["syntax", "unknown-column", "unknown-dataset", "two-part-path", "malformed-flight-sql"])
def test_get_schema_errors_are_dstps_words(flight: fl.FlightClient, descriptor: fl.FlightDescriptor,
                                           status: type[Exception], code: str, words: list[str]) -> None:
    with pytest.raises(pa.ArrowException) as caught:
        flight.get_schema(descriptor)
    assert_dstp_words(caught.value, code, *words)
    assert isinstance(caught.value, status)  # INVALID_ARGUMENT / NOT_FOUND on the wire, not UNKNOWN


def test_get_schema_leaves_other_tracebacks_alone(flight: fl.FlightClient) -> None:
    with pytest.raises(pa.ArrowException):
        flight.get_schema(fl.FlightDescriptor.for_path("nosuch"))
    try:
        raise ValueError("not a Flight error")
    except ValueError as exc:
        lines = traceback.format_exception(exc)
        assert lines == list(traceback.TracebackException.from_exception(exc).format())
    assert lines[0].startswith("Traceback") and lines[-1] == "ValueError: not a Flight error\n"


# -- uploads: dstp is read-only ------------------------------------------------------------------------

def _do_put(flight: fl.FlightClient) -> None:
    writer, _ = flight.do_put(fl.FlightDescriptor.for_path("ccm3"), pa.schema([("temperature", pa.float32())]))
    writer.close()


def _do_exchange(flight: fl.FlightClient) -> None:
    writer, reader = flight.do_exchange(fl.FlightDescriptor.for_path("ccm3"))
    writer.close()
    reader.read_all()


@pytest.mark.parametrize(("call", "method"), [(_do_put, "DoPut"), (_do_exchange, "DoExchange")],
                         ids=["DoPut", "DoExchange"])
def test_uploads_are_refused_in_words(flight: fl.FlightClient, call: Callable[[fl.FlightClient], None],
                                      method: str) -> None:
    with pytest.raises(fl.FlightServerError) as caught:
        call(flight)
    assert_dstp_words(caught.value, "method_not_allowed",
                      f"dstp does not accept uploads: {method} is not supported", "GetFlightInfo")


# -- Flight SQL: a malformed message says what is malformed ------------------------------------------

@pytest.mark.parametrize(("body", "what"), [
    (b"not a protobuf", "it is not a Flight SQL message"),
    (b"", "it is empty"),
    (sql_.pack("CommandStatementQuery", query="select gw from ccm3"), "it holds a Flight SQL CommandStatementQuery"),
], ids=["not-protobuf", "empty", "another-message"])
def test_a_malformed_create_prepared_statement_says_what_is_wrong(flight: fl.FlightClient, body: bytes,
                                                                   what: str) -> None:
    with pytest.raises(fl.FlightServerError) as caught:
        list(flight.do_action(fl.Action("CreatePreparedStatement", body)))
    assert_dstp_words(caught.value, "protocol_error", "CreatePreparedStatement is malformed", what,
                      "ActionCreatePreparedStatementRequest")
    assert "not supported" not in str(caught.value)


def test_a_well_formed_create_prepared_statement_still_prepares(flight: fl.FlightClient) -> None:
    body = sql_.pack("ActionCreatePreparedStatementRequest", query="select gw from ccm3")
    [result] = list(flight.do_action(fl.Action("CreatePreparedStatement", body)))
    found = sql_.unpack(result.body.to_pybytes())
    assert found is not None and found[0] == "ActionCreatePreparedStatementResult"
    assert found[1].prepared_statement_handle == b"select gw from ccm3"


@pytest.mark.parametrize(("command", "words"), [
    (_statement_not_utf8(), ["CommandStatementQuery is malformed"]),
    (sql_.pack("CommandPreparedStatementQuery", prepared_statement_handle=b"\xff\xfe"),
     ["prepared statement handle is not one dstp issued"]),
], ids=["statement-not-utf8", "handle-not-utf8"])
def test_a_malformed_flight_sql_command_is_the_callers_to_fix(flight: fl.FlightClient, command: bytes,
                                                             words: list[str]) -> None:
    with pytest.raises(fl.FlightServerError) as caught:  # not FlightInternalError with an incident id
        flight.get_flight_info(fl.FlightDescriptor.for_command(command))
    assert_dstp_words(caught.value, "protocol_error", *words)


def test_a_damaged_metadata_ticket_is_a_bad_ticket(flight: fl.FlightClient) -> None:
    with pytest.raises(fl.FlightUnauthorizedError) as caught:
        flight.do_get(fl.Ticket(META_TICKET + _statement_not_utf8())).read_all()
    assert_dstp_words(caught.value, "bad_ticket", "ask GetFlightInfo for a new one")


# -- every entry point; the ones that were already clean stay so -------------------------------------

def test_every_entry_point_refuses_in_dstps_words(flight: fl.FlightClient) -> None:
    refusals: list[tuple[Callable[[], object], str, str]] = [
        (lambda: flight.get_flight_info(fl.FlightDescriptor.for_command("select nosuch from ccm3")),
         "unknown_column", "nosuch"),
        (lambda: flight.get_schema(fl.FlightDescriptor.for_command("drop table ccm3")), "forbidden", "drop"),
        (lambda: _do_put(flight), "method_not_allowed", "DoPut is not supported"),
        (lambda: _do_exchange(flight), "method_not_allowed", "DoExchange is not supported"),
        (lambda: flight.do_get(fl.Ticket(b"not a ticket")).read_all(), "bad_ticket", "ticket"),
        (lambda: list(flight.do_action(fl.Action("BeginTransaction", b""))), "invalid_query",
         "'BeginTransaction' is not supported by dstp; actions are CreatePreparedStatement and "
         "ClosePreparedStatement"),
    ]
    for call, code, words in refusals:
        with pytest.raises(pa.ArrowException) as caught:
            call()
        assert_dstp_words(caught.value, code, words)
    assert [a.type for a in flight.list_actions()] == ["CreatePreparedStatement", "ClosePreparedStatement"]
    assert len(list(flight.list_flights())) > 0


def test_every_entry_point_refuses_an_unknown_token_in_dstps_words(flight: fl.FlightClient) -> None:
    bad = fl.FlightCallOptions(headers=[(b"authorization", b"Bearer dstp_nosuch_token")])
    calls: list[Callable[[], object]] = [
        lambda: list(flight.list_flights(options=bad)),
        lambda: flight.get_flight_info(fl.FlightDescriptor.for_path("ccm3"), bad),
        lambda: flight.get_schema(fl.FlightDescriptor.for_path("ccm3"), bad),
        lambda: flight.do_get(fl.Ticket(b"not a ticket"), bad).read_all(),
        lambda: list(flight.do_action(fl.Action("ClosePreparedStatement", b""), bad)),
        lambda: flight.list_actions(bad),
    ]
    for call in calls:
        # pyarrow's client raises OSError for GetSchema's UNAUTHENTICATED (apache/arrow#43556), Flight errors else
        with pytest.raises((fl.FlightUnauthenticatedError, OSError)) as caught:
            call()
        assert_dstp_words(caught.value, "unauthenticated", "token")

"""The Arrow Flight adapter: a stock ``pyarrow.flight`` or Flight SQL client queries dstp with no dstp code.

Thin like :mod:`dstp.grpc_app`: each Flight method translates to the one
service API and back.

    ListFlights                        the catalog: one FlightInfo per dataset (path descriptor [id],
                                       the schema of ``select *``, its record count), no endpoints
    GetFlightInfo(cmd = SQL)           service.queries.plan(sql): the plan's schema, sizes, and one endpoint whose
                                       ticket is the service's own ticket (channel "grpc": a gRPC stream)
    GetFlightInfo(path = [id])         the same for ``select * from id``
    GetSchema(cmd | path)              service.queries.prepare(sql).schema, no ticket issued
    DoGet(ticket)                      service.open_source(ticket): the records as they are produced
    DoAction / ListActions             Flight SQL prepared statements (the handle is the SQL text)
    DoPut, DoExchange                  refused: dstp serves published datasets read-only

A command is the SQL text, or a Flight SQL ``Any`` (:mod:`dstp._flight_sql`):
``CommandStatementQuery`` and prepared statements (whose handle is the SQL),
and the metadata commands ``CommandGetCatalogs``, ``CommandGetDbSchemas``,
``CommandGetTables``, ``CommandGetTableTypes``, ``CommandGetSqlInfo``, so
ADBC's Flight SQL driver connects. Datasets are tables of catalog ``dstp``,
schema ``main``.

A Flight ticket is the dstp ticket followed by its fetch proof (an HMAC with
the offer's key, transport/server/tickets.py): like every Flight ticket it is a
bearer capability, single-use and expiring, and when the caller
authenticated it is bound to that principal too. Identity arrives through
Flight server middleware (``authorization: Bearer <token>``), never parsed
below. Errors become Flight errors carrying the dstp code
(``[dstp:unknown_column] …``); a result cut at a server limit ends with
an error after its last batch, as the gRPC client raises TruncatedResultError.

No method lets out anything but what :func:`flight_error` gives: pyarrow
sends any other exception to the client as a Python traceback with this
server's file paths. GetSchema is the exception pyarrow makes (its callback
does not catch Flight errors, pyarrow/_flight.pyx ``_get_schema``);
:func:`_schema_refusal` works around it.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import traceback
from typing import Any, Callable, Iterator

import pyarrow as pa
import pyarrow.flight as fl

from dstp import __version__
from dstp import _flight_sql as sql_
from dstp.auth import ANONYMOUS, Principal
from dstp.auth.tls import TlsMaterial
from dstp.connections import Warden, peer_address
from dstp.errors import MethodNotAllowedError, ProtocolError, QueryError, TicketError
from dstp.incidents import for_client
from dstp.service import DstpService
from dstp.transport.server.sources import QuerySource
from dstp.transport.server.tickets import TICKET_LENGTH
from dstp.transport.wire.proofs import check_proof, fetch_proof

__all__ = ["DstpFlightServer", "flight_error", "start_flight_server"]

log = logging.getLogger("dstp.flight")

#: Tickets of metadata commands (no records to plan): the prefix, then the command's Any bytes.
META_TICKET = b"dstp-flight-sql-meta:"
AUTH_MIDDLEWARE = "dstp-auth"


def flight_error(exc: BaseException) -> Exception:
    """Return the Flight error a dstp error (or a surprise) becomes; the message starts with its code. An
    incident is logged once, with its traceback and cause, under the id the message names.

    Raise it ``from None``: pyarrow may render a raised exception's chain into the status it sends, and the
    cause is for the log (where :func:`~dstp.incidents.for_client` put it), never for the client.
    """
    exc = for_client(exc, "flight")
    message = f"[dstp:{exc.code}] {exc.message}"
    status = exc.grpc_status
    if status == "UNAUTHENTICATED":
        return fl.FlightUnauthenticatedError(message)
    if status == "PERMISSION_DENIED":
        return fl.FlightUnauthorizedError(message)
    if status in ("UNAVAILABLE", "RESOURCE_EXHAUSTED"):
        return fl.FlightUnavailableError(message)
    if status == "DEADLINE_EXCEEDED":
        return fl.FlightTimedOutError(message)
    if status == "CANCELLED":
        return fl.FlightCancelledError(message)
    if status == "INTERNAL":
        return fl.FlightInternalError(message)
    # Flight has no error class for INVALID_ARGUMENT, NOT_FOUND or UNIMPLEMENTED (pyarrow's ArrowInvalid would
    # carry the server's Python traceback to the client): the code travels in the message instead.
    return fl.FlightServerError(message)


# -- GetSchema's errors ------------------------------------------------------------------------------
#
# pyarrow's GetSchema callback (unlike every other Flight callback) does not catch Flight errors: whatever
# get_schema raises becomes a status whose detail is ``"Python exception: " + traceback.format_exception(...)``
# of it (arrow/python/common.cc, PythonErrorDetail), and that detail is sent to the client. dstp raises a
# _SchemaRefusal there instead: its message is the dstp message, its Python base picks the status pyarrow
# maps it to (ValueError: INVALID_ARGUMENT, KeyError: NOT_FOUND, NotImplementedError: UNIMPLEMENTED,
# others UNKNOWN), and traceback.format_exception renders it as its dstp code alone, so the detail reads
# "Python exception: [dstp:syntax_error]". Every other exception formats exactly as before.


class _SchemaRefusal(Exception):
    """A GetSchema error as the client sees it; ``str()`` is the dstp message."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code

    def __str__(self) -> str:  # KeyError's str() would quote the message
        return str(self.args[0])


class _InvalidSchemaRequest(_SchemaRefusal, ValueError):
    pass


class _SchemaNotFound(_SchemaRefusal, KeyError):
    pass


class _SchemaNotImplemented(_SchemaRefusal, NotImplementedError):
    pass


_SCHEMA_REFUSALS: dict[str, type[_SchemaRefusal]] = {
    "INVALID_ARGUMENT": _InvalidSchemaRequest,
    "NOT_FOUND": _SchemaNotFound,
    "UNIMPLEMENTED": _SchemaNotImplemented,
}
_format_lock = threading.Lock()


def _schema_refusal(exc: BaseException) -> _SchemaRefusal:
    """Return the exception get_schema raises for ``exc``: the dstp message, no traceback on the wire."""
    with _format_lock:
        if not getattr(traceback.format_exception, "_dstp_schema_refusal", False):
            traceback.format_exception = _refusal_format(traceback.format_exception)  # type: ignore[assignment]
    err = for_client(exc, "flight")
    return _SCHEMA_REFUSALS.get(err.grpc_status, _SchemaRefusal)(f"[dstp:{err.code}] {err.message}", err.code)


def _refusal_format(format_exception: Callable[..., list[str]]) -> Callable[..., list[str]]:
    """Return ``traceback.format_exception`` that renders a _SchemaRefusal as its code and the rest as before."""

    def formatted(exc: Any, /, *args: Any, **kwargs: Any) -> list[str]:
        value = args[0] if args else kwargs.get("value", exc)
        if isinstance(value, _SchemaRefusal):
            return [f"[dstp:{value.code}]"]
        return format_exception(exc, *args, **kwargs)

    formatted._dstp_schema_refusal = True  # type: ignore[attr-defined]
    formatted.__wrapped__ = format_exception  # type: ignore[attr-defined]
    formatted.__doc__ = format_exception.__doc__
    return formatted


#: What failed GetSchema authentications are counted under (pyarrow's middleware does not know the peer).
UNKNOWN_ADDRESS = "an unknown address (Flight GetSchema)"


class _Identity(fl.ServerMiddleware):  # type: ignore[misc]
    """A call's credential, authenticated once its handler knows the caller's address (``principal``).

    With a warden (dstp/connections.py) the call is counted on its connection from then until it completes
    (a DoGet stream included), so the per-address cap never closes a busy connection.
    """

    def __init__(self, authenticate: Callable[[str | None, str], Principal], authorization: str | None,
                 warden: Warden | None) -> None:
        self.authenticate = authenticate
        self.authorization = authorization
        self.warden = warden
        self._principal: Principal | None = None
        self._counted: Any = None

    def principal(self, peer: str) -> Principal:
        """Return the call's principal (AuthenticationError, LimitExceededError when it has none)."""
        if self.warden is not None and self._counted is None:
            self._counted = self.warden.call(peer)
            self._counted.__enter__()
        if self._principal is None:
            self._principal = self.authenticate(self.authorization, peer_address(peer))
        elif not self._principal.authenticated and not self._principal.source:
            self._principal = dataclasses.replace(self._principal, source=peer_address(peer))
        return self._principal

    def call_completed(self, exception: Any) -> None:
        if self._counted is not None:
            self._counted.__exit__(None, None, None)
            self._counted = None


class _IdentityFactory(fl.ServerMiddlewareFactory):  # type: ignore[misc]
    """Reads ``authorization`` from each call's headers; a call without one is refused here when the server
    needs a token. A credential is checked in the handler, where the caller's address is known (failed
    authentications are counted per address)."""

    def __init__(self, authenticate: Callable[[str | None, str], Principal], warden: Warden | None) -> None:
        self.authenticate = authenticate
        self.warden = warden

    def start_call(self, info: Any, headers: dict[str, list[str]]) -> _Identity:
        values = headers.get("authorization") or headers.get("Authorization") or []
        authorization = values[0] if values else None
        identity = _Identity(self.authenticate, authorization, self.warden)
        # GetSchema's handler cannot answer UNAUTHENTICATED (see _SchemaRefusal): its credential is checked here,
        # where the caller's address is not known — its failures count under one name for all addresses.
        if authorization is None or info.method == fl.FlightMethod.GET_SCHEMA:
            try:
                identity._principal = self.authenticate(authorization, "" if authorization is None else
                                                        UNKNOWN_ADDRESS)
            except Exception as exc:  # noqa: BLE001 - every failure leaves as a Flight error
                raise flight_error(exc) from None
        return identity


class DstpFlightServer(fl.FlightServerBase):  # type: ignore[misc]
    """The Flight (and Flight SQL) face of a :class:`DstpService`."""

    def __init__(self, service: DstpService, location: str, *,
                 authenticate: Callable[[str | None, str], Principal] | None = None, warden: Warden | None = None,
                 **kwargs: Any) -> None:
        middleware = {AUTH_MIDDLEWARE: _IdentityFactory(authenticate, warden)} if authenticate is not None else {}
        super().__init__(location, middleware=middleware, **kwargs)
        self.service = service

    # -- who is asking ------------------------------------------------------------------------

    def _principal(self, context: fl.ServerCallContext) -> Principal:
        identity = context.get_middleware(AUTH_MIDDLEWARE)
        return identity.principal(context.peer()) if identity is not None else ANONYMOUS

    # -- the catalog ------------------------------------------------------------------------------

    def _select_all(self, dataset_id: str) -> str:
        return f'select * from "{dataset_id}"'

    def list_flights(self, context: fl.ServerCallContext, criteria: bytes) -> Iterator[fl.FlightInfo]:
        try:
            principal = self._principal(context)  # here, not in the generator: a refusal keeps its status
        except Exception as exc:  # noqa: BLE001
            raise flight_error(exc) from None
        return self._flights(principal)

    def _flights(self, principal: Principal) -> Iterator[fl.FlightInfo]:
        try:
            for summary in self.service.datasets(principal):
                prepared = self.service.queries.prepare(self._select_all(summary.id), principal)
                yield fl.FlightInfo(prepared.schema, fl.FlightDescriptor.for_path(summary.id), [],
                                    summary.default_grid_rows, -1)
        except Exception as exc:  # noqa: BLE001 - every failure leaves as a Flight error
            raise flight_error(exc) from None

    # -- planning -------------------------------------------------------------------------------

    def _command(self, descriptor: fl.FlightDescriptor) -> tuple[str, Any]:
        """Return (kind, payload): ("sql", text) or ("meta", (name, message))."""
        if descriptor.descriptor_type == fl.DescriptorType.PATH:
            parts = [p.decode() if isinstance(p, bytes) else p for p in descriptor.path]
            if len(parts) != 1:
                raise QueryError("a path descriptor names one dataset: FlightDescriptor.for_path('ccm3')")
            return "sql", self._select_all(parts[0])
        command = descriptor.command
        found = sql_.unpack(command)
        if found is None:
            try:
                return "sql", command.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise QueryError("a command descriptor holds the query as UTF-8 text "
                                 "(or a Flight SQL CommandStatementQuery)") from exc
        name, message = found
        if name == "CommandStatementQuery":
            return "sql", message.query
        if name == "CommandPreparedStatementQuery":
            try:
                return "sql", message.prepared_statement_handle.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ProtocolError("this prepared statement handle is not one dstp issued (dstp's handle is the "
                                    "query's UTF-8 text); send the handle CreatePreparedStatement returned, "
                                    "unchanged") from exc
        if name in ("CommandGetCatalogs", "CommandGetDbSchemas", "CommandGetTables", "CommandGetTableTypes",
                    "CommandGetSqlInfo"):
            return "meta", (name, message)
        raise QueryError(f"Flight SQL {name} is not supported by dstp (read-only SQL over published datasets: "
                         "statements, prepared statements, catalogs, schemas, tables, table types, SQL info)")

    def _meta_table(self, name: str, message: Any, principal: Principal) -> pa.Table:
        if name == "CommandGetCatalogs":
            return sql_.catalogs_table()
        if name == "CommandGetDbSchemas":
            return sql_.schemas_table(message.catalog, message.db_schema_filter_pattern)
        if name == "CommandGetTableTypes":
            return sql_.table_types_table()
        if name == "CommandGetSqlInfo":
            return sql_.sql_info_table(__version__, message.info)
        datasets = [(s.id, self.service.queries.prepare(self._select_all(s.id), principal).schema)
                    for s in self.service.datasets(principal)]
        return sql_.tables_table(message, datasets)

    def get_flight_info(self, context: fl.ServerCallContext, descriptor: fl.FlightDescriptor) -> fl.FlightInfo:
        try:
            principal = self._principal(context)
            kind, payload = self._command(descriptor)
            if kind == "meta":
                name, message = payload
                table = self._meta_table(name, message, principal)
                ticket = fl.Ticket(META_TICKET + descriptor.command)
                return fl.FlightInfo(table.schema, descriptor, [fl.FlightEndpoint(ticket, [])], table.num_rows, -1)
            handle = self.service.queries.plan(payload, ["grpc"], principal=principal)
            offer = handle.offers[0]
            token = offer.ticket.token
            ticket = fl.Ticket(token + fetch_proof(offer.ticket.key, token))
            # No location: "fetch it from the server you asked" (the Flight convention), so a server
            # listening on 0.0.0.0 or behind a proxy hands out nothing unreachable.
            return fl.FlightInfo(handle.schema, descriptor, [fl.FlightEndpoint(ticket, [])],
                                 handle.estimated_rows, handle.estimated_bytes)
        except Exception as exc:  # noqa: BLE001
            raise flight_error(exc) from None

    def get_schema(self, context: fl.ServerCallContext, descriptor: fl.FlightDescriptor) -> fl.SchemaResult:
        try:
            principal = self._principal(context)
        except Exception as exc:  # noqa: BLE001 - a refused credential is a Flight error, not a schema refusal
            raise flight_error(exc) from None
        try:
            kind, payload = self._command(descriptor)
            if kind == "meta":
                name, message = payload
                return fl.SchemaResult(self._meta_table(name, message, principal).schema)
            return fl.SchemaResult(self.service.queries.prepare(payload, principal).schema)
        except Exception as exc:  # noqa: BLE001
            raise _schema_refusal(exc) from None  # not flight_error(exc): see _SchemaRefusal

    # -- data -------------------------------------------------------------------------------------

    def do_get(self, context: fl.ServerCallContext, ticket: fl.Ticket) -> fl.FlightDataStream:
        try:
            principal = self._principal(context)
            data = ticket.ticket
            if data.startswith(META_TICKET):
                damaged = TicketError("this Flight ticket is damaged; ask GetFlightInfo for a new one")
                try:
                    found = sql_.unpack(data[len(META_TICKET):])
                except ProtocolError as exc:
                    raise damaged from exc
                if found is None or found[1] is None:
                    raise damaged
                return fl.RecordBatchStream(self._meta_table(found[0], found[1], principal))
            token, proof = data[:TICKET_LENGTH], data[TICKET_LENGTH:]
            cancel = threading.Event()
            source, _ = self.service.open_source(
                token, "grpc", cancel, principal=principal,
                proof=lambda key: check_proof(fetch_proof(key, token), proof))
            if not isinstance(source, QuerySource):
                source.close()
                raise TicketError("this ticket is for a file; fetch files with `dstp get`")
            return fl.GeneratorStream(source.execution.schema, _batches(source, context, cancel))
        except Exception as exc:  # noqa: BLE001
            raise flight_error(exc) from None

    def do_put(self, context: fl.ServerCallContext, descriptor: fl.FlightDescriptor,
               reader: fl.MetadataRecordBatchReader, writer: fl.FlightMetadataWriter) -> None:
        raise flight_error(MethodNotAllowedError(
            "dstp does not accept uploads: DoPut is not supported (dstp serves published datasets read-only; "
            "Flight SQL updates and bulk ingest are refused too). Ask with GetFlightInfo and fetch with DoGet; "
            "to add data, publish its files on the server (`dstp publish`)"))

    def do_exchange(self, context: fl.ServerCallContext, descriptor: fl.FlightDescriptor,
                    reader: fl.MetadataRecordBatchReader, writer: fl.MetadataRecordBatchWriter) -> None:
        raise flight_error(MethodNotAllowedError(
            "dstp does not accept uploads: DoExchange is not supported. Ask with GetFlightInfo (the SQL text, "
            "or a dataset path) and fetch the records with DoGet"))

    # -- Flight SQL prepared statements (the handle is the SQL text) ------------------------------

    ACTIONS = (("CreatePreparedStatement", "Validate a query; the handle is its text (Flight SQL)"),
               ("ClosePreparedStatement", "Forget a prepared statement (nothing is held)"))

    def list_actions(self, context: fl.ServerCallContext) -> list[tuple[str, str]]:
        try:
            self._principal(context)  # a bad credential is refused here too
        except Exception as exc:  # noqa: BLE001
            raise flight_error(exc) from None
        return list(self.ACTIONS)

    def do_action(self, context: fl.ServerCallContext, action: fl.Action) -> Iterator[bytes]:
        try:
            self._principal(context)  # a bad credential is refused whatever the action
            if action.type == "CreatePreparedStatement":
                body = action.body.to_pybytes() if action.body is not None else b""
                query = _prepared_statement_query(body)
                schema = self.service.queries.prepare(query, self._principal(context)).schema
                yield sql_.pack("ActionCreatePreparedStatementResult", prepared_statement_handle=query.encode(),
                                dataset_schema=schema.serialize().to_pybytes())
                return
            if action.type == "ClosePreparedStatement":
                return
            names = " and ".join(name for name, _ in self.ACTIONS)
            raise QueryError(f"the Flight action {action.type!r} is not supported by dstp; actions are {names}")
        except Exception as exc:  # noqa: BLE001
            raise flight_error(exc) from None


def _prepared_statement_query(body: bytes) -> str:
    """Return the query of a CreatePreparedStatement body, or raise ProtocolError saying what is wrong with it."""
    request = "ActionCreatePreparedStatementRequest"
    found = sql_.unpack(body)
    if found is not None and found[0] == request:
        return str(found[1].query)
    if not body:
        what = "it is empty"
    elif found is None:
        what = "it is not a Flight SQL message (a protobuf Any of arrow.flight.protocol.sql)"
    else:
        what = f"it holds a Flight SQL {found[0]}"
    raise ProtocolError(f"the body of the Flight action CreatePreparedStatement is malformed: {what}. It must be "
                        f"a protobuf Any holding a Flight SQL {request} whose query is the SQL (Flight SQL clients "
                        "such as ADBC send that); or skip preparing: GetFlightInfo with the SQL text as the command")


def _batches(source: QuerySource, context: fl.ServerCallContext, cancel: threading.Event) -> Iterator[pa.RecordBatch]:
    """Yield a query's batches as produced; stop the query if the client goes; flag a cut result."""
    execution = source.execution
    try:
        for batch in execution.batches():
            if context.is_cancelled():
                cancel.set()
                execution.cancel.set()
                return
            yield batch
        summary = source.summary()
        log.info("flight query %s sent %d rows, %d bytes", source.label, summary.rows, summary.bytes)
        if summary.truncated:
            from dstp.errors import TruncatedResultError

            raise flight_error(TruncatedResultError(
                f"the result is incomplete: the server stopped it after {summary.rows:,} records "
                f"({summary.truncated_reason}); narrow the query (WHERE on coordinates, stride(), LIMIT)"))
    except fl.FlightError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise flight_error(exc) from None
    finally:
        source.close()


class FlightServer:
    """A started Flight server on its own thread; ``endpoint`` is ``host:port``, ``location`` its URI."""

    def __init__(self, server: DstpFlightServer, host: str, scheme: str = "grpc+tcp",
                 warden: Warden | None = None) -> None:
        self.server = server
        self.endpoint = f"[{host}]:{server.port}" if ":" in host else f"{host}:{server.port}"
        self.location = f"{scheme}://{self.endpoint}"
        #: Keeps the connections within their caps and idle timeout (Arrow Flight has none of its own).
        self.warden = warden
        if warden is not None:
            warden.port = server.port
            warden.start()
        self._thread = threading.Thread(target=server.serve, name=f"dstp-flight-{self.endpoint}", daemon=True)
        self._thread.start()

    def stop(self, grace: float = 2.0) -> None:
        """Stop serving and join the thread.

        pyarrow's shutdown waits for every call in flight, however long (a DoGet whose reader stopped
        reading: forever): after ``grace`` seconds the door's connections are shut down under them.
        """
        if self.warden is not None:
            self.warden.stop()
        stopping = threading.Thread(target=self.server.shutdown, name=f"dstp-flight-stop-{self.endpoint}",
                                    daemon=True)
        stopping.start()
        stopping.join(grace)
        if stopping.is_alive() and self.warden is not None:
            log.info("Flight: calls still running %g s after shutdown; closing their connections", grace)
            self.warden.shut_all()
        stopping.join(5)
        self._thread.join(5)

    def __repr__(self) -> str:
        return f"FlightServer({self.endpoint!r})"


def start_flight_server(service: DstpService, host: str, port: int, *,
                        authenticate: Callable[[str | None, str], Principal] | None = None,
                        tls: TlsMaterial | None = None, warden: Warden | None = None) -> FlightServer:
    """Return a Flight server for ``service`` listening on ``host``:``port`` (0 picks a free port).

    With ``tls`` it speaks ``grpc+tls`` with the server's certificate, like the gRPC control plane.
    """
    scheme = "grpc+tls" if tls is not None else "grpc+tcp"
    extra: dict[str, Any] = {"tls_certificates": [(tls.cert_pem, tls.key_pem)]} if tls is not None else {}
    try:
        server = DstpFlightServer(service, f"{scheme}://{host}:{port}", authenticate=authenticate, warden=warden,
                                  **extra)
    except (OSError, pa.ArrowException) as exc:
        raise OSError(f"cannot listen on {host}:{port} (the Flight endpoint; is another server using it? "
                      f"use --flight-port): {exc}") from exc
    flight = FlightServer(server, host, scheme, warden)
    log.info("dstp serving Arrow Flight on %s", flight.location)
    return flight

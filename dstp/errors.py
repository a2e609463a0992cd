"""Every error dstp can raise, in one tree.

Each class carries the gRPC status name and the HTTP status an adapter must
use, and its message is written for the scientist who sent the request: it
says what was wrong and what to do instead. Each adapter translates in one
place (``dstp.grpc_app.grpc_errors``, ``dstp.http.error_responses``); no
traceback and no exception type from a lower library (DuckDB, netCDF,
sqlglot, grpc) ever reaches a client. An unexpected failure is an incident:
logged once by the door with its cause, under an id its message names
(:mod:`dstp.incidents`); inside, every translation keeps its cause
(``raise … from exc``).

:func:`error_table` lists the classes below with their codes, statuses and
meanings (each class's first docstring line). The tree below, the error table
in ``proto/README.md`` and the R client's classes (``clients/r/R/conditions.R``)
are generated from it: ``python -m dstp._error_tables`` rewrites them, and
``tests/test_error_tables.py`` fails while one is stale.

    DstpError                           INTERNAL             500  internal
    ├── QueryError                      INVALID_ARGUMENT     400  invalid_query
    │   ├── QuerySyntaxError            INVALID_ARGUMENT     400  syntax_error
    │   ├── UnknownColumnError          INVALID_ARGUMENT     400  unknown_column
    │   ├── ForbiddenQueryError         INVALID_ARGUMENT     400  forbidden
    │   └── BadRequestError             INVALID_ARGUMENT     400  invalid_query
    ├── NotFoundError                   NOT_FOUND            404  not_found
    │   ├── DatasetNotFoundError        NOT_FOUND            404  dataset_not_found
    │   ├── FileNotPublishedError       NOT_FOUND            404  file_not_published
    │   └── RouteNotFoundError          NOT_FOUND            404  not_found
    ├── LimitExceededError              RESOURCE_EXHAUSTED   429  limit_exceeded
    │   ├── ResultTooLargeError         RESOURCE_EXHAUSTED   413  too_large
    │   └── TruncatedResultError        RESOURCE_EXHAUSTED   429  truncated
    ├── QueryTimeoutError               DEADLINE_EXCEEDED    504  timeout
    ├── CancelledError                  CANCELLED            499  cancelled
    ├── TicketError                     PERMISSION_DENIED    403  bad_ticket
    │   └── TicketExpiredError          PERMISSION_DENIED    403  ticket_expired
    ├── AuthenticationError             UNAUTHENTICATED      401  unauthenticated
    ├── TransportError                  UNAVAILABLE          503  transport_error
    │   ├── ServerUnreachableError      UNAVAILABLE          503  connection_error
    │   ├── TransportUnavailableError   FAILED_PRECONDITION  409  transport_unavailable
    │   ├── IntegrityError              DATA_LOSS            502  integrity_error
    │   └── ProtocolError               INVALID_ARGUMENT     400  protocol_error
    ├── CatalogError                    FAILED_PRECONDITION  409  catalog_error
    │   ├── DescriptorError             FAILED_PRECONDITION  409  bad_descriptor
    │   ├── DataFileError               DATA_LOSS            500  bad_data_file
    │   │   └── StoreUnavailableError   UNAVAILABLE          503  store_unavailable
    │   └── ChangesLostError            FAILED_PRECONDITION  409  changes_lost
    ├── MethodNotAllowedError           UNIMPLEMENTED        405  method_not_allowed
    └── ServerError                     INTERNAL             500  internal

    DstpTruncationWarning (UserWarning)    a truncated result the caller accepted (allow_truncated=True)
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "AuthenticationError",
    "BadRequestError",
    "CancelledError",
    "CatalogError",
    "ChangesLostError",
    "DataFileError",
    "DatasetNotFoundError",
    "DescriptorError",
    "DstpError",
    "DstpTruncationWarning",
    "ErrorRow",
    "FileNotPublishedError",
    "ForbiddenQueryError",
    "IntegrityError",
    "LimitExceededError",
    "ResultTooLargeError",
    "MethodNotAllowedError",
    "NotFoundError",
    "ProtocolError",
    "QueryError",
    "QuerySyntaxError",
    "QueryTimeoutError",
    "RouteNotFoundError",
    "ServerError",
    "StoreUnavailableError",
    "ServerUnreachableError",
    "TicketError",
    "TicketExpiredError",
    "TransportError",
    "TransportUnavailableError",
    "TruncatedResultError",
    "UnknownColumnError",
    "error_from_status",
    "error_table",
    "with_caret",
]


class DstpError(Exception):
    """Base of every dstp error; ``str(err)`` is the message a client sees."""

    grpc_status: str = "INTERNAL"
    http_status: int = 500
    #: Stable machine-readable code, also used in the HTTP JSON error body.
    code: str = "internal"
    #: The incident id of an unexpected failure (dstp/incidents.py), "" for a refusal; ``logged`` once logged.
    incident: str = ""
    logged: bool = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def to_dict(self) -> dict[str, object]:
        """Return the JSON error body shared by every adapter."""
        return {"error": {"code": self.code, "message": self.message}}


def with_caret(message: str, sql: str | None, line: int | None, column: int | None, token: str | None) -> str:
    """Return ``message`` with where it points: (line, column), then the line of ``sql`` and a caret under ``token``."""
    if line is None or column is None:
        return message
    where = f"{message} (line {line}, column {column})"
    if sql is None:
        return where
    lines = sql.splitlines() or [sql]
    if not 1 <= line <= len(lines):
        return where
    text = lines[line - 1]
    width = max(1, len(token or "")) if token else 1
    start = max(0, column - width)
    width = min(width, 40)
    # A long line is shown as a window around the caret: messages travel in gRPC headers (16 KiB).
    if len(text) > 120:
        left = max(0, start - 50)
        right = min(len(text), start + width + 50)
        text = ("…" if left else "") + text[left:right] + ("…" if right < len(text) else "")
        start -= left - (1 if left else 0)
    caret = " " * start + "^" * width
    return f"{where}\n  {text}\n  {caret}"


class QueryError(DstpError):
    """The query is not one dstp can run (types, limits, a bad literal); ``line``/``column`` point at the token."""

    grpc_status = "INVALID_ARGUMENT"
    http_status = 400
    code = "invalid_query"
    sql: str | None = None
    line: int | None = None
    column: int | None = None
    token: str | None = None

    def __init__(
        self,
        message: str,
        *,
        sql: str | None = None,
        line: int | None = None,
        column: int | None = None,
        token: str | None = None,
    ) -> None:
        self.sql = sql
        self.line = line
        self.column = column
        self.token = token
        super().__init__(self._with_position(message))

    def _with_position(self, message: str) -> str:
        return with_caret(message, self.sql, self.line, self.column, self.token)

    def to_dict(self) -> dict[str, object]:
        body = super().to_dict()
        err = body["error"]
        assert isinstance(err, dict)
        if self.line is not None:
            err["line"] = self.line
            err["column"] = self.column
        if self.token:
            err["token"] = self.token
        return body


class QuerySyntaxError(QueryError):
    """The text is not SQL dstp can parse."""

    code = "syntax_error"


class UnknownColumnError(QueryError):
    """The query names a column the dataset does not have."""

    code = "unknown_column"


class ForbiddenQueryError(QueryError):
    """The query tries something dstp never runs: DDL/DML, COPY, ATTACH, PRAGMA,
    file or environment functions, joins, subqueries, aggregates."""

    code = "forbidden"


class BadRequestError(QueryError):
    """HTTP: a request parameter is malformed or missing (``format=xls``, ``limit=-1``, no ``sql``)."""


class NotFoundError(DstpError):
    """Something the request names does not exist."""

    grpc_status = "NOT_FOUND"
    http_status = 404
    code = "not_found"


class DatasetNotFoundError(NotFoundError):
    """No dataset with that id is published."""

    code = "dataset_not_found"
    line: int | None = None
    column: int | None = None

    def __init__(self, message: str, *, sql: str | None = None, line: int | None = None, column: int | None = None,
                 token: str | None = None) -> None:
        """``sql``, ``line``, ``column``, ``token``: where a query names it (a caret under the name, as QueryError)."""
        self.line, self.column = line, column
        super().__init__(with_caret(message, sql, line, column, token))

    def to_dict(self) -> dict[str, object]:
        body = super().to_dict()
        if self.line is not None:
            err = body["error"]
            assert isinstance(err, dict)
            err["line"], err["column"] = self.line, self.column
        return body


class FileNotPublishedError(NotFoundError):
    """Bulk access to a file that is not part of any published dataset."""

    code = "file_not_published"


class RouteNotFoundError(NotFoundError):
    """HTTP: no page or endpoint at that path."""


class LimitExceededError(DstpError):
    """A server limit was reached: too many concurrent queries, or a query needs more memory than allowed."""

    grpc_status = "RESOURCE_EXHAUSTED"
    http_status = 429
    code = "limit_exceeded"
    #: Seconds after which trying again may succeed (sent as gRPC metadata ``retry-after`` and the HTTP
    #: ``Retry-After`` header); None when waiting will not help.
    retry_after_s: float | None = None

    def __init__(self, message: str, *, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class ResultTooLargeError(LimitExceededError):
    """The answer asked for is larger than this door sends in one piece (its size, known before it is read, is
    in the message): ask for a smaller one. Waiting does not help."""

    http_status = 413
    code = "too_large"


class TruncatedResultError(LimitExceededError):
    """The server cut the result at ``max_result_rows``/``max_result_bytes`` (raised client-side).

    Raised by clients once the cut-off result has arrived, unless the caller
    accepted it (``allow_truncated=True``; then :class:`DstpTruncationWarning`);
    ``summary`` says where. The server never sends this code: its stream ends
    normally with ``FetchSummary.truncated`` set.
    """

    code = "truncated"
    #: The fetch summary (rows, bytes, truncated_reason, ...) when the client has one.
    summary: dict[str, object] | None = None


class DstpTruncationWarning(UserWarning):
    """A result cut at a server limit was accepted (``allow_truncated=True``) and is incomplete."""


class QueryTimeoutError(DstpError):
    """The query outlived ``query_time_limit_s``."""

    grpc_status = "DEADLINE_EXCEEDED"
    http_status = 504
    code = "timeout"


class CancelledError(DstpError):
    """The query was cancelled (client gone, server stopping)."""

    grpc_status = "CANCELLED"
    http_status = 499
    code = "cancelled"


class TicketError(DstpError):
    """The ticket is unknown, already used, or belongs to another query or channel."""

    grpc_status = "PERMISSION_DENIED"
    http_status = 403
    code = "bad_ticket"


class TicketExpiredError(TicketError):
    """The ticket is past its expiry (``ticket_ttl_s``)."""

    code = "ticket_expired"


class AuthenticationError(DstpError):
    """The request carries no credential the server accepts: no token where one is needed, or an unknown,
    revoked or expired one. The message says how to pass one (``token=…``, ``DSTP_TOKEN``, ``--token``)."""

    grpc_status = "UNAUTHENTICATED"
    http_status = 401
    code = "unauthenticated"


class TransportError(DstpError):
    """The server cannot be reached, or a data connection broke (connection lost, peer gone)."""

    grpc_status = "UNAVAILABLE"
    http_status = 503
    code = "transport_error"


class ServerUnreachableError(TransportError):
    """No dstp server answers at the address (nothing listens there, the name does not resolve, TLS mismatch)."""

    code = "connection_error"


class TransportUnavailableError(TransportError):
    """No requested data channel (or compression, congestion control) is available; never downgraded silently."""

    grpc_status = "FAILED_PRECONDITION"
    http_status = 409
    code = "transport_unavailable"


class IntegrityError(TransportError):
    """Data arrived corrupted, out of order, or incomplete (client side)."""

    grpc_status = "DATA_LOSS"
    http_status = 502
    code = "integrity_error"


class ProtocolError(TransportError):
    """The peer broke the wire protocol (bad magic, version, frame)."""

    grpc_status = "INVALID_ARGUMENT"
    http_status = 400
    code = "protocol_error"


class CatalogError(DstpError):
    """The catalog cannot serve the request: a descriptor or a data file is unusable."""

    grpc_status = "FAILED_PRECONDITION"
    http_status = 409
    code = "catalog_error"


class DescriptorError(CatalogError):
    """A dataset descriptor is malformed; ``path``/``line`` say where."""

    code = "bad_descriptor"
    path: str | None = None
    line: int | None = None

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None) -> None:
        self.path = path
        self.line = line
        where = path or "<descriptor>"
        if line is not None:
            where = f"{where}:{line}"
        super().__init__(f"{where}: {message}")


class DataFileError(CatalogError):
    """A data file of a published dataset cannot be read."""

    grpc_status = "DATA_LOSS"
    http_status = 500
    code = "bad_data_file"


class StoreUnavailableError(DataFileError):
    """An object store a dataset's files live in cannot be reached or refused access; other datasets are served."""

    grpc_status = "UNAVAILABLE"
    http_status = 503
    code = "store_unavailable"


class ChangesLostError(CatalogError):
    """A change feed cannot be followed on from where a reader left it: the server's index was rebuilt since (another
    epoch), or the changes after that point are older than those it keeps. List the catalog again, then follow on."""

    code = "changes_lost"


class MethodNotAllowedError(DstpError):
    """The endpoint does not take that method: HTTP (``PUT /query``), Flight (DoPut, DoExchange)."""

    grpc_status = "UNIMPLEMENTED"
    http_status = 405
    code = "method_not_allowed"


class ServerError(DstpError):
    """An unexpected server fault (a bug, a failing disk): the message names an incident id the server log has."""

    code = "internal"


@dataclass(frozen=True, slots=True)
class ErrorRow:
    """One class of the error tree as clients and the docs see it."""

    error: type[DstpError]
    parent: type[DstpError] | None  # None for DstpError, the root
    depth: int
    code: str
    grpc_status: str
    http_status: int
    #: The first paragraph of the class's docstring, on one line.
    meaning: str

    @property
    def name(self) -> str:
        return self.error.__name__


def error_table() -> list[ErrorRow]:
    """Return every class of the tree, root first, depth first in definition order."""
    rows: list[ErrorRow] = []

    def walk(cls: type[DstpError], parent: type[DstpError] | None, depth: int) -> None:
        paragraph = (cls.__dict__.get("__doc__") or "").strip().split("\n\n")[0]
        rows.append(ErrorRow(cls, parent, depth, cls.code, cls.grpc_status, cls.http_status,
                             " ".join(paragraph.split())))
        for sub in cls.__subclasses__():
            if sub.__module__ == __name__:  # the tree is this module's, whatever else subclasses it
                walk(sub, cls, depth + 1)

    walk(DstpError, None, 0)
    return rows


_BY_STATUS: dict[str, type[DstpError]] = {
    "INVALID_ARGUMENT": QueryError,
    "NOT_FOUND": NotFoundError,
    "RESOURCE_EXHAUSTED": LimitExceededError,
    "DEADLINE_EXCEEDED": QueryTimeoutError,
    "CANCELLED": CancelledError,
    "PERMISSION_DENIED": TicketError,
    "UNAUTHENTICATED": AuthenticationError,
    "UNAVAILABLE": TransportError,
    "FAILED_PRECONDITION": CatalogError,
    "DATA_LOSS": IntegrityError,
}

_BY_CODE: dict[str, type[DstpError]] = {}


def _index_codes(cls: type[DstpError]) -> None:
    _BY_CODE.setdefault(cls.code, cls)
    for sub in cls.__subclasses__():
        _index_codes(sub)


_index_codes(DstpError)
_BY_CODE["internal"] = ServerError  # the root shares the code; a client raises the concrete class


def error_from_status(status: str, message: str, code: str | None = None) -> DstpError:
    """Return the typed error a client raises for a server status (and code, if sent)."""
    cls = _BY_CODE.get(code or "") or _BY_STATUS.get(status, ServerError)
    err = cls.__new__(cls)
    DstpError.__init__(err, message)
    return err

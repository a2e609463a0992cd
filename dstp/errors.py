"""Every error dstp can raise, in one tree.

Each class carries the gRPC status name and the HTTP status an adapter must
use, and its message is written for the scientist who sent the request: it
says what was wrong and what to do instead. Adapters translate with
:func:`dstp.errors.public_message`; no traceback and no exception type from a
lower library (DuckDB, netCDF, sqlglot, grpc) ever reaches a client.

    DstpError                              INTERNAL            500
    ├── QueryError                         INVALID_ARGUMENT    400
    │   ├── QuerySyntaxError                 (cannot be parsed; has line/column)
    │   ├── UnknownColumnError               (not an attribute of the dataset)
    │   └── ForbiddenQueryError              (DDL/DML, file or environment access)
    ├── NotFoundError                      NOT_FOUND           404
    │   ├── DatasetNotFoundError
    │   └── FileNotPublishedError            (bulk access to a file outside a dataset)
    ├── LimitExceededError                 RESOURCE_EXHAUSTED  429
    │   └── TruncatedResultError             (the result was cut at max_result_rows/bytes)
    ├── QueryTimeoutError                  DEADLINE_EXCEEDED   504
    ├── CancelledError                     CANCELLED           499
    ├── TicketError                        PERMISSION_DENIED   403
    │   └── TicketExpiredError
    ├── TransportError                     UNAVAILABLE         503
    │   ├── TransportUnavailableError      FAILED_PRECONDITION 409
    │   ├── IntegrityError                 DATA_LOSS           502
    │   └── ProtocolError                  INVALID_ARGUMENT    400
    ├── CatalogError                       FAILED_PRECONDITION 409
    │   ├── DescriptorError                  (file, line, problem)
    │   └── DataFileError                  DATA_LOSS           500
    └── ServerError                        INTERNAL            500

    DstpTruncationWarning (UserWarning)    a truncated result the caller accepted (allow_truncated=True)
"""

from __future__ import annotations

__all__ = [
    "CancelledError",
    "CatalogError",
    "DataFileError",
    "DatasetNotFoundError",
    "DescriptorError",
    "DstpError",
    "DstpTruncationWarning",
    "FileNotPublishedError",
    "ForbiddenQueryError",
    "IntegrityError",
    "LimitExceededError",
    "NotFoundError",
    "ProtocolError",
    "QueryError",
    "QuerySyntaxError",
    "QueryTimeoutError",
    "ServerError",
    "TicketError",
    "TicketExpiredError",
    "TransportError",
    "TransportUnavailableError",
    "TruncatedResultError",
    "UnknownColumnError",
    "error_from_status",
]


class DstpError(Exception):
    """Base of every dstp error; ``str(err)`` is the message a client sees."""

    grpc_status: str = "INTERNAL"
    http_status: int = 500
    #: Stable machine-readable code, also used in the HTTP JSON error body.
    code: str = "internal"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def to_dict(self) -> dict[str, object]:
        """Return the JSON error body shared by every adapter."""
        return {"error": {"code": self.code, "message": self.message}}


class QueryError(DstpError):
    """The query is not one dstp can run; ``line``/``column`` point at the token."""

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
        if self.line is None or self.column is None:
            return message
        where = f"{message} (line {self.line}, column {self.column})"
        if self.sql is None:
            return where
        lines = self.sql.splitlines() or [self.sql]
        if not 1 <= self.line <= len(lines):
            return where
        text = lines[self.line - 1]
        width = max(1, len(self.token or "")) if self.token else 1
        start = max(0, self.column - width)
        width = min(width, 40)
        # A long line is shown as a window around the caret: messages travel in gRPC headers (16 KiB).
        if len(text) > 120:
            left = max(0, start - 50)
            right = min(len(text), start + width + 50)
            text = ("…" if left else "") + text[left:right] + ("…" if right < len(text) else "")
            start -= left - (1 if left else 0)
        caret = " " * start + "^" * width
        return f"{where}\n  {text}\n  {caret}"

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
    """The text is not valid SQL."""

    code = "syntax_error"


class UnknownColumnError(QueryError):
    """The query names a column the dataset does not have."""

    code = "unknown_column"


class ForbiddenQueryError(QueryError):
    """The query tries something dstp never runs (writes, files, settings)."""

    code = "forbidden"


class NotFoundError(DstpError):
    grpc_status = "NOT_FOUND"
    http_status = 404
    code = "not_found"


class DatasetNotFoundError(NotFoundError):
    """No dataset with that id is published."""

    code = "dataset_not_found"


class FileNotPublishedError(NotFoundError):
    """The file is not part of any published dataset."""

    code = "file_not_published"


class LimitExceededError(DstpError):
    """A server limit (concurrent queries, result size) was reached."""

    grpc_status = "RESOURCE_EXHAUSTED"
    http_status = 429
    code = "limit_exceeded"


class TruncatedResultError(LimitExceededError):
    """The server cut the result at ``max_result_rows``/``max_result_bytes``; ``summary`` says where.

    Raised by clients once the cut-off result has arrived, unless the caller
    accepted it (``allow_truncated=True``; then :class:`DstpTruncationWarning`).
    """

    code = "truncated"
    #: The fetch summary (rows, bytes, truncated_reason, ...) when the client has one.
    summary: dict[str, object] | None = None


class DstpTruncationWarning(UserWarning):
    """A result cut at a server limit was accepted (``allow_truncated=True``) and is incomplete."""


class QueryTimeoutError(DstpError):
    grpc_status = "DEADLINE_EXCEEDED"
    http_status = 504
    code = "timeout"


class CancelledError(DstpError):
    grpc_status = "CANCELLED"
    http_status = 499
    code = "cancelled"


class TicketError(DstpError):
    """The ticket is unknown, already used, or belongs to another query."""

    grpc_status = "PERMISSION_DENIED"
    http_status = 403
    code = "bad_ticket"


class TicketExpiredError(TicketError):
    code = "ticket_expired"


class TransportError(DstpError):
    """The data channel failed (connection lost, peer gone)."""

    grpc_status = "UNAVAILABLE"
    http_status = 503
    code = "transport_error"


class TransportUnavailableError(TransportError):
    """The data channel asked for is not offered by this server or client."""

    grpc_status = "FAILED_PRECONDITION"
    http_status = 409
    code = "transport_unavailable"


class IntegrityError(TransportError):
    """Data arrived corrupted, out of order, or incomplete."""

    grpc_status = "DATA_LOSS"
    http_status = 502
    code = "integrity_error"


class ProtocolError(TransportError):
    """The peer broke the wire protocol (bad magic, version, frame)."""

    grpc_status = "INVALID_ARGUMENT"
    http_status = 400
    code = "protocol_error"


class CatalogError(DstpError):
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


class ServerError(DstpError):
    """An unexpected server fault; the message carries an incident id for the logs."""

    code = "internal"


_BY_STATUS: dict[str, type[DstpError]] = {
    "INVALID_ARGUMENT": QueryError,
    "NOT_FOUND": NotFoundError,
    "RESOURCE_EXHAUSTED": LimitExceededError,
    "DEADLINE_EXCEEDED": QueryTimeoutError,
    "CANCELLED": CancelledError,
    "PERMISSION_DENIED": TicketError,
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


def error_from_status(status: str, message: str, code: str | None = None) -> DstpError:
    """Return the typed error a client raises for a server status (and code, if sent)."""
    cls = _BY_CODE.get(code or "") or _BY_STATUS.get(status, ServerError)
    err = cls.__new__(cls)
    DstpError.__init__(err, message)
    return err

#' dstp: a client for dstp data access servers
#'
#' Discover the datasets a dstp server publishes and run its SQL-like
#' queries over gridded netCDF data; records come back as data.frames with
#' the types the server states.
#'
#' * [dstp_connect()]: connect to a server's HTTP API;
#' * [dstp_datasets()], [dstp_describe()]: the catalog and one dataset;
#' * [dstp_query()]: a query's records as a data.frame;
#' * [dstp_download()]: a query's result streamed to a file (CSV, Parquet,
#'   Arrow, netCDF, JSON);
#' * [dstp_python_available()]: whether the striped/UDT/gRPC transports of
#'   the Python client can be used.
#'
#' Errors are conditions of class `dstp_error`; see [dstp_error].
#'
#' Options: `dstp.python` (a Python interpreter for the Python transports,
#' or `FALSE` to never use Python), `dstp.arrow_package` (`FALSE` to decode
#' Arrow with the built-in reader even when the arrow package is installed).
#' @keywords internal
"_PACKAGE"

#' Errors raised by dstp
#'
#' Every failure of this package's functions is a condition of class
#' `dstp_error` (and `error`, `condition`) with a subclass named after the
#' server's error code, following the server's error tree:
#'
#' * `dstp_query_error` (HTTP 400, `invalid_query`), with subclasses
#'   `dstp_syntax_error`, `dstp_unknown_column`, `dstp_forbidden` (hostile
#'   SQL: DDL/DML, file or environment access);
#' * `dstp_not_found` (404), subclass `dstp_dataset_not_found`;
#' * `dstp_limit_exceeded` (429), subclass `dstp_truncated` (a result the
#'   server cut at its `max_result_rows`/`max_result_bytes`; a warning of that class
#'   when accepted with `allow_truncated = TRUE`); `dstp_timeout` (504), `dstp_cancelled`;
#' * `dstp_transport_error` (503), subclasses `dstp_connection_error` (the
#'   server cannot be reached: the message names the URL),
#'   `dstp_transport_unavailable` (a transport this server or this R session
#'   cannot use), `dstp_integrity_error` (a result that arrived incomplete),
#'   `dstp_protocol_error`;
#' * `dstp_catalog_error`, subclass `dstp_bad_data_file` (a published file
#'   cannot be read);
#' * `dstp_server_error` (500, `internal`: the message has an incident id
#'   for the server log).
#'
#' Fields: `message` (the server's message, with a caret under the offending
#' token for query errors), `code` (the server's code, e.g.
#' `"unknown_column"`), `status` (the HTTP status, `NULL` if none), `line`,
#' `column`, `token` (for query errors that point at a token) and `url`.
#' `conditionMessage()` prefixes the message with the code and status.
#'
#' @name dstp_error
#' @examples
#' \dontrun{
#' tryCatch(
#'   dstp_query(con, "select nope from ccm3"),
#'   dstp_unknown_column = function(e) message("no such column at column ", e$column),
#'   dstp_error = function(e) stop(e)
#' )
#' }
NULL

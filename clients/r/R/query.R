# Queries: GET /query streamed to a temporary file, then decoded with the types of the server's Arrow schema.

#' Run a query and return its records as a data.frame
#'
#' Sends one dstp query (see the query language in the server's
#' `docs/query-language.md`) and returns every matching record. Column
#' types come from the result's Arrow schema as the server states it, never
#' from guessing at text:
#'
#' | Arrow type | R column |
#' |---|---|
#' | `float`, `double` | `numeric` (float32 values widened exactly to double) |
#' | `int8`, `int16`, `int32`, `uint8`, `uint16` | `integer` |
#' | `int64`, `uint32`, `uint64`, `decimal` | `numeric` (integers exact up to 2^53) |
#' | `bool` | `logical` |
#' | `timestamp` (standard, gregorian, proleptic_gregorian, noleap, 365_day calendars) | `POSIXct` in UTC, to the microsecond |
#' | `string`: times on 360_day, all_leap, 366_day, julian calendars | `character`, ISO 8601 `"2000-02-30T00:00:00"` |
#' | `date32` | `Date` |
#'
#' Missing values (netCDF fill values, `missing_value`, NaN in the files,
#' SQL NULL) are `NA`. Times on non-standard calendars stay text because
#' they name dates POSIXct cannot hold (2000-02-30); their calendar is in
#' `dstp_schema(df)$calendar`. Text times sort and compare correctly as text.
#'
#' @section Transports and formats:
#' `transport = "auto"` (the default) goes through the dstp Python client's
#' `"auto"` when that client can be used (see below) and no `format` is
#' named, else over HTTP: the
#' Python client takes its gRPC stream for a result under 32 MiB and
#' otherwise the data channel it measured fastest, with compression chosen
#' for the path, and asks a server on this host no probe. The transport
#' used is `dstp_info$transport`. `transport = "http"` reads `GET /query` of
#' the server's HTTP API, in the wire `format`:
#' * `"arrow"` (what `"auto"` picks): the Arrow IPC stream, decoded by the
#'   arrow package when it is installed, else by this package's own reader
#'   (base R). The fastest: fewest bytes and no text to parse
#'   (see `docs/r-client.md` for measurements).
#' * `"csv"`: streamed CSV read by `data.table::fread()` with `colClasses`
#'   taken from the result's Arrow schema (asked for first with
#'   `format=arrow&limit=0`, which returns only the schema).
#' * `"json"`: the JSON array read by jsonlite (slowest; kept for proxies
#'   that allow nothing else). JSON cannot tell NaN or infinities from NULL.
#'
#' The other transports go through the dstp Python client (reticulate and a
#' Python with `dstp` installed; see [dstp_python_available()]): `"grpc"`
#' (the control connection's stream), `"striped"` (parallel TCP streams;
#' `streams = 0` lets the client's auto-tuner choose), `"udt"`, and `"auto"`
#' (the Python client picks gRPC or striped from the result's size; without
#' the Python client `"auto"` falls back to `"http"`). The Python client is
#' kept per server for the R session, so what it measured about the path
#' carries over from one query to the next. An explicitly named
#' transport that cannot be used raises a `dstp_transport_unavailable`
#' condition saying why.
#'
#' @section Errors:
#' Every failure is a condition of class `dstp_error` (and `error`), with a
#' subclass from the server's error code: `dstp_syntax_error`,
#' `dstp_unknown_column` and `dstp_forbidden` (all also `dstp_query_error`),
#' `dstp_dataset_not_found` (`dstp_not_found`), `dstp_limit_exceeded`,
#' `dstp_timeout`, `dstp_bad_data_file`, `dstp_server_error`,
#' `dstp_connection_error`, `dstp_integrity_error` and
#' `dstp_transport_unavailable` (all also `dstp_transport_error`). The
#' condition carries the server's `message`, `code`, `status` and, for query
#' errors that point at a token, `line`, `column` and `token`. A result that
#' fails after it started streaming (the CSV `# dstp-error:` trailer, an
#' Arrow stream without its end marker, a connection that broke off) always
#' raises: a partial result is never returned. See [dstp_error].
#'
#' @section Truncated results:
#' A result the server cut at its `max_result_rows` or `max_result_bytes`
#' raises a `dstp_truncated` error (also `dstp_limit_exceeded`) whose
#' message names the limit. With `allow_truncated = TRUE` the records that
#' arrived are returned with a warning of class `dstp_truncated` (and
#' `dstp_warning`), and `dstp_info` has `truncated`, the server's reason.
#' A `limit` smaller than the server's caps is not truncation.
#'
#' @param con A connection from [dstp_connect()].
#' @param sql The query, e.g. `"select temperature, time from ccm3 where humidity > 50"`.
#' @param transport `"auto"` (default), `"http"`, `"grpc"`, `"striped"` or `"udt"` (see below).
#' @param format Wire format for `transport = "http"`: `"auto"` (= `"arrow"`),
#'   `"arrow"`, `"csv"` or `"json"`.
#' @param limit Keep at most this many records; the server stops the query
#'   once they are sent (previews). `NULL` (default): all.
#' @param streams Parallel streams for `transport = "striped"` (0: auto-tuned).
#' @param allow_truncated Return a result the server cut at a limit (with a
#'   `dstp_truncated` warning) instead of raising a `dstp_truncated` error.
#' @return A data.frame, one row per record, columns as in the query's
#'   select list. Attributes: `dstp_schema` (see [dstp_schema()]) and
#'   `dstp_info` (a list: `sql`, `transport`, `format`, `query_id`, `rows`,
#'   `seconds`, and `truncated` for an accepted truncated result).
#' @seealso [dstp_download()] to save a result to a file without reading it
#'   into memory; [dstp_describe()] for the columns a dataset has.
#' @examples
#' \dontrun{
#' con <- dstp_connect("http://127.0.0.1:8080")
#' df <- dstp_query(con, "select temperature, time from ccm3 where humidity > 50")
#' str(df)                       # temperature: num, time: POSIXct (UTC)
#' dstp_schema(df)               # units and calendars
#' oc <- dstp_query(con, "select time, salinity from ocean where lat > 60 limit 10")
#' oc$time                       # 360_day calendar: ISO text
#' tryCatch(dstp_query(con, "select nope from ccm3"),
#'          dstp_unknown_column = function(e) c(e$line, e$column))
#' big <- dstp_query(con, "select * from ccm3", transport = "striped")
#' }
#' @export
dstp_query <- function(con, sql, transport = c("auto", "http", "grpc", "striped", "udt"),
                       format = c("auto", "arrow", "csv", "json"), limit = NULL, streams = 0L,
                       allow_truncated = FALSE) {
  check_connection(con)
  if (!isTRUE(allow_truncated) && !isFALSE(allow_truncated)) stop("`allow_truncated` must be TRUE or FALSE", call. = FALSE)
  transport <- match.arg(transport)
  format <- match.arg(format)
  if (!is.character(sql) || length(sql) != 1L || is.na(sql)) stop("`sql` must be one string", call. = FALSE)
  if (!is.null(limit)) {
    if (!is.numeric(limit) || length(limit) != 1L || is.na(limit) || limit < 0) {
      stop("`limit` must be NULL or a number >= 0", call. = FALSE)
    }
    limit <- format(as.integer(limit), scientific = FALSE)
  }
  started <- Sys.time()
  if (transport == "auto") transport <- auto_transport(con, format)
  if (transport == "http") {
    if (format == "auto") format <- "arrow"
    res <- switch(format,
      arrow = http_arrow(con, sql, limit, allow_truncated),
      csv = http_csv(con, sql, limit, allow_truncated = allow_truncated),
      json = http_json_result(con, sql, limit, allow_truncated)
    )
  } else {
    res <- python_query(con, sql, transport, streams = streams, limit = if (!is.null(limit)) as.integer(limit))
    format <- "arrow"
  }
  info <- c(list(sql = sql, transport = res$info$transport %||% transport, format = format),
            res$info[setdiff(names(res$info), "transport")])
  info$seconds <- as.numeric(difftime(Sys.time(), started, units = "secs"))
  if (!is.null(res$truncated)) info$truncated <- signal_truncation(res$truncated, allow_truncated, res$url)
  result_df(res$columns, res$schema, info)
}

# What `transport = "auto"` runs: the Python client's own "auto" when it can be used and the server says
# where its gRPC port is; HTTP when a wire `format` was named (only HTTP has formats), or without either.
auto_transport <- function(con, format) {
  if (format != "auto" || !isTRUE(dstp_python_available())) return("http")
  known <- tryCatch(nzchar(grpc_target(con)), dstp_error = function(e) FALSE)
  if (isTRUE(known)) "auto" else "http"
}

#' The schema of a query result
#'
#' The columns of a [dstp_query()] result as the server described them:
#' Arrow type, nullability and the field metadata dstp sends (units,
#' calendar, standard and long names, the grid dimensions of the attribute).
#'
#' @param x A data.frame returned by [dstp_query()].
#' @return A data.frame with one row per column: `name`, `type` (the Arrow
#'   type, e.g. `"float"`, `"timestamp[us]"`, `"string"`), `r_class`,
#'   `nullable`, `units`, `calendar`, `standard_name`, `long_name`,
#'   `dimensions`; `NULL` if `x` carries no schema (selecting columns with `[` drops it).
#' @examples
#' \dontrun{
#' df <- dstp_query(con, "select temperature, time from ccm3 limit 3")
#' dstp_schema(df)[, c("name", "type", "units", "calendar")]
#' }
#' @export
dstp_schema <- function(x) attr(x, "dstp_schema", exact = TRUE)

# -- types ------------------------------------------------------------------------

# The R class a field becomes (also fread's colClasses).
r_class <- function(field) {
  switch(field$kind,
    floatingpoint = "numeric",
    int = if (field$bits < 32L || field$bits == 32L && field$signed) "integer" else "numeric",
    bool = "logical",
    timestamp = "POSIXct",
    date = "Date",
    decimal = "numeric",
    null = "logical",
    "character"
  )
}

schema_df <- function(schema) {
  meta <- function(f, key) chr(f$metadata[[key]] %||% "")
  fields <- schema$fields
  data.frame(
    name = vapply(fields, function(f) f$name, ""),
    type = vapply(fields, function(f) f$type, ""),
    r_class = vapply(fields, r_class, ""),
    nullable = vapply(fields, function(f) isTRUE(f$nullable), NA),
    units = vapply(fields, meta, "", "units"),
    calendar = vapply(fields, meta, "", "calendar"),
    standard_name = vapply(fields, meta, "", "standard_name"),
    long_name = vapply(fields, meta, "", "long_name"),
    dimensions = vapply(fields, function(f) meta(f, "dstp:dimensions") %|e|% meta(f, "dstp:dimension"), ""),
    stringsAsFactors = FALSE
  )
}

`%|e|%` <- function(a, b) if (nzchar(a)) a else b

result_df <- function(columns, schema, info) {
  n <- if (length(columns)) length(columns[[1L]]) else 0L
  names(columns) <- vapply(schema$fields, function(f) f$name, "")
  df <- structure(columns, class = "data.frame", row.names = if (n > 0) c(NA_integer_, -as.integer(n)) else integer())
  attr(df, "dstp_schema") <- schema_df(schema)
  info$rows <- n
  attr(df, "dstp_info") <- info
  df
}

# Round doubles parsed from text to the float32 the server holds (then widen exactly), keeping NA apart from NaN.
as_float32 <- function(x) {
  if (!length(x)) return(as.double(x))
  na <- is.na(x) & !is.nan(x)
  y <- readBin(writeBin(as.double(x), raw(), size = 4L), "double", n = length(x), size = 4L)
  y[na] <- NA_real_
  y
}

# Apply the schema's types to columns read from text (CSV via fread, JSON via jsonlite). fread
# already parses with colClasses; text reaches the conversions below only when it could not (or
# from JSON), and a value that does not convert is an error, never a silent NA.
typed_column <- function(x, field) {
  cls <- r_class(field)
  from_text <- is.character(x) && cls != "character"
  parse_time <- function(x) {
    text <- sub("Z$", "", sub("T", " ", as.character(x), fixed = TRUE))
    .POSIXct(as.numeric(as.POSIXct(text, tz = "UTC", format = "%Y-%m-%d %H:%M:%OS")), tz = "UTC")
  }
  out <- suppressWarnings(switch(cls,
    numeric = as.numeric(x),
    integer = as.integer(x),
    logical = if (from_text) as.logical(tolower(x)) else as.logical(x),
    POSIXct = if (inherits(x, "POSIXct")) .POSIXct(unclass(x), tz = "UTC") else parse_time(x),
    Date = if (inherits(x, "Date")) x else as.Date(as.character(x)),
    character = if (is.character(x)) x else as.character(x)
  ))
  if (from_text) {
    bad <- is.na(out) & !is.nan(out) & !is.na(x) & nzchar(x)
    if (any(bad)) {
      stop_dstp("protocol_error", sprintf("column %s (%s): %s is not a %s value", field$name, field$type,
                                          encodeString(x[which(bad)[1L]], quote = "\""), cls))
    }
  }
  if (field$type %in% c("float", "halffloat")) out <- as_float32(out)
  out
}

# -- Arrow ------------------------------------------------------------------------

use_arrow_package <- function() {
  !isFALSE(getOption("dstp.arrow_package")) && requireNamespace("arrow", quietly = TRUE)
}

# Read an Arrow IPC stream file: with the arrow package when installed, else with ipc_read_stream().
# Returns list(schema, columns); columns NULL when a type cannot be decoded without the arrow package.
read_arrow_file <- function(path, truncated = FALSE) {
  if (use_arrow_package()) return(read_with_arrow_package(path, truncated))
  ipc_read_stream(path, truncated = truncated)
}

read_with_arrow_package <- function(path, truncated = FALSE) {
  schema <- ipc_read_stream(path, schema_only = TRUE)$schema
  if (!truncated) check_arrow_complete(path, "the server")  # arrow would accept a stream cut after a batch
  table <- arrow::read_ipc_stream(path, as_data_frame = FALSE)
  df <- as.data.frame(table)
  columns <- lapply(seq_along(schema$fields), function(i) {
    x <- df[[i]]
    f <- schema$fields[[i]]
    if (inherits(x, "integer64")) x <- as.double(x)
    if (f$kind == "timestamp") x <- .POSIXct(as.numeric(x), tz = "UTC")
    if (f$kind == "int" && r_class(f) == "numeric") x <- as.double(x)
    attributes(x) <- attributes(x)[intersect(names(attributes(x)), c("class", "tzone", "levels"))]
    x
  })
  list(schema = schema, columns = columns)
}

http_arrow <- function(con, sql, limit, allow_truncated = FALSE) {
  path <- tempfile("dstp-", fileext = ".arrows")
  on.exit(unlink(path), add = TRUE)
  res <- http_query_to_file(con, sql, "arrow", path, limit, allow_truncated)
  r <- read_arrow_file(path, truncated = !is.null(res$truncated))
  if (is.null(r$columns)) return(http_csv(con, sql, limit, schema = r$schema, allow_truncated))  # types only CSV can carry
  list(columns = r$columns, schema = r$schema, truncated = res$truncated, url = res$url,
       info = list(transport = "http", query_id = res$headers[["x-dstp-query-id"]]))
}

# The result's Arrow schema, without its records: GET /query?format=arrow&limit=0 answers just the schema.
query_schema <- function(con, sql) {
  path <- tempfile("dstp-schema-", fileext = ".arrows")
  on.exit(unlink(path), add = TRUE)
  http_query_to_file(con, sql, "arrow", path, limit = "0")
  ipc_read_stream(path, schema_only = TRUE)$schema
}

# A response header with the result's schema (base64 of the Arrow IPC schema message), if the server sends one.
SCHEMA_HEADER <- "x-dstp-arrow-schema"

schema_from_headers <- function(headers) {
  value <- headers[[SCHEMA_HEADER]]
  if (is.null(value) || !nzchar(value)) return(NULL)
  ipc_parse_schema(jsonlite::base64_dec(value))
}

# -- CSV ----------------------------------------------------------------------------

http_csv <- function(con, sql, limit, schema = NULL, allow_truncated = FALSE) {
  path <- tempfile("dstp-", fileext = ".csv")
  on.exit(unlink(path), add = TRUE)
  res <- http_query_to_file(con, sql, "csv", path, limit, allow_truncated)
  schema <- schema %||% schema_from_headers(res$headers) %||% query_schema(con, sql)
  list(columns = read_csv_result(path, schema), schema = schema, truncated = res$truncated, url = res$url,
       info = list(transport = "http", query_id = res$headers[["x-dstp-query-id"]]))
}

empty_column <- function(field) {
  switch(r_class(field),
    numeric = double(), integer = integer(), logical = logical(), character = character(),
    POSIXct = .POSIXct(double(), tz = "UTC"), Date = structure(double(), class = "Date")
  )
}

read_csv_result <- function(path, schema) {
  fields <- schema$fields
  head <- readLines(path, n = 2L, warn = FALSE, encoding = "UTF-8")
  if (length(head) == 0L) stop_dstp("integrity_error", "the CSV result is empty: not even a header line")
  header <- scan(text = head[1L], what = "", sep = ",", quote = "\"", quiet = TRUE, na.strings = character(),
                 strip.white = FALSE)
  names <- vapply(fields, function(f) f$name, "")
  if (length(header) != length(fields) || !all(header == names)) {
    stop_dstp("protocol_error", sprintf("the CSV header (%s) does not match the result's schema (%s)",
                                        paste(header, collapse = ", "), paste(names, collapse = ", ")))
  }
  if (length(head) < 2L) return(lapply(fields, empty_column))
  dt <- data.table::fread(
    path, sep = ",", quote = "\"", header = TRUE, colClasses = vapply(fields, r_class, ""),
    # NULL is an empty field, or NA (unquoted) in a one-column result, where an empty field would be a blank line
    na.strings = c("", "NA"), strip.white = FALSE, blank.lines.skip = FALSE, fill = FALSE, check.names = FALSE,
    encoding = "UTF-8", showProgress = FALSE, data.table = FALSE, integer64 = "double", tz = "UTC"
  )
  # Every text value of dstp's CSV is quoted, a quote in it doubled (RFC 4180: q"t is "q""t").
  text <- which(vapply(fields, r_class, "") == "character")
  if (length(text) && fread_keeps_doubled_quotes()) {
    for (i in text) dt[[i]] <- gsub("\"\"", "\"", dt[[i]], fixed = TRUE)
  }
  lapply(seq_along(fields), function(i) typed_column(dt[[i]], fields[[i]]))
}

# Whether data.table::fread leaves the doubled quotes of a quoted field as they are ("q""t" read as q""t,
# not q"t): 1.14.8 does. Asked of fread itself, once, so that a fread that undoes them is not undone twice.
fread_keeps_doubled_quotes <- function() {
  if (is.null(the$fread_keeps_doubled_quotes)) {
    probe <- data.table::fread(text = "a,b\n1,\"q\"\"t\"\n", sep = ",", quote = "\"", header = TRUE,
                               colClasses = c("numeric", "character"), na.strings = c("", "NA"),
                               strip.white = FALSE, showProgress = FALSE, data.table = FALSE)
    the$fread_keeps_doubled_quotes <- identical(probe$b, "q\"\"t")
  }
  the$fread_keeps_doubled_quotes
}

# -- JSON ---------------------------------------------------------------------------

http_json_result <- function(con, sql, limit, allow_truncated = FALSE) {
  path <- tempfile("dstp-", fileext = ".json")
  on.exit(unlink(path), add = TRUE)
  res <- http_query_to_file(con, sql, "json", path, limit, allow_truncated)
  schema <- schema_from_headers(res$headers) %||% query_schema(con, sql)
  records <- tryCatch(jsonlite::fromJSON(path, simplifyVector = TRUE), error = function(e) {
    stop_dstp("integrity_error", sprintf("the JSON result is not complete JSON (%s)", conditionMessage(e)))
  })
  columns <- lapply(schema$fields, function(f) {
    if (length(records) == 0L) return(empty_column(f))
    x <- records[[f$name]]
    if (is.null(x)) stop_dstp("protocol_error", sprintf("the JSON records lack column %s", f$name))
    typed_column(x, f)
  })
  list(columns = columns, schema = schema, truncated = res$truncated, url = res$url,
       info = list(transport = "http", query_id = res$headers[["x-dstp-query-id"]]))
}

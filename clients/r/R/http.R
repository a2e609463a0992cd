# HTTP plumbing on curl: JSON documents, and query results streamed to a file.

USER_AGENT <- "dstp-r/0.1.0 (https://github.com/dstp; R package dstp)"

# GET URLs longer than this (URL-encoded) use POST /query with a JSON body instead.
MAX_GET_URL <- 8000L

new_dstp_handle <- function(con, ...) {
  h <- curl::new_handle()
  curl::handle_setopt(h, useragent = USER_AGENT, connecttimeout = con$timeout, followlocation = TRUE,
                      failonerror = FALSE)
  if (nzchar(con$ca_file %||% "")) curl::handle_setopt(h, cainfo = con$ca_file)
  dstp_headers(h, con, ...)
  h
}

# Set the request headers of `h`: the token, if the connection has one, and `...` (curl replaces them all).
dstp_headers <- function(h, con, ...) {
  headers <- list(...)
  if (nzchar(con$token %||% "")) headers[["Authorization"]] <- paste("Bearer", con$token)
  if (length(headers)) do.call(curl::handle_setheaders, c(list(h), headers))
  invisible(h)
}

# A curl failure (no answer at all) as a dstp_connection_error naming the URL.
connection_error <- function(url, e) {
  dstp_condition("connection_error", sprintf("cannot reach the dstp server at %s: %s", url, conditionMessage(e)),
                 url = url)
}

# Turn an error response body (the JSON error shape of docs/web.md) into a condition.
error_from_body <- function(status, body, url) {
  text <- if (is.raw(body)) rawToChar(body) else paste(body, collapse = "\n")
  parsed <- tryCatch(jsonlite::fromJSON(text, simplifyVector = FALSE), error = function(e) NULL)
  err <- if (is.list(parsed)) parsed$error else NULL
  if (!is.list(err)) {
    snippet <- substr(gsub("\\s+", " ", text), 1L, 200L)
    return(dstp_condition(if (status == 404) "not_found" else "internal",
                          sprintf("HTTP %d from %s (not a dstp error body): %s", status, url, snippet),
                          status = status, url = url))
  }
  as_int <- function(x) if (is.null(x)) NULL else as.integer(x)
  dstp_condition(err$code, err$message %||% sprintf("HTTP %d", status), line = as_int(err$line),
                 column = as_int(err$column), token = err$token, status = status, url = url)
}

base_url <- function(con, path, query = list()) {
  url <- paste0(con$url, path)
  query <- query[!vapply(query, is.null, logical(1))]
  if (length(query)) {
    values <- vapply(seq_along(query), function(i) {
      paste0(curl::curl_escape(names(query)[i]), "=", curl::curl_escape(as.character(query[[i]])))
    }, character(1))
    url <- paste0(url, "?", paste(values, collapse = "&"))
  }
  url
}

# GET a JSON document; returns the parsed list (simplifyVector = FALSE).
http_json <- function(con, path, query = list()) {
  url <- base_url(con, path, query)
  res <- tryCatch(curl::curl_fetch_memory(url, handle = new_dstp_handle(con)),
                  error = function(e) stop(connection_error(url, e)))
  if (res$status_code >= 400) stop(error_from_body(res$status_code, res$content, url))
  text <- rawToChar(res$content)
  Encoding(text) <- "UTF-8"
  parsed <- tryCatch(jsonlite::fromJSON(text, simplifyVector = FALSE), error = function(e) {
    stop_dstp("protocol_error", sprintf("%s did not answer JSON: %s", url, conditionMessage(e)), url = url)
  })
  parsed
}

# The last line of a file, if it is short enough to be a trailer ("" otherwise).
last_line <- function(path, max_bytes = 65536) {
  size <- file.size(path)
  if (is.na(size) || size == 0) return("")
  con <- file(path, "rb")
  on.exit(close(con))
  n <- min(size, max_bytes)
  seek(con, size - n)
  tail <- readBin(con, "raw", n)
  while (length(tail) && tail[length(tail)] %in% as.raw(c(10, 13))) tail <- tail[-length(tail)]
  nl <- which(tail == as.raw(10))
  if (length(nl)) tail <- tail[(max(nl) + 1L):length(tail)]
  if (length(tail) == 0L || any(tail == as.raw(0))) return("")
  out <- rawToChar(tail)
  Encoding(out) <- "UTF-8"
  out
}

CSV_TRAILER <- "# dstp-error: "
CSV_TRUNCATED <- "# dstp-truncated: "
TRUNCATED_HEADER <- "x-dstp-truncated"

# Cut `bytes` bytes off the end of a file.
drop_tail <- function(path, bytes) {
  con <- file(path, "r+b")
  on.exit(close(con))
  seek(con, file.size(path) - bytes, rw = "write")
  truncate(con)
  invisible(path)
}

# Whether the server cut the result at max_result_rows/max_result_bytes (docs/web.md, "Truncated results"):
# list(reason, rows, trailer_bytes) or NULL. Assembled formats say it in the X-Dstp-Truncated header; streamed
# ones in their last line (CSV `# dstp-truncated: {...}`, JSON and NDJSON `{"truncated": {...}}`) or, for
# Arrow, in the custom metadata of the last record batch of a stream without end-of-stream marker. The body
# is read whatever the header forecast (it is sent before the result is run): a trailer is the last word.
truncation_of <- function(path, format, headers) {
  if (format %in% c("parquet", "nc")) {
    if (!identical(headers[[TRUNCATED_HEADER]], "true")) return(NULL)
    rows <- headers[["x-dstp-truncated-rows"]]
    return(list(reason = headers[["x-dstp-truncated-reason"]] %||% "cut at a server limit",
                rows = if (is.null(rows)) NULL else as.numeric(rows), trailer_bytes = 0))
  }
  if (format == "arrow") return(arrow_truncation(path))
  line <- last_line(path)
  body <- NULL
  if (format == "csv" && startsWith(line, CSV_TRUNCATED)) body <- substring(line, nchar(CSV_TRUNCATED) + 1L)
  if (format %in% c("json", "ndjson") && startsWith(line, "{\"truncated\"")) body <- line
  if (is.null(body)) return(NULL)
  cut <- tryCatch(jsonlite::fromJSON(body, simplifyVector = FALSE)$truncated, error = function(e) NULL)
  if (!is.list(cut)) return(NULL)
  list(reason = cut$reason, rows = cut$rows, trailer_bytes = nchar(line, type = "bytes") + 1L)
}

# The error a result file ends with (CSV `# dstp-error:` line, NDJSON `{"error": ...}` line), or NULL.
trailer_error <- function(path, format, url) {
  if (!format %in% c("csv", "ndjson")) return(NULL)
  line <- last_line(path)
  body <- NULL
  if (format == "csv" && startsWith(line, CSV_TRAILER)) body <- substring(line, nchar(CSV_TRAILER) + 1L)
  if (format == "ndjson" && startsWith(line, "{\"error\"")) body <- line
  if (is.null(body)) return(NULL)
  cond <- error_from_body(500L, body, url)
  cond$message <- paste0(cond$message, "\n(the server failed after it had started sending the result; ",
                         "the records received so far were discarded)")
  cond$status <- NULL
  cond
}

#' Run a query over HTTP and stream its result into `path`
#'
#' Returns list(status, headers, url, path, truncated). Raises the server's error as a
#' condition: before the result (status >= 400 with a JSON body), after it
#' started (the CSV/NDJSON trailer), or when the transfer broke off (an
#' integrity error naming the URL). A result the server cut at a limit raises a
#' dstp_truncated error unless `allow_truncated`; then `truncated` is
#' list(reason, rows) and, with `strip_trailer`, the text formats' truncation
#' line is removed from the file so it parses as the records alone.
#' @noRd
http_query_to_file <- function(con, sql, format, path, limit = NULL, allow_truncated = FALSE,
                               strip_trailer = TRUE) {
  stopifnot(is.character(sql), length(sql) == 1L, !is.na(sql))
  url <- base_url(con, "/query", list(sql = sql, format = format, limit = limit))
  h <- new_dstp_handle(con)
  shown <- base_url(con, "/query", list(format = format))
  if (nchar(url) > MAX_GET_URL) {
    body <- jsonlite::toJSON(list(sql = sql, format = format, limit = limit), auto_unbox = TRUE, null = "null")
    curl::handle_setopt(h, post = TRUE, postfields = as.character(body))
    dstp_headers(h, con, "Content-Type" = "application/json")
    url <- paste0(con$url, "/query")
    shown <- url
  }
  res <- tryCatch(curl::curl_fetch_disk(url, path, handle = h), error = function(e) e)
  if (inherits(res, "error")) {
    trailer <- if (file.exists(path)) trailer_error(path, format, shown) else NULL
    if (!is.null(trailer)) stop(trailer)
    if (file.exists(path) && file.size(path) > 0) {
      stop_dstp("integrity_error", sprintf(
        "the result from %s broke off after %s bytes (%s); it is incomplete and was discarded",
        shown, format(file.size(path), big.mark = ","), conditionMessage(res)), url = shown)
    }
    stop(connection_error(shown, res))
  }
  headers <- curl::parse_headers_list(res$headers)
  if (res$status_code >= 400) {
    body <- readBin(path, "raw", file.size(path))
    stop(error_from_body(res$status_code, body, shown))
  }
  trailer <- trailer_error(path, format, shown)
  if (!is.null(trailer)) stop(trailer)
  cut <- truncation_of(path, format, headers)
  if (!is.null(cut)) {
    if (!allow_truncated) signal_truncation(cut, FALSE, shown)
    if (strip_trailer && cut$trailer_bytes > 0) drop_tail(path, cut$trailer_bytes)
  }
  list(status = res$status_code, headers = headers, url = shown, path = path, truncated = cut)
}

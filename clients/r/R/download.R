#' Save a query result to a file
#'
#' Streams the result of `sql` from the server's `GET /query` straight to
#' `file` with curl: the records never pass through R's memory, so results
#' larger than RAM are fine. The file is written under a temporary name
#' (`file` plus `".part"`) and renamed when the transfer is complete; on any
#' error the partial file is removed and the error raised, so `file` only
#' ever holds a complete result.
#'
#' | format | content |
#' |---|---|
#' | `"csv"` | header line, one line per record; NULL is an empty field (`NA` in a one-column result) |
#' | `"parquet"` | one Parquet file, schema metadata (units, calendars) kept |
#' | `"arrow"` | the Arrow IPC stream format (`.arrows`) |
#' | `"nc"` | netCDF-4 on the result's grid, CF-1.8 (needs every grid coordinate among the columns, e.g. `select *`) |
#' | `"json"` | one JSON array of record objects |
#' | `"ndjson"` | one JSON record object per line |
#'
#' A result the server cut at its `max_result_rows` or `max_result_bytes`
#' raises a `dstp_truncated` error and leaves no file, unless
#' `allow_truncated = TRUE`: then the file is kept as the server sent it,
#' truncation notice included (CSV: a last line `# dstp-truncated: {...}`,
#' JSON and NDJSON: a last line `{"truncated": {...}}`, Arrow: a last empty
#' batch with `dstp:truncated` metadata and no end-of-stream marker,
#' Parquet: file metadata `dstp:truncated`, netCDF: global attribute
#' `dstp_truncated`), and a `dstp_truncated` warning is issued.
#'
#' @param con A connection from [dstp_connect()].
#' @param sql The query.
#' @param file Path of the file to write (overwritten if it exists).
#' @param format One of `"csv"` (default), `"parquet"`, `"arrow"`, `"nc"`,
#'   `"json"`, `"ndjson"`.
#' @param limit Keep at most this many records (`NULL`: all).
#' @param allow_truncated Keep a result the server cut at a limit (with a
#'   warning) instead of raising a `dstp_truncated` error.
#' @return `file`, invisibly, with attributes `bytes` (its size),
#'   `query_id` (the id in the server log), `format`, and `truncated`
#'   (the server's reason) for an accepted truncated result.
#' @seealso [dstp_query()] to read a result into a data.frame.
#' @examples
#' \dontrun{
#' con <- dstp_connect("http://127.0.0.1:8080")
#' dstp_download(con, "select * from ocean where depth < 20", "ocean.nc", format = "nc")
#' dstp_download(con, "select temperature, time from ccm3 where humidity > 50", "ccm3.parquet",
#'               format = "parquet")
#' }
#' @export
dstp_download <- function(con, sql, file, format = c("csv", "parquet", "arrow", "nc", "json", "ndjson"),
                          limit = NULL, allow_truncated = FALSE) {
  check_connection(con)
  if (!isTRUE(allow_truncated) && !isFALSE(allow_truncated)) stop("`allow_truncated` must be TRUE or FALSE", call. = FALSE)
  format <- match.arg(format)
  stopifnot(is.character(file), length(file) == 1L, nzchar(file))
  if (!is.null(limit)) limit <- format(as.integer(limit), scientific = FALSE)
  file <- path.expand(file)
  part <- paste0(file, ".part")
  ok <- FALSE
  on.exit(if (!ok) unlink(part), add = TRUE)
  res <- http_query_to_file(con, sql, format, part, limit, allow_truncated, strip_trailer = FALSE)
  if (format == "arrow" && is.null(res$truncated)) check_arrow_complete(part, res$url)
  if (!file.rename(part, file)) {
    if (!file.copy(part, file, overwrite = TRUE)) stop(sprintf("cannot write %s", file), call. = FALSE)
    unlink(part)
  }
  ok <- TRUE
  reason <- if (!is.null(res$truncated)) signal_truncation(res$truncated, TRUE, res$url)
  invisible(structure(file, bytes = file.size(file), query_id = res$headers[["x-dstp-query-id"]],
                      format = format, truncated = reason))
}

# An Arrow stream must end with its end-of-stream marker (0xFFFFFFFF 0x00000000).
check_arrow_complete <- function(path, url) {
  size <- file.size(path)
  con <- file(path, "rb")
  on.exit(close(con))
  if (size >= 8) seek(con, size - 8)
  tail <- readBin(con, "raw", 8L)
  if (!identical(tail, as.raw(c(0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0)))) {
    stop_dstp("integrity_error", sprintf("the Arrow stream from %s lacks its end marker: it is incomplete", url),
              url = url)
  }
}

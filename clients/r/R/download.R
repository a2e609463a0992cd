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
#' | `"csv"` | header line, one line per record; NULL is an empty field |
#' | `"parquet"` | one Parquet file, schema metadata (units, calendars) kept |
#' | `"arrow"` | the Arrow IPC stream format (`.arrows`) |
#' | `"nc"` | netCDF-4 on the result's grid, CF-1.8 (needs every grid coordinate among the columns, e.g. `select *`) |
#' | `"json"` | one JSON array of record objects |
#' | `"ndjson"` | one JSON record object per line |
#'
#' @param con A connection from [dstp_connect()].
#' @param sql The query.
#' @param file Path of the file to write (overwritten if it exists).
#' @param format One of `"csv"` (default), `"parquet"`, `"arrow"`, `"nc"`,
#'   `"json"`, `"ndjson"`.
#' @param limit Keep at most this many records (`NULL`: all).
#' @return `file`, invisibly, with attributes `bytes` (its size),
#'   `query_id` (the id in the server log) and `format`.
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
                          limit = NULL) {
  check_connection(con)
  format <- match.arg(format)
  stopifnot(is.character(file), length(file) == 1L, nzchar(file))
  if (!is.null(limit)) limit <- format(as.integer(limit), scientific = FALSE)
  file <- path.expand(file)
  part <- paste0(file, ".part")
  ok <- FALSE
  on.exit(if (!ok) unlink(part), add = TRUE)
  res <- http_query_to_file(con, sql, format, part, limit)
  if (format == "arrow") check_arrow_complete(part, res$url)
  if (!file.rename(part, file)) {
    if (!file.copy(part, file, overwrite = TRUE)) stop(sprintf("cannot write %s", file), call. = FALSE)
    unlink(part)
  }
  ok <- TRUE
  invisible(structure(file, bytes = file.size(file), query_id = res$headers[["x-dstp-query-id"]],
                      format = format))
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

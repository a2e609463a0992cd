#' Connect to a dstp server
#'
#' Checks that a dstp server answers at `url` (its HTTP API: `dstp serve
#' --http-port`) and returns a connection object for the other functions.
#' Nothing stays open between calls: each call is one or two HTTP requests.
#'
#' @param url The server's HTTP address, e.g. `"http://127.0.0.1:8080"` (a
#'   missing `http://` is added). Defaults to the `DSTP_URL` environment
#'   variable, else `"http://127.0.0.1:8080"`.
#' @param grpc The server's gRPC address (`"host:port"`), used only by the
#'   transports that go through the Python client (`transport = "grpc"`,
#'   `"striped"`, `"udt"`, `"auto"` in [dstp_query()]). `NULL` (the default)
#'   discovers it from the server on first use.
#' @param timeout Seconds to wait for a connection to be established.
#' @param token An API token (or a JWT of the server's OIDC issuer) for a
#'   server that needs one, sent as `Authorization: Bearer` on every request
#'   and handed to the Python transports. Defaults to the `DSTP_TOKEN`
#'   environment variable; `""` sends none.
#' @param ca_file A PEM certificate to trust for an `https://` server whose
#'   certificate no system authority signed (a `dstp serve --tls-self-signed`
#'   server's). Defaults to `DSTP_CA_FILE`; `""` uses the system's roots.
#' @param check If `TRUE` (the default), ask the server for its catalog now, so
#'   that a wrong address fails here with a clear message.
#' @param x A `dstp_connection` (for `print()`).
#' @param ... Ignored.
#' @return An object of class `dstp_connection`: a list with `url`, `grpc`,
#'   `timeout`, `token`, `ca_file` and, when `check = TRUE`, `datasets` (the
#'   ids the token may read).
#'   A wrong address, a server that does not answer or an answer that is not
#'   a dstp catalog raise a `dstp_connection_error` (or another `dstp_error`)
#'   whose message names the URL.
#' @seealso [dstp_datasets()], [dstp_query()]
#' @examples
#' \dontrun{
#' con <- dstp_connect("http://127.0.0.1:8080")
#' con
#' }
#' @export
dstp_connect <- function(url = Sys.getenv("DSTP_URL", "http://127.0.0.1:8080"), grpc = NULL, timeout = 10,
                         check = TRUE, token = Sys.getenv("DSTP_TOKEN"), ca_file = Sys.getenv("DSTP_CA_FILE")) {
  stopifnot(is.character(url), length(url) == 1L, nzchar(url))
  stopifnot(is.character(token), length(token) == 1L, is.character(ca_file), length(ca_file) == 1L)
  if (!grepl("^[A-Za-z][A-Za-z0-9+.-]*://", url)) url <- paste0("http://", url)
  url <- sub("/+$", "", url)
  con <- structure(
    list(url = url, grpc = grpc, timeout = timeout, datasets = NULL, token = token, ca_file = ca_file,
         cache = new.env(parent = emptyenv())),
    class = "dstp_connection"
  )
  if (check) {
    listing <- http_json(con, "/datasets.json")
    if (!is.list(listing) || (length(listing) && is.null(listing[[1L]]$id))) {
      stop_dstp("protocol_error", sprintf("%s answered, but /datasets.json is not a dstp catalog", url), url = url)
    }
    con$datasets <- vapply(listing, function(d) d$id, character(1))
  }
  con
}

#' @rdname dstp_connect
#' @export
print.dstp_connection <- function(x, ...) {
  cat("<dstp connection>", x$url, if (nzchar(x$token %||% "")) "(with a token)" else "", "\n")
  if (!is.null(x$datasets)) {
    cat("  datasets:", if (length(x$datasets)) paste(x$datasets, collapse = ", ") else "(none)", "\n")
  }
  grpc <- x$grpc %||% x$cache$grpc
  cat("  gRPC:    ", if (is.null(grpc)) "(asked for on first use by a Python transport)" else grpc, "\n")
  invisible(x)
}

check_connection <- function(con) {
  if (!inherits(con, "dstp_connection")) stop("`con` must be a connection from dstp_connect()", call. = FALSE)
}

# The gRPC address: given to dstp_connect(), or discovered from the HTTP API:
# /server.json names it; servers older than that document only show it in
# the query builder's Python snippet (/datasets/{id}/query.json).
grpc_target <- function(con) {
  if (!is.null(con$grpc)) return(con$grpc)
  if (!is.null(con$cache$grpc)) return(con$cache$grpc)
  found <- NULL
  info <- tryCatch(http_json(con, "/server.json"), dstp_error = function(e) NULL)
  if (!is.null(info) && is.character(info$grpc) && nzchar(info$grpc)) found <- info$grpc
  ids <- if (is.null(found)) con$datasets %||% vapply(http_json(con, "/datasets.json"), function(d) d$id, character(1))
  if (is.null(found) && length(ids)) {
    builder <- http_json(con, sprintf("/datasets/%s/query.json", curl::curl_escape(ids[[1L]])))
    m <- regmatches(builder$snippets$python %||% "",
                    regexec("dstp\\.connect\\(['\"]([^'\"]+)['\"]\\)", builder$snippets$python %||% ""))[[1L]]
    if (length(m) == 2L && !grepl("GRPC_PORT", m[2L], fixed = TRUE)) found <- m[2L]
  }
  if (is.null(found)) {
    stop_dstp("transport_unavailable", sprintf(paste(
      "the server at %s does not say where its gRPC port is; pass it to",
      "dstp_connect(url, grpc = \"host:port\")"), con$url), url = con$url)
  }
  assign("grpc", found, envir = con$cache)
  found
}

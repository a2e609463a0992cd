# The data channels only the Python client speaks (gRPC stream, striped TCP,
# UDT), reached through reticulate. See inst/python/dstp_r_bridge.py.

the <- new.env(parent = emptyenv())

# Which Python to use, when reticulate has not started one yet: options(dstp.python = "/path/python"),
# else $RETICULATE_PYTHON (reticulate's own variable), else $DSTP_PYTHON, else python3 on the PATH.
python_candidate <- function() {
  opt <- getOption("dstp.python")
  if (is.character(opt) && length(opt) == 1L && nzchar(opt)) return(opt)
  if (nzchar(Sys.getenv("RETICULATE_PYTHON"))) return(NULL)
  env <- Sys.getenv("DSTP_PYTHON")
  if (nzchar(env)) return(env)
  found <- Sys.which("python3")
  if (nzchar(found)) unname(found) else NULL
}

# Resolve wrappers (pyenv shims, virtualenv links) to the real interpreter.
python_executable <- function(python) {
  out <- tryCatch(suppressWarnings(system2(python, c("-c", shQuote("import sys; print(sys.executable)")),
                                           stdout = TRUE, stderr = FALSE)),
                  error = function(e) character())
  if (length(out) && nzchar(out[length(out)]) && file.exists(out[length(out)])) out[length(out)] else python
}

python_unavailable <- function(why) {
  dstp_condition("transport_unavailable", paste0(
    "this transport needs the dstp Python client through reticulate, but ", why,
    ". Use transport = \"http\" (the default), or install reticulate and `pip install dstp` and point ",
    "options(dstp.python =) or DSTP_PYTHON at that Python."))
}

#' Is the Python client usable from R?
#'
#' The transports `"grpc"`, `"striped"`, `"udt"` and `"auto"` of
#' [dstp_query()] run the dstp Python client through reticulate. This
#' returns `TRUE` when that works (loading Python if needed), `FALSE`
#' otherwise, with the reason as attribute `"reason"`.
#'
#' The Python used is, in order: an already running reticulate session,
#' `options(dstp.python = "/path/to/python")`, `$RETICULATE_PYTHON`,
#' `$DSTP_PYTHON`, then `python3` on the `PATH`. `options(dstp.python =
#' FALSE)` turns the Python transports off.
#'
#' @return `TRUE` or `FALSE` (with attribute `reason`).
#' @examples
#' dstp_python_available()
#' @export
dstp_python_available <- function() {
  ok <- tryCatch({
    python_bridge()
    TRUE
  }, dstp_transport_unavailable = function(e) structure(FALSE, reason = conditionMessage(e)))
  ok
}

python_bridge <- function() {
  if (isFALSE(getOption("dstp.python"))) stop(python_unavailable("options(dstp.python = FALSE) turns it off"))
  if (!is.null(the$bridge)) return(the$bridge)
  if (!requireNamespace("reticulate", quietly = TRUE)) {
    stop(python_unavailable("the R package reticulate is not installed"))
  }
  if (!reticulate::py_available(initialize = FALSE)) {
    python <- python_candidate()
    if (!is.null(python)) {
      python <- python_executable(python)
      ok <- tryCatch({
        reticulate::use_python(python, required = TRUE)
        TRUE
      }, error = function(e) conditionMessage(e))
      if (!isTRUE(ok)) stop(python_unavailable(sprintf("Python %s cannot be used (%s)", python, ok)))
    }
  }
  where <- tryCatch(reticulate::py_config()$python, error = function(e) NULL)
  if (is.null(where)) stop(python_unavailable("no Python could be started"))
  if (!reticulate::py_module_available("dstp")) {
    # reticulate puts the base installation's site-packages of a --system-site-packages virtualenv
    # on sys.path without reading its .pth files, which is where `pip install -e` hooks in.
    reticulate::py_run_string(paste(
      "import site as _site, sys as _sys",
      "for _p in [p for p in _sys.path if p.endswith(('site-packages', 'dist-packages'))]:",
      "    _site.addsitedir(_p)",
      sep = "\n"))
  }
  if (!reticulate::py_module_available("dstp")) {
    stop(python_unavailable(sprintf("the Python at %s has no dstp module", where)))
  }
  dir <- system.file("python", package = "dstp")
  bridge <- tryCatch(reticulate::import_from_path("dstp_r_bridge", path = dir, convert = TRUE),
                     error = function(e) stop(python_unavailable(sprintf(
                       "importing the bridge from %s failed: %s", dir, conditionMessage(e)))))
  the$bridge <- bridge
  bridge
}

python_query <- function(con, sql, transport, streams = 0L, limit = NULL) {
  bridge <- python_bridge()
  target <- grpc_target(con)
  path <- tempfile("dstp-", fileext = ".arrows")
  on.exit(unlink(path), add = TRUE)
  res <- tryCatch(
    bridge$fetch(target, sql, transport, as.integer(streams), path, as.integer(limit %||% -1L),
                 con$token %||% "", startsWith(con$url, "https://"), con$ca_file %||% ""),
    error = function(e) {
      stop_dstp("transport_error", sprintf("the Python client failed on %s: %s", target, conditionMessage(e)),
                url = target)
    }
  )
  if (!is.null(res$error)) {
    err <- res$error
    stop(dstp_condition(err$code, err$message, line = err$line, column = err$column, token = err$token,
                        status = if (!is.null(err$status)) as.integer(err$status), url = target))
  }
  r <- read_arrow_file(path)
  cut <- if (isTRUE(res$truncated)) list(reason = res$truncated_reason, rows = res$rows) else NULL
  list(columns = r$columns, schema = r$schema, truncated = cut, url = target,
       info = list(transport = res$transport, query_id = res$query_id, rows = res$rows, summary = res))
}

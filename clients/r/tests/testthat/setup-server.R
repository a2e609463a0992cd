# One dstp server for the whole test run, started the way a user would:
#   python -m dstp.cli samples DIR
#   python -m dstp.cli serve DIR --port 0 --http-port 0 --data-port 0 --udt-port -1
# (with a watchdog that stops it if this R process dies). $DSTP_R_CATALOG names a ready catalog
# instead (tests/r/test_r_client.py adds the edge-case datasets of the Python tests to the samples).
# The server is stopped when the tests end.

dstp_test <- new.env()

local({
  if (!nzchar(python_path())) {
    dstp_test$skip <- "no Python found (set DSTP_PYTHON or put python3 on the PATH)"
    return()
  }
  if (!python_has_dstp()) {
    dstp_test$skip <- sprintf("the Python at %s cannot import dstp and pyarrow", python_path())
    return()
  }
  root <- Sys.getenv("DSTP_R_CATALOG")
  if (!nzchar(root)) {
    root <- tempfile("dstp-catalog-")
    out <- run_python(c("-m", "dstp.cli", "samples", shQuote(root)))
    if (!is.null(attr(out, "status"))) {
      dstp_test$skip <- paste("dstp samples failed:", paste(out, collapse = "\n"))
      return()
    }
  }
  proc <- start_python("dstp.cli", c("serve", root, "--port", "0", "--http-port", "0", "--data-port", "0",
                                     "--udt-port", "-1"),
                       env = "DSTP_BATCH_ROWS=4096", name = "server")
  withr::defer(stop_python(proc), teardown_env())
  addr <- tryCatch(wait_for_addresses(proc, c("grpc", "http", "data")), error = function(e) e)
  if (inherits(addr, "error")) {
    dstp_test$skip <- paste("the dstp server did not start:", conditionMessage(addr))
    return()
  }
  dstp_test$root <- root
  dstp_test$proc <- proc
  dstp_test$http <- paste0("http://", addr$http)
  dstp_test$grpc <- addr$grpc
  # the package's Python transports use the same interpreter as the server
  options(dstp.python = python_path())
})

skip_if_no_server <- function() {
  if (!is.null(dstp_test$skip)) skip(dstp_test$skip)
}

test_con <- function() {
  skip_if_no_server()
  if (is.null(dstp_test$con)) dstp_test$con <- dstp_connect(dstp_test$http)
  dstp_test$con
}

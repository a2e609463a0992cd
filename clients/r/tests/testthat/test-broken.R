# Results that fail after they started (docs/web.md, "Streaming and what a failure looks like"),
# served by fake_server.py: the client must raise, never return the rows it got.

fake <- local({
  url <- NULL
  function() {
    skip_if_no_server()
    if (is.null(url)) {
      proc <- start_python(test_path("fake_server.py"), character(), name = "fake")
      withr::defer(stop_python(proc), teardown_env())
      url <<- paste0("http://", wait_for_addresses(proc, "http", timeout = 30)$http)
    }
    dstp_connect(url)
  }
})

test_that("a CSV result ending with the # dstp-error: trailer raises the server's error", {
  con <- fake()
  e <- tryCatch(dstp_query(con, "select trailer from ccm3", format = "csv"), error = identity)
  expect_s3_class(e, "dstp_bad_data_file")
  expect_s3_class(e, "dstp_error")
  expect_identical(e$code, "bad_data_file")
  expect_match(e$message, "cannot read ccm3_1990-09.nc")
  expect_match(e$message, "after it had started sending")
})

test_that("a result cut without a trailer is an integrity error", {
  con <- fake()
  e <- tryCatch(dstp_query(con, "select cut from ccm3", format = "csv"), error = identity)
  expect_s3_class(e, "dstp_integrity_error")
  expect_match(conditionMessage(e), "broke off")
  expect_error(dstp_query(con, "select cut from ccm3", format = "arrow"), class = "dstp_integrity_error")
  expect_error(dstp_query(con, "select cut from ccm3", format = "json"), class = "dstp_integrity_error")
})

test_that("dstp_download raises on a broken stream and keeps no partial file", {
  con <- fake()
  dir <- tempfile("dl-")
  dir.create(dir)
  expect_error(dstp_download(con, "select trailer from ccm3", file.path(dir, "a.csv")), class = "dstp_bad_data_file")
  expect_error(dstp_download(con, "select trailer from ccm3", file.path(dir, "a.ndjson"), format = "ndjson"),
               class = "dstp_bad_data_file")
  expect_error(dstp_download(con, "select cut from ccm3", file.path(dir, "a.arrows"), format = "arrow"),
               class = "dstp_integrity_error")
  expect_identical(list.files(dir), character())
})

test_that("the trailer check reads only the last line", {
  f <- tempfile(fileext = ".csv")
  writeLines(c('"a"', "1", '# dstp-error: {"error": {"code": "timeout", "message": "too slow"}}'), f)
  e <- dstp:::trailer_error(f, "csv", "http://x/query")
  expect_s3_class(e, "dstp_timeout")
  expect_identical(e$message, paste0("too slow\n(the server failed after it had started sending the result; ",
                                     "the records received so far were discarded)"))
  writeLines(c('"a"', "# dstp-error: not last", "1"), f)
  expect_null(dstp:::trailer_error(f, "csv", "http://x/query"))
  expect_null(dstp:::trailer_error(f, "parquet", "http://x/query"))
})

test_that("a truncation trailer raises dstp_truncated even when the header said the result was whole", {
  # X-Dstp-Truncated is a forecast sent before the result runs; the body's end is what happened.
  con <- fake()
  sql <- "select forecast from ccm3"
  for (format in c("csv", "json", "arrow")) {
    e <- tryCatch(dstp_query(con, sql, format = format), error = identity)
    expect_s3_class(e, "dstp_truncated")
    expect_s3_class(e, "dstp_limit_exceeded")
    expect_match(conditionMessage(e), "after 2 records (result cut at max_result_rows=2)", fixed = TRUE)
    seen <- NULL
    df <- withCallingHandlers(dstp_query(con, sql, format = format, allow_truncated = TRUE),
                              dstp_truncated = function(w) {
                                seen <<- w
                                invokeRestart("muffleWarning")
                              })
    expect_s3_class(seen, "dstp_warning")
    expect_identical(df$temperature, c(201.5, 202.25), label = format)  # the trailer is not a record
    expect_identical(attr(df, "dstp_info")$truncated, "result cut at max_result_rows=2")
  }
  dir <- tempfile("dl-")
  dir.create(dir)
  for (format in c("csv", "ndjson", "arrow")) {
    expect_error(dstp_download(con, sql, file.path(dir, paste0("cut.", format)), format = format),
                 class = "dstp_truncated")
  }
  expect_identical(list.files(dir), character())
})

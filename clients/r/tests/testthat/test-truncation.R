# A result the server cut at max_result_rows is never returned silently: a dstp_truncated error, or with
# allow_truncated = TRUE the records and a dstp_truncated warning. A server of its own caps results at 5,000
# records (DSTP_MAX_RESULT_ROWS), in batches of 1,024.

capped <- local({
  addr <- NULL
  function() {
    skip_if_no_server()
    if (is.null(addr)) {
      proc <- start_python("dstp.cli", c("serve", dstp_test$root, "--port", "0", "--http-port", "0",
                                         "--data-port", "0", "--udt-port", "-1"),
                           env = c("DSTP_BATCH_ROWS=1024", "DSTP_MAX_RESULT_ROWS=5000"), name = "capped")
      withr::defer(stop_python(proc), teardown_env())
      addr <<- wait_for_addresses(proc, c("grpc", "http"))
    }
    dstp_connect(paste0("http://", addr$http), grpc = addr$grpc)
  }
})

# Evaluate `expr`, expecting one dstp_truncated warning; return its value.
expect_truncation_warning <- function(expr) {
  seen <- NULL
  value <- withCallingHandlers(expr, warning = function(w) {
    if (inherits(w, "dstp_truncated")) {
      seen <<- w
      invokeRestart("muffleWarning")
    }
  })
  expect_s3_class(seen, "dstp_warning")
  expect_match(conditionMessage(seen), "max_result_rows=5000", fixed = TRUE)
  value
}

CUT <- "select temperature from ccm3"            # 196,608 records: cut at 5,000
MAYBE <- "select temperature from ccm3 where temperature > 0"  # the server cannot tell before running it

test_that("every HTTP format raises dstp_truncated unless truncation is allowed", {
  con <- capped()
  for (format in c("arrow", "csv", "json")) {
    for (sql in c(CUT, MAYBE)) {
      e <- tryCatch(dstp_query(con, sql, format = format), error = identity)
      expect_s3_class(e, "dstp_truncated")
      expect_s3_class(e, "dstp_limit_exceeded")
      expect_identical(e$code, "truncated")
      expect_match(conditionMessage(e), "after 5,000 records (result cut at max_result_rows=5000)", fixed = TRUE)
      expect_match(conditionMessage(e), "allow_truncated = TRUE", fixed = TRUE)

      df <- expect_truncation_warning(dstp_query(con, sql, format = format, allow_truncated = TRUE))
      expect_identical(nrow(df), 5000L, label = paste(format, sql))
      expect_false(anyNA(df$temperature))  # the trailer was not read as a record
      expect_identical(attr(df, "dstp_info")$truncated, "result cut at max_result_rows=5000")
    }
  }
  # a LIMIT within the caps is not truncation
  expect_identical(nrow(dstp_query(con, "select temperature from ccm3 limit 5000", format = "csv")), 5000L)
  expect_identical(nrow(dstp_query(con, CUT, limit = 100)), 100L)
})

test_that("the Python transports raise dstp_truncated too", {
  con <- capped()
  skip_if_no_oracle()
  for (transport in c("grpc", "striped")) {
    expect_error(dstp_query(con, CUT, transport = transport), class = "dstp_truncated")
    df <- expect_truncation_warning(dstp_query(con, CUT, transport = transport, allow_truncated = TRUE))
    expect_identical(nrow(df), 5000L)
  }
})

test_that("dstp_download keeps no file of a truncated result unless allowed, then keeps the server's notice", {
  con <- capped()
  dir <- tempfile("dl-")
  dir.create(dir)
  for (format in c("csv", "parquet", "arrow")) {
    target <- file.path(dir, paste0("cut.", format))
    expect_error(dstp_download(con, CUT, target, format = format), class = "dstp_truncated")
    expect_identical(list.files(dir), character())
  }
  target <- file.path(dir, "cut.csv")
  kept <- expect_truncation_warning(dstp_download(con, CUT, target, allow_truncated = TRUE))
  expect_identical(attr(kept, "truncated"), "result cut at max_result_rows=5000")
  lines <- readLines(target)
  expect_identical(length(lines), 5002L)
  expect_match(lines[5002L], "^# dstp-truncated: ")
  ar <- expect_truncation_warning(dstp_download(con, MAYBE, file.path(dir, "cut.arrows"), format = "arrow",
                                                allow_truncated = TRUE))
  expect_identical(length(dstp:::ipc_read_stream(ar, truncated = TRUE)$columns[[1]]), 5000L)
})

test_that("a NULL in a one-column CSV result is NA, not a lost row", {
  con <- test_con()
  df <- dstp_query(con, "select humidity from ccm3", format = "csv")
  ar <- dstp_query(con, "select humidity from ccm3", format = "arrow")
  expect_identical(nrow(df), nrow(ar))
  expect_true(anyNA(ar$humidity))
  expect_identical(is.na(df$humidity), is.na(ar$humidity))
  expect_identical(df$humidity, ar$humidity)
})

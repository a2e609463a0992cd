# Converting text (CSV fallbacks, JSON) to the schema's types.

field <- function(kind, type, ...) list(name = "x", kind = kind, type = type, bits = 0L, signed = TRUE, ...)

test_that("text converts to the schema's type, or fails loudly", {
  ts <- dstp:::typed_column(c("1990-01-16 12:00:00.000000", "1990-01-16T12:00:00.5", NA, ""),
                            field("timestamp", "timestamp[us]"))
  expect_s3_class(ts, "POSIXct")
  expect_identical(attr(ts, "tzone"), "UTC")
  expect_identical(as.numeric(ts), c(632491200, 632491200.5, NA, NA))
  expect_identical(dstp:::typed_column(c("1.5", NA, "nan", "-inf"), field("floatingpoint", "double")),
                   c(1.5, NA, NaN, -Inf))
  f32 <- dstp:::typed_column(c("202.60796", NA), field("floatingpoint", "float"))
  expect_identical(f32, c(readBin(writeBin(202.60796, raw(), size = 4), "double", size = 4), NA))
  expect_identical(dstp:::typed_column(c("true", "false", NA), field("bool", "bool")), c(TRUE, FALSE, NA))
  expect_error(dstp:::typed_column(c("1", "one"), field("floatingpoint", "double")), class = "dstp_protocol_error")
  expect_error(dstp:::typed_column(c("1990-13-45 99:00:00"), field("timestamp", "timestamp[us]")),
               class = "dstp_protocol_error")
})

test_that("condition classes follow the server's error tree", {
  cls <- function(code, status = NULL) class(dstp:::dstp_condition(code, "m", status = status))
  expect_identical(cls("syntax_error"), c("dstp_syntax_error", "dstp_query_error", "dstp_error", "error",
                                          "condition"))
  expect_identical(cls("transport_unavailable")[1:3], c("dstp_transport_unavailable", "dstp_transport_error",
                                                        "dstp_error"))
  expect_identical(cls("internal")[1:2], c("dstp_server_error", "dstp_error"))
  # a code this client does not know keeps its name and gets the class of its HTTP status
  expect_identical(cls("brand_new", 429)[1:3], c("dstp_brand_new", "dstp_limit_exceeded", "dstp_error"))
  e <- dstp:::dstp_condition("unknown_column", "no column", line = 1L, column = 8L, status = 400L)
  expect_identical(conditionMessage(e), "unknown_column (HTTP 400): no column")
})

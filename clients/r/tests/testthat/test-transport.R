test_that("transport = 'striped' and 'grpc' go through the Python client and return the same records", {
  con <- test_con()
  skip_if_no_oracle()
  for (sql in c("select temperature, time from ccm3 where humidity > 50", "select * from ocean where depth < 20",
                "select lev, lat, lon, time from ccm3 where humidity is null")) {
    expected <- oracle(sql)
    striped <- dstp_query(con, sql, transport = "striped")
    expect_same_records(striped, expected, paste("striped:", sql))
    expect_identical(attr(striped, "dstp_info")$transport, "striped")
    expect_same_records(dstp_query(con, sql, transport = "striped", streams = 3), expected,
                        paste("striped x3:", sql))
    expect_same_records(dstp_query(con, sql, transport = "grpc"), expected, paste("grpc:", sql))
  }
  expect_identical(nrow(dstp_query(con, "select temperature from ccm3", transport = "striped", limit = 9)), 9L)
  auto <- dstp_query(con, "select gw, lat from ccm3", transport = "auto")
  expect_true(attr(auto, "dstp_info")$transport %in% c("grpc", "striped"))
  # the gRPC address was found through the HTTP API
  expect_identical(con$cache$grpc, dstp_test$grpc)
})

test_that("the default transport is the Python client's auto, kept per server, with the same records", {
  con <- test_con()
  skip_if_no_oracle()
  sql <- "select temperature, time from ccm3 where humidity > 50"
  expected <- oracle(sql)
  first <- dstp_query(con, sql)
  expect_same_records(first, expected, paste("default:", sql))
  info <- attr(first, "dstp_info")
  expect_identical(info$transport, "grpc")  # a small result on this host: the gRPC stream, chosen by auto
  expect_match(info$summary$choice, "^auto: grpc")
  bridge <- dstp:::python_bridge()
  kept <- length(bridge$`_clients`)
  again <- dstp_query(con, sql)
  expect_same_records(again, expected, paste("default again:", sql))
  expect_identical(length(bridge$`_clients`), kept)  # the kept client of this server served it: none added
  # a wire format is HTTP's: naming one takes HTTP
  expect_identical(attr(dstp_query(con, sql, format = "csv"), "dstp_info")$transport, "http")
})

test_that("errors over the Python transports have the same classes", {
  con <- test_con()
  skip_if_no_oracle()
  e <- tryCatch(dstp_query(con, "select nope from ccm3", transport = "striped"), error = identity)
  expect_s3_class(e, "dstp_unknown_column")
  expect_identical(c(e$line, e$column), c(1L, 11L))
  expect_error(dstp_query(con, "drop table ccm3", transport = "grpc"), class = "dstp_forbidden")
  # this test server offers no UDT channel
  e <- tryCatch(dstp_query(con, "select gw from ccm3", transport = "udt"), error = identity)
  expect_s3_class(e, "dstp_transport_unavailable")
  expect_match(conditionMessage(e), "udt")
})

test_that("without the Python client: a clear dstp_transport_unavailable, and 'auto' falls back to HTTP", {
  con <- test_con()
  old <- options(dstp.python = FALSE)
  on.exit(options(old))
  expect_false(dstp_python_available())
  e <- tryCatch(dstp_query(con, "select gw from ccm3", transport = "striped"), error = identity)
  expect_s3_class(e, "dstp_transport_unavailable")
  expect_match(conditionMessage(e), "reticulate")
  auto <- dstp_query(con, "select gw from ccm3", transport = "auto")
  expect_identical(attr(auto, "dstp_info")$transport, "http")
  expect_identical(nrow(auto), 32L)
})

test_that("a gRPC address given to dstp_connect is used as is", {
  skip_if_no_server()
  con <- dstp_connect(dstp_test$http, grpc = "127.0.0.1:1")
  expect_output(print(con), "127.0.0.1:1")
  skip_if_no_oracle()
  expect_error(dstp_query(con, "select gw from ccm3", transport = "grpc"), class = "dstp_transport_error")
})

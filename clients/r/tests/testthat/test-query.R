test_that("dstp_query returns the Python client's records, exactly, in every HTTP format", {
  con <- test_con()
  skip_if_no_oracle()
  queries <- query_set(con)
  expect_gt(length(queries), 20L)
  for (sql in queries) {
    expected <- oracle(sql)
    ordered <- !grepl("(select", sql, fixed = TRUE) || grepl("order by", sql, fixed = TRUE)
    expect_same_records(dstp_query(con, sql), expected, paste("arrow:", sql), ordered)
    expect_same_records(dstp_query(con, sql, format = "csv"), expected, paste("csv:", sql), ordered)
  }
})

test_that("JSON gives the same records (it is slower; a few queries)", {
  con <- test_con()
  skip_if_no_oracle()
  for (sql in c("select lev, lat, lon, time from ccm3 where humidity is null", "select * from ocean where depth < 20",
                R_QUERIES[grepl("^select year", R_QUERIES)])) {
    expect_same_records(dstp_query(con, sql, format = "json"), oracle(sql), paste("json:", sql))
  }
})

test_that("text holding quotes and commas comes back as it is, in every format", {
  con <- test_con()
  skip_if_no_oracle()
  # CSV doubles a quote inside a quoted field ("q""t"): the client must read it as one
  sql <- paste("select lat, case when lat > 80 then 'q\"t' when lat < -80 then '\"lead, \"\"x\"\"'",
               "when lat > 0 then 'end\"' else null end as s from ccm3",
               "where lon = 0 and lev > 990 and time < '1990-02-01'")
  expected <- oracle(sql)
  expect_true(all(c("q\"t", "\"lead, \"\"x\"\"", "end\"") %in% expected$s))
  expect_true(anyNA(expected$s))
  for (format in c("csv", "arrow", "json")) {
    expect_same_records(dstp_query(con, sql, format = format), expected, paste(format, sql))
  }
})

test_that("noleap times are POSIXct in UTC, 360_day times ISO text, with their calendars in the schema", {
  con <- test_con()
  ccm3 <- dstp_query(con, "select time, temperature from ccm3 where lat > 80 and lev > 900")
  expect_s3_class(ccm3$time, "POSIXct")
  expect_identical(attr(ccm3$time, "tzone"), "UTC")
  expect_identical(format(min(ccm3$time), "%Y-%m-%d %H:%M:%S", tz = "UTC"), "1990-01-16 12:00:00")
  s <- dstp_schema(ccm3)
  expect_identical(s$calendar[s$name == "time"], "noleap")
  expect_identical(s$type, c("timestamp[us]", "float"))
  expect_identical(s$units[s$name == "temperature"], "K")

  # 2000-02-30 exists on the 360_day calendar
  ocean <- dstp_query(con, "select time, salinity from ocean where time <= '2000-02-30' and lat > 80")
  expect_type(ocean$time, "character")
  expect_identical(sort(unique(ocean$time)), c("2000-01-16T00:00:00", "2000-02-16T00:00:00"))
  expect_identical(dstp_schema(ocean)$calendar[1], "360_day")
})

test_that("fill values are NA (not NaN), packed variables are unpacked", {
  con <- test_con()
  h <- dstp_query(con, "select humidity, lev from ccm3 where humidity is null")
  expect_gt(nrow(h), 0)
  expect_true(all(is.na(h$humidity)) && !any(is.nan(h$humidity)))
  land <- dstp_query(con, "select temperature, salinity from ocean where depth = 5", format = "csv")
  expect_true(anyNA(land$temperature))
  expect_identical(is.na(land$temperature), is.na(land$salinity))
  d <- dstp_describe(con, "ocean")
  expect_true(d$attributes$packed[d$attributes$name == "temperature"])
  sea <- land$temperature[!is.na(land$temperature)]
  expect_true(all(sea > -5 & sea < 40))  # degC after scale_factor/add_offset, not raw shorts
})

test_that("limit, order by and empty results", {
  con <- test_con()
  top <- dstp_query(con, "select temperature, lat from ccm3 order by temperature desc limit 5")
  expect_identical(nrow(top), 5L)
  expect_false(is.unsorted(rev(top$temperature)))
  expect_identical(nrow(dstp_query(con, "select temperature from ccm3", limit = 3)), 3L)
  expect_identical(nrow(dstp_query(con, "select temperature from ccm3", limit = 3, format = "csv")), 3L)
  for (format in c("arrow", "csv", "json")) {
    empty <- dstp_query(con, "select time, temperature from ccm3 where temperature > 1000", format = format)
    expect_identical(nrow(empty), 0L)
    expect_s3_class(empty$time, "POSIXct")
    expect_type(empty$temperature, "double")
  }
  info <- attr(top, "dstp_info")
  expect_identical(info$transport, "grpc")  # the default, auto: a small result on this host takes the gRPC stream
  expect_match(info$query_id, "^q")
  over_http <- attr(dstp_query(con, "select gw from ccm3", transport = "http"), "dstp_info")
  expect_identical(over_http$transport, "http")
  expect_match(over_http$query_id, "^q")
})

test_that("a query longer than a URL goes by POST", {
  con <- test_con()
  long <- paste("select temperature from ccm3 where", paste(rep("temperature > 0", 500), collapse = " and "),
                "and lat > 85")
  expect_gt(nchar(long), 8000)
  expect_identical(nrow(dstp_query(con, long)), nrow(dstp_query(con, "select temperature from ccm3 where lat > 85")))
})

test_that("query errors are classed conditions carrying the server's code, message and position", {
  con <- test_con()
  e <- tryCatch(dstp_query(con, "select nope from ccm3"), error = identity)
  expect_s3_class(e, c("dstp_unknown_column", "dstp_query_error", "dstp_error", "error", "condition"), exact = TRUE)
  expect_identical(e$code, "unknown_column")
  expect_identical(e$status, 400L)
  expect_identical(c(e$line, e$column), c(1L, 11L))
  expect_identical(e$token, "nope")
  expect_match(e$message, "ccm3 has no column 'nope'")
  expect_match(conditionMessage(e), "^unknown_column \\(HTTP 400\\): ")
  # the same over CSV
  expect_error(dstp_query(con, "select nope from ccm3", format = "csv"), class = "dstp_unknown_column")

  syn <- tryCatch(dstp_query(con, "selec temperature from ccm3"), error = identity)
  expect_s3_class(syn, "dstp_syntax_error")
  expect_s3_class(syn, "dstp_query_error")
  expect_false(is.null(syn$line))

  nf <- tryCatch(dstp_query(con, "select x from nowhere"), error = identity)
  expect_s3_class(nf, "dstp_dataset_not_found")
  expect_identical(nf$status, 404L)
})

test_that("hostile SQL is refused with a 400 condition", {
  con <- test_con()
  for (sql in c("drop table ccm3", "select * from read_csv('/etc/passwd')", "select getenv('HOME') from ccm3",
                "copy ccm3 to '/tmp/x.csv'")) {
    e <- tryCatch(dstp_query(con, sql), error = identity)
    expect_s3_class(e, "dstp_query_error")
    expect_identical(e$status, 400L, label = sql)
  }
  e <- tryCatch(dstp_query(con, "drop table ccm3"), error = identity)
  expect_s3_class(e, "dstp_forbidden")
  expect_identical(e$code, "forbidden")
  expect_match(e$message, "DROP")
  # the table is still there
  expect_gt(nrow(dstp_query(con, "select gw from ccm3")), 0)
})

test_that("bad arguments fail before any request", {
  con <- test_con()
  expect_error(dstp_query(con, c("a", "b")), "one string")
  expect_error(dstp_query(con, "select gw from ccm3", limit = -1), "limit")
  expect_error(dstp_query(con, "select gw from ccm3", transport = "carrier-pigeon"))
  expect_error(dstp_query(list(), "select gw from ccm3"), "dstp_connect")
})

test_that("dstp_connect checks the server and prints", {
  con <- test_con()
  expect_s3_class(con, "dstp_connection")
  expect_true(all(c("ccm3", "ocean") %in% con$datasets))
  expect_output(print(con), "<dstp connection> http://127.0.0.1:")
  expect_output(print(con), "ccm3, ")
  # a missing scheme and a trailing slash are fine
  con2 <- dstp_connect(paste0(sub("^http://", "", dstp_test$http), "/"))
  expect_identical(con2$url, dstp_test$http)
})

test_that("an unreachable server is a connection error naming the URL", {
  skip_if_no_server()
  e <- tryCatch(dstp_connect("http://127.0.0.1:1", timeout = 5), error = identity)
  expect_s3_class(e, "dstp_connection_error")
  expect_s3_class(e, "dstp_error")
  expect_match(conditionMessage(e), "cannot reach the dstp server at http://127.0.0.1:1", fixed = TRUE)
  # something that is not a dstp server
  e <- tryCatch(dstp_connect(paste0(dstp_test$http, "/api")), error = identity)
  expect_s3_class(e, "dstp_error")
})

test_that("dstp_datasets lists the catalog with list columns, time spans and boxes", {
  con <- test_con()
  ds <- dstp_datasets(con)
  expect_s3_class(ds, "data.frame")
  expect_true(all(c("id", "title", "summary", "keywords", "attributes", "default_grid", "default_grid_rows",
                    "time_start", "time_end", "size_bytes", "access_policy", "lat_min", "lat_max", "lon_min",
                    "lon_max") %in% names(ds)))
  expect_identical(ds$id, sort(ds$id))
  ccm3 <- ds[ds$id == "ccm3", ]
  expect_type(ds$attributes, "list")
  expect_true("temperature" %in% ccm3$attributes[[1]])
  expect_identical(ccm3$default_grid[[1]], c("time", "lev", "lat", "lon"))
  expect_identical(ccm3$default_grid_rows, 196608)
  expect_identical(ccm3$time_start, "1990-01-16T12:00:00")
  expect_equal(c(ccm3$lat_min, ccm3$lat_max), c(-87.86, 87.86))
  # the catalog's search filters
  expect_identical(dstp_datasets(con, q = "salinity")$id, "ocean")
  expect_identical(dstp_datasets(con, attribute = c("air_temperature", "humidity"))$id, "ccm3")
  early <- dstp_datasets(con, end = "1995")$id
  expect_true("ccm3" %in% early && !"ocean" %in% early)
  none <- dstp_datasets(con, q = "no-such-thing-anywhere")
  expect_identical(nrow(none), 0L)
  expect_identical(names(none), names(ds))
  expect_error(dstp_datasets(con, bbox = c(1, 2, 3)), class = "dstp_query_error")
})

test_that("dstp_describe gives data.frames and prints nicely", {
  con <- test_con()
  d <- dstp_describe(con, "ocean")
  expect_s3_class(d, "dstp_dataset")
  expect_identical(d$id, "ocean")
  expect_identical(d$dimensions$name, c("time", "depth", "lat", "lon"))
  expect_identical(d$dimensions$calendar[1], "360_day")
  expect_identical(d$dimensions$order[d$dimensions$name == "lat"], -1)
  expect_true(all(c("temperature", "salinity") %in% d$attributes$name))
  expect_identical(d$attributes$units[d$attributes$name == "temperature"], "degC")
  expect_identical(d$attributes$standard_name[d$attributes$name == "salinity"], "sea_water_salinity")
  expect_type(d$attributes$cf, "list")
  expect_identical(nrow(d$files), 2L)
  expect_true(all(d$files$size_bytes > 0))
  expect_true(nrow(d$coordinates) >= 4L)
  expect_type(d$global_attributes, "character")
  out <- capture.output(print(d))
  expect_match(out[1], "^<dstp dataset> ocean")
  expect_true(any(grepl("^Dimensions:", out)) && any(grepl("^Attributes:", out)) && any(grepl("^Files:", out)))
  expect_true(any(grepl("360_day", out)))
  expect_true(any(grepl("packed", out)))

  e <- tryCatch(dstp_describe(con, "nope"), error = identity)
  expect_s3_class(e, "dstp_dataset_not_found")
  expect_identical(e$status, 404L)
})

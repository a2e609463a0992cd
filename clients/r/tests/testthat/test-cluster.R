# A scale-out server (`dstp serve --local-cluster 2`: a coordinator and two Dask worker processes)
# on the same catalog as the test server. Over the Python transports the query's pieces come from
# both workers' own data channels; the records are the single server's (the oracle), in any order
# unless the query says `order by`.

by_all_columns <- function(x) {
  o <- do.call(order, c(unname(as.list(x)), list(method = "radix")))
  if (is.data.frame(x)) x[o, , drop = FALSE] else lapply(x, `[`, o)
}

test_that("from a scale-out server, transport = 'striped' fetches every worker's piece and the records are exact", {
  skip_if_no_oracle()
  proc <- start_python("dstp.cli", c("serve", dstp_test$root, "--port", "0", "--http-port", "0",
                                     "--udt-port", "-1", "--local-cluster", "2"),
                       env = "DSTP_BATCH_ROWS=4096", name = "cluster")
  on.exit(stop_python(proc), add = TRUE)
  addr <- wait_for_addresses(proc, c("grpc", "http"), timeout = 180)
  con <- dstp_connect(paste0("http://", addr$http))
  for (sql in c("select temperature, time from ccm3 where humidity > 50",
                "select * from ocean where depth < 50")) {
    expected <- oracle(sql)
    got <- dstp_query(con, sql, transport = "striped")
    expect_same_records(by_all_columns(got), by_all_columns(expected), paste("cluster, striped:", sql))
    info <- attr(got, "dstp_info")
    expect_identical(info$summary$partitions, 2L)
    endpoints <- strsplit(info$summary$endpoints, ",", fixed = TRUE)[[1]]
    expect_length(unique(endpoints), 2L)
    expect_false(any(endpoints %in% c(addr$grpc, addr$http)))  # the workers' channels, not the coordinator's
    expect_identical(info$summary$refetched, 0L)
    # the coordinator's HTTP API answers the same query itself
    expect_same_records(by_all_columns(dstp_query(con, sql)), by_all_columns(expected), paste("cluster, http:", sql))
  }
  sql <- "select salinity, time, depth, lat, lon from ocean where salinity > 34 order by salinity, time, depth, lat, lon"
  got <- dstp_query(con, sql, transport = "striped")
  expect_identical(attr(got, "dstp_info")$summary$partitions, 2L)
  expect_same_records(got, oracle(sql), "cluster, order by")
})

python_check <- function(code, path) {
  out <- run_python(c("-c", shQuote(code), shQuote(path)))
  out[length(out)]
}

test_that("dstp_download writes each format completely", {
  con <- test_con()
  sql <- "select * from ccm3 where lat > 60"
  n <- nrow(dstp_query(con, sql))
  dir <- tempfile("dl-")
  dir.create(dir)

  csv <- dstp_download(con, sql, file.path(dir, "r.csv"))
  expect_identical(as.character(csv), file.path(dir, "r.csv"))
  expect_identical(attr(csv, "bytes"), file.size(csv))
  expect_identical(length(readLines(csv)), n + 1L)
  expect_false(file.exists(paste0(csv, ".part")))

  pq <- dstp_download(con, sql, file.path(dir, "r.parquet"), format = "parquet")
  expect_identical(python_check(
    "import sys, pyarrow.parquet as pq; t = pq.read_table(sys.argv[1]); print(t.num_rows, t.schema.field('time').metadata[b'calendar'].decode())",
    pq), paste(n, "noleap"))

  ar <- dstp_download(con, sql, file.path(dir, "r.arrows"), format = "arrow")
  expect_identical(python_check(
    "import sys, pyarrow as pa; print(pa.ipc.open_stream(open(sys.argv[1], 'rb')).read_all().num_rows)", ar),
    as.character(n))
  expect_identical(length(dstp:::ipc_read_stream(ar)$columns[[1]]), n)

  js <- dstp_download(con, sql, file.path(dir, "r.json"), format = "json")
  expect_identical(nrow(jsonlite::fromJSON(js)), n)
  nd <- dstp_download(con, sql, file.path(dir, "r.ndjson"), format = "ndjson")
  expect_identical(length(readLines(nd)), n)

  nc <- dstp_download(con, "select * from ocean where depth < 20", file.path(dir, "r.nc"), format = "nc")
  got <- python_check(paste(
    "import sys, netCDF4",
    "ds = netCDF4.Dataset(sys.argv[1])",
    "print(ds.Conventions, ds.variables['time'].calendar, *(len(ds.dimensions[d]) for d in ('time', 'depth', 'lat', 'lon')))",
    sep = "\n"), nc)
  expect_identical(got, "CF-1.8 360_day 12 2 36 72")

  lim <- dstp_download(con, sql, file.path(dir, "lim.csv"), limit = 10)
  expect_identical(length(readLines(lim)), 11L)
})

test_that("a failed download raises and leaves no file behind", {
  con <- test_con()
  dir <- tempfile("dl-")
  dir.create(dir)
  target <- file.path(dir, "bad.csv")
  expect_error(dstp_download(con, "select nope from ccm3", target), class = "dstp_unknown_column")
  expect_false(file.exists(target))
  expect_false(file.exists(paste0(target, ".part")))
  # netCDF needs every grid coordinate
  expect_error(dstp_download(con, "select temperature from ocean", file.path(dir, "x.nc"), format = "nc"),
               class = "dstp_query_error")
  expect_identical(list.files(dir), character())
})

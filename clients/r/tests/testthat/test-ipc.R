# The built-in Arrow IPC reader against streams written by pyarrow, type by type.

write_stream <- function(code) {
  path <- tempfile(fileext = ".arrows")
  out <- run_python(c("-c", shQuote(paste(
    "import sys, datetime, decimal, pyarrow as pa",
    code,
    "with pa.OSFile(sys.argv[1], 'wb') as f, pa.ipc.new_stream(f, table.schema) as w:",
    "    for b in table.to_batches(max_chunksize=3): w.write_batch(b)",
    sep = "\n")), shQuote(path)))
  if (!is.null(attr(out, "status"))) stop(paste(out, collapse = "\n"))
  path
}

test_that("every type dstp produces decodes exactly, with NULLs, across several batches", {
  skip_if_no_server()
  path <- write_stream(paste(
    "table = pa.table({",
    "  'i8': pa.array([-128, 127, None, 0, 5], pa.int8()),",
    "  'u8': pa.array([0, 255, None, 1, 2], pa.uint8()),",
    "  'i16': pa.array([-32768, 32767, None, 1, 2], pa.int16()),",
    "  'u16': pa.array([0, 65535, None, 1, 2], pa.uint16()),",
    "  'i32': pa.array([-2**31 + 1, 2**31 - 1, None, -1, -2**31], pa.int32()),",
    "  'u32': pa.array([0, 2**32 - 1, None, 2**31, 1], pa.uint32()),",
    "  'i64': pa.array([-2**53, 2**53, None, -1, -2**31], pa.int64()),",
    "  'u64': pa.array([0, 2**53, None, 2**63, 1], pa.uint64()),",
    "  'f32': pa.array([0.1, -1e30, None, float('nan'), float('inf')], pa.float32()),",
    "  'f64': pa.array([0.1, -1e300, None, float('nan'), -0.0], pa.float64()),",
    "  'b': pa.array([True, False, None, True, False]),",
    "  's': pa.array(['2000-02-30T00:00:00', '', None, 'x', 'abc'], pa.string()),",
    "  'u': pa.array(['h\u00e9', '\u65e5\u672c', None, '', 'z'], pa.string()),",
    "  'ls': pa.array(['a', 'bb', None, '', 'ccc'], pa.large_string()),",
    "  'ts': pa.array([0, 1_700_000_000_123_456, None, -1, 86_400_000_000], pa.timestamp('us')),",
    "  'tsz': pa.array([0, 1, None, 2, 3], pa.timestamp('s', tz='UTC')),",
    "  'tms': pa.array([0, 1500, None, -1500, 3], pa.timestamp('ms')),",
    "  'd32': pa.array([0, 10957, None, -1, 20000], pa.date32()),",
    "  'dec': pa.array([decimal.Decimal('1.50'), decimal.Decimal('-15.25'), None, decimal.Decimal('-0.01'),",
    "                   decimal.Decimal('123456789012.34')], pa.decimal128(14, 2)),",
    "  'n': pa.array([None] * 5, pa.null()),",
    "})", sep = "\n"))
  r <- dstp:::ipc_read_stream(path)
  x <- setNames(r$columns, vapply(r$schema$fields, `[[`, "", "name"))
  expect_identical(x$i8, c(-128L, 127L, NA, 0L, 5L))
  expect_identical(x$u8, c(0L, 255L, NA, 1L, 2L))
  expect_identical(x$i16, c(-32768L, 32767L, NA, 1L, 2L))
  expect_identical(x$u16, c(0L, 65535L, NA, 1L, 2L))
  expect_identical(x$i32, c(-2147483647L, 2147483647L, NA, -1L, NA))  # -2^31 is R's NA_integer_
  expect_identical(x$u32, c(0, 2^32 - 1, NA, 2^31, 1))
  expect_identical(x$i64, c(-2^53, 2^53, NA, -1, -2^31))
  expect_identical(x$u64, c(0, 2^53, NA, 2^63, 1))
  expect_identical(x$f32, c(readBin(writeBin(0.1, raw(), size = 4), "double", size = 4), -1.0000000150474662e30,
                            NA, NaN, Inf))
  expect_identical(x$f64, c(0.1, -1e300, NA, NaN, -0))
  expect_identical(x$b, c(TRUE, FALSE, NA, TRUE, FALSE))
  expect_identical(x$s, c("2000-02-30T00:00:00", "", NA, "x", "abc"))
  expect_identical(x$u, enc2utf8(c("h\u00e9", "\u65e5\u672c", NA, "", "z")))
  expect_identical(x$ls, c("a", "bb", NA, "", "ccc"))
  expect_identical(as.numeric(x$ts), c(0, 1700000000.123456, NA, -1e-6, 86400))
  expect_identical(attr(x$ts, "tzone"), "UTC")
  expect_identical(as.numeric(x$tsz), c(0, 1, NA, 2, 3))
  expect_identical(as.numeric(x$tms), c(0, 1.5, NA, -1.5, 0.003))
  expect_identical(x$d32, as.Date(c("1970-01-01", "2000-01-01", NA, "1969-12-31", "2024-10-04")))
  expect_identical(x$dec, c(1.5, -15.25, NA, -0.01, 123456789012.34))
  expect_identical(x$n, rep(NA, 5))
  types <- vapply(r$schema$fields, `[[`, "", "type")
  expect_identical(types[1:9], c("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float"))
  expect_identical(unname(types[c(10, 12, 15, 16, 18, 19)]),
                   c("double", "string", "timestamp[us]", "timestamp[s, tz=UTC]", "date32[day]", "decimal(14, 2)"))
})

test_that("an empty stream gives typed empty columns; unsupported types are reported", {
  skip_if_no_server()
  path <- write_stream("table = pa.table({'t': pa.array([], pa.timestamp('us')), 'x': pa.array([], pa.float32())})")
  r <- dstp:::ipc_read_stream(path)
  expect_s3_class(r$columns[[1]], "POSIXct")
  expect_identical(r$columns[[2]], double())
  path <- write_stream("table = pa.table({'l': pa.array([[1, 2], None], pa.list_(pa.int32()))})")
  expect_false(dstp:::ipc_supported(dstp:::ipc_read_stream(path, schema_only = TRUE)$schema))
  expect_null(dstp:::ipc_read_stream(path)$columns)
})

test_that("a schema sent as a header (base64 IPC message) parses like the stream's", {
  skip_if_no_server()
  path <- write_stream(paste(
    "table = pa.table({'time': pa.array([], pa.string())})",
    "table = table.replace_schema_metadata({'dstp:dataset': 'ocean'})",
    "table = table.cast(pa.schema([pa.field('time', pa.string(), metadata={'calendar': '360_day'})], metadata={'dstp:dataset': 'ocean'}))",
    sep = "\n"))
  bytes <- readBin(path, "raw", file.size(path))
  s <- dstp:::schema_from_headers(list(`x-dstp-arrow-schema` = jsonlite::base64_enc(bytes)))
  expect_identical(s$fields[[1]]$metadata$calendar, "360_day")
  expect_identical(s$metadata[["dstp:dataset"]], "ocean")
  expect_null(dstp:::schema_from_headers(list()))
})

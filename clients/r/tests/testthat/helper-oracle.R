# The oracle: the same query through the dstp Python client (gRPC), its pyarrow Table turned
# into R vectors by reticulate with nothing of this package involved (no Arrow decoding, no
# CSV reading). Numbers travel as Python floats (float32 values widened exactly), times as
# float microseconds since the epoch, NULLs as a separate mask.

ORACLE_PY <- "
def columns(target, sql):
    import dstp
    import pyarrow as pa
    with dstp.connect(target) as client:
        table = client.query(sql)
    out = []
    for field, col in zip(table.schema, table.columns):
        t = field.type
        nulls = col.is_null().to_pylist()
        if pa.types.is_timestamp(t):
            scale = {'s': 1.0, 'ms': 1e3, 'us': 1e6, 'ns': 1e9}[t.unit]
            values = [float(v) for v in col.cast(pa.int64()).fill_null(0).to_pylist()]
            kind = 'timestamp'
        elif pa.types.is_date32(t):
            values, kind, scale = [float(v) for v in col.cast(pa.int32()).fill_null(0).to_pylist()], 'date', 1.0
        elif pa.types.is_integer(t):
            small = t.bit_width < 32 or (t.bit_width == 32 and pa.types.is_signed_integer(t))
            values, kind, scale = [float(v) for v in col.fill_null(0).to_pylist()], 'integer' if small else 'double', 1.0
        elif pa.types.is_floating(t) or pa.types.is_decimal(t):
            values, kind, scale = col.cast(pa.float64()).fill_null(0.0).to_pylist(), 'double', 1.0
        elif pa.types.is_boolean(t):
            values, kind, scale = col.fill_null(False).to_pylist(), 'logical', 1.0
        else:
            values, kind, scale = col.cast(pa.string()).fill_null('').to_pylist(), 'character', 1.0
        out.append({'name': field.name, 'type': str(t), 'kind': kind, 'scale': scale, 'values': values,
                    'nulls': nulls})
    return out
"

skip_if_no_oracle <- function() {
  skip_if_no_server()
  skip_if_not_installed("reticulate")
  if (!isTRUE(dstp_python_available())) skip(paste("the oracle needs reticulate and Python dstp:",
                                                   attr(dstp_python_available(), "reason")))
}

oracle <- function(sql) {
  skip_if_no_oracle()
  if (is.null(dstp_test$oracle)) {
    dstp_test$oracle <- reticulate::py_run_string(ORACLE_PY, local = TRUE, convert = TRUE)
  }
  cols <- dstp_test$oracle$columns(dstp_test$grpc, sql)
  out <- lapply(cols, function(c) {
    v <- unlist(c$values, use.names = FALSE)
    x <- switch(c$kind,
      timestamp = .POSIXct(as.double(v) / c$scale, tz = "UTC"),
      date = structure(as.double(v), class = "Date"),
      integer = as.integer(v),
      double = as.double(v),
      logical = as.logical(v),
      character = as.character(v)
    )
    if (length(x) == 0L) x <- x[0]
    x[unlist(c$nulls) %||% logical()] <- NA
    x
  })
  names(out) <- vapply(cols, function(c) c$name, "")
  structure(out, types = vapply(cols, function(c) c$type, ""))
}

`%||%` <- function(a, b) if (is.null(a)) b else a

# Every column equal: same class, same values bit for bit (NA and NaN apart), POSIXct in UTC and
# equal to the microsecond.
# Records in the same order, or (ordered = FALSE: a join's or a subquery's records come in no set order)
# the same records in any order.
expect_same_records <- function(df, expected, label = "", ordered = TRUE) {
  expect_s3_class(df, "data.frame")
  if (!ordered && nrow(df) > 1L && length(expected)) {
    df <- df[do.call(order, unname(as.list(df))), , drop = FALSE]
    expected <- as.data.frame(expected, stringsAsFactors = FALSE, optional = TRUE)
    expected <- expected[do.call(order, unname(as.list(expected))), , drop = FALSE]
  }
  expect_identical(names(df), names(expected), label = label)
  n <- if (length(expected)) length(expected[[1L]]) else 0L
  expect_identical(nrow(df), n, label = label)
  for (name in names(expected)) {
    a <- df[[name]]
    b <- expected[[name]]
    what <- sprintf("%s: column %s", label, name)
    expect_identical(class(a), class(b), label = what)
    if (inherits(b, "POSIXct")) {
      expect_identical(attr(a, "tzone"), "UTC", label = what)
      expect_identical(round(as.numeric(a) * 1e6), round(as.numeric(b) * 1e6), label = what)
    } else {
      expect_identical(as.vector(a), as.vector(b), label = what)
    }
  }
}

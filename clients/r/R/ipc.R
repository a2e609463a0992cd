# A small reader of the Arrow IPC stream format, in base R.
#
# The server's `format=arrow` answer is an Arrow IPC *stream*: a Schema
# message, RecordBatch messages, and an end-of-stream marker. Each message is
# a FlatBuffers table (the metadata) followed by a body of plain little-endian
# buffers. Decoding a flat table of the types dstp produces (booleans,
# integers, floats, timestamps, dates, UTF-8 text) needs only readBin() on
# those buffers, so R can read Arrow without the arrow package: no text is
# parsed, float32 values widen exactly to double, and the schema (types,
# units, calendars) travels in the same response as the records.
#
# Anything else (nested types, dictionaries, 256-bit decimals, compressed bodies)
# makes ipc_supported() FALSE and the caller uses CSV instead. The layout
# follows format/Schema.fbs and format/Message.fbs of the Arrow project.

# -- FlatBuffers primitives (positions are 0-based offsets into `buf`) --------

fb_i32 <- function(buf, pos) readBin(buf[pos + 1:4], "integer", size = 4L, endian = "little")

fb_u16 <- function(buf, pos) readBin(buf[pos + 1:2], "integer", size = 2L, signed = FALSE, endian = "little")

fb_i16 <- function(buf, pos) readBin(buf[pos + 1:2], "integer", size = 2L, signed = TRUE, endian = "little")

fb_u8 <- function(buf, pos) as.integer(buf[pos + 1L])

fb_i64 <- function(buf, pos) {
  v <- readBin(buf[pos + 1:8], "integer", n = 2L, size = 4L, endian = "little")
  int64_to_double(v[1L], v[2L])
}

# The position of field `i` (0-based) of the table at `tab`, or NA if absent.
fb_field <- function(buf, tab, i) {
  vt <- tab - fb_i32(buf, tab)
  vsize <- fb_u16(buf, vt)
  at <- 4L + 2L * i
  if (at + 2L > vsize) return(NA_integer_)
  off <- fb_u16(buf, vt + at)
  if (off == 0L) NA_integer_ else tab + off
}

# Follow the offset stored at `pos` (tables, strings and vectors are referenced this way).
fb_deref <- function(buf, pos) pos + fb_i32(buf, pos)

fb_scalar <- function(buf, tab, i, reader, default = 0L) {
  p <- fb_field(buf, tab, i)
  if (is.na(p)) default else reader(buf, p)
}

fb_string <- function(buf, tab, i) {
  p <- fb_field(buf, tab, i)
  if (is.na(p)) return(NA_character_)
  s <- fb_deref(buf, p)
  n <- fb_i32(buf, s)
  if (n == 0L) return("")
  out <- rawToChar(buf[s + 4L + seq_len(n)])
  Encoding(out) <- "UTF-8"
  out
}

fb_table <- function(buf, tab, i) {
  p <- fb_field(buf, tab, i)
  if (is.na(p)) NA_integer_ else fb_deref(buf, p)
}

# Positions of the elements of a vector field: tables (offsets) or inline structs of `struct_size` bytes.
fb_vector <- function(buf, tab, i, struct_size = 0L) {
  p <- fb_field(buf, tab, i)
  if (is.na(p)) return(integer())
  v <- fb_deref(buf, p)
  n <- fb_i32(buf, v)
  if (n == 0L) return(integer())
  if (struct_size > 0L) return(v + 4L + struct_size * (seq_len(n) - 1L))
  at <- v + 4L + 4L * (seq_len(n) - 1L)
  vapply(at, function(q) fb_deref(buf, q), integer(1))
}

fb_key_values <- function(buf, tab, i) {
  kv <- fb_vector(buf, tab, i)
  out <- vapply(kv, function(t) fb_string(buf, t, 1L), character(1))
  names(out) <- vapply(kv, function(t) fb_string(buf, t, 0L), character(1))
  as.list(out)
}

# Combine the low and high 32-bit halves of little-endian int64 values into doubles
# (exact up to 2^53). readBin() maps the bit pattern 0x80000000 to NA_integer_.
int64_to_double <- function(lo, hi, signed = TRUE) {
  lo_d <- as.double(lo)
  hi_d <- as.double(hi)
  if (anyNA(lo)) lo_d[is.na(lo)] <- -2147483648
  if (anyNA(hi)) hi_d[is.na(hi)] <- -2147483648
  out <- hi_d * 4294967296 + lo_d + (lo_d < 0) * 4294967296
  if (!signed) out <- out + (hi_d < 0) * 18446744073709551616
  out
}

# -- Schema -------------------------------------------------------------------

# Arrow's Type union (Schema.fbs), by index.
ARROW_TYPE_NAMES <- c(
  "null", "int", "floatingpoint", "binary", "utf8", "bool", "decimal", "date", "time", "timestamp",
  "interval", "list", "struct", "union", "fixedsizebinary", "fixedsizelist", "map", "duration",
  "largebinary", "largeutf8", "largelist", "runendencoded", "binaryview", "utf8view", "listview",
  "largelistview"
)

TIME_UNITS <- c("s", "ms", "us", "ns")

# Describe one Field table: name, Arrow type (as pyarrow spells it), nullability, metadata.
ipc_field <- function(buf, f) {
  type_id <- fb_scalar(buf, f, 2L, fb_u8)
  kind <- if (type_id >= 1L && type_id <= length(ARROW_TYPE_NAMES)) ARROW_TYPE_NAMES[type_id] else "unknown"
  t <- fb_table(buf, f, 3L)
  bits <- 0L
  signed <- TRUE
  unit <- ""
  tz <- NA_character_
  type <- switch(kind,
    int = {
      bits <- fb_scalar(buf, t, 0L, fb_i32)
      signed <- as.logical(fb_scalar(buf, t, 1L, fb_u8))
      paste0(if (signed) "int" else "uint", bits)
    },
    floatingpoint = c("halffloat", "float", "double")[fb_scalar(buf, t, 0L, fb_i16) + 1L],
    timestamp = {
      unit <- TIME_UNITS[fb_scalar(buf, t, 0L, fb_i16) + 1L]
      tz <- fb_string(buf, t, 1L)
      if (is.na(tz)) sprintf("timestamp[%s]", unit) else sprintf("timestamp[%s, tz=%s]", unit, tz)
    },
    date = if (fb_scalar(buf, t, 0L, fb_i16, default = 1L) == 0L) "date32[day]" else "date64[ms]",
    utf8 = "string",
    largeutf8 = "large_string",
    bool = "bool",
    null = "null",
    binary = "binary",
    decimal = {
      bits <- fb_scalar(buf, t, 2L, fb_i32, default = 128L)
      unit <- as.character(fb_scalar(buf, t, 1L, fb_i32))  # the scale
      sprintf("decimal%s(%d, %s)", if (bits == 128L) "" else bits, fb_scalar(buf, t, 0L, fb_i32), unit)
    },
    kind
  )
  list(
    name = fb_string(buf, f, 0L),
    type = type,
    kind = kind,
    bits = bits,
    signed = signed,
    unit = unit,
    nullable = as.logical(fb_scalar(buf, f, 1L, fb_u8)),
    dictionary = !is.na(fb_field(buf, f, 4L)),
    children = length(fb_vector(buf, f, 5L)),
    metadata = fb_key_values(buf, f, 6L)
  )
}

# A parsed schema: a list of fields plus the schema-level metadata.
ipc_schema_from_message <- function(buf, msg) {
  schema <- fb_table(buf, msg, 2L)
  fields <- lapply(fb_vector(buf, schema, 1L), function(f) ipc_field(buf, f))
  structure(list(fields = fields, metadata = fb_key_values(buf, schema, 2L)), class = "dstp_schema")
}

# -- Messages -----------------------------------------------------------------

# Read the next message's metadata from connection `con`: list(type, buf, msg, body_len), or NULL at
# the end of the file. The body (body_len bytes) is left for the caller to read or skip.
ipc_next_message <- function(con) {
  head <- readBin(con, "raw", 8L)
  if (length(head) == 0L) return(NULL)
  if (length(head) < 4L) stop_dstp("integrity_error", "the Arrow stream ended inside a message header")
  first <- readBin(head[1:4], "integer", size = 4L, endian = "little")
  if (identical(first, -1L)) {
    if (length(head) < 8L) stop_dstp("integrity_error", "the Arrow stream ended inside a message header")
    len <- readBin(head[5:8], "integer", size = 4L, endian = "little")
    rest <- raw()
  } else {  # the pre-1.0 format: no continuation marker
    len <- first
    rest <- head[-(1:4)]
  }
  if (len == 0L) return(list(type = "eos"))
  meta <- c(rest, readBin(con, "raw", len - length(rest)))
  if (length(meta) < len) stop_dstp("integrity_error", "the Arrow stream ended inside a message")
  msg <- fb_deref(meta, 0L)
  header_type <- fb_scalar(meta, msg, 1L, fb_u8)
  body_len <- fb_scalar(meta, msg, 3L, fb_i64, default = 0)
  type <- c("schema", "dictionary", "recordbatch", "tensor", "sparsetensor")[header_type]
  list(type = if (is.na(type)) "unknown" else type, buf = meta, msg = msg, body_len = body_len)
}

# Read exactly n bytes (n may be 0) or fail: the stream ended early.
read_raw <- function(con, n) {
  if (n <= 0) return(raw())
  out <- readBin(con, "raw", n)
  if (length(out) < n) stop_dstp("integrity_error", "the Arrow stream ended inside a message body")
  out
}

#' Parse an Arrow IPC schema message (bytes as in gRPC QueryReply.arrow_schema)
#' @noRd
ipc_parse_schema <- function(bytes) {
  con <- rawConnection(bytes, "rb")
  on.exit(close(con))
  m <- ipc_next_message(con)
  if (is.null(m) || !identical(m$type, "schema")) stop_dstp("protocol_error", "no Arrow schema in the server's answer")
  ipc_schema_from_message(m$buf, m$msg)
}

# Can ipc_decode_batch() read every column of this schema?
ipc_supported <- function(schema) {
  ok <- function(f) {
    !f$dictionary && f$children == 0L && (
      f$kind %in% c("null", "floatingpoint", "bool", "utf8", "largeutf8", "timestamp", "date") &&
        f$type != "halffloat" ||
        f$kind == "decimal" && f$bits == 128L ||
        f$kind == "int" && f$bits %in% c(8L, 16L, 32L, 64L)
    )
  }
  all(vapply(schema$fields, ok, logical(1)))
}


# -- Record batches -------------------------------------------------------------
#
# A record batch body is read buffer by buffer straight from the connection: typed buffers go
# through readBin() into R vectors without an intermediate raw copy.

body_reader <- function(con, body_len) {
  pos <- 0
  goto <- function(offset) {
    if (offset < pos) stop_dstp("protocol_error", "Arrow buffers out of order in a record batch")
    read_raw(con, offset - pos)
    pos <<- offset
  }
  list(
    raw = function(spec) {
      goto(spec[1L])
      pos <<- pos + spec[2L]
      read_raw(con, spec[2L])
    },
    typed = function(spec, what, n, size, signed = TRUE) {
      if (spec[2L] < n * size) stop_dstp("protocol_error", "an Arrow buffer is shorter than its column")
      goto(spec[1L])
      x <- if (n > 0) readBin(con, what, n = n, size = size, signed = signed, endian = "little") else
        vector(if (what == "double") "double" else "integer")
      if (length(x) < n) stop_dstp("integrity_error", "the Arrow stream ended inside a record batch")
      pos <<- pos + n * size
      x
    },
    finish = function() goto(body_len)
  )
}

ipc_strings <- function(offsets, data) {
  n <- length(offsets) - 1L
  if (n == 0L) return(character())
  # the buffer may be padded past the last string, and offsets need not start at 0
  first <- offsets[1L]
  data <- if (offsets[n + 1L] > first) data[(first + 1):offsets[n + 1L]] else raw()
  if (length(data) == 0L) return(rep("", n))
  starts <- offsets[-length(offsets)] - first
  ends <- offsets[-1L] - first
  if (!any(data > as.raw(0x7f)) && !any(data == as.raw(0))) {
    # ASCII (ISO times, most names): cut one string, byte positions are character positions
    return(substring(rawToChar(data), starts + 1, ends))
  }
  parts <- split(data, factor(rep.int(seq_len(n), ends - starts), levels = seq_len(n)))
  out <- vapply(parts, function(p) if (length(p)) rawToChar(p) else "", character(1), USE.NAMES = FALSE)
  Encoding(out) <- "UTF-8"
  out
}

# Interleaved little-endian int64 values read as pairs of int32, as doubles.
int64_pairs <- function(v, signed = TRUE) {
  dim(v) <- c(2L, length(v) %/% 2L)
  int64_to_double(v[1L, ], v[2L, ], signed = signed)
}

# Decode one column (as a plain vector: timestamps in seconds, dates in days; see ipc_finish()).
# `specs` is a list of c(offset, length) for this column's buffers.
ipc_column <- function(field, n, null_count, specs, body) {
  if (field$kind == "null") return(rep(NA, n))
  validity <- body$raw(specs[[1L]])
  data <- specs[[2L]]
  value <- switch(field$kind,
    floatingpoint = body$typed(data, "double", n, if (field$type == "float") 4L else 8L),
    int = switch(as.character(field$bits),
      "64" = int64_pairs(body$typed(data, "integer", 2L * n, 4L), signed = field$signed),
      "32" = {
        v <- body$typed(data, "integer", n, 4L)
        if (field$signed) v else int64_to_double(v, 0L, signed = FALSE)
      },
      body$typed(data, "integer", n, field$bits %/% 8L, signed = field$signed)
    ),
    bool = as.logical(rawToBits(body$raw(data))[seq_len(n)]),
    timestamp = int64_pairs(body$typed(data, "integer", 2L * n, 4L)) /
      c(s = 1, ms = 1e3, us = 1e6, ns = 1e9)[[field$unit]],
    date = if (field$type == "date32[day]") {
      as.double(body$typed(data, "integer", n, 4L))
    } else {
      int64_pairs(body$typed(data, "integer", 2L * n, 4L)) / 86400000
    },
    decimal = {
      # 128-bit two's complement integers scaled by 10^-scale; the low half is read as signed
      # 64-bit so small negative numbers stay exact (as exact as a parsed decimal up to 2^53)
      v <- body$typed(data, "integer", 4L * n, 4L)
      dim(v) <- c(4L, n)
      lo <- int64_to_double(v[1L, ], v[2L, ])
      hi <- int64_to_double(v[3L, ], v[4L, ])
      ((hi + (lo < 0)) * 18446744073709551616 + lo) / 10^as.numeric(field$unit)
    },
    utf8 = {
      offsets <- body$typed(data, "integer", n + 1L, 4L)
      ipc_strings(offsets, body$raw(specs[[3L]]))
    },
    largeutf8 = {
      offsets <- int64_pairs(body$typed(data, "integer", 2L * (n + 1L), 4L))
      ipc_strings(offsets, body$raw(specs[[3L]]))
    },
    stop_dstp("protocol_error", sprintf("cannot decode Arrow type %s", field$type))
  )
  if (null_count > 0 && length(validity)) {
    value[!as.logical(rawToBits(validity)[seq_len(n)])] <- NA
  }
  value
}

# Give decoded columns their R classes.
ipc_finish <- function(field, x) {
  switch(field$kind,
    timestamp = .POSIXct(x, tz = "UTC"),
    date = structure(x, class = "Date"),
    x
  )
}

# Number of buffers each column takes in a record batch body.
ipc_buffer_count <- function(field) {
  switch(field$kind, null = 0L, utf8 = 3L, largeutf8 = 3L, binary = 3L, largebinary = 3L, 2L)
}

ipc_decode_batch <- function(schema, m, con) {
  buf <- m$buf
  rb <- fb_table(buf, m$msg, 2L)
  if (!is.na(fb_field(buf, rb, 3L))) {
    stop_dstp("protocol_error", "compressed Arrow record batches are not supported by this client")
  }
  nodes <- fb_vector(buf, rb, 1L, struct_size = 16L)
  specs <- fb_vector(buf, rb, 2L, struct_size = 16L)
  fields <- schema$fields
  if (length(nodes) != length(fields)) stop_dstp("protocol_error", "a record batch does not match its schema")
  body <- body_reader(con, m$body_len)
  out <- vector("list", length(fields))
  b <- 0L
  for (i in seq_along(fields)) {
    k <- ipc_buffer_count(fields[[i]])
    bufs <- lapply(specs[b + seq_len(k)], function(p) c(fb_i64(buf, p), fb_i64(buf, p + 8L)))
    b <- b + k
    n <- fb_i64(buf, nodes[i])
    value <- ipc_column(fields[[i]], n, fb_i64(buf, nodes[i] + 8L), bufs, body)
    if (length(value) != n) {
      stop_dstp("integrity_error", sprintf("column %s: %d values where %d were announced", fields[[i]]$name,
                                           length(value), n))
    }
    out[[i]] <- value
  }
  body$finish()
  out
}

# An empty column of the R type a field decodes to (before ipc_finish()).
ipc_empty <- function(field) {
  switch(field$kind,
    int = if (field$bits < 32L || field$bits == 32L && field$signed) integer() else double(),
    bool = logical(),
    utf8 = character(),
    largeutf8 = character(),
    null = logical(),
    double()
  )
}

# The truncation notice of an Arrow stream (docs/web.md): a stream that ends without its end-of-stream marker
# right after a record batch whose custom metadata says dstp:truncated. list(reason, rows, trailer_bytes = 0)
# or NULL. Only message headers are read; bodies are skipped.
arrow_truncation <- function(path) {
  con <- file(path, "rb")
  on.exit(close(con))
  meta <- list()
  repeat {
    m <- tryCatch(ipc_next_message(con), dstp_error = function(e) NULL)
    if (is.null(m)) break
    if (identical(m$type, "eos")) return(NULL)
    meta <- fb_key_values(m$buf, m$msg, 4L)  # Message.custom_metadata
    if (m$body_len > 0) seek(con, m$body_len, origin = "current")
  }
  if (!identical(meta[["dstp:truncated"]], "true")) return(NULL)
  rows <- meta[["dstp:truncated_rows"]]
  list(reason = meta[["dstp:truncated_reason"]] %||% "cut at a server limit",
       rows = if (is.null(rows)) NULL else as.numeric(rows), trailer_bytes = 0)
}

#' Read an Arrow IPC stream file into a list(schema, columns)
#'
#' Raises a dstp_integrity_error condition when the stream lacks its end
#' marker (the server stopped mid-result), unless `truncated` (the caller
#' found the stream's truncation notice, see arrow_truncation()). `columns`
#' is NULL when the schema has a type this reader does not decode (see ipc_supported()).
#' @noRd
ipc_read_stream <- function(path, schema_only = FALSE, truncated = FALSE) {
  con <- file(path, "rb")
  on.exit(close(con))
  first <- ipc_next_message(con)
  if (is.null(first) || !identical(first$type, "schema")) {
    stop_dstp("integrity_error", "the Arrow stream does not start with a schema")
  }
  schema <- ipc_schema_from_message(first$buf, first$msg)
  if (schema_only || !ipc_supported(schema)) return(list(schema = schema, columns = NULL))
  read_raw(con, first$body_len)
  batches <- list()
  repeat {
    m <- ipc_next_message(con)
    if (is.null(m) && truncated) break
    if (is.null(m)) {
      stop_dstp("integrity_error", paste(
        "the Arrow stream ended without its end-of-stream marker: the server stopped before the",
        "result was complete"))
    }
    if (m$type == "eos") break
    if (m$type == "recordbatch") {
      batches[[length(batches) + 1L]] <- ipc_decode_batch(schema, m, con)
    } else if (m$type == "dictionary") {
      stop_dstp("protocol_error", "dictionary-encoded Arrow columns are not supported by this client")
    } else {
      read_raw(con, m$body_len)
    }
  }
  columns <- lapply(seq_along(schema$fields), function(i) {
    f <- schema$fields[[i]]
    x <- if (length(batches) == 0L) ipc_empty(f) else if (length(batches) == 1L) batches[[1L]][[i]] else
      unlist(lapply(batches, `[[`, i), use.names = FALSE)
    ipc_finish(f, x)
  })
  list(schema = schema, columns = columns)
}

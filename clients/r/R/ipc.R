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
# Anything else (nested types, dictionaries, decimals, compressed bodies)
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
  lo <- as.double(lo)
  hi <- as.double(hi)
  lo[is.na(lo)] <- -2147483648
  hi[is.na(hi)] <- -2147483648
  neg <- lo < 0
  lo[neg] <- lo[neg] + 4294967296
  if (!signed) {
    hneg <- hi < 0
    hi[hneg] <- hi[hneg] + 4294967296
  }
  hi * 4294967296 + lo
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
    decimal = sprintf("decimal(%d, %d)", fb_scalar(buf, t, 0L, fb_i32), fb_scalar(buf, t, 1L, fb_i32)),
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

# Read the next message from connection `con`: list(type, buf, msg, body) or NULL at end of stream.
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
  body <- if (body_len > 0) readBin(con, "raw", body_len) else raw()
  if (length(body) < body_len) stop_dstp("integrity_error", "the Arrow stream ended inside a record batch")
  type <- c("schema", "dictionary", "recordbatch", "tensor", "sparsetensor")[header_type]
  list(type = if (is.na(type)) "unknown" else type, buf = meta, msg = msg, body = body)
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
        f$kind == "int" && f$bits %in% c(8L, 16L, 32L, 64L)
    )
  }
  all(vapply(schema$fields, ok, logical(1)))
}

# -- Record batches -------------------------------------------------------------

ipc_buffer <- function(body, spec) {
  if (spec[2] == 0) return(raw())
  body[spec[1] + seq_len(spec[2])]
}

ipc_strings <- function(offsets, data) {
  n <- length(offsets) - 1L
  if (n == 0L) return(character())
  if (length(data) == 0L) return(rep("", n))
  starts <- offsets[-length(offsets)]
  ends <- offsets[-1L]
  if (!any(data > as.raw(0x7f)) && !any(data == as.raw(0))) {
    # ASCII (ISO times, most names): cut one string, byte positions are character positions
    return(substring(rawToChar(data), starts + 1, ends))
  }
  parts <- split(data, factor(rep.int(seq_len(n), ends - starts), levels = seq_len(n)))
  out <- vapply(parts, function(p) if (length(p)) rawToChar(p) else "", character(1), USE.NAMES = FALSE)
  Encoding(out) <- "UTF-8"
  out
}

# Decode one column: `node` is c(length, null_count); `bufs` a list of c(offset, length).
ipc_column <- function(field, n, null_count, bufs, body) {
  if (field$kind == "null") return(rep(NA, n))
  validity <- ipc_buffer(body, bufs[[1L]])
  data <- ipc_buffer(body, bufs[[2L]])
  value <- switch(field$kind,
    floatingpoint = readBin(data, "double", n = n, size = if (field$type == "float") 4L else 8L,
                            endian = "little"),
    int = {
      if (field$bits == 64L) {
        v <- readBin(data, "integer", n = 2L * n, size = 4L, endian = "little")
        int64_to_double(v[c(TRUE, FALSE)], v[c(FALSE, TRUE)], signed = field$signed)
      } else if (field$bits == 32L) {
        v <- readBin(data, "integer", n = n, size = 4L, endian = "little")
        if (field$signed) v else int64_to_double(v, 0L, signed = FALSE)
      } else {
        readBin(data, "integer", n = n, size = field$bits %/% 8L, signed = field$signed, endian = "little")
      }
    },
    bool = as.logical(rawToBits(data)[seq_len(n)]),
    timestamp = {
      v <- readBin(data, "integer", n = 2L * n, size = 4L, endian = "little")
      us <- int64_to_double(v[c(TRUE, FALSE)], v[c(FALSE, TRUE)])
      .POSIXct(us / c(s = 1, ms = 1e3, us = 1e6, ns = 1e9)[[field$unit]], tz = "UTC")
    },
    date = {
      if (field$type == "date32[day]") {
        days <- as.double(readBin(data, "integer", n = n, size = 4L, endian = "little"))
      } else {
        v <- readBin(data, "integer", n = 2L * n, size = 4L, endian = "little")
        days <- int64_to_double(v[c(TRUE, FALSE)], v[c(FALSE, TRUE)]) / 86400000
      }
      structure(days, class = "Date")
    },
    utf8 = ipc_strings(readBin(data, "integer", n = n + 1L, size = 4L, endian = "little"),
                       ipc_buffer(body, bufs[[3L]])),
    largeutf8 = {
      v <- readBin(data, "integer", n = 2L * (n + 1L), size = 4L, endian = "little")
      ipc_strings(int64_to_double(v[c(TRUE, FALSE)], v[c(FALSE, TRUE)]), ipc_buffer(body, bufs[[3L]]))
    },
    stop_dstp("protocol_error", sprintf("cannot decode Arrow type %s", field$type))
  )
  if (length(value) != n) stop_dstp("integrity_error", sprintf("column %s: %d values where %d were announced",
                                                                field$name, length(value), n))
  if (null_count > 0 && length(validity)) {
    value[!as.logical(rawToBits(validity)[seq_len(n)])] <- NA
  }
  value
}

# Number of buffers each column takes in a record batch body.
ipc_buffer_count <- function(field) {
  switch(field$kind, null = 0L, utf8 = 3L, largeutf8 = 3L, binary = 3L, largebinary = 3L, 2L)
}

ipc_decode_batch <- function(schema, m) {
  buf <- m$buf
  rb <- fb_table(buf, m$msg, 2L)
  if (!is.na(fb_field(buf, rb, 3L))) {
    stop_dstp("protocol_error", "compressed Arrow record batches are not supported by this client")
  }
  nodes <- fb_vector(buf, rb, 1L, struct_size = 16L)
  specs <- fb_vector(buf, rb, 2L, struct_size = 16L)
  fields <- schema$fields
  if (length(nodes) != length(fields)) stop_dstp("protocol_error", "a record batch does not match its schema")
  out <- vector("list", length(fields))
  b <- 0L
  for (i in seq_along(fields)) {
    k <- ipc_buffer_count(fields[[i]])
    bufs <- lapply(specs[b + seq_len(k)], function(p) c(fb_i64(buf, p), fb_i64(buf, p + 8L)))
    b <- b + k
    out[[i]] <- ipc_column(fields[[i]], fb_i64(buf, nodes[i]), fb_i64(buf, nodes[i] + 8L), bufs, m$body)
  }
  out
}

# An empty column of the R type a field decodes to.
ipc_empty <- function(field) {
  switch(field$kind,
    floatingpoint = double(),
    int = if (field$bits < 32L || field$bits == 32L && field$signed) integer() else double(),
    bool = logical(),
    timestamp = .POSIXct(double(), tz = "UTC"),
    date = structure(double(), class = "Date"),
    utf8 = character(),
    largeutf8 = character(),
    logical()
  )
}

#' Read an Arrow IPC stream file into a list(schema, columns)
#'
#' Raises a dstp_integrity_error condition when the stream lacks its end
#' marker (the server stopped mid-result).
#' @noRd
ipc_read_stream <- function(path, schema_only = FALSE) {
  con <- file(path, "rb")
  on.exit(close(con))
  first <- ipc_next_message(con)
  if (is.null(first) || !identical(first$type, "schema")) {
    stop_dstp("integrity_error", "the Arrow stream does not start with a schema")
  }
  schema <- ipc_schema_from_message(first$buf, first$msg)
  if (schema_only) return(list(schema = schema, columns = NULL))
  if (!ipc_supported(schema)) return(list(schema = schema, columns = NULL))
  batches <- list()
  repeat {
    m <- ipc_next_message(con)
    if (is.null(m)) {
      stop_dstp("integrity_error", paste(
        "the Arrow stream ended without its end-of-stream marker: the server stopped before the",
        "result was complete"))
    }
    if (m$type == "eos") break
    if (m$type == "recordbatch") {
      batches[[length(batches) + 1L]] <- ipc_decode_batch(schema, m)
    } else if (m$type == "dictionary") {
      stop_dstp("protocol_error", "dictionary-encoded Arrow columns are not supported by this client")
    }
  }
  columns <- lapply(seq_along(schema$fields), function(i) {
    parts <- lapply(batches, `[[`, i)
    if (length(parts) == 0L) return(ipc_empty(schema$fields[[i]]))
    if (length(parts) == 1L) return(parts[[1L]])
    out <- do.call(c, parts)
    if (inherits(parts[[1L]], "POSIXct")) attr(out, "tzone") <- "UTC"
    out
  })
  list(schema = schema, columns = columns)
}

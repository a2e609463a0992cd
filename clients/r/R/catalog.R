# Discovery: the catalog (/datasets.json) and one dataset (/datasets/{id}.json).

chr <- function(x) if (is.null(x)) NA_character_ else as.character(x)
num <- function(x) if (is.null(x)) NA_real_ else as.numeric(x)
lgl <- function(x) if (is.null(x)) NA else as.logical(x)
strs <- function(x) as.character(unlist(x %||% list(), use.names = FALSE))

# A data.frame from a list of records, one column per field spec (name = converter).
records_df <- function(records, spec) {
  cols <- lapply(names(spec), function(field) {
    conv <- spec[[field]]
    values <- lapply(records, function(r) conv(r[[field]]))
    if (identical(conv, strs)) return(values)
    unlist(values, use.names = FALSE) %||% conv(NULL)[0]
  })
  names(cols) <- names(spec)
  df <- data.frame(row.names = seq_along(records))
  for (n in names(cols)) df[[n]] <- cols[[n]]
  rownames(df) <- NULL
  df
}

summaries_df <- function(items) {
  df <- records_df(items, list(
    id = chr, title = chr, summary = chr, keywords = strs, attributes = strs, default_grid = strs,
    default_grid_rows = num, time_start = chr, time_end = chr, size_bytes = num, access_policy = chr
  ))
  bbox <- lapply(items, function(d) if (length(d$bbox) == 4L) as.numeric(unlist(d$bbox)) else rep(NA_real_, 4))
  m <- matrix(unlist(bbox) %||% numeric(), ncol = 4L, byrow = TRUE)
  df$lat_min <- m[, 1L]
  df$lat_max <- m[, 2L]
  df$lon_min <- m[, 3L]
  df$lon_max <- m[, 4L]
  df
}

#' List the datasets a server publishes
#'
#' One row per dataset, in id order, from the server's `/datasets.json`. The
#' catalog's search filters are passed through.
#'
#' @param con A connection from [dstp_connect()].
#' @param q Words that must all match (id, title, summary, keywords,
#'   attribute names and standard names), as in the catalog's search box.
#' @param attribute Attribute names or CF standard names every dataset must have.
#' @param start,end Keep datasets whose time span overlaps `[start, end]`
#'   (ISO 8601 prefixes such as `"1990"` or `"2000-06-30"`).
#' @param bbox `c(lat_min, lat_max, lon_min, lon_max)`: keep datasets whose
#'   region overlaps this box.
#' @return A data.frame with columns `id`, `title`, `summary`, `keywords`,
#'   `attributes`, `default_grid` (list columns of character vectors: use
#'   `"temperature" %in% ds$attributes[[1]]`), `default_grid_rows` (records
#'   of `select *`), `time_start`, `time_end` (ISO 8601 text on the dataset's
#'   own calendar, `""` without a time axis; text because a 360_day date such
#'   as `2000-02-30` is no POSIXct), `size_bytes`, `access_policy`, and the
#'   bounding box `lat_min`, `lat_max`, `lon_min`, `lon_max` (coordinate
#'   values; `NA` without one).
#' @seealso [dstp_describe()]
#' @examples
#' \dontrun{
#' con <- dstp_connect("http://127.0.0.1:8080")
#' ds <- dstp_datasets(con)
#' ds[, c("id", "default_grid_rows", "time_start", "time_end")]
#' dstp_datasets(con, q = "salinity")
#' }
#' @export
dstp_datasets <- function(con, q = NULL, attribute = NULL, start = NULL, end = NULL, bbox = NULL) {
  check_connection(con)
  query <- list(q = q, start = start, end = end, bbox = if (!is.null(bbox)) paste(bbox, collapse = ","))
  query <- c(query, stats::setNames(as.list(as.character(attribute)), rep("attribute", length(attribute))))
  summaries_df(http_json(con, "/datasets.json", query))
}

#' Describe one dataset
#'
#' Everything the server says about a dataset (its `/datasets/{id}.json`):
#' dimensions with ranges, coordinates and attributes with units and types,
#' files, correlation keys and global attributes.
#'
#' @param con A connection from [dstp_connect()].
#' @param id The dataset id, e.g. `"ccm3"`.
#' @param x A `dstp_dataset` (for `print()` and `format()`).
#' @param ... Ignored.
#' @return An object of class `dstp_dataset`, a list with
#'   * `id`, `title`, `summary` (text), `default_grid`, `default_grid_rows`,
#'     `time_start`, `time_end`, `bbox`;
#'   * `dimensions`: a data.frame (`name`, `size`, `coordinate`, `min`, `max`
#'     (as text), `order` (1 ascending, -1 descending), `units`, `calendar`,
#'     `axis`);
#'   * `coordinates`, `attributes`: data.frames (`name`, `variable`,
#'     `dimensions` (comma-joined), `units`, `description`, `arrow_type`,
#'     `standard_name`, `long_name`, `packed`, `nullable`, `coordinate`, and
#'     `cf`, a list column of every CF attribute);
#'   * `files`: a data.frame (`name`, `size_bytes`, `format`, `start`, `count`);
#'   * `correlation_keys`: a data.frame (`name`, `column`, `standard_name`, `units`);
#'   * `global_attributes`: a named character vector;
#'   * `aggregate_dimension`, `license`, `source`, `descriptor_xml`.
#'
#'   Printing it shows a summary; the parts are ordinary data.frames.
#' @seealso [dstp_datasets()], [dstp_query()]
#' @examples
#' \dontrun{
#' con <- dstp_connect("http://127.0.0.1:8080")
#' d <- dstp_describe(con, "ocean")
#' d
#' d$attributes[, c("name", "units", "arrow_type")]
#' d$dimensions$calendar
#' }
#' @export
dstp_describe <- function(con, id) {
  check_connection(con)
  stopifnot(is.character(id), length(id) == 1L)
  j <- http_json(con, sprintf("/datasets/%s.json", curl::curl_escape(id)))
  s <- summaries_df(list(j$summary))
  columns <- function(items) {
    df <- records_df(items, list(
      name = chr, variable = chr, units = chr, description = chr, arrow_type = chr, packed = lgl,
      nullable = lgl, coordinate = lgl
    ))
    df$dimensions <- vapply(items, function(c) paste(strs(c$dimensions), collapse = ", "), character(1))
    df$standard_name <- vapply(items, function(c) chr(c$cf$standard_name %||% ""), character(1))
    df$long_name <- vapply(items, function(c) chr(c$cf$long_name %||% ""), character(1))
    df$cf <- lapply(items, function(c) unlist(c$cf) %||% character())
    df[, c("name", "variable", "dimensions", "units", "description", "arrow_type", "standard_name",
           "long_name", "packed", "nullable", "coordinate", "cf")]
  }
  structure(list(
    id = s$id, title = s$title, summary = s$summary, keywords = s$keywords[[1L]],
    default_grid = s$default_grid[[1L]], default_grid_rows = s$default_grid_rows,
    time_start = s$time_start, time_end = s$time_end,
    bbox = c(lat_min = s$lat_min, lat_max = s$lat_max, lon_min = s$lon_min, lon_max = s$lon_max),
    size_bytes = s$size_bytes,
    dimensions = records_df(j$dimensions, list(
      name = chr, size = num, coordinate = chr, min = chr, max = chr, order = num, units = chr, calendar = chr,
      axis = chr
    )),
    coordinates = columns(j$coordinates),
    attributes = columns(j$attributes),
    files = records_df(j$files, list(name = chr, size_bytes = num, format = chr, start = num, count = num)),
    correlation_keys = records_df(j$correlation_keys, list(name = chr, column = chr, standard_name = chr,
                                                           units = chr)),
    global_attributes = unlist(j$global_attributes) %||% character(),
    aggregate_dimension = chr(j$aggregate_dimension), license = chr(j$license), source = chr(j$source),
    descriptor_xml = chr(j$descriptor_xml)
  ), class = "dstp_dataset")
}

# Format a data.frame as aligned text lines (left-aligned text, right-aligned numbers).
table_lines <- function(df, indent = "  ") {
  if (nrow(df) == 0L) return(paste0(indent, "(none)"))
  cells <- lapply(df, function(x) {
    if (is.numeric(x)) format(x, big.mark = ",", trim = TRUE, scientific = FALSE) else as.character(x)
  })
  header <- names(df)
  widths <- mapply(function(x, h) max(nchar(c(x, h), type = "width")), cells, header)
  right <- vapply(df, is.numeric, logical(1))
  pad <- function(x, w, r) formatC(x, width = if (r) w else -w)
  line <- function(values) {
    paste0(indent, sub("\\s+$", "", paste(mapply(pad, values, widths, right), collapse = "  ")))
  }
  c(line(header), vapply(seq_len(nrow(df)), function(i) line(vapply(cells, `[`, "", i)), character(1)))
}

ellipsis <- function(x, width) ifelse(nchar(x) > width, paste0(substr(x, 1L, width - 1L), "\u2026"), x)

#' @rdname dstp_describe
#' @export
format.dstp_dataset <- function(x, ...) {
  size <- if (is.na(x$size_bytes)) "" else paste(",", format_bytes(x$size_bytes))
  dims <- x$dimensions
  extent <- ifelse(dims$coordinate == "" | (dims$min == "" & dims$max == ""), "",
                   paste(dims$min, "\u2026", dims$max))
  dims_df <- data.frame(dimension = dims$name, size = dims$size, axis = dims$axis, units = dims$units,
                        calendar = dims$calendar, range = extent,
                        order = c("descending", "", "ascending")[dims$order + 2L], stringsAsFactors = FALSE)
  a <- x$attributes
  flags <- ifelse(a$packed, "packed", "")
  attr_df <- data.frame(attribute = a$name, dimensions = a$dimensions, units = a$units, type = a$arrow_type,
                        description = ellipsis(ifelse(a$long_name != "", a$long_name, a$description), 40L),
                        note = flags, stringsAsFactors = FALSE)
  if (!any(nzchar(flags))) attr_df$note <- NULL
  f <- x$files
  files_df <- data.frame(file = f$name, format = f$format, bytes = f$size_bytes, stringsAsFactors = FALSE)
  if (!is.na(x$aggregate_dimension) && nzchar(x$aggregate_dimension)) {
    files_df$index <- sprintf("%s[%g:%g]", x$aggregate_dimension, f$start, f$start + f$count)
  }
  time <- if (nzchar(x$time_start %|NA|% "")) sprintf("; time %s \u2026 %s", x$time_start, x$time_end) else ""
  c(
    sprintf("<dstp dataset> %s \u2014 %s", x$id, x$title),
    if (!is.na(x$summary) && nzchar(x$summary)) strwrap(x$summary, width = 88L, prefix = "  "),
    sprintf("  %d file(s)%s; select * has %s records on %s%s", nrow(f), size,
            format(x$default_grid_rows, big.mark = ","), paste(x$default_grid, collapse = " \u00d7 "), time),
    "", "Dimensions:", table_lines(dims_df),
    "", "Attributes:", table_lines(attr_df),
    "", "Files:", table_lines(files_df),
    if (nrow(x$correlation_keys)) {
      c("", paste("Correlation keys:", paste0(x$correlation_keys$name, "=", x$correlation_keys$column,
                                               collapse = ", ")))
    }
  )
}

format_bytes <- function(n) {
  units <- c("bytes", "KiB", "MiB", "GiB", "TiB")
  k <- if (n > 0) min(length(units) - 1L, floor(log(n, 1024))) else 0
  if (k == 0) sprintf("%s bytes", format(n, big.mark = ",")) else sprintf("%.1f %s", n / 1024^k, units[k + 1L])
}

`%|NA|%` <- function(a, b) if (length(a) == 0L || is.na(a)) b else a

#' @rdname dstp_describe
#' @export
print.dstp_dataset <- function(x, ...) {
  cat(format(x, ...), sep = "\n")
  invisible(x)
}

# Errors as R conditions, one class per server error code, mirroring dstp.errors:
#
#   dstp_error
#   +-- dstp_query_error            invalid_query (400)
#   |   +-- dstp_syntax_error       syntax_error
#   |   +-- dstp_unknown_column     unknown_column
#   |   +-- dstp_forbidden          forbidden
#   +-- dstp_not_found              not_found (404)
#   |   +-- dstp_dataset_not_found  dataset_not_found
#   +-- dstp_limit_exceeded         limit_exceeded (429)
#   |   +-- dstp_truncated          truncated (a result cut at max_result_rows/max_result_bytes)
#   +-- dstp_timeout                timeout (504)
#   +-- dstp_cancelled              cancelled
#   +-- dstp_ticket_error           bad_ticket, ticket_expired
#   +-- dstp_transport_error        transport_error (503)
#   |   +-- dstp_connection_error   (client side: the server cannot be reached)
#   |   +-- dstp_transport_unavailable
#   |   +-- dstp_integrity_error    (incomplete or corrupted results)
#   |   +-- dstp_protocol_error
#   +-- dstp_catalog_error          catalog_error, bad_descriptor
#   |   +-- dstp_bad_data_file      bad_data_file
#   +-- dstp_server_error           internal (500)
#
# A truncated result the caller accepted (allow_truncated = TRUE) is a warning of class
# c("dstp_truncated", "dstp_warning", "warning", "condition") instead.

DSTP_CLASSES <- list(
  invalid_query = "dstp_query_error",
  syntax_error = c("dstp_syntax_error", "dstp_query_error"),
  unknown_column = c("dstp_unknown_column", "dstp_query_error"),
  forbidden = c("dstp_forbidden", "dstp_query_error"),
  not_found = "dstp_not_found",
  dataset_not_found = c("dstp_dataset_not_found", "dstp_not_found"),
  file_not_published = c("dstp_file_not_published", "dstp_not_found"),
  limit_exceeded = "dstp_limit_exceeded",
  truncated = c("dstp_truncated", "dstp_limit_exceeded"),
  timeout = "dstp_timeout",
  cancelled = "dstp_cancelled",
  bad_ticket = "dstp_ticket_error",
  ticket_expired = c("dstp_ticket_expired", "dstp_ticket_error"),
  transport_error = "dstp_transport_error",
  connection_error = c("dstp_connection_error", "dstp_transport_error"),
  transport_unavailable = c("dstp_transport_unavailable", "dstp_transport_error"),
  integrity_error = c("dstp_integrity_error", "dstp_transport_error"),
  protocol_error = c("dstp_protocol_error", "dstp_transport_error"),
  catalog_error = "dstp_catalog_error",
  bad_descriptor = c("dstp_bad_descriptor", "dstp_catalog_error"),
  bad_data_file = c("dstp_bad_data_file", "dstp_catalog_error"),
  internal = "dstp_server_error"
)

# Fallback for codes this client does not know, by HTTP status.
STATUS_CLASSES <- list(
  "400" = "dstp_query_error", "404" = "dstp_not_found", "429" = "dstp_limit_exceeded",
  "499" = "dstp_cancelled", "502" = "dstp_integrity_error", "503" = "dstp_transport_error",
  "504" = "dstp_timeout", "500" = "dstp_server_error"
)

#' Build a dstp error condition
#'
#' `code` is the server's error code (`"unknown_column"`, `"forbidden"`, ...);
#' the condition's class follows the server's error tree (see the package
#' documentation, `?dstp_error`), ending in `"dstp_error", "error", "condition"`.
#' @noRd
dstp_condition <- function(code, message, line = NULL, column = NULL, token = NULL, status = NULL,
                           url = NULL, call = NULL) {
  code <- if (is.null(code) || !nzchar(code)) "internal" else code
  classes <- DSTP_CLASSES[[code]]
  if (is.null(classes)) {
    classes <- c(paste0("dstp_", code), STATUS_CLASSES[[as.character(status %||% 500)]] %||% character())
  }
  structure(
    class = unique(c(classes, "dstp_error", "error", "condition")),
    list(message = message, call = call, code = code, line = line, column = column, token = token,
         status = status, url = url)
  )
}

stop_dstp <- function(code, message, ...) {
  stop(dstp_condition(code, message, ...))
}

#' @rdname dstp_error
#' @param c A `dstp_error` condition.
#' @export
conditionMessage.dstp_error <- function(c) {
  what <- if (!is.null(c$status)) sprintf("%s (HTTP %s)", c$code, c$status) else c$code
  paste0(what, ": ", c$message)
}

`%||%` <- function(a, b) if (is.null(a)) b else a

# A result cut at the server's max_result_rows/max_result_bytes: `cut` is list(reason, rows) (rows may be NULL).
# Raises a dstp_truncated error, or with `allow` warns (class dstp_truncated, dstp_warning) and returns the reason.
signal_truncation <- function(cut, allow, url = NULL) {
  after <- if (is.null(cut$rows)) "" else sprintf(" after %s records", format(cut$rows, big.mark = ",", scientific = FALSE))
  fix <- if (allow) "to get all of it" else "or pass allow_truncated = TRUE to keep the records that arrived"
  message <- sprintf("the result is incomplete: the server stopped it%s (%s); narrow the query (WHERE on coordinates, %s",
                     after, cut$reason, paste("stride(), tablesample, LIMIT)", fix))
  if (!allow) stop(dstp_condition("truncated", message, url = url))
  warning(structure(class = c("dstp_truncated", "dstp_warning", "warning", "condition"),
                    list(message = message, call = NULL, reason = cut$reason, rows = cut$rows)))
  invisible(cut$reason)
}

# Time to fetch one query's records into R, by transport and wire format, next to the
# Python client's time for the same query in the same run. Medians of RUNS runs.
#
#   python3 -m dstp.cli samples /tmp/med --size medium
#   python3 -m dstp.cli serve /tmp/med --port 0 --http-port 0 --data-port 0 --udt-port -1 &
#   Rscript clients/r/bench/bench.R http://127.0.0.1:HTTP_PORT 127.0.0.1:GRPC_PORT [RUNS]
#
# Environment: DSTP_PYTHON (default python3), DSTP_BENCH_SQL (default: the seed query).
args <- commandArgs(trailingOnly = TRUE)
if (length(args) < 2L) stop("usage: Rscript bench.R HTTP_URL GRPC_TARGET [RUNS]")
url <- args[[1L]]
grpc <- args[[2L]]
runs <- if (length(args) >= 3L) as.integer(args[[3L]]) else 3L
sql <- Sys.getenv("DSTP_BENCH_SQL", "select temperature, time from ccm3 where humidity > 50")
python <- Sys.getenv("DSTP_PYTHON", "python3")

suppressPackageStartupMessages(library(dstp))
con <- dstp_connect(url, grpc = grpc)
cat(sprintf("query: %s\nserver: %s (gRPC %s); %d runs each, after one warm-up\n", sql, url, grpc, runs))
cat(sprintf("R %s, data.table %s (%d threads), curl %s, reticulate %s; arrow R package: %s\n\n",
            getRversion(), packageVersion("data.table"), data.table::getDTthreads(), packageVersion("curl"),
            if (requireNamespace("reticulate", quietly = TRUE)) packageVersion("reticulate") else "-",
            if (requireNamespace("arrow", quietly = TRUE)) "installed" else "not installed"))

rows <- NA_integer_
time_r <- function(label, ...) {
  df <- dstp_query(con, sql, ...)  # warm-up (and the Python bridge's start-up)
  rows <<- nrow(df)
  rm(df)
  t <- vapply(seq_len(runs), function(i) {
    gc()
    system.time(df <- dstp_query(con, sql, ...))[["elapsed"]]
  }, numeric(1))
  data.frame(client = "R dstp_query", how = label, rows = rows, median_s = median(t),
             runs = paste(sprintf("%.2f", t), collapse = " "))
}

time_python <- function(transport) {
  code <- sprintf(paste(
    "import time, statistics, dstp",
    "c = dstp.connect(%s)",
    "sql = %s",
    "c.query(sql, transport=%s)",
    "ts = []",
    "for _ in range(%d):",
    "    t0 = time.perf_counter(); t = c.query(sql, transport=%s); ts.append(time.perf_counter() - t0)",
    "print(t.num_rows, statistics.median(ts), ' '.join('%%.2f' %% x for x in ts))",
    sep = "\n"), deparse(grpc), deparse(sql), deparse(transport), runs, deparse(transport))
  # R's LD_LIBRARY_PATH would make a shared-libpython Python (pyenv, venvs) load Debian's libpython
  libdir <- system2("env", c("-u", "LD_LIBRARY_PATH", python, "-c",
                             shQuote("import sysconfig; print(sysconfig.get_config_var('LIBDIR') or '')")),
                    stdout = TRUE)
  env <- sprintf("LD_LIBRARY_PATH=%s", shQuote(paste(c(libdir, Sys.getenv("LD_LIBRARY_PATH")), collapse = ":")))
  out <- system2(python, c("-c", shQuote(code)), stdout = TRUE, env = env)
  f <- strsplit(out[length(out)], " ", fixed = TRUE)[[1L]]
  data.frame(client = "Python dstp.connect().query", how = transport, rows = as.integer(f[1L]),
             median_s = as.numeric(f[2L]), runs = paste(f[-(1:2)], collapse = " "))
}

# The transfer alone (curl to a file, nothing decoded), for reference.
time_transfer <- function(format) {
  url <- paste0(con$url, "/query?format=", format, "&sql=", curl::curl_escape(sql))
  path <- tempfile()
  on.exit(unlink(path))
  curl::curl_fetch_disk(url, path)
  t <- vapply(seq_len(runs), function(i) system.time(curl::curl_fetch_disk(url, path))[["elapsed"]], numeric(1))
  data.frame(client = "R curl_fetch_disk (transfer only)", how = paste("HTTP", format), rows = NA_integer_,
             median_s = median(t), runs = paste(sprintf("%.2f", t), collapse = " "))
}

results <- list(
  time_transfer("arrow"),
  time_transfer("csv"),
  time_r("HTTP, Arrow IPC stream (built-in decoder)", format = "arrow"),
  time_r("HTTP, CSV + data.table::fread", format = "csv"),
  time_r("HTTP, JSON + jsonlite", format = "json")
)
if (isTRUE(dstp_python_available())) {
  results <- c(results, list(
    time_r("reticulate + Python client, gRPC", transport = "grpc"),
    time_r("reticulate + Python client, striped TCP", transport = "striped")
  ))
}
results <- c(results, list(time_python("grpc"), time_python("striped")))
out <- do.call(rbind, results)
out$median_s <- sprintf("%.2f", out$median_s)
print(out, row.names = FALSE, right = FALSE)

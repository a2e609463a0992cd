# Starting Python processes (the dstp server, the fake broken server) from the tests.
#
# Python comes from $DSTP_PYTHON (CI: the repository's .venv), else python3 on the PATH.
# R puts its own library folders on LD_LIBRARY_PATH (/usr/lib/x86_64-linux-gnu among them); a
# Python built with a shared libpython (pyenv, a venv made from one) would then load Debian's
# libpython of the same version and lose its site-packages. Children get the Python's own
# LIBDIR first on LD_LIBRARY_PATH.

python_path <- function() {
  p <- Sys.getenv("DSTP_PYTHON")
  if (!nzchar(p)) p <- Sys.which("python3")
  unname(p)
}

python_env <- local({
  cached <- NULL
  function() {
    if (!is.null(cached)) return(cached)
    py <- python_path()
    out <- tryCatch(suppressWarnings(system2(
      "env", c("-u", "LD_LIBRARY_PATH", shQuote(py), "-c",
               shQuote("import sysconfig; print(sysconfig.get_config_var('LIBDIR') or '')")),
      stdout = TRUE, stderr = FALSE)), error = function(e) character())
    libdir <- if (length(out)) out[length(out)] else ""
    ld <- Sys.getenv("LD_LIBRARY_PATH")
    cached <<- if (nzchar(libdir)) sprintf("LD_LIBRARY_PATH=%s", shQuote(paste(c(libdir, if (nzchar(ld)) ld),
                                                                             collapse = ":"))) else character()
    cached
  }
})

# Run python with `args`; return stdout lines (status attribute on failure).
run_python <- function(args, stdout = TRUE, stderr = TRUE) {
  suppressWarnings(system2(python_path(), args, stdout = stdout, stderr = stderr, env = python_env()))
}

python_has_dstp <- function() {
  py <- python_path()
  if (!nzchar(py)) return(FALSE)
  out <- run_python(c("-c", shQuote("import dstp, pyarrow; print('ok')")), stderr = FALSE)
  identical(out[length(out)], "ok")
}

# Exit when the R process that started us is gone (so no server outlives a killed test run).
WATCHDOG <- paste(
  "import os, runpy, signal, sys, threading, time",
  "parent = int(sys.argv.pop(1))",
  "def watch():",
  "    while True:",
  "        try:",
  "            os.kill(parent, 0)",
  "        except ProcessLookupError:",
  "            os.kill(os.getpid(), signal.SIGTERM)",
  "            return",
  "        time.sleep(1)",
  "threading.Thread(target=watch, daemon=True).start()",
  "module = sys.argv.pop(1)",
  "if module.endswith('.py'):",
  "    sys.argv[0] = module",
  "    runpy.run_path(module, run_name='__main__')",
  "else:",
  "    sys.argv[0] = module",
  "    runpy.run_module(module, run_name='__main__', alter_sys=True)",
  sep = "\n")

# Start `python -m module args...` (or a script path) in the background; its output goes to a log file.
start_python <- function(module, args, env = character(), name = "proc") {
  dir <- tempfile(paste0("dstp-", name, "-"))
  dir.create(dir)
  log <- file.path(dir, "log")
  pidfile <- file.path(dir, "pid")
  # The pid is written under another name and renamed: the file appears only once it holds the pid (a
  # loaded run read it between its creation and the write, got NA and took the server for exited).
  cmd <- paste(
    "echo $$ >", shQuote(paste0(pidfile, ".tmp")), "&& mv", shQuote(paste0(pidfile, ".tmp")), shQuote(pidfile),
    "; exec env", paste(c(python_env(), env), collapse = " "),
    shQuote(python_path()), "-u", "-c", shQuote(WATCHDOG), Sys.getpid(), shQuote(module),
    paste(shQuote(args), collapse = " "), ">", shQuote(log), "2>&1")
  system2("sh", c("-c", shQuote(cmd)), wait = FALSE)
  deadline <- Sys.time() + 10
  while (!file.exists(pidfile) && Sys.time() < deadline) Sys.sleep(0.05)
  pid <- as.integer(readLines(pidfile, warn = FALSE)[1L])
  list(pid = pid, log = log, dir = dir)
}

# Wait until the log shows every `keys` line ("  http  127.0.0.1:PORT"); return the addresses.
wait_for_addresses <- function(proc, keys, timeout = 90) {
  deadline <- Sys.time() + timeout
  repeat {
    lines <- if (file.exists(proc$log)) readLines(proc$log, warn = FALSE) else character()
    found <- list()
    for (k in keys) {
      m <- regmatches(lines, regexec(sprintf("^\\s*%s\\s+(\\S+:\\d+)\\s*$", k), lines))
      hit <- Filter(length, m)
      if (length(hit)) found[[k]] <- hit[[1L]][2L]
    }
    if (length(found) == length(keys)) return(found)
    alive <- tools::pskill(proc$pid, 0L)
    if (!alive || Sys.time() > deadline) {
      stop_python(proc)
      stop(sprintf("the process did not report %s (%s):\n%s", paste(keys, collapse = ", "),
                   if (alive) "timed out" else "it exited", paste(tail(lines, 30L), collapse = "\n")))
    }
    Sys.sleep(0.1)
  }
}

stop_python <- function(proc) {
  if (is.null(proc) || is.na(proc$pid)) return(invisible())
  tools::pskill(proc$pid, tools::SIGTERM)
  deadline <- Sys.time() + 10
  while (tools::pskill(proc$pid, 0L) && Sys.time() < deadline) Sys.sleep(0.1)
  if (tools::pskill(proc$pid, 0L)) tools::pskill(proc$pid, tools::SIGKILL)
  invisible()
}

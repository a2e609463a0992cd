# A server that needs a token and speaks TLS (a self-signed development certificate), with a restricted
# dataset: the token goes with every HTTP request and to the Python transports, the certificate is trusted
# through ca_file, and a dataset the token may not read does not exist for it.

auth_server <- local({
  started <- NULL
  function() {
    skip_if_no_server()
    if (!is.null(started)) return(started)
    dir <- tempfile("dstp-auth-")
    dir.create(dir)
    root <- file.path(dir, "catalog")
    dir.create(file.path(root, "polar"), recursive = TRUE)
    file.copy(file.path(dstp_test$root, "ccm3"), root, recursive = TRUE)
    ocean <- file.path(dstp_test$root, "ocean")
    file.copy(list.files(ocean, pattern = "[.]nc$", full.names = TRUE), file.path(root, "polar"))
    xml <- readLines(file.path(ocean, "ocean.dstp.xml"))
    xml <- sub('id="ocean"', 'id="polar"', xml, fixed = TRUE)
    xml <- sub('<access policy="public"/>', '<access policy="restricted" groups="polar"/>', xml, fixed = TRUE)
    writeLines(xml, file.path(root, "polar", "polar.dstp.xml"))
    store <- file.path(dir, "tokens.json")
    make <- function(user, groups) {
      out <- run_python(c("-m", "dstp.cli", "token", "create", "--user", user, "--groups", groups,
                          "--store", shQuote(store)), stderr = FALSE)
      out[startsWith(out, "dstp_")][1L]
    }
    polar <- make("r-polar", "polar")
    other <- make("r-other", "ocean-team")
    proc <- start_python("dstp.cli", c("serve", root, "--port", "0", "--http-port", "0", "--data-port", "0",
                                       "--udt-port", "-1", "--tls-self-signed", "--token-store", store),
                         env = sprintf("XDG_CACHE_HOME=%s", shQuote(file.path(dir, "cache"))), name = "auth")
    withr::defer(stop_python(proc), teardown_env())
    addr <- wait_for_addresses(proc, c("grpc", "http", "data"))
    log <- readLines(proc$log, warn = FALSE)
    cert <- regmatches(log, regexec("TLS certificate (\\S+) \\(SHA-256", log))
    cert <- Filter(length, cert)[[1L]][2L]
    started <<- list(http = paste0("https://", addr$http), grpc = addr$grpc, cert = cert, polar = polar,
                     other = other)
    started
  }
})

test_that("a server that needs a token says so, and a token opens it over TLS", {
  s <- auth_server()
  e <- tryCatch(dstp_connect(s$http, token = "", ca_file = s$cert), error = identity)
  expect_s3_class(e, "dstp_unauthenticated")
  expect_match(conditionMessage(e), "needs a token", fixed = TRUE)
  con <- dstp_connect(s$http, token = s$polar, ca_file = s$cert)
  expect_setequal(con$datasets, c("ccm3", "polar"))
  expect_output(print(con), "(with a token)", fixed = TRUE)
  other <- dstp_connect(s$http, token = s$other, ca_file = s$cert)
  expect_identical(other$datasets, "ccm3")
  e <- tryCatch(dstp_query(other, "select salinity from polar limit 3"), error = identity)
  expect_s3_class(e, "dstp_dataset_not_found")
  # the system's roots do not know a self-signed certificate
  e <- tryCatch(dstp_connect(s$http, token = s$polar, ca_file = ""), error = identity)
  expect_s3_class(e, "dstp_connection_error")
})

test_that("the token reaches HTTP queries and the Python transports (sealed striped TCP)", {
  s <- auth_server()
  con <- dstp_connect(s$http, grpc = s$grpc, token = s$polar, ca_file = s$cert)
  sql <- "select time, lat, lon, salinity from polar where depth < 20 limit 500"
  over_http <- dstp_query(con, sql, transport = "http")
  expect_identical(nrow(over_http), 500L)
  striped <- dstp_query(con, sql, transport = "striped", streams = 2L)
  expect_equal(striped, over_http, ignore_attr = TRUE)
  withr::with_envvar(c(DSTP_TOKEN = s$polar, DSTP_CA_FILE = s$cert), {
    from_env <- dstp_connect(s$http, grpc = s$grpc)
    expect_equal(dstp_query(from_env, sql, transport = "grpc"), over_http, ignore_attr = TRUE)
  })
})

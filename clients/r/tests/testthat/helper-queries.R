# Queries compared with the oracle. The first part is the shared query set of the Python tests
# (tests/query_cases.py) on the sample datasets; when $DSTP_QUERY_CASES names that file (the
# pytest wrapper sets it), every case whose dataset the server publishes is used instead.

R_QUERIES <- c(
  # projections and the seed query
  "select temperature, time from ccm3",
  "select temperature, time from ccm3 where humidity > 50",
  "select lat, lon, lev, time, cloud from ccm3",
  # comparisons, boolean logic, between, in
  "select humidity, lat from ccm3 where humidity = 50.0",
  "select cloud, lev from ccm3 where cloud <> 0",
  "select humidity from ccm3 where humidity <= 10.5",
  "select cloud, lat, time from ccm3 where (humidity > 60 and cloud < 0.3) or not (temperature > 220)",
  "select temperature, lev from ccm3 where temperature not between 210 and 290",
  "select lev, lat, temperature from ccm3 where lev in (85.4, 600.5) and lat in (-87.86, 87.86)",
  # NULL from fill values (below-ground humidity, land in the ocean)
  "select lev, lat, lon, time from ccm3 where humidity is null",
  "select humidity, lev from ccm3 where humidity is not null and lev > 900",
  "select lat, lon, temperature from ocean where temperature is null and depth = 5",
  # arithmetic
  "select temperature - 273.15 as celsius, lat from ccm3 where temperature * 2 > 560 and lat > 0",
  # times: noleap (timestamps), 360_day (ISO text)
  "select temperature, time from ccm3 where time >= '1990-06-01' and time < timestamp '1990-09-01'",
  "select salinity, time from ocean where time > '2000-02-16' and time <= '2000-06-30' and lat > 60",
  # coordinate ranges, descending latitude, packed variables (ocean temperature)
  "select temperature, lat from ocean where lat between -20 and 20 and depth < 30",
  # mixed grids
  "select precipitation, temperature, lev from ccm3 where lev = 992.6 and precipitation > 5",
  "select pressure, lat, lon from ccm3 where pressure < 70000",
  "select gw, lat from ccm3",
  # limit and order by
  "select temperature, lev, lat from ccm3 limit 7",
  "select temperature, time, lev, lat, lon from ccm3 where lat > 80 order by temperature desc, time, lev, lat, lon limit 50",
  "select salinity, lat from ocean where salinity is not null order by lat, salinity limit 20 offset 5",
  "select temperature, lat from ccm3 order by 2 desc, 1 limit 10",
  # R-specific: every sample column at once, and the other Arrow types a query can produce
  "select * from ocean where depth < 20",
  "select * from ccm3 where lat > 60",
  paste("select year(time) as y, month(time) as m, lat > 0 as north, cast(time as date) as day,",
        "cast(lat as integer) as ilat, round(temperature) as t, 1.5 as dec from ccm3 where lev > 900"),
  "select temperature from ccm3 where temperature > 1000"
)

query_set <- function(con) {
  cases_file <- Sys.getenv("DSTP_QUERY_CASES")
  if (!nzchar(cases_file) || !file.exists(cases_file) || !requireNamespace("reticulate", quietly = TRUE) ||
      !isTRUE(dstp_python_available())) {
    return(R_QUERIES)
  }
  mod <- reticulate::import_from_path(sub("\\.py$", "", basename(cases_file)), dirname(cases_file))
  served <- con$datasets
  shared <- unlist(lapply(mod$CASES, function(case) if (case[[2L]] %in% served) case[[1L]]))
  unique(c(shared, R_QUERIES))
}

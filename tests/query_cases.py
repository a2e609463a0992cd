"""The shared query set: every query with the dataset and columns its oracle reads."""

# (sql, dataset, attributes the oracle must read, extra grid dims, ordered comparison)
CASES = [
    # projections and the seed query
    ("select temperature, time from ccm3", "ccm3", ["temperature"], (), False),
    ("select temperature, time from ccm3 where humidity > 50", "ccm3", ["temperature", "humidity"], (), False),
    ("select lat, lon, lev, time, cloud from ccm3", "ccm3", ["cloud"], (), False),
    # each comparison operator
    ("select humidity, lat from ccm3 where humidity = 50.0", "ccm3", ["humidity"], (), False),
    ("select cloud, lev from ccm3 where cloud = 0", "ccm3", ["cloud"], (), False),
    ("select cloud, lev from ccm3 where cloud <> 0", "ccm3", ["cloud"], (), False),
    ("select cloud, lev from ccm3 where cloud != 0", "ccm3", ["cloud"], (), False),
    ("select humidity from ccm3 where humidity < 10", "ccm3", ["humidity"], (), False),
    ("select humidity from ccm3 where humidity <= 10.5", "ccm3", ["humidity"], (), False),
    ("select humidity from ccm3 where humidity >= 95", "ccm3", ["humidity"], (), False),
    ("select temperature from ccm3 where 250 < temperature", "ccm3", ["temperature"], (), False),
    # and / or / not, between, in
    ("select cloud, lat, time from ccm3 where (humidity > 60 and cloud < 0.3) or not (temperature > 220)",
     "ccm3", ["cloud", "humidity", "temperature"], (), False),
    ("select temperature, lev from ccm3 where temperature between 250 and 260", "ccm3", ["temperature"], (), False),
    ("select temperature, lev from ccm3 where temperature not between 210 and 290", "ccm3", ["temperature"], (), False),
    ("select lev, lat, temperature from ccm3 where lev in (85.4, 600.5) and lat in (-87.86, 87.86)",
     "ccm3", ["temperature"], (), False),
    ("select lev, temperature from ccm3 where lev not in (85.4, 600.5)", "ccm3", ["temperature"], (), False),
    # NULL from fill values (below-ground humidity, land in the ocean)
    ("select lev, lat, lon, time from ccm3 where humidity is null", "ccm3", ["humidity"], (), False),
    ("select humidity, lev from ccm3 where humidity is not null and lev > 900", "ccm3", ["humidity"], (), False),
    ("select lat, lon, temperature from ocean where temperature is null and depth = 5", "ocean", ["temperature"], (), False),
    ("select t2m, d2m, time from station where t2m is null or d2m is null", "station", ["t2m", "d2m"], (), False),
    # arithmetic between attributes
    ("select t2m, d2m, lat from station where t2m - d2m < 1", "station", ["t2m", "d2m"], (), False),
    ("select temperature - 273.15 as celsius, lat from ccm3 where temperature * 2 > 560 and lat > 0",
     "ccm3", ["temperature"], (), False),
    # time predicates: noleap (timestamps), standard (hours), 360_day (ISO text)
    ("select temperature, time from ccm3 where time >= '1990-06-01' and time < timestamp '1990-09-01'",
     "ccm3", ["temperature"], (), False),
    ("select t2m, time from station where time between '2001-01-03' and '2001-01-05 12:00'", "station", ["t2m"], (), False),
    ("select salinity, time from ocean where time > '2000-02-16' and time <= '2000-06-30' and lat > 60",
     "ocean", ["salinity"], (), False),
    ("select sst, step from axes where step between '1850-02-25' and '1850-03-30'", "axes", ["sst"], (), False),
    # coordinate ranges, descending and scalar coordinates
    ("select t2m, lat from station where lat > 45", "station", ["t2m"], (), False),
    ("select t2m, lat from station where lat between 35 and 52.5 and lon >= 0", "station", ["t2m"], (), False),
    ("select temperature, lat from ocean where lat between -20 and 20 and depth < 30", "ocean", ["temperature"], (), False),
    ("select height, t2m from station where height = 2 and t2m > 285", "station", ["t2m"], (), False),
    ("select sst, latitude, xc from axes where latitude < 0 and xc > 150", "axes", ["sst", "latitude"], (), False),
    # index-only dimension
    ("select spectrum, band, time from station where band = 2", "station", ["spectrum"], (), False),
    # mixed grids: broadcast 3-D attributes over lev
    ("select precipitation, temperature, lev from ccm3 where lev = 992.6 and precipitation > 5",
     "ccm3", ["precipitation", "temperature"], (), False),
    ("select pressure, lat, lon from ccm3 where pressure < 70000", "ccm3", ["pressure"], (), False),
    ("select precipitation, lev from ccm3 where lev > 900 and lat > 80", "ccm3", ["precipitation"], ("lev",), False),
    ("select gw, lat from ccm3", "ccm3", ["gw"], (), False),
    # limit and order by
    ("select temperature, lev, lat from ccm3 limit 7", "ccm3", ["temperature"], (), True),
    ("select temperature, time, lev, lat, lon from ccm3 where lat > 80 order by temperature desc, time, lev, lat, lon limit 50",
     "ccm3", ["temperature"], (), True),
    ("select salinity, lat from ocean where salinity is not null order by lat, salinity limit 20 offset 5",
     "ocean", ["salinity"], (), True),
    ("select temperature, lat from ccm3 order by 2 desc, 1 limit 10", "ccm3", ["temperature"], (), True),
]


# On ISO-text calendars dstp reads '2000-02-16' as midnight; the oracle's plain text comparison
# needs the full form to mean the same instant.
ORACLE_SQL = {
    "select salinity, time from ocean where time > '2000-02-16' and time <= '2000-06-30' and lat > 60":
        "select salinity, time from ocean where time > '2000-02-16T00:00:00' and time <= '2000-06-30T00:00:00' and lat > 60",
    "select sst, step from axes where step between '1850-02-25' and '1850-03-30'":
        "select sst, step from axes where step between '1850-02-25T00:00:00' and '1850-03-30T00:00:00'",
}

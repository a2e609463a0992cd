"""Time functions on every CF calendar: year/month/season, date_trunc and time_bucket as SQL rewrites.

A time column holds its calendar's *labels*: ``timestamp[us]`` on the
Gregorian-like calendars (standard, proleptic_gregorian, noleap), ISO text
``YYYY-MM-DDTHH:MM:SS`` on the others (360_day, all_leap, julian). DuckDB
knows only the Gregorian calendar, so a function that counts days — a 5-day
``time_bucket``, ``dayofyear`` — would count days the model does not have
(29 February in a noleap run) or miss days it has (30 February in a 360_day
run). Each such call is rewritten here into arithmetic in the column's own
calendar:

* a time is turned into *model microseconds* since the calendar's year 0
  (``__dstp_<cal>_us``), with whole numbers only, so bucket boundaries are exact;
* buckets are floor divisions of that count (or of the month index
  ``12·year + month − 1`` for widths in months or years);
* the bucket start is turned back into a label of the column's kind
  (``__dstp_<cal>_label``): a timestamp for noleap, ISO text for the others.

The arithmetic lives in DuckDB macros, created once on the shared database
(:func:`install_macros`), not in Python UDFs: a macro is inlined into the
vectorised plan and runs on all of DuckDB's threads, where a Python function
would take the GIL for every vector — the GIL the netCDF scan feeding the same
query needs. The standard calendars keep DuckDB's own functions (same
defaults: ``time_bucket`` origins 2000-01-03 for day-based widths and
2000-01-01 for months). Functions with no meaning off the Gregorian calendar
(day of week, ISO week, epoch seconds) are refused there, never answered wrongly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import duckdb
import numpy as np
from sqlglot import exp

from dstp.catalog.cf import calendar_family

__all__ = ["CALENDAR_MACROS", "Interval", "STANDARD", "install_macros", "interval_of", "model_microseconds",
           "time_function", "season"]

#: Calendars whose labels DuckDB's own (proleptic Gregorian) functions get right.
STANDARD = frozenset({"standard", "gregorian", "proleptic_gregorian"})
#: Macro prefix per non-Gregorian calendar family.
_FAMILY = {"noleap": "noleap", "360_day": "d360", "all_leap": "allleap", "julian": "julian"}
DAY_US = 86_400_000_000
_CUM365 = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334]
_CUM366 = [0, 31, 60, 91, 121, 152, 182, 213, 244, 274, 305, 335]


def _fdiv(a: str, b: int, bound: int = 10**18) -> str:
    """Return SQL for floor(a / b) with a named once: shift by a multiple of b above |a| (DuckDB's // truncates)."""
    shift = b * (bound // b + 1)
    return f"(({a}) + {shift}) // {b} - {shift // b}"


def _fmod(a: str, b: int, bound: int = 10**18) -> str:
    """Return SQL for a mod b in [0, b), with a named once."""
    shift = b * (bound // b + 1)
    return f"(({a}) + {shift}) % {b}"


def _lookup(values: list[int]) -> str:
    return "[" + ", ".join(str(v) for v in values) + "]"


def _year_tables(lengths: list[int]) -> tuple[str, str]:
    """Return list literals mapping a 0-based day of year to its month and its day of month."""
    months = [m + 1 for m, n in enumerate(lengths) for _ in range(n)]
    days = [d + 1 for n in lengths for d in range(n)]
    return _lookup(months), _lookup(days)


_LENGTHS_365 = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
_LENGTHS_366 = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
_MONTH_365, _MDAY_365 = _year_tables(_LENGTHS_365)
_MONTH_366, _MDAY_366 = _year_tables(_LENGTHS_366)


def _hms(us: str) -> str:
    """Return printf arguments hour, minute, second of microseconds-of-day ``us``."""
    return f"({us}) // 3600000000, (({us}) // 60000000) % 60, (({us}) // 1000000) % 60"


def _iso_label(y: str, m: str, d: str, us: str) -> str:
    """Return SQL building ISO text from year, month, day and microseconds of day (fraction when non-zero)."""
    return (f"printf('%04d-%02d-%02dT%02d:%02d:%02d', {y}, {m}, {d}, {_hms(us)}) || "
            f"CASE WHEN ({us}) % 1000000 = 0 THEN '' ELSE printf('.%06d', ({us}) % 1000000) END")


def _ts_label(y: str, m: str, d: str, us: str) -> str:
    return (f"make_timestamp({y}, {m}, {d}, ({us}) // 3600000000, (({us}) // 60000000) % 60, "
            f"(({us}) % 60000000) / 1e6)")


_DAYS = _fdiv("us", DAY_US)
_OF_DAY = _fmod("us", DAY_US)


def _label_macro(family: str, year_days: int, month_table: str, mday_table: str, build: str) -> str:
    """Return the macro turning model microseconds into a label, for calendars of fixed-length years."""
    r = _fmod(_DAYS, year_days, 10**9)
    y = _fdiv(_DAYS, year_days, 10**9)
    label = _ts_label if build == "ts" else _iso_label
    return f"__dstp_{family}_label(us) AS " + label(y, f"{month_table}[{r} + 1]", f"{mday_table}[{r} + 1]", _OF_DAY)


def _julian_label() -> str:
    c = f"({_DAYS} + 32082)"
    dd = f"((4 * {c} + 3) // 1461)"
    e = f"({c} - (1461 * {dd}) // 4)"
    mm = f"((5 * {e} + 2) // 153)"
    return "__dstp_julian_label(us) AS " + _iso_label(
        f"{dd} - 4800 + {mm} // 10", f"{mm} + 3 - 12 * ({mm} // 10)", f"{e} - (153 * {mm} + 2) // 5 + 1", _OF_DAY)


_CUM365_SQL = _lookup(_CUM365)
_CUM366_SQL = _lookup(_CUM366)

#: The macros, in creation order (later ones call earlier ones). Created once per database.
CALENDAR_MACROS: tuple[str, ...] = (
    # floor((x - o) / w) * w + o, with the difference shifted positive first (DuckDB's // truncates)
    "__dstp_bucket(x, w, o) AS o + ((x - o) + w * (1000000000000000000 // w + 1)) // w * w "
    "- (1000000000000000000 // w + 1) * w",
    # ISO text parts, found from the 'T' so that years of any width (and negative ones) work.
    "__dstp_iso_year(t) AS CAST(left(t, strpos(t, 'T') - 7) AS BIGINT)",
    "__dstp_iso_month(t) AS CAST(substr(t, strpos(t, 'T') - 5, 2) AS BIGINT)",
    "__dstp_iso_day(t) AS CAST(substr(t, strpos(t, 'T') - 2, 2) AS BIGINT)",
    "__dstp_iso_hour(t) AS CAST(substr(t, strpos(t, 'T') + 1, 2) AS BIGINT)",
    "__dstp_iso_minute(t) AS CAST(substr(t, strpos(t, 'T') + 4, 2) AS BIGINT)",
    "__dstp_iso_second(t) AS CAST(substr(t, strpos(t, 'T') + 7, 2) AS BIGINT)",
    "__dstp_iso_us_of_day(t) AS CAST(substr(t, strpos(t, 'T') + 1, 2) AS BIGINT) * 3600000000 "
    "+ CAST(substr(t, strpos(t, 'T') + 4, 2) AS BIGINT) * 60000000 "
    "+ CAST(substr(t, strpos(t, 'T') + 7, 2) AS BIGINT) * 1000000 "
    "+ CASE WHEN length(t) > strpos(t, 'T') + 9 "
    "THEN CAST(rpad(substr(t, strpos(t, 'T') + 10, 6), 6, '0') AS BIGINT) ELSE 0 END",
    "__dstp_ts_us_of_day(t) AS epoch_us(t) - epoch_us(date_trunc('day', t))",
    "__dstp_season(m) AS CASE WHEN m IN (12, 1, 2) THEN 'DJF' WHEN m IN (3, 4, 5) THEN 'MAM' "
    "WHEN m IN (6, 7, 8) THEN 'JJA' WHEN m IN (9, 10, 11) THEN 'SON' END",
    # noleap: timestamps of labels; days counted with 365-day years.
    f"__dstp_noleap_us(t) AS (year(t) * 365 + {_CUM365_SQL}[month(t)] + day(t) - 1) * 86400000000 "
    "+ __dstp_ts_us_of_day(t)",
    f"__dstp_noleap_doy(t) AS {_CUM365_SQL}[month(t)] + day(t)",
    _label_macro("noleap", 365, _MONTH_365, _MDAY_365, "ts"),
    "__dstp_noleap_month_label(mi) AS make_timestamp(" + _fdiv("mi", 12, 10**9) + ", "
    + _fmod("mi", 12, 10**9) + " + 1, 1, 0, 0, 0)",
    # 360_day: twelve 30-day months.
    "__dstp_d360_us(t) AS (__dstp_iso_year(t) * 360 + (__dstp_iso_month(t) - 1) * 30 + __dstp_iso_day(t) - 1) "
    "* 86400000000 + __dstp_iso_us_of_day(t)",
    "__dstp_d360_doy(t) AS (__dstp_iso_month(t) - 1) * 30 + __dstp_iso_day(t)",
    "__dstp_d360_label(us) AS " + _iso_label(
        _fdiv(_DAYS, 360, 10**9), f"{_fmod(_DAYS, 360, 10**9)} // 30 + 1", f"{_fmod(_DAYS, 360, 10**9)} % 30 + 1",
        _OF_DAY),
    # all_leap: 366-day years.
    f"__dstp_allleap_us(t) AS (__dstp_iso_year(t) * 366 + {_CUM366_SQL}[__dstp_iso_month(t)] "
    "+ __dstp_iso_day(t) - 1) * 86400000000 + __dstp_iso_us_of_day(t)",
    f"__dstp_allleap_doy(t) AS {_CUM366_SQL}[__dstp_iso_month(t)] + __dstp_iso_day(t)",
    _label_macro("allleap", 366, _MONTH_366, _MDAY_366, "iso"),
    # julian: the Julian day number (Fliegel & Van Flandern's formulas for the Julian calendar).
    "__dstp_julian_us(t) AS (__dstp_iso_day(t) + (153 * (__dstp_iso_month(t) + 12 * ((14 - __dstp_iso_month(t)) "
    "// 12) - 3) + 2) // 5 + 365 * (__dstp_iso_year(t) + 4800 - (14 - __dstp_iso_month(t)) // 12) + "
    + _fdiv("__dstp_iso_year(t) + 4800 - (14 - __dstp_iso_month(t)) // 12", 4, 10**9)
    + " - 32083) * 86400000000 + __dstp_iso_us_of_day(t)",
    f"__dstp_julian_doy(t) AS {_CUM365_SQL}[__dstp_iso_month(t)] + __dstp_iso_day(t) "
    "+ CASE WHEN __dstp_iso_month(t) > 2 AND " + _fmod("__dstp_iso_year(t)", 4, 10**9) + " = 0 THEN 1 ELSE 0 END",
    _julian_label(),
    "__dstp_iso_month_label(mi) AS printf('%04d-%02d-01T00:00:00', " + _fdiv("mi", 12, 10**9) + ", "
    + _fmod("mi", 12, 10**9) + " + 1)",
)


def install_macros(database: duckdb.DuckDBPyConnection) -> None:
    """Create the calendar macros on a database (once; every cursor of it sees them)."""
    for body in CALENDAR_MACROS:
        database.execute(f"CREATE OR REPLACE MACRO {body}")


# -- intervals ---------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Interval:
    """A bucket width or tolerance: whole months, or microseconds (never both)."""

    months: int = 0
    micros: int = 0

    def __str__(self) -> str:
        if self.months:
            return f"{self.months} month{'s' if self.months != 1 else ''}"
        days, rest = divmod(self.micros, DAY_US)
        return f"{days} day{'s' if days != 1 else ''}" if not rest else f"{self.micros / 1e6:g} s"


_UNIT_MICROS = {"microsecond": 1, "millisecond": 1_000, "second": 1_000_000, "minute": 60_000_000,
                "hour": 3_600_000_000, "day": DAY_US, "week": 7 * DAY_US}
_UNIT_MONTHS = {"month": 1, "quarter": 3, "year": 12, "decade": 120, "century": 1200}
_PART = re.compile(r"\s*([-+]?\d+(?:\.\d+)?)\s*([a-z]+)\s*", re.IGNORECASE)


def interval_of(node: exp.Expression) -> Interval | None:
    """Return the interval a literal ``interval '5 days'`` (or ``'5 days'``) stands for, or None."""
    if isinstance(node, exp.Interval):
        amount = node.this.name if isinstance(node.this, exp.Literal) else None
        unit = node.args.get("unit")
        text = f"{amount} {unit.name}" if amount is not None and unit is not None else amount
    elif isinstance(node, exp.Literal) and node.is_string:
        text = node.this
    else:
        return None
    if not text:
        return None
    months = micros = 0
    pos = 0
    while pos < len(text):
        m = _PART.match(text, pos)
        if m is None:
            return None
        pos = m.end()
        number, unit = float(m[1]), m[2].lower().rstrip("s")
        unit = {"us": "microsecond", "ms": "millisecond", "sec": "second", "min": "minute", "h": "hour",
                "hr": "hour", "d": "day", "mon": "month", "y": "year", "yr": "year"}.get(unit, unit)
        if unit in _UNIT_MICROS:
            micros += round(number * _UNIT_MICROS[unit])
        elif unit in _UNIT_MONTHS and number == int(number):
            months += int(number) * _UNIT_MONTHS[unit]
        else:
            return None
    return Interval(months, micros)


# -- the rewrites ------------------------------------------------------------------------------

def _call(name: str, *args: exp.Expression) -> exp.Expression:
    return exp.Anonymous(this=name, expressions=list(args))


def _int(value: int) -> exp.Expression:
    return exp.Literal.number(value)


def _parts(t: exp.Expression, iso: bool) -> tuple[exp.Expression, exp.Expression]:
    """Return SQL for (year, month) of a time in its representation."""
    if iso:
        return _call("__dstp_iso_year", t), _call("__dstp_iso_month", t)
    return exp.Year(this=t), exp.Month(this=t)


def season(t: exp.Expression, iso: bool) -> exp.Expression:
    """Return ``season(t)``: 'DJF', 'MAM', 'JJA' or 'SON', as xarray's ``time.season``."""
    return _call("__dstp_season", _parts(t, iso)[1])


class CalendarError(ValueError):
    """A time function that has no meaning on a calendar; the message says what to do instead."""


_FIELD_FUNCTIONS = {"year", "month", "day", "hour", "minute", "second", "quarter", "dayofyear", "doy"}
_GREGORIAN_ONLY = {"week", "weekofyear", "yearweek", "dayofweek", "dow", "isodow", "weekday", "isoyear", "epoch",
                   "julian", "millennium", "era"}


def _month_index(t: exp.Expression, iso: bool) -> exp.Expression:
    year, month = _parts(t, iso)
    return exp.Paren(this=exp.Add(this=exp.Mul(this=year, expression=_int(12)),
                                  expression=exp.Sub(this=month, expression=_int(1))))


def _month_label(mi: exp.Expression, iso: bool) -> exp.Expression:
    return _call("__dstp_iso_month_label" if iso else "__dstp_noleap_month_label", mi)


def field(name: str, t: exp.Expression, calendar: str, iso: bool) -> exp.Expression:
    """Return ``name(t)`` (year, month, day, hour, minute, second, quarter, dayofyear) on ``calendar``."""
    family = calendar_family(calendar)
    name = {"doy": "dayofyear"}.get(name, name)
    if name in _GREGORIAN_ONLY:
        if family in STANDARD:
            return exp.Anonymous(this=name, expressions=[t])
        raise CalendarError(f"{name} is not defined on the {calendar} calendar (it counts Gregorian weeks or "
                            "seconds); use year, month, day, dayofyear, date_trunc or time_bucket")
    if not iso:
        if name == "dayofyear" and family not in STANDARD:
            return _call(f"__dstp_{_FAMILY[family]}_doy", t)
        return exp.Anonymous(this=name, expressions=[t])
    if name == "dayofyear":
        return _call(f"__dstp_{_FAMILY.get(family, 'd360')}_doy", t)
    if name == "quarter":
        months = exp.Paren(this=exp.Sub(this=_parts(t, True)[1], expression=_int(1)))
        return exp.Paren(this=exp.Add(this=exp.IntDiv(this=months, expression=_int(3)), expression=_int(1)))
    return _call(f"__dstp_iso_{name}", t)


def _unit_micros(unit: str) -> int | None:
    return {"microseconds": 1, "milliseconds": 1000, "second": 1_000_000, "minute": 60_000_000,
            "hour": 3_600_000_000, "day": DAY_US}.get(unit)


def trunc(unit: str, t: exp.Expression, calendar: str, iso: bool) -> exp.Expression:
    """Return ``date_trunc(unit, t)`` on ``calendar``, in the column's representation."""
    family = calendar_family(calendar)
    unit = unit.lower().rstrip("s") if unit.lower() not in ("microseconds", "milliseconds") else unit.lower()
    unit = {"microsecond": "microseconds", "millisecond": "milliseconds"}.get(unit, unit)
    if family in STANDARD or (not iso and unit in ("year", "quarter", "month", "day", "hour", "minute", "second",
                                                   "milliseconds", "microseconds")):
        return exp.TimestampTrunc(this=t, unit=exp.Var(this=unit.upper()))
    months = {"year": 12, "quarter": 3, "month": 1}.get(unit)
    if months is not None:
        mi = _month_index(t, iso)
        return _month_label(_call("__dstp_bucket", mi, _int(months), _int(0)), iso)
    micros = _unit_micros(unit)
    if micros is None:
        raise CalendarError(f"date_trunc('{unit}', …) is not defined on the {calendar} calendar; "
                            "use year, quarter, month, day, hour, minute or second")
    prefix = f"__dstp_{_FAMILY.get(family, 'd360')}"
    us = _call(f"{prefix}_us", t)
    return _call(f"{prefix}_label", _call("__dstp_bucket", us, _int(micros), _int(0)))


#: time_bucket's default origins (DuckDB's): a Monday for day-based widths, a year start for months.
DAY_ORIGIN = "2000-01-03T00:00:00"
MONTH_ORIGIN = "2000-01-01T00:00:00"


def bucket(width: Interval, t: exp.Expression, origin: exp.Expression | None, calendar: str,
           iso: bool) -> exp.Expression:
    """Return ``time_bucket(width, t[, origin])`` on ``calendar``: buckets of model time, labelled by their start.

    ``origin`` is a literal already in the column's representation (or None for the defaults).
    """
    family = calendar_family(calendar)
    if width.months <= 0 and width.micros <= 0:
        raise CalendarError("a time_bucket width must be positive, e.g. interval '5 days'")
    if family in STANDARD:
        args = [exp.Interval(this=exp.Literal.string(str(width.micros) if not width.months else str(width.months)),
                             unit=exp.Var(this="MICROSECONDS" if not width.months else "MONTHS")), t]
        if origin is not None:
            args.append(origin)
        return exp.Anonymous(this="time_bucket", expressions=args)
    if width.months:
        default = MONTH_ORIGIN if iso else MONTH_ORIGIN.replace("T", " ")
        o = origin if origin is not None else _literal(default, iso)
        start = _call("__dstp_bucket", _month_index(t, iso), _int(width.months), _month_index(o, iso))
        return _month_label(start, iso)
    prefix = f"__dstp_{_FAMILY.get(family, 'd360')}"
    o = origin if origin is not None else _literal(DAY_ORIGIN, iso)
    start = _call("__dstp_bucket", _call(f"{prefix}_us", t), _int(width.micros), _call(f"{prefix}_us", o))
    return _call(f"{prefix}_label", start)


def _literal(text: str, iso: bool) -> exp.Expression:
    if iso:
        return exp.Literal.string(text)
    return exp.Cast(this=exp.Literal.string(text.replace("T", " ")), to=exp.DataType.build("TIMESTAMP"))


def time_function(name: str, t: exp.Expression, calendar: str, iso: bool) -> exp.Expression:
    """Return the rewrite of a one-argument time function (year … season) on ``calendar``."""
    if name == "season":
        return season(t, iso)
    if name in _FIELD_FUNCTIONS or name in _GREGORIAN_ONLY:
        return field(name, t, calendar, iso)
    raise CalendarError(f"{name}() is not a time function dstp knows")


# -- model time in numpy (matchups) ------------------------------------------------------------

_ISO = re.compile(r"^(-?\d+)-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?$")


def model_microseconds(values: np.ndarray, calendar: str) -> np.ndarray:
    """Return times as int64 microseconds of model time on ``calendar`` (NULL/NaT: the minimum int64).

    Differences of the result are durations in the calendar's own days, as
    the macros above count them; on the standard calendars they are Gregorian.
    """
    family = calendar_family(calendar)
    missing = np.iinfo(np.int64).min
    if values.dtype.kind == "M":
        ts = values.astype("datetime64[us]")
        out = ts.astype(np.int64)
        if family in STANDARD or family not in _FAMILY:
            return np.where(np.isnat(ts), missing, out)
        days = ts.astype("datetime64[D]")
        years = days.astype("datetime64[Y]").astype(np.int64) + 1970
        months = (days.astype("datetime64[M]").astype(np.int64) % 12) + 1
        mday = (days - days.astype("datetime64[M]")).astype(np.int64) + 1
        of_day = out - days.astype("datetime64[us]").astype(np.int64)
        counted = _days(family, years, months, mday) * DAY_US + of_day
        return np.where(np.isnat(ts), missing, counted)
    out = np.full(values.shape, missing, dtype=np.int64)
    for i, text in enumerate(values.reshape(-1)):
        if text is None:
            continue
        m = _ISO.match(str(text))
        if m is None:
            raise ValueError(f"{text!r} is not an ISO 8601 date-time")
        y, mo, d, hh, mi, ss = (int(m[k]) for k in range(1, 7))
        micro = int((m[7] or "0").ljust(6, "0"))
        day = int(_days(family, np.array([y]), np.array([mo]), np.array([d]))[0])
        out.reshape(-1)[i] = day * DAY_US + ((hh * 60 + mi) * 60 + ss) * 1_000_000 + micro
    return out


def _days(family: str, y: np.ndarray, m: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Return day numbers as the macros count them (numpy twin of ``__dstp_<cal>_days``)."""
    if family == "360_day":
        return y * 360 + (m - 1) * 30 + d - 1
    if family == "noleap":
        return y * 365 + np.asarray(_CUM365)[m - 1] + d - 1
    if family == "all_leap":
        return y * 366 + np.asarray(_CUM366)[m - 1] + d - 1
    if family == "julian":
        a = (14 - m) // 12
        y2, m2 = y + 4800 - a, m + 12 * a - 3
        return d + (153 * m2 + 2) // 5 + 365 * y2 + np.floor_divide(y2, 4) - 32083
    # proleptic Gregorian: days since 0000-01-01 are days since 1970 shifted; differences are what matter
    dates = np.array([f"{yy:04d}-{mm:02d}-{dd:02d}" for yy, mm, dd in zip(y, m, d)], dtype="datetime64[D]")
    return dates.astype(np.int64)

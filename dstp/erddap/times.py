"""Times as the ERDDAP facade counts them: one number per time, seconds since 1970-01-01T00:00:00Z, on every calendar.

ERDDAP answers and takes times as "epoch seconds". How ERDDAP gets them
(``EDVTimeStamp.sourceTimeToEpochSeconds`` → ``Calendar2.getTimeBaseAndFactor``
and ``Calendar2.unitsSinceToEpochSeconds``, github.com/ERDDAP/erddap): it
parses the reference date of the variable's ``units`` on Java's Gregorian
calendar (Julian before 1582-10-15) and adds the stored number times the
unit's seconds (``months`` and ``years`` by adding calendar months/years to
that date); the ``calendar`` attribute is not read (``Calendar2.
SUPPORTED_CALENDARS`` is ``gregorian, standard``). So a 360_day file's
2000-02-30 stored as ``days since 2000-01-01`` = 59 is ERDDAP's
2000-01-01 + 59 days = 951782400, and its next day 951868800: the numbers keep
the calendar's spacing and order, the labels are counted from the units'
reference date.

:class:`TimeAxis` is that rule for one time column:

* on the calendars whose times dstp keeps as timestamps of their labels
  (standard, proleptic_gregorian, noleap/365_day) a number is the label's
  seconds on the proleptic Gregorian calendar — ERDDAP's own number on the
  standard calendar, and on noleap the number erddapy (``parse_dates``) and
  pandas give the label, as docs/erddap.md has said since noleap was served;
* on the calendars dstp keeps as ISO text (360_day, julian, all_leap/366_day)
  a number is ERDDAP's: the units' reference date in Gregorian seconds plus
  the elapsed time on the file's calendar.

Text (``2000-02-30T00:00:00Z``) is always a label on the column's own calendar.
A number that no time of the column can be (``1e30``, ``inf``, ``NaN``) is
refused with a :class:`~dstp.errors.QueryError` naming it, never turned into
an exception of a lower library.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from dstp.errors import QueryError

__all__ = ["ERDDAP_TIME_UNITS", "ERDDAP_CALENDAR", "TIMESTAMP_CALENDARS", "TimeAxis", "parse_label",
           "finite_number", "shift_seconds", "now_seconds", "iso_seconds"]

ERDDAP_TIME_UNITS = "seconds since 1970-01-01T00:00:00Z"
#: The calendar ERDDAP's seconds decode on (what pandas, erddapy and numpy count on).
ERDDAP_CALENDAR = "proleptic_gregorian"
#: Calendars whose times dstp keeps as timestamps of their labels.
TIMESTAMP_CALENDARS = ("", "standard", "gregorian", "proleptic_gregorian", "noleap", "365_day")

_ISO = re.compile(r"(-?\d{1,4})-(\d\d?)-(\d\d?)(?:[T ](\d\d?):(\d\d)(?::(\d\d)(?:\.(\d+))?)?)?\s*(Z|[+-]00:?00)?")
_SINCE = re.compile(r"\s*([A-Za-z]+)\s+since\s+(.+?)\s*$")
#: ERDDAP's unit names (``Calendar2.factorToGetSeconds``) and their seconds; months and years are special.
_UNITS = {**dict.fromkeys(("ms", "msec", "msecs", "millis", "millisec", "millisecs", "millisecond", "milliseconds"),
                          0.001),
          **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), 1.0),
          **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), 60.0),
          **dict.fromkeys(("h", "hr", "hrs", "hour", "hours"), 3600.0),
          **dict.fromkeys(("d", "day", "days"), 86400.0),
          **dict.fromkeys(("week", "weeks"), 7 * 86400.0),
          **dict.fromkeys(("mon", "mons", "month", "months"), 30 * 86400.0),
          **dict.fromkeys(("yr", "yrs", "year", "years"), 360 * 86400.0)}
_MONTH, _YEAR = 30 * 86400.0, 360 * 86400.0
#: The instants a time can be here: years 0001 to 9999 (DuckDB's timestamps and ISO text alike).
_FIRST = -62135596800.0  # 0001-01-01T00:00:00Z
_LAST = 253402300799.0  # 9999-12-31T23:59:59Z


def finite_number(text: str, said: str) -> float:
    """Return ``text`` as a finite number, or refuse it naming ``said`` (the constraint as written)."""
    try:
        value = float(text)
    except ValueError as exc:
        raise QueryError(f"{said}: {text.strip()!r} is not a number") from exc
    if not math.isfinite(value):
        raise QueryError(f"{said}: {text.strip()} is not a finite number (NaN and infinities compare with "
                         "nothing); give a finite value, or =NaN / !=NaN to test for missing values")
    return value


def parse_label(text: str, calendar: str) -> Any:
    """Return an ISO date-time as a cftime date on ``calendar`` (QueryError when it is none of its dates)."""
    import cftime

    m = _ISO.fullmatch(text.strip().strip('"'))
    if m is None:
        raise QueryError(f"{text!r} is not a time; write 2000-01-16T00:00:00Z or seconds since 1970-01-01")
    y, mo, d = int(m[1]), int(m[2]), int(m[3])
    h, mi, s = int(m[4] or 0), int(m[5] or 0), int(m[6] or 0)
    micro = int((m[7] or "0")[:6].ljust(6, "0"))
    try:
        return cftime.datetime(y, mo, d, h, mi, s, micro, calendar=calendar or "standard")
    except ValueError as exc:
        raise QueryError(f"{text!r} is not a date of the {calendar or 'standard'} calendar ({exc})") from exc


def iso_seconds(seconds: float) -> str:
    """Return ERDDAP seconds as ISO text with ``Z`` (Gregorian), for messages."""
    if not (math.isfinite(seconds) and _FIRST <= seconds <= _LAST):
        return repr(seconds)
    moment = dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=round(seconds * 1000))
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + ("" if moment.microsecond == 0 else
                                                   f".{moment.microsecond // 1000:03d}") + "Z"


def _label_text(date: Any) -> str:
    """Return a cftime date as dstp's ISO text of it (microseconds only when there are some)."""
    text = f"{date.year:04d}-{date.month:02d}-{date.day:02d}T{date.hour:02d}:{date.minute:02d}:{date.second:02d}"
    return text + (f".{date.microsecond:06d}" if date.microsecond else "")


def _gregorian(seconds: float) -> Any:
    import cftime

    return cftime.num2date(seconds, ERDDAP_TIME_UNITS, "standard", only_use_cftime_datetimes=True)


def _add_months(date: Any, months: int) -> Any:
    """Return a Gregorian (cftime, standard) date ``months`` calendar months later, as Java's ``add(MONTH)``."""
    import calendar as _cal
    import cftime

    index = date.year * 12 + (date.month - 1) + months
    year, month = divmod(index, 12)
    day = min(date.day, _cal.monthrange(year, month + 1)[1]) if year >= 1 else date.day
    return cftime.datetime(year, month + 1, day, date.hour, date.minute, date.second, date.microsecond,
                           calendar="standard")


def shift_seconds(seconds: float, amount: int, unit: str) -> float:
    """Return ERDDAP seconds moved by ``amount`` ``unit`` (months and years as calendar months, as ERDDAP does)."""
    import cftime

    factor = _UNITS[unit]
    if factor < _MONTH:
        return seconds + amount * factor
    date = _add_months(_gregorian(seconds), amount * (12 if factor == _YEAR else 1))
    return float(cftime.date2num(date, ERDDAP_TIME_UNITS, "standard"))


def now_seconds(now: dt.datetime) -> float:
    """Return ERDDAP's ``now``: the current instant rounded up to the next whole second."""
    return float(math.floor(now.timestamp()) + 1)


@dataclass(frozen=True, slots=True)
class TimeAxis:
    """How ERDDAP numbers map to the times of one column (its units and calendar)."""

    units: str
    calendar: str

    @property
    def iso_text(self) -> bool:
        """True where dstp keeps the times as ISO text (360_day, julian, all_leap), not timestamps."""
        return self.calendar not in TIMESTAMP_CALENDARS

    # -- ERDDAP's rule on the ISO-text calendars -----------------------------------------------

    def _base(self) -> tuple[float, float, Any]:
        """Return (the reference date's ERDDAP seconds, the unit's seconds, the reference date on the calendar)."""
        import cftime

        m = _SINCE.fullmatch(self.units or "")
        factor = _UNITS.get(m[1].lower()) if m else None
        if m is None or factor is None:
            raise QueryError(f"the time units {self.units!r} are not '<unit> since <date>': numbers cannot be "
                             "matched to these times; write the times as text (2000-01-16T00:00:00Z)")
        date = _ISO.fullmatch(m[2].strip())
        try:
            origin = cftime.num2date(0, f"seconds since {m[2]}", self.calendar)
            if date is None:
                raise ValueError("not an ISO date")
            # Java's lenient GregorianCalendar, as ERDDAP parses it: a 360_day 2000-02-30 is 2000-03-01.
            y, mo, d = int(date[1]), int(date[2]), int(date[3])
            first = cftime.datetime(y, mo, 1, calendar="standard") + dt.timedelta(
                days=d - 1, hours=int(date[4] or 0), minutes=int(date[5] or 0), seconds=int(date[6] or 0))
            seconds = cftime.date2num(first, ERDDAP_TIME_UNITS, "standard")
        except (ValueError, OverflowError) as exc:
            raise QueryError(f"the reference date of the time units {self.units!r} cannot be read ({exc})") from exc
        return float(seconds), factor, origin

    def _erddap_seconds(self, date: Any) -> float:
        import cftime

        base, factor, origin = self._base()
        elapsed = (date - origin).total_seconds()
        if factor < _MONTH:
            return round(base + elapsed, 3) if factor >= 60 else base + elapsed
        # months/years: ERDDAP adds whole calendar months (years) to the reference date, the rest rounded.
        raw = elapsed / (_MONTH if factor == _MONTH else _YEAR)
        whole = math.floor(raw)
        frac = raw - whole
        months = whole * (12 if factor == _YEAR else 1) + (round(frac * 12) if factor == _YEAR else 0)
        moved = _add_months(_gregorian(base), months)
        seconds = float(cftime.date2num(moved, ERDDAP_TIME_UNITS, "standard"))
        return seconds + (round(frac * 30) * 86400.0 if factor == _MONTH else 0.0)

    def _label_of(self, seconds: float) -> Any:
        import cftime

        base, factor, origin = self._base()
        if factor < _MONTH:
            elapsed = round(seconds - base, 3)
        else:
            # the inverse of the months rule: whole Gregorian months from the reference date, the rest in days
            start, at = _gregorian(base), _gregorian(seconds)
            months = (at.year * 12 + at.month) - (start.year * 12 + start.month)
            if float(cftime.date2num(_add_months(start, months), ERDDAP_TIME_UNITS, "standard")) > seconds:
                months -= 1
            rest = seconds - float(cftime.date2num(_add_months(start, months), ERDDAP_TIME_UNITS, "standard"))
            elapsed = months * _MONTH + rest * (_MONTH / (30 * 86400.0))
        return origin + dt.timedelta(seconds=elapsed)

    # -- the column's values <-> ERDDAP seconds ----------------------------------------------------------

    def seconds(self, values: np.ndarray) -> np.ndarray:
        """Return the column's times (datetime64 or ISO text) as ERDDAP seconds (NaN where missing)."""
        values = np.asarray(values)
        if values.dtype.kind == "M":
            micros = values.astype("datetime64[us]")
            out = micros.astype("int64") / 1e6
            return np.where(np.isnat(micros), np.nan, out)
        out = np.full(values.shape, np.nan)
        for i, v in enumerate(values.reshape(-1)):
            if v is None or (isinstance(v, float) and math.isnan(v)):
                continue
            if not self.iso_text:
                out.reshape(-1)[i] = float(np.datetime64(_label_text(parse_label(str(v), "proleptic_gregorian")),
                                                         "us").astype("int64")) / 1e6
            else:
                out.reshape(-1)[i] = self._erddap_seconds(parse_label(str(v), self.calendar))
        return out

    def value(self, seconds: float, said: str) -> np.datetime64 | str:
        """Return the column's value (a timestamp, or ISO text on its calendar) at ERDDAP ``seconds``.

        ``said`` is the constraint or selector as written, for the message when no time of this column can be
        that number (not finite, or outside years 0001–9999).
        """
        if not math.isfinite(seconds) or not _FIRST <= seconds <= _LAST:
            raise QueryError(f"{said}: {seconds!r} seconds since 1970-01-01T00:00:00Z is not a time this dataset "
                             "can have (years 0001 to 9999); give a time as 2000-01-16T00:00:00Z or as seconds "
                             "since 1970 within those years")
        if not self.iso_text:
            return np.datetime64(int(round(seconds * 1e6)), "us")
        try:
            label = self._label_of(seconds)
        except (ValueError, OverflowError) as exc:
            raise QueryError(f"{said}: {seconds!r} seconds since 1970-01-01T00:00:00Z is not a date of the "
                             f"{self.calendar} calendar counted from {self.units!r} ({exc})") from exc
        if not 1 <= label.year <= 9999:
            raise QueryError(f"{said}: {iso_seconds(seconds)} lies outside years 0001 to 9999 on the "
                             f"{self.calendar} calendar")
        return _label_text(label)

    def label_value(self, text: str) -> np.datetime64 | str:
        """Return the column's value of an ISO date-time written by the user (a label on its calendar)."""
        date = parse_label(text, "proleptic_gregorian" if not self.iso_text else self.calendar)
        if not 1 <= date.year <= 9999:
            raise QueryError(f"{text!r} lies outside years 0001 to 9999")
        return np.datetime64(_label_text(date), "us") if not self.iso_text else _label_text(date)

    def label(self, seconds: float) -> str:
        """Return ERDDAP seconds as the label ``…Z`` a user reads (on the column's calendar), for messages."""
        try:
            v = self.value(seconds, "")
        except QueryError:
            return repr(seconds)
        return (str(v.astype("datetime64[s]")) if isinstance(v, np.datetime64) else v[:19]) + "Z"

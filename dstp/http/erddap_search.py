"""ERDDAP's advanced search (``/erddap/search/advanced.<fmt>``): every parameter ERDDAP takes, none ignored.

Followed from ERDDAP's own ``Erddap.doAdvancedSearch`` (ERDDAP/erddap, ``Erddap.java``) and
``LoadDatasets.categorizeGlobalAtts``/``categorizeVariableAtts``:

* ``minLon maxLon minLat maxLat minTime maxTime``: a dataset matches when its extent overlaps the box,
  each bound on its own: it is left out when ``minX`` > its greatest X or ``maxX`` < its least X. Numbers
  are compared as they are — longitudes too: a dataset stored on 0…360 is found by a box on 0…360 and a
  −180…180 one by a −180…180 box (ERDDAP's advice: search −180…360 to find both). A dataset without that
  axis is left out by any bound on it. ``minX`` > ``maxX`` is an error. Times are ISO 8601, seconds since
  1970-01-01, or ``now``, ``now-7days`` (``now±N`` seconds, minutes, hours, days, weeks, months, years);
  they are compared with a dataset's time labels field by field (year, month, day, …), so 360_day's
  2000-02-30 lies between 2000-02-29 and 2000-03-01.
* ``cdm_data_type institution ioos_category keywords long_name standard_name variableName``: the dataset
  has that value (global ``cdm_data_type``, ``institution``, each of its ``keywords``; any variable's
  ``ioos_category``, ``long_name``, ``standard_name`` or name), compared as ERDDAP compares them: lower
  case, with every run of characters other than A-Z a-z 0-9 ``_ - .`` made one ``_``
  (``Sea Surface Temperature`` = ``sea_surface_temperature``).
* ``(ANY)`` or an empty value: no constraint (erddapy sends ``minLon=(ANY)`` for every bound it is not given).

Where ERDDAP ignores what it does not know, this refuses it: an unknown parameter, a malformed value and a
protocol this facade does not serve are a 400 naming the parameter and quoting the value.
"""

from __future__ import annotations

import datetime as dt
import re
import threading
import unicodedata
import weakref
from dataclasses import dataclass
from typing import Iterable, Sequence

from dstp.errors import QueryError
from dstp.http.erddap_meta import cdm_data_type, erddap_matches
from dstp.http.search import SearchIndex
from dstp.metadata import DatasetDetails

__all__ = ["AdvancedSearch", "BOUNDS", "CATEGORIES", "category_value", "parse_search"]

ANY = "(ANY)"
#: ERDDAP's categoryAttributes, as its URLs name them (setup.xml's default).
CATEGORIES = ("cdm_data_type", "institution", "ioos_category", "keywords", "long_name", "standard_name",
              "variableName")
BOUNDS = ("minLon", "maxLon", "minLat", "maxLat", "minTime", "maxTime")
#: What both search pages take; the advanced page takes CATEGORIES and BOUNDS besides.
COMMON = ("searchFor", "protocol", "page", "itemsPerPage")

#: A time label: (year, month, day, hour, minute, second, microsecond), compared field by field.
Label = tuple[int, int, int, int, int, int, int]

_ISO = re.compile(r"(-?\d{4})(?:-(\d\d)(?:-(\d\d)(?:[T ](\d\d)(?::(\d\d)(?::(\d\d)(\.\d+)?)?)?)?)?)?"
                  r"(Z|[+-]\d\d:?\d\d)?")
_NOW = re.compile(r"now(?:([-+ ])(\d*)\s*([a-z]*))?")
_UNITS = {**dict.fromkeys(("ms", "msec", "msecs", "millis", "millisec", "millisecs", "millisecond", "milliseconds"),
                          "ms"),
          **dict.fromkeys(("", "s", "sec", "secs", "second", "seconds"), "s"),
          **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), "min"),
          **dict.fromkeys(("h", "hr", "hrs", "hour", "hours"), "h"),
          **dict.fromkeys(("d", "day", "days"), "d"),
          **dict.fromkeys(("week", "weeks"), "w"),
          **dict.fromkeys(("mon", "mons", "month", "months"), "mon"),
          **dict.fromkeys(("yr", "yrs", "year", "years"), "yr")}
_STEP = {"ms": dt.timedelta(milliseconds=1), "s": dt.timedelta(seconds=1), "min": dt.timedelta(minutes=1),
         "h": dt.timedelta(hours=1), "d": dt.timedelta(days=1), "w": dt.timedelta(weeks=1)}
_TIME_HELP = ("write ISO 8601 (2020-01-31, 2020-01-31T12:00:00Z), seconds since 1970-01-01T00:00:00Z, "
              "or now, now-7days (units: seconds, minutes, hours, days, weeks, months, years)")


@dataclass(frozen=True, slots=True)
class AdvancedSearch:
    """What an ERDDAP search asks for: words, a protocol, category values and a box (None: unbounded)."""

    words: str = ""
    protocol: str = ""
    #: (parameter, value made file-name safe and lower case), e.g. ("standard_name", "air_temperature").
    categories: tuple[tuple[str, str], ...] = ()
    lon: tuple[float | None, float | None] = (None, None)
    lat: tuple[float | None, float | None] = (None, None)
    time: tuple[Label | None, Label | None] = (None, None)


def parse_search(params: Sequence[tuple[str, str]], page: str, now: dt.datetime) -> AdvancedSearch:
    """Return the search ``params`` ask for on ``page`` (index or advanced); QueryError naming the parameter for
    one this page does not take, one given twice with different values, or a malformed value. ``now`` (UTC)
    is what ``now-7days`` counts from."""
    allowed = COMMON + (CATEGORIES + BOUNDS if page == "advanced" else ())
    given: dict[str, str] = {}
    for name, value in params:
        if name not in allowed:
            if page != "advanced" and name in CATEGORIES + BOUNDS:
                raise QueryError(f"{name}={value!r}: search/index takes only searchFor, protocol, page and "
                                 f"itemsPerPage; ask search/advanced for {name}")
            raise QueryError(f"search/{page} has no parameter {name!r} (it takes {', '.join(allowed)}); "
                             "ERDDAP would ignore it, dstp does not")
        if name in given and given[name].strip() != value.strip():
            raise QueryError(f"{name} is given twice ({given[name]!r} and {value!r}); give it once")
        given[name] = value
    protocol = given.get("protocol", "").strip()
    if protocol.casefold() in ("", ANY.casefold()):
        protocol = ""
    elif protocol.casefold() in ("griddap", "tabledap"):
        protocol = protocol.casefold()
    else:
        raise QueryError(f"protocol={protocol!r}: this server's ERDDAP searches griddap, tabledap or (ANY)")
    categories = []
    for name in CATEGORIES:
        value = given.get(name, "").strip()
        if value and value.casefold() != ANY.casefold():
            categories.append((name, category_value(value)))
    lon = _number_pair(given, "minLon", "maxLon")
    lat = _number_pair(given, "minLat", "maxLat")
    t0, t1 = (_time(name, given.get(name, ""), now) for name in ("minTime", "maxTime"))
    if t0 is not None and t1 is not None and t0[0] > t1[0]:
        raise QueryError(f"minTime={given['minTime']!r} is after maxTime={given['maxTime']!r}")
    return AdvancedSearch(given.get("searchFor", "").strip().strip('"'), protocol, tuple(categories), lon, lat,
                          (t0[1] if t0 else None, t1[1] if t1 else None))


def _unbounded(text: str) -> bool:
    return not text.strip() or text.strip().casefold() == ANY.casefold()


def _number_pair(given: dict[str, str], low: str, high: str) -> tuple[float | None, float | None]:
    pair: list[float | None] = []
    for name in (low, high):
        text = given.get(name, "")
        if _unbounded(text):
            pair.append(None)
            continue
        try:
            number = float(text)
        except ValueError:
            number = float("nan")
        if number != number or number in (float("inf"), float("-inf")):
            raise QueryError(f"{name}={text!r} is not a number of degrees (e.g. {name}=-130.5), nor (ANY)")
        pair.append(number)
    if pair[0] is not None and pair[1] is not None and pair[0] > pair[1]:
        raise QueryError(f"{low}={given[low]!r} > {high}={given[high]!r}: give the smaller value as {low}")
    return pair[0], pair[1]


def _time(name: str, text: str, now: dt.datetime) -> tuple[float, Label] | None:
    """Return a time bound as (seconds since 1970 for ordering, label), None when unbounded."""
    if _unbounded(text):
        return None
    raw = text.strip()
    try:
        instant = _instant(raw.lower(), now) if raw.lower().startswith("now") else _iso_or_seconds(raw)
    except (ValueError, OverflowError) as exc:
        raise QueryError(f"{name}={text!r} is not a time: {_TIME_HELP}") from exc
    instant = instant.astimezone(dt.timezone.utc)
    label = (instant.year, instant.month, instant.day, instant.hour, instant.minute, instant.second,
             instant.microsecond)
    return instant.timestamp(), label


def _iso_or_seconds(text: str) -> dt.datetime:
    try:
        seconds = float(text)
    except ValueError:
        seconds = None
    if seconds is not None:
        if seconds != seconds or abs(seconds) == float("inf"):
            raise ValueError(text)
        return dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(seconds=seconds)
    m = _ISO.fullmatch(text)
    if m is None:
        raise ValueError(text)
    year, month, day, hour, minute, second, frac, zone = m.groups()
    tz = dt.timezone.utc
    if zone and zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        tz = dt.timezone(sign * dt.timedelta(hours=int(digits[:2]), minutes=int(digits[2:])))
    return dt.datetime(int(year), int(month or 1), int(day or 1), int(hour or 0), int(minute or 0),
                       int(second or 0), int(round(float(frac or 0) * 1e6)), tzinfo=tz)


def _instant(text: str, now: dt.datetime) -> dt.datetime:
    """Return ERDDAP's ``now[+|-N units]`` (Calendar2.nowStringToZdt: now is the next whole second)."""
    m = _NOW.fullmatch(text)
    if m is None or len(text) == 4:  # "now-" alone is no time (ERDDAP: "now-days" is a day back, "now-" an error)
        raise ValueError(text)
    sign, digits, units = m.groups()
    base = now.astimezone(dt.timezone.utc).replace(microsecond=0) + dt.timedelta(seconds=1)
    if sign is None:
        return base
    if units.strip() not in _UNITS:
        raise ValueError(text)
    n = (-1 if sign == "-" else 1) * int(digits or 1)
    unit = _UNITS[units.strip()]
    if unit in _STEP:
        return base + n * _STEP[unit]
    months = n * (12 if unit == "yr" else 1)
    index = base.year * 12 + base.month - 1 + months
    year, month = divmod(index, 12)
    last = (dt.date(year + (month == 11), (month + 1) % 12 + 1, 1) - dt.timedelta(days=1)).day
    return base.replace(year=year, month=month + 1, day=min(base.day, last))


def category_value(text: str) -> str:
    """Return a category value as ERDDAP files it: ASCII, runs of characters other than A-Z a-z 0-9 _ - . made
    one ``_``, lower case (String2.modifyToBeFileNameSafe, then toLowerCase)."""
    ascii_ = "".join(c if ord(c) < 128 else (unicodedata.normalize("NFKD", c)[:1] if ord(c) < 256 else "?")
                     for c in text)
    return re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9_.\-]", "_", ascii_)).lower()


def _keywords(d: DatasetDetails) -> Iterable[str]:
    stated = dict(d.global_attributes).get("keywords", "")
    for k in (*d.summary.keywords, *stated.split(",")):
        k = k.strip().lower()
        if k:
            yield k[16:] if k.startswith("earth science > ") else k


def _facets(d: DatasetDetails) -> dict[str, frozenset[str]]:
    """Return a dataset's category values, per category (ERDDAP's categoryInfo of one dataset)."""
    columns = (*d.coordinates, *d.attributes)
    attrs = [dict(c.cf) for c in columns]
    found = {
        "cdm_data_type": [cdm_data_type(d)],
        "institution": [dict(d.global_attributes).get("institution", "")],
        "keywords": list(_keywords(d)),
        "variableName": [c.name for c in columns],
        **{name: [a.get(name, "") for a in attrs] for name in ("ioos_category", "long_name", "standard_name")},
    }
    return {name: frozenset(category_value(v) for v in values if v.strip()) for name, values in found.items()}


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _extents(d: DatasetDetails) -> tuple[tuple[float, float] | None, tuple[float, float] | None,
                                         tuple[Label, Label] | None]:
    """Return a dataset's least and greatest longitude, latitude and time (None: it has no such axis)."""
    box = d.summary.bbox
    lat: tuple[float, float] | None = (box[0], box[1]) if box else None
    lon: tuple[float, float] | None = (box[2], box[3]) if box else None
    if box is None:  # latitude without longitude (or the other way round): each axis on its own, as ERDDAP
        for dim in d.dimensions:
            lo, hi = _number(dim.min), _number(dim.max)
            units = dim.units.replace(" ", "").lower()
            if lo is None or hi is None or not units.startswith("degree"):
                continue
            if dim.axis == "Y" and units.endswith(("north", "n")):
                lat = (min(lo, hi), max(lo, hi))
            elif dim.axis == "X" and units.endswith(("east", "e")):
                lon = (min(lo, hi), max(lo, hi))
    start, end = _label(d.summary.time_start), _label(d.summary.time_end)
    return lon, lat, (start, end) if start is not None and end is not None else None


_LABEL = re.compile(r"(-?\d+)-(\d\d)-(\d\d)(?:[T ](\d\d):(\d\d)(?::(\d\d)(\.\d+)?)?)?")


def _label(text: str) -> Label | None:
    m = _LABEL.match(text.strip())
    if m is None:
        return None
    y, mo, d, h, mi, s, frac = m.groups()
    return (int(y), int(mo), int(d), int(h or 0), int(mi or 0), int(s or 0), int(round(float(frac or 0) * 1e6)))


@dataclass(frozen=True, slots=True)
class _Entry:
    facets: dict[str, frozenset[str]]
    lon: tuple[float, float] | None
    lat: tuple[float, float] | None
    time: tuple[Label, Label] | None


#: Each index's facets and extents, made once (an index lives for one catalog version and set of readers).
_ENTRIES: "weakref.WeakKeyDictionary[SearchIndex, dict[str, _Entry]]" = weakref.WeakKeyDictionary()
_ENTRIES_LOCK = threading.Lock()


def _entry(index: SearchIndex, d: DatasetDetails) -> _Entry:
    with _ENTRIES_LOCK:
        kept = _ENTRIES.setdefault(index, {})
        found = kept.get(d.summary.id)
    if found is None:
        found = _Entry(_facets(d), *_extents(d))
        with _ENTRIES_LOCK:
            kept[d.summary.id] = found
    return found


def _overlaps(extent: tuple[float, float] | tuple[Label, Label] | None, low: object, high: object) -> bool:
    """ERDDAP's rule: no bound asked, or the dataset has the axis and neither bound lies past its extent."""
    if low is None and high is None:
        return True
    if extent is None:
        return False
    return not ((low is not None and low > extent[1]) or (high is not None and high < extent[0]))  # type: ignore[operator]


def advanced_matches(index: SearchIndex, search: AdvancedSearch) -> list[DatasetDetails]:
    """Return the datasets of ``index`` that match every criterion of ``search`` (in erddap_matches' order)."""
    found = []
    for d in erddap_matches(index, search.words, search.protocol):
        e = _entry(index, d)
        if all(value in e.facets[name] for name, value in search.categories) \
                and _overlaps(e.lon, *search.lon) and _overlaps(e.lat, *search.lat) \
                and _overlaps(e.time, *search.time):
            found.append(d)
    return found

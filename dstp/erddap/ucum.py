"""UDUNITS units written in UCUM, for the ERDDAP facade's ``units("UCUM")``.

ERDDAP converts the units of an answer with ``Units2.udunitsToUcum``
(github.com/ERDDAP/erddap): times ``<unit> since <date>`` become
``s{since 1970-01-01T00:00:00Z}`` (``ms``, ``s``, ``min``, ``h``, ``d``,
``mo``, ``a``), a product is joined with ``.``, ``/`` and ``per`` make negative
exponents (``m s-1``, ``m/s`` → ``m.s-1``), ``**``/``^`` exponents are plain
digits, named units become their UCUM symbols (``degree_Celsius`` → ``Cel``,
``degrees_north`` → ``deg{north}``, ``percent`` → ``%``, ``PSU`` → ``{PSU}``),
and what it does not know it keeps in ``{…}`` braces (UCUM's annotations), so a
UCUM reader never takes it for a unit. The names below are the CF units that
ERDDAP's table (``UdunitsToUcum.properties``) spells differently from UDUNITS;
a unit already written as a UCUM symbol (``K``, ``m``, ``Pa``, ``kg``) stays.
"""

from __future__ import annotations

import re

__all__ = ["udunits_to_ucum"]

_TIME = {"ms": "ms", "msec": "ms", "millisecond": "ms", "milliseconds": "ms", "s": "s", "sec": "s", "second": "s",
         "seconds": "s", "min": "min", "minute": "min", "minutes": "min", "h": "h", "hr": "h", "hour": "h",
         "hours": "h", "d": "d", "day": "d", "days": "d", "week": "wk", "weeks": "wk", "month": "mo", "months": "mo",
         "year": "a", "years": "a"}
_NAMES = {
    "degree_Celsius": "Cel", "degrees_Celsius": "Cel", "degree_C": "Cel", "degrees_C": "Cel", "degC": "Cel",
    "deg_C": "Cel", "celsius": "Cel", "Celsius": "Cel", "degree_Fahrenheit": "[degF]", "degF": "[degF]",
    "degree_F": "[degF]", "kelvin": "K", "Kelvin": "K", "degK": "K", "degree_K": "K",
    "degrees_north": "deg{north}", "degree_north": "deg{north}", "degree_N": "deg{north}",
    "degrees_N": "deg{north}", "degreeN": "deg{north}", "degrees_east": "deg{east}", "degree_east": "deg{east}",
    "degree_E": "deg{east}", "degrees_E": "deg{east}", "degreeE": "deg{east}", "degrees_west": "deg{west}",
    "degrees_south": "deg{south}", "degree": "deg", "degrees": "deg", "radian": "rad", "radians": "rad",
    "percent": "%", "meter": "m", "meters": "m", "metre": "m", "metres": "m", "kilometer": "km",
    "kilometers": "km", "centimeter": "cm", "centimeters": "cm", "millimeter": "mm", "millimeters": "mm",
    "gram": "g", "grams": "g", "kilogram": "kg", "kilograms": "kg", "second": "s", "seconds": "s", "sec": "s",
    "minute": "min", "minutes": "min", "hour": "h", "hours": "h", "hr": "h", "day": "d", "days": "d",
    "year": "a", "years": "a", "pascal": "Pa", "hectopascal": "hPa", "millibar": "mbar", "mb": "mbar",
    "bar": "bar", "atm": "atm", "watt": "W", "watts": "W", "joule": "J", "joules": "J", "newton": "N",
    "newtons": "N", "volt": "V", "volts": "V", "mole": "mol", "moles": "mol", "liter": "L", "liters": "L",
    "litre": "L", "l": "L", "psu": "{PSU}", "PSU": "{PSU}", "ppm": "[ppm]", "ppb": "[ppb]", "ppt": "[ppth]",
    "ppth": "[ppth]", "knot": "[kn_i]", "knots": "[kn_i]", "kt": "[kn_i]", "count": "{count}",
    "counts": "{count}", "dBZ": "{dBZ}", "dB": "dB", "gpm": "{gpm}", "NTU": "{NTU}", "ntu": "{NTU}",
    "hPa": "hPa", "Pa": "Pa", "K": "K", "m": "m", "kg": "kg", "g": "g", "W": "W", "J": "J", "N": "N",
    "mol": "mol", "s": "s",
}
_SINCE = re.compile(r"\s*([A-Za-z]+)\s+since\s+(.+?)\s*$")
_TOKEN = re.compile(r"(?P<brace>\{[^}]*\})|(?P<num>[+-]?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)|"
                    r"(?P<word>[A-Za-z_%°µ][A-Za-z_%°µ0-9]*?)(?P<exp>(?:\*\*|\^)?-?\d+)?(?![A-Za-z_%°µ0-9])|"
                    r"(?P<op>[/.*·]|\bper\b)|(?P<space>\s+)")


def _since(units: str) -> str | None:
    m = _SINCE.fullmatch(units)
    if m is None or m[1].lower() not in _TIME:
        return None
    base = m[2].replace(" ", "T", 1) if re.match(r"\d{4}-\d\d-\d\d \d", m[2]) else m[2]
    if re.fullmatch(r"\d{4}-\d\d-\d\d", base):
        base += "T00:00:00Z"
    elif re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", base):
        base += "Z"
    return f"{_TIME[m[1].lower()]}{{since {base}}}"


def udunits_to_ucum(units: str) -> str:
    """Return UDUNITS ``units`` as UCUM (ERDDAP's rules; an unknown name kept as ``{name}``)."""
    text = units.strip()
    if not text or text == "1":
        return text
    if text == "UTC":  # ERDDAP's ISO time strings: their units stay
        return text
    since = _since(text)
    if since is not None:
        return since
    parts: list[str] = []
    divide = False
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            return "{" + text + "}"
        pos = m.end()
        if m["space"] or (m["op"] and m["op"] in ".*·"):
            continue
        if m["op"]:  # "/" or "per": the next factor is divided by
            divide = True
            continue
        if m["brace"]:
            parts.append(m["brace"])
            continue
        if m["num"]:
            parts.append(m["num"] if not divide else f"{m['num']}-1")
            divide = False
            continue
        word = m["word"]
        exp = (m["exp"] or "").replace("**", "").replace("^", "")
        symbol = _NAMES.get(word, word if re.fullmatch(r"[A-Za-z]{1,3}", word) else "{" + word + "}")
        power = int(exp) if exp else 1
        if divide:
            power, divide = -power, False
        parts.append(symbol + ("" if power == 1 else str(power)))
    return ".".join(parts) if parts else "{" + text + "}"

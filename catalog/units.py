"""Units compared as units, not as text: UDUNITS-2 through cf-units, the library CF's ``units`` are defined by.

Files of one dataset often spell one unit two ways (``K`` and ``kelvin``,
``m s-1`` and ``m/s``, ``hPa`` and ``mbar``): they are the same unit, and
aggregate. Units that convert into each other but are not the same (``K`` and
``degC``) are refused for data variables -- dstp does not convert values
between files (docs/publishing.md). Some files give a coordinate a label
where CF wants a unit (``level``, ``hybrid_sigma_pressure``): such labels are
not units at all, so two files with different labels but identical values
aggregate, with a warning (:func:`compare_units`).

cf-units ships UDUNITS-2 in its wheels (``libudunits2`` inside the package),
so no system library is needed; its ``Unit`` parses the full UDUNITS grammar
(``kg m-2 s-1``, ``degrees_north``, ``0.01 1``) that a hand-written table
would approximate.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

__all__ = ["EQUAL", "CONVERTIBLE", "DIFFERENT", "LABELS", "compare_units", "normal_units"]

#: Same unit in any spelling (also: the same text, or both absent).
EQUAL = "equal"
#: Physical units of one dimension that differ by a factor or offset (K and degC).
CONVERTIBLE = "convertible"
#: Physical units of different dimensions (K and m).
DIFFERENT = "different"
#: At least one is no physical unit (``level``, absent, misspelt): only the texts can be compared.
LABELS = "labels"


def normal_units(value: Any) -> str:
    """Return a units attribute as text with its whitespace normalised ('' when absent)."""
    return " ".join(str(value if value is not None else "").split())


@lru_cache(maxsize=1024)
def _unit(text: str) -> Any:
    """Return the cf-units Unit of ``text``, or None when it is no physical unit (unknown, no_unit, a label)."""
    if not text:
        return None
    from cf_units import Unit  # loads UDUNITS-2's XML database once, on first use

    try:
        unit = Unit(text)
    except ValueError:
        return None
    return None if unit.is_unknown() or unit.is_no_unit() or unit.is_time_reference() else unit


def compare_units(a: Any, b: Any) -> str:
    """Return how two units attributes compare: EQUAL, CONVERTIBLE, DIFFERENT or LABELS."""
    left, right = normal_units(a), normal_units(b)
    if left == right:
        return EQUAL
    first, second = _unit(left), _unit(right)
    if first is None or second is None:
        return LABELS
    if first == second:
        return EQUAL
    return CONVERTIBLE if first.is_convertible(second) else DIFFERENT

"""Correlation keys between datasets: comparisons done in common terms, or refused with the reason.

DSTP's universal correlation keys (time, latitude, longitude, vertical; a
descriptor's ``<correlation-keys>``) let records of different datasets be
matched. Two datasets rarely write a key the same way, so wherever a query
compares a key column of one source with the same key of another (``a.lon =
b.lon`` in ON or WHERE, ``a.time >= b.time`` in an ASOF join), dstp brings both
sides to one convention first:

============ ===================================================================
longitude    0…360 and −180…180 meet on (−180, 180]: ``lon − 360`` where
             ``lon > 180`` (exact in floating point, so equal meridians stay
             equal); a side is left alone when its values (held by the
             catalog) are already in the other's range; radians → degrees
latitude     radians → degrees
vertical     pressures (Pa, hPa, mbar, kPa, bar) and lengths (m, km, cm) are
             converted to the left side's units; other units must agree
time         already decoded to labels; the calendars must be compatible:
             standard, proleptic_gregorian and noleap compare by their date
             labels; 360_day, all_leap and julian only with their own calendar
============ ===================================================================

A comparison that cannot be made meaningful is refused, naming both columns
and why (``ocean.time is on the 360_day calendar, buoys.time on standard``).
"""

from __future__ import annotations

from sqlglot import exp

from dstp.errors import QueryError
from dstp.query._scope import ColumnMeta
from dstp.query._text import error_at

__all__ = ["canonical_longitude", "compatible_times", "reconcile"]

_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ, exp.NullSafeNEQ)
_SCALE = {
    "pa": ("pressure", 1.0), "hpa": ("pressure", 100.0), "mbar": ("pressure", 100.0), "millibar": ("pressure", 100.0),
    "kpa": ("pressure", 1000.0), "bar": ("pressure", 1e5), "dbar": ("pressure", 1e4), "decibar": ("pressure", 1e4),
    "m": ("length", 1.0), "meter": ("length", 1.0), "metre": ("length", 1.0), "meters": ("length", 1.0),
    "km": ("length", 1000.0), "cm": ("length", 0.01),
}
_TIMESTAMP_FAMILIES = {"standard", "proleptic_gregorian", "noleap"}


def _meta(node: exp.Expression) -> ColumnMeta | None:
    meta = node.meta.get("dstp")
    return meta if isinstance(meta, ColumnMeta) and isinstance(node, exp.Column) else None


def compatible_times(a: ColumnMeta, b: ColumnMeta) -> str | None:
    """Return why two time columns cannot be compared, or None when they can."""
    fa, fb = a.calendar_family, b.calendar_family
    if fa is None or fb is None or fa == fb:
        return None
    if fa in _TIMESTAMP_FAMILIES and fb in _TIMESTAMP_FAMILIES and not a.iso and not b.iso:
        return None
    return (f"{_name(a)} is on the {a.calendar} calendar and {_name(b)} on {b.calendar}; their dates do not "
            "correspond (a 360_day February has 30 days), so dstp does not match them — compare times of one "
            "calendar, or standard/proleptic_gregorian/noleap times, which match by their date labels")


def _name(meta: ColumnMeta) -> str:
    if meta.origin is not None:
        ref, column = meta.origin
        return f"{ref.dataset.id}.{column}"
    return meta.name


def canonical_longitude(node: exp.Expression) -> exp.Expression:
    """Return ``node`` mapped onto (−180, 180]: exact for values in (−540, 540]."""
    return exp.Paren(this=exp.Case(ifs=[
        exp.If(this=exp.GT(this=node.copy(), expression=exp.Literal.number(180)),
               true=exp.Sub(this=node.copy(), expression=exp.Literal.number(360))),
        exp.If(this=exp.LTE(this=node.copy(), expression=exp.Literal.number(-180)),
               true=exp.Add(this=node.copy(), expression=exp.Literal.number(360))),
    ], default=node.copy()))


def _in_degrees(node: exp.Expression, meta: ColumnMeta) -> exp.Expression:
    return exp.Degrees(this=node) if meta.radians else node


def _needs_wrap(meta: ColumnMeta, other: ColumnMeta) -> bool:
    """Return whether a longitude side must be mapped to (−180, 180] to meet the other side."""
    mine, theirs = meta.value_range, other.value_range
    if meta.radians or other.radians:
        return True
    if mine is None or theirs is None:
        return mine is None or mine[1] > 180 or mine[0] <= -180
    both_east = mine[0] >= 0 and theirs[0] >= 0 and mine[1] <= 360 and theirs[1] <= 360
    both_west = mine[0] > -180 and theirs[0] > -180 and mine[1] <= 180 and theirs[1] <= 180
    return not (both_east or both_west)


def _scale(meta: ColumnMeta) -> tuple[str, float] | None:
    return _SCALE.get((meta.units or "").strip().lower())


def reconcile(node: exp.Expression, sql: str) -> exp.Expression:
    """Return ``node`` with each comparison between keys of two sources brought to common terms; raise if impossible."""
    for cmp in list(node.find_all(*_COMPARISONS)):
        left, right = cmp.this, cmp.expression
        a, b = _meta(left), _meta(right)
        if a is None or b is None or a.origin is None or b.origin is None or a.origin[0] is b.origin[0]:
            continue
        if a.calendar is not None or b.calendar is not None:
            if a.calendar is not None and b.calendar is not None:
                why = compatible_times(a, b)
                if why is not None:
                    raise error_at(QueryError, why, sql, cmp)
            continue
        if a.key != b.key or a.key is None:
            continue
        if a.key == "longitude":
            wrap_a, wrap_b = _needs_wrap(a, b), _needs_wrap(b, a)
            if wrap_a or wrap_b:
                new_left = canonical_longitude(_in_degrees(left.copy(), a)) if wrap_a else left
                new_right = canonical_longitude(_in_degrees(right.copy(), b)) if wrap_b else right
                cmp.set("this", new_left)
                cmp.set("expression", new_right)
        elif a.key == "latitude":
            if a.radians != b.radians:
                cmp.set("this", _in_degrees(left.copy(), a))
                cmp.set("expression", _in_degrees(right.copy(), b))
        elif a.key == "vertical" and (a.units or "").lower() != (b.units or "").lower():
            sa, sb = _scale(a), _scale(b)
            if sa is None or sb is None or sa[0] != sb[0]:
                raise error_at(QueryError, f"{_name(a)} is in {a.units or 'no units'} and {_name(b)} in "
                               f"{b.units or 'no units'}; dstp converts pressures and lengths, not these — compare "
                               "vertical keys of one kind", sql, cmp)
            factor = sb[1] / sa[1]
            cmp.set("expression", exp.Paren(this=exp.Mul(this=right.copy(), expression=exp.Literal.number(factor))))
    return node

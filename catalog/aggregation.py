"""Aggregating files along one axis: their order, each file's decoding, the coverage they give.

A dataset of many files (one per month, say) is one long axis cut into
pieces. Each piece is decoded with its own file's attributes
(:func:`file_decodings` refuses what cannot be reconciled, naming file and
variable); files are put in order by their first coordinate value
(:func:`order_files`); and the axis they make is checked for gaps and overlaps
(:func:`coverage`).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from dstp.catalog.cf import Decoding, calendar_family, decode_values, decoding_for, merge_decodings
from dstp.catalog.columns import CoordinateColumn
from dstp.catalog.descriptor import CoordinateSpec
from dstp.catalog.netcdf4_ import FileMeta, FileSource, VariableMeta
from dstp.catalog.units import CONVERTIBLE, DIFFERENT, EQUAL, LABELS, compare_units
from dstp.errors import DataFileError

__all__ = ["coverage", "file_decodings", "nulls", "order_files"]


def nulls(shape: tuple[int, ...], dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Return a block of NULLs: placeholder values of ``dtype`` and an all-true mask."""
    values = np.full(shape, None, dtype=object) if dtype == np.dtype(object) else np.zeros(shape, dtype=dtype)
    return values, np.ones(shape, dtype=bool)


#: What :func:`_first_values` gives for a file with no records along the aggregation dimension.
_EMPTY = object()


def _first_values(handles: FileSource, meta: FileMeta, variable: str, agg: str) -> Any:
    """Return the first decoded value of a file's aggregation coordinate: ``_EMPTY`` when the file has no
    records, None when the coordinate does not decode."""
    var = meta.variables.get(variable)
    if var is None or var.dimensions != (agg,):
        raise DataFileError(f"{meta.path.name}: coordinate {variable!r} along {agg!r} is missing")
    dec = decoding_for(var.dtype, var.attrs, var.default_fill, per_character=var.per_character)
    if var.shape[0] == 0:
        return _EMPTY
    if dec is None:
        return None
    raw = handles.read(meta.path, variable, [slice(0, 1)])
    try:
        value, mask = decode_values(raw, dec)
    except ValueError as exc:
        raise DataFileError(f"{meta.path.name}: coordinate {variable!r}: {exc}") from None
    if mask is not None and mask.any():
        raise DataFileError(f"{meta.path.name}: the first value of coordinate {variable!r} is missing")
    return value[0]


def _first_of_each(handles: FileSource, metas: list[FileMeta], variable: str, agg: str) -> list[Any]:
    """Return :func:`_first_values` of every file; files whose coordinate decodes alike are decoded together
    (the same values, one call: per file, decoding 100,000 single times costs seconds)."""
    out: list[Any] = [None] * len(metas)
    groups: dict[int, tuple[Decoding, list[int], list[np.ndarray]]] = {}
    by_variable: dict[int, Decoding | None] = {}
    for k, meta in enumerate(metas):
        var = meta.variables.get(variable)
        if var is None or var.dimensions != (agg,) or var.shape[0] == 0:
            out[k] = _first_values(handles, meta, variable, agg)  # refuses, or says it has no records
            continue
        if id(var) not in by_variable:
            by_variable[id(var)] = decoding_for(var.dtype, var.attrs, var.default_fill,
                                                per_character=var.per_character)
        dec = by_variable[id(var)]
        if dec is None or dec.text:  # text first values keep their own path (a char array's string length)
            out[k] = _first_values(handles, meta, variable, agg)
            continue
        _, members, raws = groups.setdefault(id(var), (dec, [], []))
        members.append(k)
        raws.append(np.asarray(handles.read(meta.path, variable, [slice(0, 1)])).reshape(-1)[:1])
    for dec, members, raws in groups.values():
        try:
            values, mask = decode_values(np.concatenate(raws), dec)
        except ValueError:  # one of them does not decode: per file, to name it
            for k in members:
                out[k] = _first_values(handles, metas[k], variable, agg)
            continue
        if mask is not None and mask.any():
            k = members[int(np.flatnonzero(mask)[0])]
            raise DataFileError(f"{metas[k].path.name}: the first value of coordinate {variable!r} is missing")
        for k, value in zip(members, values):
            out[k] = value
    return out


def order_files(
    metas: list[FileMeta], agg: str | None, spec: CoordinateSpec | None, handles: FileSource
) -> list[FileMeta]:
    """Order files along the aggregation dimension by their first coordinate value, else by name."""
    if len(metas) < 2 or agg is None or spec is None:
        return metas
    if not any(spec.variable in m.variables for m in metas):
        return metas  # an index dimension (a record or sample dimension without a coordinate): name order
    firsts = list(zip(_first_of_each(handles, metas, spec.variable, agg), (m.path.name for m in metas)))
    if any(v is None for v, _ in firsts):
        return metas
    # A file with no records yet (a month created, not yet written) holds nothing to order: it goes last.
    held = [i for i, (v, _) in enumerate(firsts) if v is not _EMPTY]
    kinds = {type(firsts[i][0]) for i in held}
    if len(kinds) > 1:  # times in some files, numbers in others: _coordinate_column says why
        return metas
    order = sorted(held, key=lambda i: (firsts[i][0], firsts[i][1]))
    return [metas[i] for i in order] + [m for m, (v, _) in zip(metas, firsts) if v is _EMPTY]


def file_decodings(
    metas: list[FileMeta],
    variable: str,
    dims: tuple[str, ...],
    what: str,
    inherit: Callable[[FileMeta], Mapping[str, Any]] | None = None,
    *,
    text_time: bool = False,
    labels: list[str] | None = None,
) -> tuple[Decoding | None, ...]:
    """Return each file's decoding of ``variable`` (None where absent); refuse files that disagree.

    ``dims`` are the dimensions of the variable's values (a char array's string
    length left out). ``inherit`` gives, for one file, the attributes a variable
    takes from another when it lacks them (CF bounds take ``units`` and
    ``calendar`` from their coordinate — in that file: units may change
    between files). ``text_time`` parses text values as ISO 8601 date-times.

    Units are compared as units (:mod:`.units`): ``K`` and ``kelvin`` agree;
    ``K`` and ``degC`` are refused (dstp converts no values between files). A
    coordinate whose values the caller checks to be identical in every file may
    carry unit *labels* that are no physical unit (``level`` in one file,
    ``hybrid_sigma_pressure`` in the next): pass ``labels``, and a sentence is
    added to it instead of a refusal.
    """
    decodings: list[Decoding | None] = []
    reference: VariableMeta | None = None
    reference_file = ""
    # Files with equal headers share their VariableMeta (the catalog index keeps one header for them): each is
    # decoded once, and equal decodings are one object (a dataset of 100,000 files holds a handful of them).
    by_variable: dict[int, Decoding | None] = {}
    interned: dict[Decoding, Decoding] = {}
    for meta in metas:
        var = meta.variables.get(variable)
        if var is None:
            decodings.append(None)
            continue
        if var.value_dimensions != dims:
            raise DataFileError(
                f"{meta.path.name}: {what} {variable!r} has dimensions ({', '.join(var.value_dimensions)}), "
                f"expected ({', '.join(dims)}); a variable must keep its dimensions in every file"
            )
        if inherit is None and id(var) in by_variable:
            dec = by_variable[id(var)]
        else:
            attrs = {**(inherit(meta) if inherit else {}), **var.attrs}
            dec = _interned(decoding_for(var.dtype, attrs, var.default_fill, text_time=text_time,
                                         per_character=var.per_character), interned)
            if inherit is None:
                by_variable[id(var)] = dec
        if dec is None:
            raise DataFileError(f"{meta.path.name}: {what} {variable!r} has type {var.dtype}, "
                                "which is neither numeric nor text")
        if text_time and not dec.text:
            raise DataFileError(f"{meta.path.name}: {what} {variable!r} is numeric; time-format=\"iso8601\" "
                                "is for text variables (numeric times are read from their units)")
        if reference is None:
            reference, reference_file = var, meta.path.name
        elif dec.time_units is None and var is not reference:
            mine, theirs = _units(var.attrs), _units(reference.attrs)
            verdict = compare_units(mine, theirs)
            if verdict == LABELS and labels is not None:
                note = (f"{what} {variable!r} has units {mine or '(none)'!r} in {meta.path.name} but "
                        f"{theirs or '(none)'!r} in {reference_file}: not physical units, and its values are the "
                        "same in every file, so the files aggregate; the first file's label is shown")
                if note not in labels:
                    labels.append(note)
            elif verdict != EQUAL:
                how = {CONVERTIBLE: "; they convert into each other, but dstp does not convert values between files",
                       LABELS: " (not both physical units, so they cannot be compared)",
                       DIFFERENT: " (different physical quantities)"}[verdict]
                raise DataFileError(
                    f"{meta.path.name}: {what} {variable!r} has units {mine or '(none)'!r} but "
                    f"{reference_file} has {theirs or '(none)'!r}{how} — convert the files, or publish them as "
                    "separate datasets"
                )
        decodings.append(dec)
    try:
        merge_decodings(decodings)
    except ValueError as exc:
        raise DataFileError(f"{what} {variable!r}: {exc}; files: {_calendars(metas, variable)}") from None
    return tuple(decodings)


def _interned(dec: Decoding | None, interned: dict[Decoding, Decoding]) -> Decoding | None:
    """Return the one object equal to ``dec`` met so far (``dec`` itself the first time)."""
    if dec is None:
        return None
    try:
        return interned.setdefault(dec, dec)
    except (TypeError, ValueError):  # a value that neither hashes nor compares as one (an array): kept as it is
        return dec


def _units(attrs: Mapping[str, Any]) -> str:
    return " ".join(str(attrs.get("units", "")).split())


def _calendars(metas: list[FileMeta], variable: str) -> str:
    parts = []
    for meta in metas:
        var = meta.variables.get(variable)
        if var is not None:
            cal = var.attrs.get("calendar", "standard") if "since" in _units(var.attrs) else "-"
            parts.append(f"{meta.path.name} ({_units(var.attrs) or 'no units'}; {cal})")
    return ", ".join(parts[:6]) + (" …" if len(parts) > 6 else "")



def coverage(coord: CoordinateColumn) -> tuple[tuple[tuple[int, int], ...], tuple[str, ...]]:
    """Return the aggregation axis' covered index runs (split at gaps) and warnings about gaps and overlaps.

    A gap is a step more than 1.5 times the median step (a missing month in
    monthly files: 59–62 days against about 30). Needs at least three points.
    """
    values = coord.values
    n = len(values)
    if n < 3:
        return ((0, n),) if n else (), ()
    numbers = _as_numbers(coord)
    steps = np.diff(numbers)
    warnings: list[str] = []
    if coord.monotonic == 0:
        repeats = int(np.sum(steps == 0))
        what = f"{repeats} repeated value(s)" if repeats else "values out of order"
        warnings.append(
            f"coordinate {coord.name!r} is not monotonic along the files ({what}): files overlap; "
            "pushdown on it is off and records appear once per file"
        )
        return ((0, n),), tuple(warnings)
    steps = np.abs(steps)
    typical = float(np.median(steps))
    runs: list[tuple[int, int]] = []
    begin = 0
    for i in np.flatnonzero(steps > 1.5 * typical):
        runs.append((begin, int(i) + 1))
        begin = int(i) + 1
    runs.append((begin, n))
    if len(runs) > 1:
        shown = ", ".join(f"{_label(values[b - 1])} → {_label(values[b])}" for b, _ in runs[1:])
        warnings.append(f"{len(runs) - 1} gap(s) along {coord.name!r} (steps over 1.5× the usual): {shown}")
    return tuple(runs), tuple(warnings)


def _label(value: Any) -> str:
    if isinstance(value, np.datetime64):
        return str(value.astype("datetime64[s]"))
    return str(value)


def _as_numbers(coord: CoordinateColumn) -> np.ndarray:
    """Return a coordinate's values as numbers (instants as days since their first)."""
    values = coord.values
    if values.dtype.kind == "M":
        return (values - values[0]).astype("timedelta64[us]").astype(np.float64) / 86_400e6
    if values.dtype == object and coord.decoding.calendar is not None:
        import cftime

        calendar = calendar_family(coord.decoding.calendar)
        dates = [cftime.datetime.strptime(str(v)[:19], "%Y-%m-%dT%H:%M:%S", calendar=calendar) for v in values]
        return np.asarray(cftime.date2num(dates, f"days since {str(values[0])[:10]}", calendar=calendar), float)
    return np.asarray(values, dtype=np.float64)

"""DAP2 and DAP4 constraint expressions, read into projections with index hyperslabs.

DAP2 (``.dods?tas[0:1:2][0:4][3],lat``): comma-separated projections, each a
variable — or a Grid's member, ``tas.tas`` / ``tas.lat`` — with one
``[start]``, ``[start:stop]`` or ``[start:stride:stop]`` per dimension (stop
inclusive); ``&`` selections apply to Sequences, and a dstp dataset serves
none, so a selection is refused with a message naming it. DAP4
(``dap4.ce=/tas[0:1:2][0:4][3];/lat``): ``;``-separated variables by path,
the same index ranges and also ``[]`` (the whole dimension) and
``[start:stride:]`` (to the end), and a filter (``|pr>20,lat>=62``) that
:func:`filter_sql` turns into the SQL condition masking what it rejects; a
field list (``{…}``) is refused by name.

Parsing is syntax only; :func:`resolve` checks names and bounds against the
dataset and fills the whole dimension where a projection gives no range.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote

from dstp.errors import BadRequestError, NotFoundError
from dstp.opendap.model import DapDataset

__all__ = ["Projection", "parse_dap2", "parse_dap4", "resolve", "whole"]

#: (start, stride, stop) with stop inclusive, as DAP writes it; stop None means "to the end" (DAP4).
IndexRange = tuple[int, int, int | None]


@dataclass(frozen=True, slots=True)
class Projection:
    """One projected variable: its name, the Grid member asked for (DAP2), and one range per dimension."""

    name: str
    #: For a DAP2 ``grid.member`` projection, the member (the array's own name or a map's); else "".
    member: str = ""
    #: One (start, stride, stop) per dimension of the variable (the member); empty means "all of it".
    ranges: tuple[IndexRange, ...] = ()
    #: A DAP4 filter (``|tas>300,pr<5``) as comparisons (left, operator, right); a side is a name or a literal.
    filter: tuple[tuple[str, ...], ...] = ()


_NAME = r"[A-Za-z_%][A-Za-z0-9_.\-%/]*"
_DAP2_PART = re.compile(rf"\s*({_NAME})((?:\[[^\]]*\])*)\s*")
_DAP4_PART = re.compile(rf"\s*/?({_NAME})((?:\[[^\]]*\])*)\s*")


def _range(text: str, said: str, dap4: bool) -> IndexRange:
    parts = [p.strip() for p in text.split(":")]
    if dap4 and text.strip() == "":
        return (0, 1, None)
    if not all(re.fullmatch(r"\d+", p) for p in parts if p) or len(parts) > 3 or any(
            not p for p in parts[:-1]) or (not parts[-1] and not dap4):
        raise BadRequestError(f"cannot read [{text}] in {said!r}: write [start], [start:stop] or "
                              "[start:stride:stop] with whole numbers from 0 (stop included)")
    numbers = [int(p) if p else None for p in parts]
    if len(numbers) == 1:
        assert numbers[0] is not None
        return (numbers[0], 1, numbers[0])
    if len(numbers) == 2:
        assert numbers[0] is not None
        return (numbers[0], 1, numbers[1])
    start, stride, stop = numbers
    assert start is not None and stride is not None
    if stride < 1:
        raise BadRequestError(f"stride {stride} in {said!r} must be 1 or more")
    return (start, stride, stop)


def _split(text: str, sep: str) -> list[str]:
    out: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        depth += 1 if ch in "[{(" else -1 if ch in "]})" else 0
        if ch == sep and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return [p for p in out if p.strip()]


def _unquoted(text: str) -> str:
    """Return ``text`` percent-decoded until stable: netCDF-C 4.9 encodes a dap4.ce's brackets two times over."""
    for _ in range(4):
        decoded = unquote(text)
        if decoded == text:
            break
        text = decoded
    return text


def parse_dap2(query: str) -> list[Projection]:
    """Return the projections of a DAP2 constraint expression (empty: the whole dataset)."""
    text = _unquoted(query).strip()
    if not text:
        return []
    projection_text, _, selections = text.partition("&")
    if selections.strip():
        raise BadRequestError(f"the selection &{selections} applies to DAP2 Sequences, and this dataset serves "
                              "arrays: constrain arrays by index, e.g. ?tas[0:1:3][0:1:9][0:1:9]")
    out = []
    for part in _split(projection_text, ","):
        m = _DAP2_PART.fullmatch(part)
        if m is None:
            raise BadRequestError(f"cannot read the projection {part.strip()!r}: write var[start:stride:stop]…, "
                                  "one [ ] per dimension, or grid.member for one part of a Grid")
        name, member = m[1], ""
        if "." in name:
            name, _, member = name.partition(".")
        ranges = tuple(_range(b, part.strip(), False) for b in re.findall(r"\[([^\]]*)\]", m[2]))
        out.append(Projection(name, member, ranges))
    return out


def parse_dap4(ce: str) -> list[Projection]:
    """Return the projections of a DAP4 constraint expression (``dap4.ce``; empty: the whole dataset)."""
    text = _unquoted(ce).strip()
    if not text:
        return []
    out = []
    for part in _split(text, ";"):
        part, bar, filter_text = part.partition("|")
        if "{" in part:
            raise BadRequestError(f"the field list in {part.strip()!r} applies to Structures; this dataset has "
                                  "none: name the variables, /tas;/lat")
        if "=" in part:
            raise BadRequestError(f"dimension constraints ({part.strip()!r}) are not supported: slice each "
                                  "variable, /tas[0:1:9][…]")
        m = _DAP4_PART.fullmatch(part)
        if m is None:
            raise BadRequestError(f"cannot read {part.strip()!r}: write /var[start:stride:stop]…, "
                                  "variables separated by ;")
        ranges = tuple(_range(b, part.strip(), True) for b in re.findall(r"\[([^\]]*)\]", m[2]))
        comparisons = _filter(filter_text, f"{part.strip()}|{filter_text}") if bar else ()
        out.append(Projection(m[1].strip("/"), "", ranges, comparisons))
    return out


_TOKEN = re.compile(r'\s*(<=|>=|==|!=|<|>|=|"(?:[^"\\]|\\.)*"|[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|/?[A-Za-z_][\w.]*(?:/[A-Za-z_][\w.]*)*)')
_OPERATORS = ("<=", ">=", "==", "!=", "<", ">", "=")


def _filter(text: str, said: str) -> tuple[tuple[str, ...], ...]:
    """Return a DAP4 filter's clauses: ``a op b`` or ``a op b op c`` (a range), joined by ``,`` (and)."""
    clauses = []
    for clause in _split(text, ","):
        tokens, at = [], 0
        while at < len(clause.rstrip()):
            m = _TOKEN.match(clause, at)
            if m is None:
                raise BadRequestError(f"cannot read the filter {said!r} at {clause[at:].strip()!r}: write "
                                      "|var>300 or |250<var<300, clauses separated by ,")
            tokens.append(m[1])
            at = m.end()
        shape_ok = len(tokens) in (3, 5) and all(
            (t in _OPERATORS) == (i % 2 == 1) for i, t in enumerate(tokens))
        if not shape_ok:
            raise BadRequestError(f"cannot read the clause {clause.strip()!r} of the filter {said!r}: write "
                                  "var op value or value op var op value, op one of < <= > >= == !=")
        clauses.append(tuple(tokens))
    if not clauses:
        raise BadRequestError(f"the filter in {said!r} is empty: write |var>300")
    return tuple(clauses)


def whole(ds: DapDataset, name: str) -> tuple[tuple[int, int, int], ...]:
    return tuple((0, 1, ds.dimensions[d] - 1) for d in ds.variables[name].dims)


def resolve(ds: DapDataset, projection: Projection, dap4: bool = False) -> tuple[str, tuple[tuple[int, int, int], ...]]:
    """Return the variable a projection reads and its ranges, checked (NotFoundError, BadRequestError)."""
    name = projection.name
    if projection.member and f"{name}.{projection.member}" in ds.variables:  # a name that holds a dot
        projection = Projection(f"{name}.{projection.member}", "", projection.ranges)
        name = projection.name
    if dap4 and name not in ds.variables:
        name = name.rsplit("/", 1)[-1]  # /Grid/precip: the variable of the group
    if name not in ds.variables:
        raise NotFoundError(f"{ds.id} has no variable {projection.name!r} (variables: {', '.join(ds.variables)})")
    target = name
    if projection.member:
        variable = ds.variables[name]
        if projection.member != name and projection.member not in variable.dims:
            raise NotFoundError(f"{name} has no member {projection.member!r}: a Grid's members are {name} and its "
                                f"maps {', '.join(variable.dims)}")
        target = projection.member
    dims = ds.variables[target].dims
    if not projection.ranges:
        return target, whole(ds, target)
    if len(projection.ranges) != len(dims):
        said = f"{projection.name}{'.' + projection.member if projection.member else ''}"
        raise BadRequestError(f"{said} has {len(dims)} dimension{'s' if len(dims) != 1 else ''} "
                              f"({', '.join(dims) or 'a scalar'}): give one [start:stride:stop] for each, "
                              f"not {len(projection.ranges)}")
    out = []
    for dim, (start, stride, stop) in zip(dims, projection.ranges):
        size = ds.dimensions[dim]
        last = size - 1 if stop is None else stop
        if start > last:
            raise BadRequestError(f"{target}: start {start} is after stop {last} on dimension {dim}")
        if last >= size:
            raise BadRequestError(f"{target}: index {last} is past the end of dimension {dim} (size {size}, "
                                  f"indices 0 to {size - 1})")
        out.append((start, stride, last))
    return target, tuple(out)


_SQL_OPERATORS = {"==": "=", "=": "=", "!=": "<>", "<": "<", "<=": "<=", ">": ">", ">=": ">="}


def filter_sql(ds: DapDataset, target: str, clauses: tuple[tuple[str, ...], ...]) -> str:
    """Return a DAP4 filter on ``target`` as the SQL condition that keeps a value (the others become NaN).

    A filter on an array masks: the answer keeps its shape, and where the condition fails the value is
    missing (``_FillValue`` NaN). Names are the target's own variable, other variables on the same
    dimensions, or those dimensions' coordinates; the condition runs in dstp's SQL engine with the read.
    """
    from dstp.hyperslabs import quote_name, sql_literal

    v = ds.variables[target]
    said = f"/{target}|" + ",".join("".join(c) for c in clauses)
    if v.source != "column" or v.dtype.kind != "f" or not any(a.name == "_FillValue" for a in v.attributes):
        raise BadRequestError(f"{said}: a filter masks the values it rejects as missing, and {target} has no "
                              "missing value (only floating-point data variables with a _FillValue can be "
                              "filtered); constrain it by index instead")

    def side(token: str) -> str:
        if token.startswith('"'):
            return sql_literal(token[1:-1].replace('\\"', '"'))
        if re.fullmatch(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?", token):
            return sql_literal(float(token))
        name = token.strip("/").rsplit("/", 1)[-1]
        other = ds.variables.get(name)
        if other is None:
            raise NotFoundError(f"{said}: {ds.id} has no variable {token!r}")
        if other.time is not None or other.source not in ("column", "axis") or not set(other.dims) <= set(v.dims):
            raise BadRequestError(f"{said}: {name} cannot be compared here: a filter on {target} names {target}, "
                                  f"variables on its dimensions ({', '.join(v.dims)}) or their coordinates, "
                                  "and no times (select times by index)")
        return quote_name(name)

    terms = []
    for clause in clauses:
        parts = [side(t) if i % 2 == 0 else _SQL_OPERATORS[t] for i, t in enumerate(clause)]
        terms.append(" ".join(parts[:3]))
        if len(parts) == 5:
            terms.append(" ".join(parts[2:]))
    return " and ".join(f"({t})" for t in terms)

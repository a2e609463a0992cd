"""A dstp dataset as one virtual OPeNDAP file: its dimensions, variables, types and CF attributes.

Values are served **decoded**, as the service reads them (each file decoded with its own
``scale_factor``/``add_offset``/``_FillValue``, then aggregated), so the attributes that say how a
file stores values (``scale_factor``, ``add_offset``, ``missing_value``, ``_Unsigned``, a packed
variable's ``valid_*``) are left out, and a variable with missing values carries ``_FillValue = NaN``
in its served type. A client that decodes (netCDF-C, xarray, pydap) then gets what xarray gets from
the files: packed integers arrive as the floats they stand for, an integer variable with missing
values as floats with NaN (xarray's own promotion), times as numbers in the dataset's time units and
calendar (the first file's units; each file's times were decoded with its own before).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dstp.erddap.dataset import ErddapDataset
from dstp.erddap.formats import attributes_of
from dstp.metadata import DatasetDetails, DimensionInfo

__all__ = ["DapDataset", "DapVariable", "DapAttribute", "build_dataset", "dap2_type", "dap4_type"]

#: Served numpy type of each Arrow type the service returns (times and nullable integers are handled apart).
_SERVED = {"float": "f4", "double": "f8", "int8": "i1", "uint8": "u1", "int16": "i2", "uint16": "u2",
           "int32": "i4", "uint32": "u4", "int64": "i8", "uint64": "u8", "bool": "u1", "halffloat": "f4"}
#: DAP2 has no 8-bit signed nor 64-bit integers: int8 widens to Int16 (exact), 64-bit to Float64.
_DAP2 = {"f4": "Float32", "f8": "Float64", "i1": "Int16", "u1": "Byte", "i2": "Int16", "u2": "UInt16",
         "i4": "Int32", "u4": "UInt32", "i8": "Float64", "u8": "Float64", "O": "String"}
_DAP4 = {"f4": "Float32", "f8": "Float64", "i1": "Int8", "u1": "UInt8", "i2": "Int16", "u2": "UInt16",
         "i4": "Int32", "u4": "UInt32", "i8": "Int64", "u8": "UInt64", "O": "String"}
#: CF attributes whose values are numbers in the variable's own (served) type.
_NUMERIC = ("valid_min", "valid_max", "valid_range", "actual_range", "flag_values", "flag_masks")


def dap2_type(dtype: np.dtype) -> str:
    return _DAP2[dtype.str[1:] if dtype.kind != "O" else "O"]


def dap4_type(dtype: np.dtype) -> str:
    return _DAP4[dtype.str[1:] if dtype.kind != "O" else "O"]


@dataclass(frozen=True, slots=True)
class DapAttribute:
    """One attribute: name, numpy type of its values (``O`` for text) and the values."""

    name: str
    dtype: np.dtype
    values: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class DapVariable:
    """One variable of the virtual file."""

    name: str
    dims: tuple[str, ...]
    #: The type values are sent in.
    dtype: np.dtype
    attributes: tuple[DapAttribute, ...]
    #: "column" (read through the service), "axis" (a dimension's coordinate values), "constant" (a grid mapping).
    source: str = "column"
    #: (units, calendar) of a time variable, whose values are numbers in those units.
    time: tuple[str, str] | None = None
    #: The value of a constant (a grid mapping variable).
    constant: Any = None
    #: A group path ("" at the root; "Grid" for /Grid/precip), used by DAP4.
    group: str = ""


@dataclass
class DapDataset:
    """The virtual file: dimensions in the dataset's order, variables, global attributes."""

    id: str
    dimensions: dict[str, int]
    variables: dict[str, DapVariable]
    attributes: tuple[DapAttribute, ...]
    #: The aggregation (unlimited) dimension, "" for none.
    unlimited: str
    #: The ERDDAP view it is built on: axes (values, order) for hyperslab queries, time axes.
    view: ErddapDataset
    #: Coordinate values by dimension, as the server compares them.
    axis_values: dict[str, np.ndarray] = field(default_factory=dict)

    def dimension(self, name: str) -> DimensionInfo:
        return next(d for d in self.view.details.dimensions if d.name == name)

    def is_grid(self, name: str) -> bool:
        """Return True for an array whose every dimension has a coordinate variable (a DAP2 Grid)."""
        v = self.variables[name]
        return bool(v.dims) and v.source == "column" and all(
            d in self.variables and self.variables[d].dims == (d,) for d in v.dims)


def _text(name: str, value: str) -> DapAttribute:
    return DapAttribute(name, np.dtype("O"), (value,))


def _numbers(name: str, text: str, dtype: np.dtype) -> DapAttribute | None:
    try:
        values = [float(w) for w in text.replace(",", " ").split()]
    except ValueError:
        return None
    if not values:
        return None
    if dtype.kind in "iu" and all(v.is_integer() for v in values):
        return DapAttribute(name, dtype, tuple(int(v) for v in values))
    return DapAttribute(name, np.dtype("f8"), tuple(values))


def _served_dtype(arrow_type: str, nullable: bool) -> np.dtype:
    if arrow_type == "string" or arrow_type.startswith(("large_string", "dictionary")):
        return np.dtype("O")
    code = _SERVED.get(arrow_type, "f8")
    if nullable and code[0] in "iu":
        # xarray turns an integer variable with a _FillValue into floats with NaN: float32 up to 16 bits.
        return np.dtype("f4") if code in ("i1", "u1", "i2", "u2") else np.dtype("f8")
    return np.dtype(code)


def _column_variable(view: ErddapDataset, name: str, present: set[str]) -> DapVariable:
    info = view.columns[name]
    time = view.time_axis(name)
    attrs = attributes_of(view, name, present)  # references (bounds, coordinates…) only to served variables
    if time is not None:
        units = time.units if " since " in time.units else info.units
        calendar = time.calendar or "standard"
        dtype = np.dtype("f8")
        attrs.update({"units": units, "calendar": calendar})
        time_spec: tuple[str, str] | None = (units, calendar)
    else:
        dtype = _served_dtype(info.arrow_type, info.nullable)
        time_spec = None
    out: list[DapAttribute] = []
    for key, value in attrs.items():
        if key in _NUMERIC:
            if info.packed and key.startswith("valid_"):
                continue  # in packed units: meaningless for the decoded values served
            number = _numbers(key, value, dtype if dtype.kind != "O" else np.dtype("f8"))
            out.append(number if number is not None else _text(key, value))
        else:
            out.append(_text(key, value))
    if info.nullable and dtype.kind == "f":
        out.insert(0, DapAttribute("_FillValue", dtype, (float("nan"),)))
    group = info.variable.rsplit("/", 1)[0].strip("/") if "/" in info.variable.strip("/") else ""
    return DapVariable(name, tuple(info.dimensions), dtype, tuple(out), "column", time_spec, group=group)


def _grid_mapping(view: ErddapDataset, mapping: Any) -> DapVariable:
    dtype = np.dtype(mapping.dtype) if mapping.dtype and np.dtype(mapping.dtype).kind in "iuf" else np.dtype("i4")
    attrs: list[DapAttribute] = []
    for key, value in mapping.parameters:
        number = _numbers(key, value, np.dtype("f8")) if key != "grid_mapping_name" else None
        attrs.append(number if number is not None else _text(key, value))
    if mapping.wkt and not any(a.name == "crs_wkt" for a in attrs):
        attrs.append(_text("crs_wkt", mapping.wkt))
    constant = np.asarray(float(mapping.value) if mapping.value else 0).astype(dtype)
    return DapVariable(mapping.name, (), dtype, tuple(attrs), "constant", constant=constant)


def build_dataset(details: DatasetDetails, axis_values: dict[str, np.ndarray]) -> DapDataset:
    """Return the virtual file of a dataset: every variable its files hold (nothing derived), gridded or not.

    Columns dstp derives (cell area weights, latitude/longitude from a grid mapping) are not in the
    files and are left out. Station, profile and trajectory data keep their variables on their own
    dimensions (no DAP2 Sequence).
    """
    view = ErddapDataset(details, axis_values)
    variables: dict[str, DapVariable] = {}
    present = {c.name for c in (*details.coordinates, *details.attributes) if c.variable} | {
        m.name for m in details.grid_mappings}
    for info in (*details.coordinates, *details.attributes):
        if not info.variable or info.name in variables:
            continue
        variables[info.name] = _column_variable(view, info.name, present)
    dims = {d.name: d for d in details.dimensions}
    for name, v in list(variables.items()):
        d = dims.get(v.dims[0]) if len(v.dims) == 1 else None
        if d is not None and d.coordinate == name and name in axis_values:
            axis_attrs = v.attributes
            if d.axis in ("X", "Y", "Z", "T") and not any(a.name == "axis" for a in axis_attrs):
                axis_attrs = (*axis_attrs, _text("axis", d.axis))
            variables[name] = DapVariable(name, v.dims, v.dtype, axis_attrs, "axis", v.time, group=v.group)
    used = {m for v in variables.values() for a in v.attributes if a.name == "grid_mapping"
            for m in str(a.values[0]).replace(":", " ").split()}
    for mapping in details.grid_mappings:
        if mapping.name in used and mapping.name not in variables:
            variables[mapping.name] = _grid_mapping(view, mapping)
    wanted = {d for v in variables.values() for d in v.dims}
    dimensions = {d.name: d.size for d in details.dimensions if d.name in wanted}
    attrs = tuple(_text(k, v) for k, v in details.global_attributes if not k.startswith("dstp:"))
    unlimited = details.aggregate_dimension if details.aggregate_dimension in dimensions else ""
    return DapDataset(details.summary.id, dimensions, variables, attrs, unlimited, view, axis_values)


def axis_numbers(ds: DapDataset, dim: str, index: slice) -> np.ndarray:
    """Return a dimension's coordinate values at ``index`` as served (times as numbers in the served units)."""
    variable = ds.variables[dim]
    values = ds.axis_values[dim][index]
    if variable.time is None:
        return np.asarray(values).astype(variable.dtype)
    return time_numbers(values, *variable.time)


def time_numbers(values: Any, units: str, calendar: str) -> np.ndarray:
    """Return times (datetime64, datetimes or ISO labels) as numbers of ``units`` on ``calendar``; NaN where missing."""
    import cftime

    from dstp.erddap.times import parse_label

    flat = list(np.asarray(values, dtype=object).reshape(-1))
    out = np.full(len(flat), np.nan)
    present: list[tuple[int, Any]] = []
    for i, v in enumerate(flat):
        if v is None or (isinstance(v, float) and np.isnan(v)):
            continue
        if isinstance(v, np.datetime64):
            if np.isnat(v):
                continue
            v = v.astype("datetime64[us]").item()
        if isinstance(v, str):
            present.append((i, parse_label(v, calendar)))
        else:
            present.append((i, cftime.datetime(v.year, v.month, v.day, v.hour, v.minute, v.second, v.microsecond,
                                               calendar=calendar)))
    if present:
        numbers = cftime.date2num([d for _, d in present], units, calendar)
        out[[i for i, _ in present]] = np.asarray(numbers, dtype="float64")
    return out.reshape(np.shape(values))

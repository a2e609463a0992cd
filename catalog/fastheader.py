"""A cold index build's fast header read: netCDF-C asked directly, for the common file, else ``None``.

    read_plain(opened, path, wanted) -> (FileMeta, values) | None

A helper process of a cold build (:meth:`FileHandles.read_once`) reads each
file once. Most of netCDF4-python's open is spent building Python objects for
every dimension, variable and attribute (0.43 ms of a 0.91 ms file, against
0.15 ms for netCDF-C's own ``nc_open`` and ``nc_close``), so for a file of the
common kind this module asks netCDF-C itself, through ``ctypes`` on the very
``libnetcdf`` netCDF4-python loaded (one netCDF-C and one HDF5 in the
process), and builds the same :class:`FileMeta` :func:`read_header` builds
from netCDF4-python, attribute by attribute with the same numpy types — and
the same objects shared where it shares them: a stored header is named by the
hash of its pickle, and a pickle refers back to an object it met rather than
repeating it, so two equal texts pickle longer than one text met twice.

Only files it can read exactly are read: no groups, and every variable and
attribute of an atomic type (``byte`` … ``uint64``, ``float``, ``double``,
``char``). A file with a group (HDF-EOS5 among them), a ``string``, a VLEN,
an enum, a compound or an opaque type, a format it does not know, or any
error of netCDF-C, is declined (``None``) and read by netCDF4-python, which
then gives the answer (or the refusal) it always gave.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from dstp.catalog import ugrid
from dstp.catalog.cf import cf_spelling
from dstp.catalog.headers import _PHONY, FileMeta, VariableMeta, _check_classic_length, _per_character

__all__ = ["read_plain"]

#: netCDF-C's atomic types, as netCDF4-python maps them (``_nctonptype``; NC_CHAR is ``S1``).
_TYPES = {1: "i1", 2: "S1", 3: "i2", 4: "i4", 5: "f4", 6: "f8", 7: "u1", 8: "u2", 9: "u4", 10: "i8", 11: "u8"}
_NC_CHAR = 2
#: ``nc_inq_format``'s answers, named as netCDF4-python's ``data_model`` names them.
_FORMATS = {1: "NETCDF3_CLASSIC", 2: "NETCDF3_64BIT_OFFSET", 3: "NETCDF4", 4: "NETCDF4_CLASSIC",
            5: "NETCDF3_64BIT_DATA"}
_NC_ENDIAN_LITTLE, _NC_ENDIAN_BIG = 1, 2
_NC_MAX_NAME = 256
_NC_MAX_VAR_DIMS = 1024

_LIB: list[Any] = []


def _library() -> Any:
    """Return netCDF-C as netCDF4-python loaded it (found among the process's mapped libraries), or None."""
    if _LIB:
        return _LIB[0]
    import netCDF4  # noqa: F401 - loads the libnetcdf to use

    found = None
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                name = line.rsplit(None, 1)[-1] if line.count(" ") >= 5 else ""
                if "/libnetcdf" in name and ".so" in name:
                    found = name
                    break
    except OSError:
        found = None
    lib = None
    if found is not None:
        try:
            lib = ctypes.CDLL(found, mode=ctypes.RTLD_LOCAL)
            lib.nc_inq_varids  # noqa: B018 - a netCDF-C of netCDF-4 (4.1 and later)
        except (OSError, AttributeError):
            lib = None
    _LIB.append(lib)
    return lib


class _Declined(Exception):
    """The file is not one this module reads exactly (or netCDF-C failed): netCDF4-python reads it."""


def _ok(status: int) -> None:
    if status != 0:
        raise _Declined(status)


def read_plain(opened: str, path: Path, wanted: Callable[[FileMeta], Sequence[str]],
               local: Path | None = None) -> tuple[FileMeta, dict[str, np.ndarray]] | None:
    """Return (header as :func:`read_header` reads it, whole raw values of the variables ``wanted(header)`` names,
    as netCDF4-python's ``var[...]`` gives them) of the file netCDF-C opens as ``opened``; None when it is not
    a file this module reads exactly, or anything failed (the caller then reads it with netCDF4-python).

    The caller holds NETCDF_LOCK."""
    lib = _library()
    if lib is None:
        return None
    ncid = ctypes.c_int()
    if lib.nc_open(opened.encode(), 0, ctypes.byref(ncid)) != 0:
        return None
    try:
        meta = _header(lib, ncid.value, path, local)
        values: dict[str, np.ndarray] = {}
        for name in wanted(meta):
            values[name] = _whole(lib, ncid.value, meta.variables[name])
        return meta, values
    except Exception:  # noqa: BLE001 - anything unexpected: netCDF4-python reads the file and says what it says
        return None
    finally:
        lib.nc_close(ncid.value)


def _header(lib: Any, ncid: int, path: Path, local: Path | None) -> FileMeta:
    c_int, byref = ctypes.c_int, ctypes.byref
    n = c_int()
    _ok(lib.nc_inq_grps(ncid, byref(n), None))
    if n.value:
        raise _Declined("groups")
    _ok(lib.nc_inq_format(ncid, byref(n)))
    data_model = _FORMATS.get(n.value)
    if data_model is None:
        raise _Declined("format")
    netcdf4 = data_model == "NETCDF4"
    name_buf = ctypes.create_string_buffer(_NC_MAX_NAME + 1)
    size = ctypes.c_size_t()

    # dimensions, in netCDF4-python's order (nc_inq_dimids for NETCDF4, else 0, 1, …)
    _ok(lib.nc_inq_ndims(ncid, byref(n)))
    count = n.value
    ids = (c_int * max(1, count))()
    if netcdf4 and count:
        _ok(lib.nc_inq_dimids(ncid, byref(n), ids, 0))
    else:
        for i in range(count):
            ids[i] = i
    _ok(lib.nc_inq_unlimdims(ncid, byref(n), None))
    unlim_ids = (c_int * max(1, n.value))()
    if n.value:
        _ok(lib.nc_inq_unlimdims(ncid, byref(n), unlim_ids))
    unlimited_ids = set(unlim_ids[:n.value])
    dim_names: dict[int, str] = {}
    dim_lengths: dict[int, int] = {}
    dimensions: dict[str, int] = {}
    unlimited: list[str] = []
    homes: dict[str, str] = {}

    def seen(dimid: int) -> str:
        known = dim_names.get(dimid)
        if known is not None:
            return known
        _ok(lib.nc_inq_dim(ncid, dimid, name_buf, byref(size)))
        name = dim_names[dimid] = name_buf.value.decode("utf-8")
        dim_lengths[dimid] = size.value
        if name not in dimensions:
            dimensions[name] = size.value
        if dimid in unlimited_ids and name not in unlimited:
            unlimited.append(name)
        if _PHONY.fullmatch(name):  # a new text each time, as read_header makes it: a pickle shares equal objects
            homes.setdefault(name, f"group /{'/'.strip('/')}")
        return name

    for i in range(count):
        seen(ids[i])

    _ok(lib.nc_inq_nvars(ncid, byref(n)))
    count = n.value
    varids = (c_int * max(1, count))()
    if netcdf4 and count:
        _ok(lib.nc_inq_varids(ncid, byref(n), varids))
    else:
        for i in range(count):
            varids[i] = i
    xtype, ndims, natts, endian, no_fill = c_int(), c_int(), c_int(), c_int(), c_int()
    dimids = (c_int * _NC_MAX_VAR_DIMS)()
    variables: dict[str, VariableMeta] = {}
    for i in range(count):
        varid = varids[i]
        _ok(lib.nc_inq_var(ncid, varid, name_buf, byref(xtype), byref(ndims), dimids, byref(natts)))
        name = name_buf.value.decode("utf-8")
        code = _TYPES.get(xtype.value)
        if code is None:
            raise _Declined("type")
        order = ""
        if lib.nc_inq_var_endian(ncid, varid, byref(endian)) == 0:
            order = "<" if endian.value == _NC_ENDIAN_LITTLE else ">" if endian.value == _NC_ENDIAN_BIG else ""
        dtype = np.dtype(order + code)
        of = dimids[:ndims.value]
        dims = tuple(seen(d) for d in of)
        attrs = _attributes(lib, ncid, varid, natts.value, name_buf)
        default_fill = None
        if "_FillValue" not in attrs:  # headers._default_fill, through Variable.get_fill_value
            _ok(lib.nc_inq_var_fill(ncid, varid, byref(no_fill), None))
            if no_fill.value != 1:
                fill = np.empty((), dtype)
                _ok(lib.nc_inq_var_fill(ncid, varid, byref(no_fill), fill.ctypes.data_as(ctypes.c_void_p)))
                default_fill = fill
        variables[name] = VariableMeta(name=name, dimensions=dims, shape=tuple(dim_lengths[d] for d in of),
                                       dtype=dtype, attrs=cf_spelling(attrs), default_fill=default_fill)
    _ok(lib.nc_inq_natts(ncid, byref(n)))
    attrs = _attributes(lib, ncid, -1, n.value, name_buf)  # NC_GLOBAL
    variables = _per_character(variables)
    if data_model.startswith("NETCDF3"):
        _check_classic_length(local or path, path.name)
    homes.update(ugrid.location_homes(variables))
    return FileMeta(path=path, format=data_model, dimensions=dimensions, unlimited=tuple(unlimited),
                    variables=variables, attrs=attrs, homes=homes)


def _attributes(lib: Any, ncid: int, varid: int, count: int, name_buf: Any) -> dict[str, Any]:
    """Return the attributes as :func:`headers._attrs` has them from netCDF4-python's ``getncattr``."""
    out: dict[str, Any] = {}
    atype, size = ctypes.c_int(), ctypes.c_size_t()
    for i in range(count):
        _ok(lib.nc_inq_attname(ncid, varid, i, name_buf))
        raw = name_buf.value
        _ok(lib.nc_inq_att(ncid, varid, raw, ctypes.byref(atype), ctypes.byref(size)))
        code = _TYPES.get(atype.value)
        if code is None:
            raise _Declined("attribute type")
        key = raw.decode("utf-8")
        if atype.value == _NC_CHAR:
            text = ctypes.create_string_buffer(size.value + 1)
            _ok(lib.nc_get_att_text(ncid, varid, raw, text))
            data = text.raw[:size.value]
            out[key] = data if key == "_FillValue" else data.decode("utf-8", errors="replace").replace("\x00", "")
            continue
        value = np.empty(size.value, code)
        if size.value:
            _ok(lib.nc_get_att(ncid, varid, raw, value.ctypes.data_as(ctypes.c_void_p)))
        out[key] = value[0] if size.value == 1 else value
    return out


def _whole(lib: Any, ncid: int, var: VariableMeta) -> np.ndarray:
    """Return ``var``'s whole raw values as netCDF4-python's ``np.asarray(var[...])`` (dtype as the variable's,
    its byte order too)."""
    varid = ctypes.c_int()
    _ok(lib.nc_inq_varid(ncid, var.name.encode("utf-8"), ctypes.byref(varid)))
    data = np.empty(var.shape, var.dtype.newbyteorder("="))
    if data.size:  # (no elements, of an unlimited dimension with no records yet: netCDF4-python's empty array)
        _ok(lib.nc_get_var(ncid, varid.value, data.ctypes.data_as(ctypes.c_void_p)))
    if not var.shape:  # netCDF4-python returns a scalar variable's value as a numpy scalar, of native order
        return data
    return data if var.dtype.isnative else data.astype(var.dtype)

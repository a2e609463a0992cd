"""How the catalog index stores values: pickles read back through an allow-list, arrays as runs or blobs.

The index (:mod:`.index`) keeps a dataset as the very object the server serves
(a :class:`~dstp.catalog.dataset.GriddedDataset` and everything it holds), so a
warm start rebuilds nothing. It is written with :mod:`pickle` and read back by
an :class:`pickle.Unpickler` that finds only the classes and functions listed
in :data:`ALLOWED` (the "restricting globals" recipe of the pickle
documentation): a tampered index can name no other callable, and any name
outside the list fails the load, so that dataset is rebuilt from its files.
The open-file cache and locks a dataset holds are not written (their
``__getstate__`` leaves them out); the catalog puts the live cache back on load.

Arrays read from files (coordinate values) are stored as a *run* when they are
an exact arithmetic progression (a regular axis: three numbers instead of the
values; :func:`encode_values` checks that the run gives back every value bit
for bit), else inline when tiny (raw bytes and their type), else as a blob
named by its digest, stored once however many files hold it (the latitudes of
100,000 daily files). A file's values are one JSON object: reading 100,000 of
them unpickles nothing.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import io
import pickle
import zlib
from typing import Any, Callable

import numpy as np

__all__ = ["ALLOWED", "blob_key", "decode_values", "dumps", "encode_values", "loads", "pack", "stored_key", "unpack"]

#: Globals an index may name: module -> names (``*``: any class of that module defined there).
ALLOWED: dict[str, frozenset[str]] = {
    "builtins": frozenset({"set", "frozenset", "slice", "complex", "bytearray", "range"}),
    "collections": frozenset({"OrderedDict"}),
    "copyreg": frozenset({"_reconstructor"}),
    "datetime": frozenset({"datetime", "date", "timedelta", "timezone"}),
    "pathlib": frozenset({"Path", "PosixPath", "PurePosixPath", "WindowsPath", "PureWindowsPath"}),
    "numpy": frozenset({"dtype", "ndarray", "bool_", "str_", "bytes_", "float16", "float32", "float64", "int8",
                        "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "datetime64",
                        "timedelta64", "object_"}),
    "numpy.core.multiarray": frozenset({"_reconstruct", "scalar"}),
    "numpy._core.multiarray": frozenset({"_reconstruct", "scalar"}),
    "numpy.core.numeric": frozenset({"_frombuffer"}),
    "numpy._core.numeric": frozenset({"_frombuffer"}),
    "numpy.dtypes": frozenset({"*"}),
    "numpy.ma.core": frozenset({"MaskedArray", "_mareconstruct"}),
    "pyarrow.lib": frozenset({"type_for_alias", "timestamp", "list_", "large_list", "field", "struct",
                              "dictionary", "decimal128", "time64", "duration", "date32", "fixed_size_binary"}),
    "pyproj.crs.crs": frozenset({"CRS"}),
    "cftime._cftime": frozenset({"*"}),
    "dstp.catalog.cf": frozenset({"Decoding"}),
    "dstp.catalog.columns": frozenset({"AttributeColumn", "CoordinateColumn", "DataFile", "Dimension",
                                       "ColumnTraits"}),
    "dstp.catalog.dataset": frozenset({"GriddedDataset"}),
    "dstp.catalog.descriptor": frozenset({"AttributeSpec", "CoordinateSpec", "CorrelationKey", "Descriptor",
                                          "RemoteSpec"}),
    "dstp.catalog.dsg": frozenset({"FeatureLayout", "Link", "RaggedStructure"}),
    "dstp.catalog.gridmapping": frozenset({"GridMapping"}),
    "dstp.catalog.headers": frozenset({"FileMeta", "VariableMeta"}),
    "dstp.catalog.netcdf4_": frozenset({"FileIdentity"}),
}


class _Unpickler(pickle.Unpickler):
    def __init__(self, data: bytes) -> None:
        super().__init__(io.BytesIO(data))

    def find_class(self, module: str, name: str) -> Any:
        allowed = ALLOWED.get(module)
        if allowed is None or not (name in allowed or ("*" in allowed and not name.startswith("_"))):
            raise pickle.UnpicklingError(f"{module}.{name} is not among the names a catalog index may hold")
        found = super().find_class(module, name)
        if "*" in allowed and name not in allowed and not isinstance(found, type):
            raise pickle.UnpicklingError(f"{module}.{name} is not a class")
        return found

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError(f"unknown reference {pid!r} in a catalog index")


def dumps(value: Any) -> bytes:
    """Return ``value`` pickled (a dataset leaves its open-file cache and locks out: ``__getstate__``).

    Frozen, slotted dataclasses are written as a call of their class with their fields: read back ~4× faster
    than through the ``__setstate__`` dataclasses generate (which looks up the fields for every object), and
    what they call is still only a class the allow-list names.
    """
    out = io.BytesIO()
    _Pickler(out, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
    return out.getvalue()


class _Pickler(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        names = _constructed(type(obj))
        if names is None:
            return NotImplemented
        return type(obj), tuple(_in_order(getattr(obj, n)) for n in names)


class _SortedSet:
    """A set of text written in sorted order: a set iterates in the order of its hashes, which differ from process to
    process, so the same header pickled by a helper process and by the server made two different blobs (and keys)."""

    __slots__ = ("items",)

    def __init__(self, items: frozenset[str] | set[str]) -> None:
        self.items = items

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self.items), (sorted(self.items),)


def _in_order(value: Any) -> Any:
    """Return ``value``, a set of text wrapped so that it is written in sorted order (read back as the same set)."""
    if type(value) in (frozenset, set) and len(value) > 1 and all(type(v) is str for v in value):
        return _SortedSet(value)
    return value


_CONSTRUCTED: dict[type, tuple[str, ...] | None] = {}


def _constructed(cls: type) -> tuple[str, ...] | None:
    """Return the fields to build ``cls`` from, when it is a frozen slotted dataclass whose fields all go to
    ``__init__`` (and nothing runs after it); None otherwise."""
    try:
        return _CONSTRUCTED[cls]
    except KeyError:
        pass
    names: tuple[str, ...] | None = None
    params = getattr(cls, "__dataclass_params__", None)
    if params is not None and params.frozen and hasattr(cls, "__slots__") and not hasattr(cls, "__post_init__"):
        found = dataclasses.fields(cls)
        if all(f.init for f in found):
            names = tuple(f.name for f in found)
    _CONSTRUCTED[cls] = names
    return names


def loads(data: bytes) -> Any:
    """Return what :func:`dumps` wrote, finding only :data:`ALLOWED` names."""
    return _Unpickler(data).load()


def pack(data: bytes) -> bytes:
    """Return ``data`` compressed (zlib level 1: these are written at every change and read at every start)."""
    return zlib.compress(data, 1)


def unpack(data: bytes) -> bytes:
    return zlib.decompress(data)


def blob_key(data: bytes) -> bytes:
    """Return the name a blob is stored under: 16 bytes of its BLAKE2b digest."""
    return hashlib.blake2b(data, digest_size=16).digest()


#: Arrays up to this many bytes are stored with their file's record, not as a blob of their own.
INLINE_BYTES = 64


def encode_values(values: np.ndarray, keep_blob: Callable[[bytes], bytes]) -> list[Any]:
    """Return how to store ``values``, as JSON-ready items: ["run", dtype, first, step, n] for an exact arithmetic
    progression, ["raw", dtype, shape, base64] when small and numeric, ["inline", base64 pickle] when small,
    else ["blob", key] where ``keep_blob(pickle)`` stored it and returned its key (hex)."""
    if values.ndim == 1 and values.size >= 3 and values.dtype.kind in "iuf" and values.dtype.isnative:
        first, step = values[0], values[1] - values[0]
        run = _run(values.dtype, first, step, values.size)
        if run is not None and run.tobytes() == values.tobytes():
            return ["run", values.dtype.str, first.item(), step.item(), int(values.size)]
    if values.nbytes <= INLINE_BYTES and values.dtype.kind in "iufbM" and values.dtype.isnative:
        data = np.ascontiguousarray(values).tobytes()
        return ["raw", values.dtype.str, list(values.shape), base64.b64encode(data).decode()]
    data = pickle.dumps(np.ascontiguousarray(values) if values.dtype.kind != "O" else values,
                        protocol=pickle.HIGHEST_PROTOCOL)
    if values.nbytes <= INLINE_BYTES:
        return ["inline", base64.b64encode(data).decode()]
    return ["blob", keep_blob(data).hex()]


def stored_key(stored: list[Any]) -> tuple[Any, ...]:
    """Return a stored item as a hashable key (equal items are one value)."""
    return tuple(tuple(x) if isinstance(x, list) else x for x in stored)


def decode_values(stored: tuple[Any, ...] | list[Any], blob: Callable[[bytes], bytes]) -> np.ndarray:
    """Return the array :func:`encode_values` stored, read-only (cached facts are shared, never changed)."""
    kind = stored[0]
    if kind == "run":
        _, dtype, first, step, n = stored
        dt = np.dtype(dtype)
        values = _run(dt, dt.type(first), dt.type(step), n)
        if values is None:
            raise pickle.UnpicklingError("a stored run is not finite")
    elif kind == "raw":
        _, dtype, shape, text = stored
        values = np.frombuffer(base64.b64decode(text), np.dtype(dtype)).reshape(tuple(shape))
    elif kind == "inline":
        values = loads(base64.b64decode(stored[1]))
    elif kind == "blob":
        values = loads(blob(bytes.fromhex(stored[1])))
    else:
        raise pickle.UnpicklingError(f"unknown stored value kind {kind!r}")
    if not isinstance(values, np.ndarray):
        raise pickle.UnpicklingError("a stored value is not an array")
    if values.flags.writeable:
        values.flags.writeable = False
    return values


def _run(dtype: np.dtype, first: Any, step: Any, n: int) -> np.ndarray | None:
    """Return first + step * k for k < n, computed in ``dtype`` (None when that overflows or is not finite)."""
    with np.errstate(all="ignore"):
        values = (np.arange(n, dtype=dtype) * dtype.type(step) + dtype.type(first)).astype(dtype)
    if dtype.kind == "f" and not np.isfinite(values).all():
        return None
    return values

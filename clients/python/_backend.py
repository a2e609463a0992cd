"""The xarray backend: ``xr.open_dataset("dstp://host:port/ccm3")`` (engine ``"dstp"``).

Registered as the ``dstp`` entry point of ``xarray.backends`` (pyproject.toml),
so xarray finds it by the URL scheme or by ``engine="dstp"``. Only xarray
imports this module: ``import dstp`` never loads xarray.

What comes back is a lazy Dataset with the dataset's dimensions, dimension
coordinates (read at open, one ``AxisValues`` call each: the server holds them
in memory, so no query runs and no file is touched), scalar and auxiliary coordinates (2-D ``lat``/``lon`` as
coordinates), CF bounds rebuilt as ``<bounds variable>(…, bnds)``, the grid
mapping as a scalar variable carrying its CF parameters and ``crs_wkt``, and
every attribute as a variable. Times are handed to xarray *encoded* (numbers
with the coordinate's ``units`` and ``calendar``), so xarray's own CF decoding
turns them into what opening the files would give: ``datetime64`` on the
standard calendar, cftime objects on ``noleap`` or ``360_day`` — and
``decode_times=False`` gives the numbers. Data values arrive decoded (the
server applies each file's packing and fill values): NULL is NaN, and integers
stay integers where xarray keeps them (no ``_FillValue``/``missing_value``).

Indexing a variable (``ds.temperature[0, :, 10:20]``, ``.sel``, ``.isel``,
a dask chunk) runs one query for exactly that hyperslab
(:mod:`dstp.hyperslabs`): only those grid points are read on the server
and sent. The chunks one dask compute reads are read together, by box queries
over exactly the chunks (:mod:`dstp.client._chunk_batches`). ``record_reads()`` collects the server's account of every such
query (hyperslabs, elements and bytes read), so the claim can be checked.

``backend_kwargs={"query": "select … where …"}`` opens a query's result on
its grid instead (:func:`dstp.client.to_xarray`), eagerly. ``token``, ``tls`` and
``ca_file`` are :func:`dstp.connect`'s: the server shows only what that identity may read.
"""

from __future__ import annotations

import contextlib
import math
import re
import sys
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Iterable, Iterator, Sequence

import numpy as np
import xarray as xr
from xarray.backends import AbstractDataStore, BackendArray, BackendEntrypoint
from xarray.backends.store import StoreBackendEntrypoint
from xarray.core import indexing

from dstp.client import _chunk_batches
from dstp.client._client import Client
from dstp.hyperslabs import Axis, quote_name, slab_query
from dstp.result_grid import to_xarray
from dstp.cf_encoding import APPLIED as _APPLIED
from dstp.cf_encoding import TimeEncoding, to_numpy, variable_attrs
from dstp.cf_encoding import time_encoding as _time_encoding
from dstp.cf_encoding import xarray_dtype as _dtype
from dstp.metadata import ColumnInfo, DatasetDetails
from dstp.transport.wire.values import TransferSummary

__all__ = ["Connection", "DstpBackendArray", "DstpBackendEntrypoint", "ReadLog", "axis_values", "parse_url",
           "record_reads"]

_URL = re.compile(r"dstp://(?P<target>[^/?#]+)/(?P<dataset>[^/?#]+)/?")

#: Queries one process runs at once against one server (dask may ask for many chunks together);
#: well under the server's default max_concurrent_queries, so chunks queue here instead of being refused.
CONCURRENT_QUERIES = 4

def parse_url(url: str) -> tuple[str, str]:
    """Return (``host:port``, dataset id) of ``dstp://host:port/dataset``."""
    m = _URL.fullmatch(url.strip())
    if m is None:
        raise ValueError(f"{url!r} is not a dstp dataset URL; write dstp://host:port/<dataset>")
    return m["target"], m["dataset"]


# -- the server's read counters, as the backend's queries report them ----------------------------


@dataclass(slots=True)
class ReadLog:
    """What the server read for the backend's queries while the log was recording."""

    summaries: list[TransferSummary] = field(default_factory=list)
    sql: list[str] = field(default_factory=list)
    #: The dimensions whose values were asked with AxisValues (served from the server's memory: no query runs).
    axes: list[str] = field(default_factory=list)

    @property
    def queries(self) -> int:
        return len(self.summaries)

    @property
    def elements(self) -> int:
        """Grid-point values the server read from files (the scan's ``elements_read``)."""
        return sum(s.elements_read for s in self.summaries)

    @property
    def hyperslabs(self) -> int:
        return sum(s.hyperslabs_read for s in self.summaries)

    @property
    def bytes_read(self) -> int:
        return sum(s.bytes_read for s in self.summaries)

    @property
    def rows(self) -> int:
        """Records the server sent."""
        return sum(s.rows for s in self.summaries)


_logs: list[ReadLog] = []
_logs_lock = threading.Lock()


@contextlib.contextmanager
def record_reads() -> Iterator[ReadLog]:
    """Collect the server's read counters of every backend query run in this process meanwhile."""
    log = ReadLog()
    with _logs_lock:
        _logs.append(log)
    try:
        yield log
    finally:
        with _logs_lock:
            _logs.remove(log)


def _report(sql: str, summary: TransferSummary | None) -> None:
    if summary is None:
        return
    with _logs_lock:
        for log in _logs:
            log.summaries.append(summary)
            log.sql.append(sql)


def _report_axis(dimension: str) -> None:
    with _logs_lock:
        for log in _logs:
            log.axes.append(dimension)


# -- one client per server, shared by every lazy array (and rebuilt after pickling) ---------------


@dataclass(frozen=True, slots=True)
class Connection:
    """How to reach a server: its address and the credentials of :func:`dstp.connect` (None: its defaults,
    e.g. ``$DSTP_TOKEN``). Picklable, so dask workers open their own connection with the same identity."""

    target: str
    token: str | None = None
    tls: bool | None = None
    ca_file: str | None = None


_clients: dict[Connection, tuple[Client, threading.Semaphore]] = {}
_clients_lock = threading.Lock()


def _client(where: Connection) -> tuple[Client, threading.Semaphore]:
    with _clients_lock:
        found = _clients.get(where)
        if found is None:
            client = Client(where.target, token=where.token, tls=where.tls, ca_file=where.ca_file)
            found = _clients[where] = (client, threading.Semaphore(CONCURRENT_QUERIES))
        return found


def _run(target: Connection, sql: str, transport: str) -> Any:
    """Return the Arrow table of ``sql`` on ``target``, reporting what the server read."""
    client, slots = _client(target)
    with slots:
        stream = client.query_batches(sql, transport=transport)
        table = stream.read_all()
        _report(sql, stream.summary)
    return table


# -- dimension coordinates: read once per dataset version ------------------------------------------

#: Datasets whose coordinate values this process keeps (least recently opened dropped first).
AXES_CACHED = 32

_axes: OrderedDict[tuple[Any, ...], dict[str, Any]] = OrderedDict()
_axes_lock = threading.Lock()


def axis_values(target: Connection, dataset: str, details: DatasetDetails) -> dict[str, Any]:
    """Return each coordinated dimension's coordinate values (an Arrow column, in index order), by dimension.

    Kept per dataset version — the Describe answer's files and dimensions (names, sizes, ranges): a
    dataset whose files changed opens with fresh values, an unchanged one with no request at all. On
    the first open each is asked with one ``AxisValues`` call, all at once: the server answers from the
    values its catalog holds in memory (``DstpService.axis_values``), so no query runs and no file is read.
    """
    version = (target, dataset, details.files, details.dimensions)
    with _axes_lock:
        found = _axes.get(version)
        if found is not None:
            _axes.move_to_end(version)
            return found
    coordinates = {c.name for c in details.coordinates}
    wanted = {dim.name: dim.coordinate for dim in details.dimensions if dim.coordinate in coordinates}

    def read(dimension: str) -> Any:
        client, slots = _client(target)
        with slots:
            found = client.axis_values(dataset, dimension)
        _report_axis(dimension)
        return found

    if len(wanted) > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(min(len(wanted), CONCURRENT_QUERIES), thread_name_prefix="dstp-axes") as pool:
            values = dict(zip(wanted, pool.map(read, wanted)))
    else:
        values = {dim: read(dim) for dim in wanted}
    with _axes_lock:
        _axes[version] = values
        while len(_axes) > AXES_CACHED:
            _axes.popitem(last=False)
    return values


# -- values: Arrow columns to the arrays xarray expects -------------------------------------------


#: What an integer column with missing values is refused with, and how the user gets the numbers.
_INTEGER_HINT = ("Open the files with xarray to get that number, or query the column "
                 "(backend_kwargs={'query': 'select …'}) to get them as NaN")


def _numpy(column: Any, dtype: np.dtype, time: TimeEncoding | None, name: str = "") -> np.ndarray:
    """Return an Arrow column as the values xarray would have (:func:`dstp.cf_encoding.to_numpy`)."""
    return to_numpy(column, dtype, time, name, hint=_INTEGER_HINT)


class DstpBackendArray(BackendArray):
    """A dataset variable on the server; indexing it runs the query for exactly that hyperslab.

    ``columns`` has one entry for a variable, or one per vertex for CF bounds
    (stacked along a last ``bnds`` dimension). Picklable: it holds the
    server's address, not a connection, so dask can ship it to workers.
    """

    def __init__(self, target: Connection, dataset: str, columns: tuple[str, ...], dims: tuple[str, ...],
                 axes: dict[str, Axis], dimension_order: tuple[str, ...], dtype: np.dtype,
                 time: TimeEncoding | None = None, transport: str = "auto") -> None:
        self.target = target
        self.dataset = dataset
        self.columns = columns
        self.dims = dims
        self.axes = axes
        self.dimension_order = dimension_order
        self.time = time
        self.transport = transport
        self.dtype = dtype
        stacked = (len(columns),) if len(columns) > 1 else ()
        self.shape = tuple(axes[d].size for d in dims) + stacked
        _arrays.add(self)

    @property
    def box_group(self) -> tuple[Any, ...] | None:
        """Arrays one query can read together (:mod:`dstp.client._chunk_batches`): one column on the same
        dimensions of the same opened dataset; None for bounds (several columns) and scalars."""
        if len(self.columns) != 1 or not self.dims:
            return None
        return self.target, self.dataset, self.dims, id(self.axes), self.dimension_order, self.transport

    def __getitem__(self, key: indexing.ExplicitIndexer) -> Any:
        return indexing.explicit_indexing_adapter(key, self.shape, indexing.IndexingSupport.BASIC, self._read)

    def _read(self, key: tuple[Any, ...]) -> np.ndarray:
        """Return the values at a basic key (ints and slices), read by one query — shared with the other
        variables a ``Dataset.load()`` loads at the same grid points (:func:`_loading_together`)."""
        stacked = len(self.columns) > 1
        grid_key, vertex_key = (key[:-1], key[-1]) if stacked else (key, slice(None))
        columns = self.columns[vertex_key] if isinstance(vertex_key, slice) else (self.columns[vertex_key],)
        sizes = [len(range(self.axes[d].size)[k]) if isinstance(k, slice) else 1
                 for d, k in zip(self.dims, grid_key)]
        if not columns or 0 in sizes:
            return np.empty(_result_shape(self.shape, key), dtype=self.dtype)
        if _chunk_batches.predicting():
            raise _chunk_batches.WouldRead(key)
        if not stacked:
            boxed = _chunk_batches.take(self, key)  # a dask chunk whose compute planned it in a box query
            if boxed is not None:
                return boxed
        if not self.dims:  # a scalar: no grid, one record
            table = _run(self.target, f"select {quote_name(columns[0])} from {quote_name(self.dataset)} limit 1",
                         self.transport)
            return _numpy(table.column(0), self.dtype, self.time, columns[0]).reshape(())
        batch = _Batch.current()
        if batch is not None:
            found = batch.take(self, key)
            if found is not None:
                return found
        together = _loading_together(self, key) if not stacked else []
        if together:
            columns = tuple(dict.fromkeys((*columns, *(c for other in together for c in other.columns))))
        slab = slab_query(self.dataset, columns, self.dims, grid_key, self.axes, self.dimension_order)
        table = _run(self.target, slab.sql, self.transport)
        expected = math.prod(slab.read_shape)
        if table.num_rows != expected:
            raise ValueError(f"the server sent {table.num_rows} records for a hyperslab of {expected} grid points "
                             f"({slab.sql}); this dataset's records are not a full grid (station or trajectory "
                             "data): open a query instead, backend_kwargs={'query': 'select …'}")
        if together:
            _Batch.start({other: (key, other._values(table, slab, grid_key, other.columns)[0])
                          for other in together})
        parts = self._values(table, slab, grid_key, self.columns[vertex_key] if isinstance(vertex_key, slice)
                             else (self.columns[vertex_key],))
        if not stacked:
            return parts[0]
        out = np.stack(parts, axis=-1)
        return out if isinstance(vertex_key, slice) else out[..., 0]

    def _values(self, table: Any, slab: Any, grid_key: tuple[Any, ...], columns: Iterable[str]) -> list[np.ndarray]:
        """Return this variable's values of ``columns`` from a slab's records, in the variable's dimension order."""
        parts = []
        squeeze = tuple(i for i, k in enumerate(grid_key) if not isinstance(k, slice))
        for name in columns:
            values = _numpy(table.column(name), self.dtype, self.time, name).reshape(slab.read_shape)[slab.keep]
            # Records come in the dataset's dimension order: put them in the variable's.
            values = values.transpose([slab.grid.index(d) for d in self.dims])
            parts.append(values.squeeze(axis=squeeze) if squeeze else values)
        return parts


# -- the chunks of one dask compute in a few box queries (dstp.client._chunk_batches) ---------------------

#: Every backend array alive: a dask compute is searched for chunk reads only while there is one.
_arrays: weakref.WeakSet[DstpBackendArray] = weakref.WeakSet()


def _read_box(arrays: Sequence[DstpBackendArray], key: tuple[Any, ...]) -> dict[int, np.ndarray]:
    """Return each array's values at ``key`` (variable dimension order), all read by one query; an array whose
    values are refused (a NULL in a kept integer) is left out, so that its chunks read alone and say so."""
    first = arrays[0]
    slab = slab_query(first.dataset, tuple(a.columns[0] for a in arrays), first.dims, key, first.axes,
                      first.dimension_order)
    table = _run(first.target, slab.sql, first.transport)
    if table.num_rows != math.prod(slab.read_shape):
        raise ValueError(f"{table.num_rows} records for {math.prod(slab.read_shape)} grid points")
    out = {}
    for array in arrays:
        try:
            out[id(array)] = array._values(table, slab, key, array.columns)[0]
        except ValueError:
            continue
    return out


def _resolve_chunk(adapter: Any, key: tuple[Any, ...]) -> tuple[DstpBackendArray, tuple[Any, ...]] | None:
    """Return (backend array, backend key) that dask's ``getter(adapter, key)`` will read, by xarray's own
    lazy indexing (nothing is read); None when ``adapter`` is not a dstp variable."""
    if _lazy_backend(adapter) is None:
        return None
    found = _lazy_backend(adapter[key])
    if found is None:
        return None
    array, lazy_key = found
    backend_key, _ = indexing.decompose_indexer(lazy_key, array.shape, indexing.IndexingSupport.BASIC)
    if not isinstance(backend_key, indexing.BasicIndexer):
        return None
    return array, backend_key.tuple


# -- several variables of one Dataset.load() in one request ------------------------------------------


def _key_id(key: tuple[Any, ...]) -> tuple[Any, ...]:
    """Return a basic key as a hashable, comparable tuple (slices are not hashable before Python 3.12)."""
    return tuple((k.start, k.stop, k.step) if isinstance(k, slice) else int(k) for k in key)


def _dataset_being_loaded() -> xr.Dataset | None:
    """Return the Dataset whose ``load()`` (or ``compute()``, or a DataArray's ``load()``) runs in this thread
    below the caller, None when there is none.

    xarray's ``Dataset.load`` reads its lazy variables one by one through each variable's ``__getitem__``;
    nothing in the backend interface says that others follow. The frame of ``Dataset.load`` says which:
    its ``self``. Found by code object, so any other xarray that loads differently simply gets one query
    per variable, as before.
    """
    code = xr.Dataset.load.__code__
    frame: FrameType | None = sys._getframe(2)
    for _ in range(48):
        if frame is None:
            return None
        if frame.f_code is code:
            ds = frame.f_locals.get("self")
            return ds if isinstance(ds, xr.Dataset) else None
        frame = frame.f_back
    return None


def _lazy_backend(data: Any) -> tuple[DstpBackendArray, Any] | None:
    """Return (the backend array, the lazy key) behind a variable's not yet loaded data, else None."""
    for _ in range(8):
        if isinstance(data, indexing.LazilyIndexedArray):
            return (data.array, data.key) if isinstance(data.array, DstpBackendArray) else None
        data = getattr(data, "array", None)  # MemoryCachedArray, CopyOnWriteArray, xarray's lazy decoders
        if data is None or isinstance(data, np.ndarray):
            return None
    return None


def _loading_together(array: DstpBackendArray, key: tuple[Any, ...]) -> list[DstpBackendArray]:
    """Return the other lazy variables (one column each) of the Dataset being loaded that read the same
    dataset on the same dimensions at the same ``key``: the batch that one query reads with ``array``."""
    ds = _dataset_being_loaded()
    if ds is None:
        _Batch.clear()  # values a load read but never took (it failed half-way) are not kept
        return []
    wanted = _key_id(key)
    out = []
    for variable in ds.variables.values():
        found = _lazy_backend(variable._data)
        if found is None:
            continue
        other, lazy_key = found
        if other is array or len(other.columns) != 1 or other.dims != array.dims or other.dataset != array.dataset \
                or other.target != array.target or other.axes is not array.axes:
            continue
        try:
            backend_key, _ = indexing.decompose_indexer(lazy_key, other.shape, indexing.IndexingSupport.BASIC)
        except (TypeError, ValueError, NotImplementedError):
            continue
        if isinstance(backend_key, indexing.BasicIndexer) and _key_id(backend_key.tuple) == wanted:
            out.append(other)
    return out


class _Batch:
    """The values one query read for the other variables of a ``Dataset.load()``, until each takes its own.

    One per thread (a Dataset loads its variables in one thread, one after another); an entry is taken
    only by the very array it was read for (held, so its id is never another's) at the very key.
    """

    _local = threading.local()

    def __init__(self, values: dict[DstpBackendArray, tuple[tuple[Any, ...], np.ndarray]]) -> None:
        self.values = {id(a): (a, _key_id(k), v) for a, (k, v) in values.items()}

    @classmethod
    def start(cls, values: dict[DstpBackendArray, tuple[tuple[Any, ...], np.ndarray]]) -> None:
        cls._local.batch = cls(values)

    @classmethod
    def clear(cls) -> None:
        cls._local.batch = None

    @classmethod
    def current(cls) -> _Batch | None:
        return getattr(cls._local, "batch", None)

    def take(self, array: DstpBackendArray, key: tuple[Any, ...]) -> np.ndarray | None:
        """Return (and forget) the values read for ``array`` at ``key``; None if there are none."""
        entry = self.values.get(id(array))
        if entry is None or entry[0] is not array or entry[1] != _key_id(key):
            return None
        del self.values[id(array)]
        if not self.values:
            self._local.batch = None
        return entry[2]


def _result_shape(shape: tuple[int, ...], key: tuple[Any, ...]) -> tuple[int, ...]:
    return tuple(len(range(n)[k]) for n, k in zip(shape, key) if isinstance(k, slice))


# -- the data store: variables and attributes of one dataset ----------------------------------------


def _vertex(info: ColumnInfo) -> int:
    found = re.search(r"vertex (\d+)", info.note)
    return int(found.group(1)) if found else 0


class DstpDataStore(AbstractDataStore):
    """One published dataset as xarray's decoding machinery reads a store: encoded variables and attributes."""

    def __init__(self, target: Connection, dataset: str, transport: str = "auto") -> None:
        self.target = target
        self.dataset = dataset
        self.transport = transport
        self.details: DatasetDetails = _client(target)[0].describe(dataset)
        _chunk_batches.install(_resolve_chunk, _read_box, lambda: bool(_arrays))
        #: Scalar, auxiliary and derived coordinates: coordinates of the Dataset, not data variables.
        self.coordinate_names: list[str] = []

    def load(self) -> tuple[dict[str, xr.Variable], dict[str, Any]]:  # type: ignore[override]
        d = self.details
        if d.feature_type:
            raise ValueError(f"{self.dataset} holds {d.feature_type} data, whose records are a table, not a grid: "
                             f"open a query instead, backend_kwargs={{'query': 'select … from {self.dataset}'}}")
        order = tuple(x.name for x in d.dimensions)
        calendars = {x.coordinate: x.calendar for x in d.dimensions if x.coordinate}
        coords_by_name = {c.name: c for c in d.coordinates}
        variables: dict[str, xr.Variable] = {}
        axes: dict[str, Axis] = {}
        coordinate_values = axis_values(self.target, self.dataset, d)
        for dim in d.dimensions:
            info = coords_by_name.get(dim.coordinate)
            if info is None:
                axes[dim.name] = Axis(dim.name, dim.size)
                continue
            raw = coordinate_values[dim.name]
            compared = np.asarray(raw.to_numpy(zero_copy_only=False))
            if compared.dtype.kind == "M":
                compared = compared.astype("datetime64[us]")
            axes[dim.name] = Axis(dim.name, dim.size, info.name, compared, dim.order)
            time = _time_encoding(info, dim.calendar)
            values = _numpy(raw, _dtype(info, time), time, info.name)
            variables[info.name] = self._variable((dim.name,), values, info, time)
        source = f"dstp://{self.target.target}/{self.dataset}"
        bounds: dict[str, list[ColumnInfo]] = {}
        for info in d.coordinates:
            if info.role in ("dimension", "weight") or info.name in variables:
                continue  # area_weight is dstp's query column (weighted_avg), not a variable of the files
            if info.role == "bounds":
                bounds.setdefault(info.variable, []).append(info)
                continue
            variables[info.name] = self._lazy(info, (info.name,), axes, order, calendars.get(info.name, ""), source)
            self.coordinate_names.append(info.name)
        for name, vertices in bounds.items():
            vertices.sort(key=_vertex)
            # "lower bound of time", "vertex 2 of the cell of lat": the coordinate they bound comes last.
            parent = vertices[0].description.rsplit(" ", 1)[-1]
            variables[name] = self._lazy(vertices[0], tuple(c.name for c in vertices), axes, order,
                                         calendars.get(parent, ""), source)
            if parent in variables:
                variables[parent].attrs["bounds"] = name
        for info in d.attributes:
            variables[info.name] = self._lazy(info, (info.name,), axes, order, calendars.get(info.name, ""), source)
        for gm in d.grid_mappings:
            attrs: dict[str, Any] = {k: _number(v) for k, v in gm.parameters if k not in _APPLIED}
            if gm.wkt and "crs_wkt" not in attrs:
                attrs["crs_wkt"] = gm.wkt
            variables[gm.name] = xr.Variable((), _mapping_value(gm.value, gm.dtype), attrs)
        attrs = dict(d.global_attributes)
        attrs.setdefault("dstp_source", source)
        return variables, attrs

    def _variable(self, dims: tuple[str, ...], data: Any, info: ColumnInfo, time: TimeEncoding | None) -> xr.Variable:
        attrs = variable_attrs(info)
        if time is not None:
            attrs.update({"units": time.units, "calendar": time.calendar})
        return xr.Variable(dims, data, attrs, {"source": f"dstp://{self.target.target}/{self.dataset}"})

    def _lazy(self, info: ColumnInfo, columns: tuple[str, ...], axes: dict[str, Axis], order: tuple[str, ...],
              calendar: str, source: str) -> xr.Variable:
        time = _time_encoding(info, calendar)
        dtype = _dtype(info, time)
        array = DstpBackendArray(self.target, self.dataset, columns, tuple(info.dimensions), axes, order, dtype,
                                 time, self.transport)
        dims = tuple(info.dimensions) + (("bnds",) if len(columns) > 1 else ())
        var = self._variable(dims, indexing.LazilyIndexedArray(array), info, time)
        var.encoding["source"] = source
        return var

    def get_variables(self) -> dict[str, xr.Variable]:
        return self.load()[0]

    def get_attrs(self) -> dict[str, Any]:
        return self.load()[1]

    def get_dimensions(self) -> dict[str, int]:
        return {x.name: x.size for x in self.details.dimensions}

    def close(self, **kwargs: Any) -> None:
        """Nothing to close: the connection is shared by every dataset of the server."""


def _mapping_value(text: str, dtype: str) -> np.ndarray:
    """Return a grid mapping variable's value as the file holds it (its dtype), 0 as int32 when the server has none."""
    kind = np.dtype(dtype) if dtype else np.dtype("int32")
    if not text:
        return np.zeros((), dtype=kind)
    if kind.kind in "SU":
        return np.asarray(text, dtype=kind)
    return np.asarray(float(text) if kind.kind == "f" else int(float(text)), dtype=kind)


def _number(text: str) -> Any:
    try:
        value = float(text)
    except ValueError:
        return text
    return int(value) if value.is_integer() and "." not in text and "e" not in text.lower() else value


class DstpBackendEntrypoint(BackendEntrypoint):
    """``engine="dstp"``: open a published dataset (or a query's result) of a dstp server."""

    description = "Open datasets of a dstp server (dstp://host:port/dataset) lazily; reads only the slabs used"
    url = "https://github.com/dstp/dstp/blob/main/docs/xarray.md"
    open_dataset_parameters = ("filename_or_obj", "drop_variables", "query", "transport", "token", "tls", "ca_file")

    def guess_can_open(self, filename_or_obj: Any) -> bool:
        return isinstance(filename_or_obj, str) and filename_or_obj.startswith("dstp://")

    def open_dataset(  # type: ignore[override]
        self,
        filename_or_obj: Any,
        *,
        drop_variables: str | Iterable[str] | None = None,
        query: str | None = None,
        transport: str = "auto",
        token: str | None = None,
        tls: bool | None = None,
        ca_file: str | None = None,
        mask_and_scale: bool = True,
        decode_times: Any = True,
        concat_characters: bool = True,
        decode_coords: Any = True,
        use_cftime: Any = None,
        decode_timedelta: Any = None,
    ) -> xr.Dataset:
        address, dataset = parse_url(str(filename_or_obj))
        target = Connection(address, token, tls, ca_file)
        if query is not None:
            table = _run(target, query, transport)
            return to_xarray(table)
        store = DstpDataStore(target, dataset, transport)
        kwargs: dict[str, Any] = dict(mask_and_scale=mask_and_scale, decode_times=decode_times,
                                      concat_characters=concat_characters, decode_coords=decode_coords,
                                      drop_variables=drop_variables, decode_timedelta=decode_timedelta)
        if use_cftime is not None:
            kwargs["use_cftime"] = use_cftime
        ds = StoreBackendEntrypoint().open_dataset(store, **kwargs)
        ds = ds.set_coords([n for n in store.coordinate_names if n in ds.variables])
        ds.encoding["source"] = str(filename_or_obj)
        return ds

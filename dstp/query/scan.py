"""Scanning: reading a hyperslab lazily as Arrow record batches of grid points.

The hyperslab is cut into blocks of about ``batch_rows`` grid points: the
innermost dimensions whole, the next one in chunks, the outer ones an index
at a time. For each block only the variables the query needs are read (one
netCDF hyperslab per variable and file), CF-decoded, broadcast to the block's
shape and flattened in C order, so records come out in grid order. Nothing is
read before DuckDB asks for the next batch, and at most one block per column
is held at a time.

Grid points that are not observations are dropped here too: the padding of
an incomplete multidimensional station or profile file, and the unused space
of a ragged array (:meth:`GriddedDataset.present`, :mod:`dstp.catalog.dsg`).

Sampling by percentage happens here: each grid point has a key derived from
its flat index in the whole dataset and the seed (splitmix64), and a point
is kept when its key falls below the percentage. The draw of a point never
depends on batching, threads or other predicates, so a seed reproduces a
sample exactly.

A matchup's grid side also yields each point's index along its key
dimensions (``__dstp_i_<dim>``), which DuckDB joins the records on.

Blocks can be read ahead in parallel (``threads`` > 1, the server's
``scan_threads``; default 1, since on a 2-core machine shared with the client
the threads only took CPU from it — bench/results/scan.md): up to ``threads`` blocks after the one DuckDB is consuming
are read and decoded on a thread pool, and batches still come out in block
order — a result is the same batches, in the same order, whatever the thread
count. netCDF-C calls still hold the netCDF lock; compressed netCDF-4 chunks
are inflated outside it (:mod:`dstp.catalog.chunks`), as is the CF decoding
and the Arrow building, so the threads overlap on several cores.

DuckDB may open a registered table more than once (to learn its schema, or
to read it again in a plan that needs it twice): :class:`ReplayableScan`
starts a fresh scan each time, so a second read sees every record again
rather than an exhausted stream.
"""

from __future__ import annotations

import collections
import logging
import math
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Generator, Iterator

import numpy as np
import pyarrow as pa

from dstp.catalog.dataset import GriddedDataset
from dstp.catalog.readahead import ReadAhead
from dstp.catalog.netcdf4_ import ReadStats
from dstp.errors import CancelledError
from dstp.query.parse import Sampling
from dstp.query.plan import ROWID, SAMPLE_KEY, Hyperslab

__all__ = ["GridScan", "INDEX_PREFIX", "ReplayableScan", "arrow_values", "sample_keys"]

#: Prefix of the columns that carry a grid point's index along one dimension (matchups).
INDEX_PREFIX = "__dstp_i_"

log = logging.getLogger("dstp.query")

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def sample_keys(rowids: np.ndarray, seed: int) -> np.ndarray:
    """Return splitmix64(rowid + seed·φ): uniform 64-bit keys, one per grid point."""
    with np.errstate(over="ignore"):
        z = rowids.astype(np.uint64) + np.uint64(seed & 0xFFFFFFFFFFFFFFFF) * _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


_NAT = np.iinfo(np.int64).min


def arrow_values(values: np.ndarray, mask: np.ndarray | None, arrow_type: pa.DataType) -> pa.Array:
    """Return decoded ``values`` (``mask`` true where missing) as the Arrow array of ``arrow_type`` a scan yields."""
    if mask is not None and not mask.any():
        mask = None
    if pa.types.is_string(arrow_type):
        return pa.array(values, type=arrow_type, mask=mask, from_pandas=False)
    if (values.dtype.kind == "M" and pa.types.is_timestamp(arrow_type)
            and np.datetime_data(values.dtype)[0] == arrow_type.unit):
        # Times of the same unit as their integers: pyarrow converts datetime64 element by element (0.27 ms
        # for 131,072 values, 0.52 ms when broadcast from one time step; ~15 % of Table 4's 1 M-record
        # query), contiguous int64 at once. NaT is missing, as pyarrow makes it without a mask (with one it
        # would pass NaT on as a date); NaT is the least int64, so the minimum tells whether there is one.
        ints = np.ascontiguousarray(values.view(np.int64))
        if ints.size and ints.min() == _NAT:
            nat = ints == _NAT
            mask = nat if mask is None else mask | nat
        return pa.array(ints, type=arrow_type, mask=mask)
    if (mask is not None and (pa.types.is_integer(arrow_type) or pa.types.is_floating(arrow_type))
            and values.dtype == arrow_type.to_pandas_dtype() and values.flags.c_contiguous):
        # A masked number column: its validity bitmap packed from the mask, the values' memory as they are
        # (pyarrow's own path took 130 µs for 131,072 float32, this one ~70).
        valid = np.packbits(~mask, bitorder="little")
        return pa.Array.from_buffers(arrow_type, len(values), [pa.py_buffer(valid), pa.py_buffer(values)],
                                     null_count=int(np.count_nonzero(mask)))
    return pa.array(values, type=arrow_type, mask=mask)


def _flat(values: np.ndarray, var_dims: tuple[str, ...], grid: tuple[str, ...], shape: tuple[int, ...]) -> np.ndarray:
    """Return ``values`` (laid out on ``var_dims``) broadcast to ``shape`` on ``grid``, flattened."""
    present = [d for d in grid if d in var_dims]
    axes = [var_dims.index(d) for d in present]
    if axes != sorted(axes):
        values = values.transpose(axes)
    expanded = values.reshape([shape[i] if d in var_dims else 1 for i, d in enumerate(grid)])
    if expanded.shape == shape:
        return expanded.reshape(-1)
    return np.broadcast_to(expanded, shape).reshape(-1)


def _split(ranges: tuple[range, ...], batch_rows: int) -> Iterator[tuple[range, ...]]:
    """Yield ``ranges`` cut into blocks of about ``batch_rows`` points in C order: inner dimensions whole,
    the next one in chunks, the outer ones an index at a time."""
    if not ranges:
        yield ()
        return
    shape = [len(r) for r in ranges]
    split = 0
    while split < len(shape) and math.prod(shape[split + 1:]) > batch_rows:
        split += 1
    split = min(split, len(shape) - 1)
    inner = math.prod(shape[split + 1:])
    chunk = max(1, batch_rows // inner)
    for outer in np.ndindex(*shape[:split]):
        head = tuple(ranges[i][j:j + 1] for i, j in enumerate(outer))
        r = ranges[split]
        for lo in range(0, len(r), chunk):
            yield (*head, r[lo:lo + chunk], *ranges[split + 1:])


def _interleave(parts: list[tuple[np.ndarray, np.ndarray | None]], prefix: int) -> tuple[np.ndarray, np.ndarray | None]:
    """Return flat (values, mask) of pieces laid side by side per outer index: C order over the union."""
    values = np.concatenate([v.reshape(prefix, -1) for v, _ in parts], axis=1).reshape(-1)
    if all(m is None for _, m in parts):
        return values, None
    masks = [np.zeros(v.shape, bool) if m is None else m for v, m in parts]
    return values, np.concatenate([m.reshape(prefix, -1) for m in masks], axis=1).reshape(-1)


class GridScan:
    """The record batches of one hyperslab of a dataset, read on demand."""

    def __init__(
        self,
        dataset: GriddedDataset,
        hyperslab: Hyperslab,
        columns: tuple[str, ...],
        *,
        batch_rows: int = 131_072,
        sampling: Sampling | None = None,
        stats: ReadStats | None = None,
        cancel: threading.Event | None = None,
        threads: int = 1,
        read_ahead_bytes: int = 0,
    ) -> None:
        self.dataset = dataset
        #: Decoded bytes of chunks in an object store read ahead of the block being read (0: none;
        #: :mod:`dstp.catalog.readahead`).
        self.read_ahead_bytes = read_ahead_bytes
        #: Blocks read at once (1: each block read when DuckDB asks for it, on DuckDB's thread).
        self.threads = max(1, threads)
        self.hyperslab = hyperslab
        self.columns = columns
        self.batch_rows = max(1, batch_rows)
        self.sampling = sampling
        self.stats = stats if stats is not None else ReadStats()
        self.cancel = cancel
        #: The first exception raised while scanning, kept for the executor to re-raise.
        self.error: BaseException | None = None
        fields = []
        for name in columns:
            if name == ROWID or name.startswith(INDEX_PREFIX):
                fields.append(pa.field(name, pa.int64(), nullable=False))
            elif name == SAMPLE_KEY:
                fields.append(pa.field(name, pa.uint64(), nullable=False))
            elif name in dataset.coordinates:
                fields.append(pa.field(name, dataset.coordinates[name].arrow_type, nullable=False))
            else:
                column = dataset.readable(name)
                assert column is not None, name
                fields.append(pa.field(name, column.arrow_type))
        self.schema = pa.schema(fields)

    # -- blocks ------------------------------------------------------------------------

    def blocks(self) -> Iterator[list[tuple[range, ...]]]:
        """Yield the blocks of the hyperslab, in C order; a block is one or more pieces (index-range tuples).

        Without strips a block is one piece. With strips (see
        :class:`~dstp.query.plan.Hyperslab`) a block holds one piece per strip,
        all sharing the indices of the dimensions before the strips', so that
        laying their records side by side per outer index keeps C order.
        """
        ranges = self.hyperslab.ranges
        if any(len(r) == 0 for r in ranges):
            return
        if not ranges:
            yield [()]
            return
        if not self.hyperslab.strips:
            for block in _split(ranges, self.batch_rows):
                yield [block]
            return
        grid = self.hyperslab.dims
        y, x = self.hyperslab.strip_dims
        ya, xa = grid.index(y), grid.index(x)

        def piece(strip: tuple[range, range], prefix: tuple[range, ...]) -> tuple[range, ...]:
            rest = list(ranges[ya:])
            rest[0], rest[xa - ya] = strip
            return (*prefix, *rest)

        per_prefix = sum(math.prod(len(r) for r in piece(s, ())) for s in self.hyperslab.strips)
        if per_prefix > self.batch_rows:
            for outer in np.ndindex(*[len(r) for r in ranges[:ya]]):
                head = tuple(ranges[i][j:j + 1] for i, j in enumerate(outer))
                for strip in self.hyperslab.strips:
                    for block in _split(piece(strip, head), self.batch_rows):
                        yield [block]
            return
        # Several prefix indices per block: split the prefix as if its inner size were per_prefix.
        for head in _split(ranges[:ya], max(1, self.batch_rows // per_prefix)):
            yield [piece(strip, head) for strip in self.hyperslab.strips]

    def _block_batch(self, pieces: list[tuple[range, ...]]) -> pa.RecordBatch:
        if len(pieces) == 1:
            columns, keep = self._piece(pieces[0], arrow_text=True)
        else:
            prefix = math.prod(len(r) for r in pieces[0][: self.hyperslab.dims.index(self.hyperslab.strip_dims[0])])
            parts = [self._piece(p) for p in pieces]
            columns = [_interleave([part[0][i] for part in parts], prefix) for i in range(len(self.columns))]
            keep = None
            if any(k is not None for _, k in parts):
                cells = [math.prod(len(r) for r in p) for p in pieces]
                keep = _interleave([(np.ones(n, bool) if k is None else k, None) for (_, k), n in zip(parts, cells)],
                                   prefix)[0]
        arrays = [values if isinstance(values, pa.Array)
                  else arrow_values(values, mask, f.type) if f.name not in (ROWID, SAMPLE_KEY)
                  and not f.name.startswith(INDEX_PREFIX) else pa.array(values)
                  for (values, mask), f in zip(columns, self.schema)]
        batch = pa.RecordBatch.from_arrays(arrays, schema=self.schema)
        if keep is not None:
            batch = batch.filter(pa.array(keep))
        return batch

    def _piece(self, block: tuple[range, ...], *, arrow_text: bool = False
               ) -> tuple[list[tuple[Any, np.ndarray | None]], np.ndarray | None]:
        """Return each scan column's flat (values, mask) over one piece, and which points to keep (or None).

        With ``arrow_text`` a text coordinate (times on a non-standard calendar, as ISO text) comes as its
        Arrow column already: each of its values converted once and taken by index, where converting every
        record's string took 6–11 ms for 86,400 records (one dask chunk of ocean) and this ~0.8 ms.
        """
        ds, grid = self.dataset, self.hyperslab.dims
        shape = tuple(len(r) for r in block)
        index = {d: slice(r.start, r.stop, r.step) for d, r in zip(grid, block)}
        keep: np.ndarray | None = None
        rowids: np.ndarray | None = None
        if self.sampling is not None or ROWID in self.columns:
            rowids = self._rowids(block, shape)
        if self.sampling is not None:
            assert rowids is not None
            keys = sample_keys(rowids, self.sampling.seed)
            if self.sampling.percent is not None:
                if self.sampling.percent < 100:
                    keep = keys < np.uint64(int(self.sampling.percent / 100.0 * 2**64))
        columns: list[tuple[np.ndarray, np.ndarray | None]] = []
        for name in self.columns:
            if name == ROWID:
                columns.append((rowids, None))  # type: ignore[arg-type]
                continue
            if name == SAMPLE_KEY:
                columns.append((sample_keys(rowids, self.sampling.seed), None))  # type: ignore[arg-type, union-attr]
                continue
            if name.startswith(INDEX_PREFIX):
                dim = name[len(INDEX_PREFIX):]
                r = block[grid.index(dim)]
                columns.append((_flat(np.arange(r.start, r.stop, r.step, dtype=np.int64), (dim,), grid, shape), None))
                continue
            coord = ds.coordinates.get(name)
            if coord is not None:
                if coord.dimension is None:
                    values = np.broadcast_to(coord.values, (math.prod(shape),))
                    columns.append((np.ascontiguousarray(values), None))
                else:
                    r = block[grid.index(coord.dimension)]
                    picked = coord.values[r.start:r.stop:r.step]
                    arrow_type = self.schema.field(len(columns)).type
                    if arrow_text and picked.dtype == object and pa.types.is_string(arrow_type):
                        taken = _flat(np.arange(len(picked), dtype=np.int64), (coord.dimension,), grid, shape)
                        columns.append((arrow_values(picked, None, arrow_type).take(pa.array(taken)), None))
                    else:
                        columns.append((_flat(picked, (coord.dimension,), grid, shape), None))
                continue
            attr = ds.readable(name)
            assert attr is not None, name
            values, mask = ds.read(attr, index, self.stats)
            flat_mask = None if mask is None else _flat(mask, attr.dimensions, grid, shape)
            columns.append((_flat(values, attr.dimensions, grid, shape), flat_mask))
        # Grid points that are not observations (padding of a station or profile file) are not records.
        for dims, present in ds.present(grid, index, self.stats):
            flat = _flat(present, dims, grid, shape)
            keep = flat if keep is None else keep & flat
        # Cells a 2-D coordinate predicate already rules out (exactly: it is in the WHERE's top-level AND).
        h = self.hyperslab
        if h.cells is not None:
            y, x = h.strip_dims
            ry, rx = block[grid.index(y)], block[grid.index(x)]
            y0, x0 = h.ranges[grid.index(y)].start, h.ranges[grid.index(x)].start
            cells = h.cells[ry.start - y0:ry.stop - y0, rx.start - x0:rx.stop - x0]
            flat = _flat(cells, (y, x), grid, shape)
            keep = flat if keep is None else keep & flat
        return columns, keep

    def _rowids(self, block: tuple[range, ...], shape: tuple[int, ...]) -> np.ndarray:
        """Return each grid point's flat index in the dataset's full grid."""
        grid = self.hyperslab.dims
        sizes = [self.dataset.dimensions[d].size for d in grid]
        strides = [math.prod(sizes[i + 1:]) for i in range(len(sizes))]
        total = np.zeros(shape, dtype=np.int64)
        for axis, (r, stride) in enumerate(zip(block, strides)):
            idx = np.arange(r.start, r.stop, r.step, dtype=np.int64) * stride
            total += idx.reshape([len(r) if i == axis else 1 for i in range(len(shape))])
        return total.reshape(-1)

    # -- iteration ---------------------------------------------------------------------

    def _ahead(self) -> Generator[list[tuple[range, ...]], None, None]:
        """Yield :meth:`blocks`, having asked, before each, for the chunks in an object store of it and of the
        blocks after it while the read-ahead has room (:mod:`dstp.catalog.readahead`)."""
        blocks = self.blocks()
        ahead = self.dataset.read_ahead(self.read_ahead_bytes)
        if ahead is None:
            yield from blocks
            return
        queued: collections.deque[list[tuple[range, ...]]] = collections.deque()
        try:
            more = True
            while True:
                while more and (not queued or ahead.room()):
                    block = next(blocks, None)
                    if block is None:
                        more = False
                        break
                    self._prefetch(block, ahead)
                    queued.append(block)
                if not queued:
                    return
                yield queued.popleft()
        finally:
            chunks = self.dataset.handles.chunks
            assert chunks is not None
            ahead.close(chunks.drop_ahead)

    def _prefetch(self, block: list[tuple[range, ...]], ahead: ReadAhead) -> None:
        """Ask for the chunks the read of ``block``'s columns will need (a fault is the read's to report)."""
        grid = self.hyperslab.dims
        for piece in block:
            index = {d: slice(r.start, r.stop, r.step) for d, r in zip(grid, piece)}
            for name in self.columns:
                if name in (ROWID, SAMPLE_KEY) or name.startswith(INDEX_PREFIX) or name in self.dataset.coordinates:
                    continue
                column = self.dataset.readable(name)
                if column is None:
                    continue
                try:
                    self.dataset.prefetch(column, {d: index[d] for d in column.dimensions}, ahead)
                except Exception as exc:  # noqa: BLE001 - the block's read meets it again and raises it
                    log.debug("read-ahead of %s skipped: %s", name, type(exc).__name__)

    def batches(self) -> Generator[pa.RecordBatch, None, None]:
        """Yield the record batches of the scan; errors are also kept in ``self.error``."""
        made = self._sequential() if self.threads == 1 else self._read_ahead()
        try:
            for batch in made:
                if batch.num_rows:
                    yield batch
        except GeneratorExit:
            raise  # closed early by its reader (a LIMIT reached): not an error
        except BaseException as exc:
            if self.error is None:
                self.error = exc
            raise
        finally:
            made.close()  # the read-ahead's threads end before the scan is let go

    def _check_cancel(self) -> None:
        if self.cancel is not None and self.cancel.is_set():
            raise CancelledError("the query was cancelled")

    def _sequential(self) -> Generator[pa.RecordBatch, None, None]:
        blocks = self._ahead()
        try:
            for block in blocks:
                self._check_cancel()
                yield self._block_batch(block)
        finally:
            blocks.close()

    def _read_ahead(self) -> Generator[pa.RecordBatch, None, None]:
        """Yield the blocks' batches in order while up to ``threads`` later blocks are read on a pool."""
        pool = ThreadPoolExecutor(self.threads, thread_name_prefix="dstp-scan")
        pending: collections.deque[Future[pa.RecordBatch]] = collections.deque()
        blocks = self._ahead()
        try:
            while True:
                while len(pending) <= self.threads:
                    block = next(blocks, None)
                    if block is None:
                        break
                    self._check_cancel()
                    pending.append(pool.submit(self._block_batch, block))
                if not pending:
                    return
                yield pending.popleft().result()
        finally:
            # Stopped early (LIMIT reached, an error, a cancel): what was not started never is; what runs ends.
            for future in pending:
                future.cancel()
            pool.shutdown(wait=True)
            blocks.close()

    def reader(self) -> pa.RecordBatchReader:
        """Return a one-shot reader over ``batches()``, for DuckDB to scan."""
        return pa.RecordBatchReader.from_batches(self.schema, self.batches())


class ReplayableScan:
    """A table DuckDB can open any number of times: each opening starts a new scan of the same hyperslab.

    Every scan shares ``stats`` and ``cancel``; ``error`` is the first error any of them raised.
    """

    def __init__(self, open_scan: "Callable[[], GridScan]", schema: pa.Schema) -> None:
        self._open = open_scan
        self.schema = schema
        self.scans: list[GridScan] = []

    @property
    def error(self) -> BaseException | None:
        return next((s.error for s in self.scans if s.error is not None), None)

    def open(self) -> GridScan:
        """Start a new scan of the hyperslab (its error is then this table's ``error``)."""
        scan = self._open()
        self.scans.append(scan)
        return scan

    def __arrow_c_stream__(self, requested_schema: object = None) -> object:
        return self.open().reader().__arrow_c_stream__(requested_schema)

"""Saving a query stream as a file, whole or not at all (``dstp query -o``), and the preview text.

The CSV and netCDF writers are :mod:`dstp.result_files`, shared with the HTTP API
(``format=csv``, ``format=nc``), so a file looks the same whichever way it was
asked for.

* :func:`save_result` writes a query stream to a temporary name beside the
  target and renames it only when the result is complete.
* A result the server cut at its ``max_result_rows``/``max_result_bytes``
  carries the same marks whichever door wrote it (docs/web.md, "Truncated
  results"): CSV ends with the line :func:`csv_truncation_line`, Arrow with
  an empty record batch whose custom metadata is :func:`truncation_metadata`.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

from dstp.errors import TruncatedResultError
# re-exported: the CLI and tests know the writers by these names too
from dstp.result_files import csv_header, csv_rows, csv_truncation_line, truncation_metadata, write_netcdf

if TYPE_CHECKING:
    import pyarrow as pa

    from dstp.client._stream import QueryStream

__all__ = ["FILE_FORMATS", "PARQUET_ROW_GROUP_BYTES", "WRITE_AHEAD_BYTES", "check_file_format", "csv_header", "csv_rows", "csv_truncation_line", "partial_name",
           "parquet_writer_options", "preview_text", "remove_stale_partials", "save_result", "truncation_metadata", "write_netcdf"]

#: What ``save_result`` writes, by file extension.
FILE_FORMATS = {".arrow": "arrow", ".feather": "arrow", ".ipc": "arrow", ".parquet": "parquet", ".csv": "csv",
                ".nc": "nc"}

def preview_text(table: pa.Table) -> str:
    """Return ``table`` as a plain text table for a terminal: a header of column names, one line per record.

    Every value is shown exactly: floats as the shortest text that reads back as the same value of
    their own type (float32 as float32), times as ISO dates, NULL as ``NA`` (as in CSV). pyarrow
    and numpy only: loading pandas to print a few rows cost ``dstp query`` ~0.3 s of start-up.
    """
    import numpy as np
    import pyarrow as pa

    columns: list[list[str]] = []
    right: list[bool] = []
    for name, column in zip(table.column_names, table.columns):
        kind = column.type
        if pa.types.is_floating(kind):
            # as_py widens float16/32 to float exactly; numpy's scalar of the column's own width
            # prints the shortest text for that width (to_numpy and pyarrow.compute load pandas
            # or ~0.1 s of function wrappers).
            width = {16: np.float16, 32: np.float32, 64: np.float64}[kind.bit_width]
            cells = ["NA" if v is None else str(width(v)) for v in column.to_pylist()]
        else:
            cells = ["NA" if v is None else v.isoformat(sep=" ") if isinstance(v, dt.datetime) else
                     v.isoformat() if isinstance(v, (dt.date, dt.time)) else str(v) for v in column.to_pylist()]
        columns.append([name, *cells])
        right.append(not (pa.types.is_string(kind) or pa.types.is_large_string(kind)))
    widths = [max(map(len, cells)) for cells in columns]
    lines = []
    for row in zip(*columns):
        lines.append(" ".join(c.rjust(w) if r else c.ljust(w) for c, w, r in zip(row, widths, right)).rstrip())
    return "\n".join(lines)


# -- saving a stream --------------------------------------------------------------------


def partial_name(out: Path) -> Path:
    """Return the temporary name a result is written under until complete: ``.NAME.dstp-partial-<pid>``."""
    return out.with_name(f".{out.name}.dstp-partial-{os.getpid()}")


def remove_stale_partials(out: Path) -> list[Path]:
    """Remove the temporary files of earlier saves to ``out`` whose process is gone (killed before it could
    clean up); return them. A file of a process still running (another save of the same name) is kept."""
    removed = []
    prefix = f".{out.name}.dstp-partial-"
    try:
        names = [p for p in out.parent.iterdir() if p.name.startswith(prefix)]
    except OSError:
        return []
    for path in names:
        pid = path.name[len(prefix):]
        if not pid.isdigit() or int(pid) == os.getpid() or _running(int(pid)):
            continue
        try:
            path.unlink()
            removed.append(path)
        except OSError:
            pass
    return removed


def _running(pid: int) -> bool:
    """Return whether process ``pid`` exists (a pid reused by another process counts: the file is kept)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: it exists, another user's
        return True
    return True


#: Uncompressed bytes of records one Parquet row group collects before it is encoded (on the writer
#: thread, while the next records arrive). A row group per received batch (64 Ki records, ~2 MB) cost 45 %
#: more time and a 33 % larger file; the last group is encoded after the last record arrived, so larger
#: groups lengthen that tail: 4 M records of ccm3 on loopback took 0.161 s with 8 MiB groups, 0.188 s with
#: 16 or 32 MiB, 0.215 s with 64 MiB, against 0.130 s streamed (medians of 5, ``/tmp``-style tmpfs).
#: 8 MiB is ~300 k records of 28 bytes: more than DuckDB's 122,880-row groups, fewer than pyarrow's 1 Mi.
PARQUET_ROW_GROUP_BYTES = 8 * 2**20

#: Bytes of received batches the writer may fall behind by before the receive waits for it (the memory a
#: save holds beyond the row group being encoded).
WRITE_AHEAD_BYTES = 64 * 2**20


class _WriteAhead:
    """Hands each batch to ``write`` on a thread of its own, so that the next batches arrive meanwhile.

    At most ``limit`` bytes wait; ``put`` blocks beyond that and raises what ``write`` raised.
    ``finish`` waits for every batch to be written; ``abort`` drops what waits and stops.
    """

    def __init__(self, write: Callable[[Any], object], limit: int = WRITE_AHEAD_BYTES) -> None:
        import collections
        import threading

        self._write = write
        self._limit = limit
        self._cond = threading.Condition()
        self._waiting: collections.deque[Any] = collections.deque()
        self._bytes = 0
        self._closed = False
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="dstp-write", daemon=True)
        self._thread.start()

    def put(self, batch: Any) -> None:
        with self._cond:
            while self._bytes > self._limit and self._error is None:
                self._cond.wait()
            if self._error is not None:
                raise self._error
            self._waiting.append(batch)
            self._bytes += batch.nbytes
            self._cond.notify_all()

    def finish(self) -> None:
        """Return once every batch is written (raise what writing raised)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join()
        if self._error is not None:
            raise self._error

    def abort(self) -> None:
        """Stop writing; batches still waiting are dropped."""
        with self._cond:
            self._closed = True
            self._waiting.clear()
            self._cond.notify_all()
        self._thread.join()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._waiting and not self._closed:
                    self._cond.wait()
                if not self._waiting:
                    return
                batch = self._waiting.popleft()
            try:
                self._write(batch)  # outside the lock: the receive keeps adding meanwhile
            except BaseException as exc:  # noqa: BLE001 - raised in the receiving thread by put/finish
                with self._cond:
                    self._error = exc
                    self._waiting.clear()
                    self._cond.notify_all()
                return
            with self._cond:
                self._bytes -= batch.nbytes
                self._cond.notify_all()


def parquet_writer_options(schema: pa.Schema) -> dict[str, Any]:
    """Return the ``pq.ParquetWriter`` options a saved result is written with: Snappy, statistics, and
    dictionary encoding only for text and binary columns.

    Numbers rarely repeat enough for a dictionary to pay: tried on every float column first, it cost 2.7×
    the encoding time for a file 10 % smaller (4 M records of ccm3: 0.154 s / 18 MB vs 0.057 s / 20 MB).
    """
    import pyarrow as pa

    text = [f.name for f in schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)
            or pa.types.is_binary(f.type) or pa.types.is_dictionary(f.type)]
    return {"compression": "snappy", "use_dictionary": text or False}


def _write(stream: QueryStream, path: Path, kind: str, check: Callable[[], str | None],
           time_units: Mapping[str, str] | None) -> int:
    """Write the stream's records to ``path`` as ``kind``; ``check()`` runs once they are all in
    (it raises for a cut result the caller did not accept, else returns the cut's reason or None).

    Arrow, Parquet and CSV are written on a thread beside the receive (:class:`_WriteAhead`); Parquet in
    row groups of :data:`PARQUET_ROW_GROUP_BYTES`.
    """
    import pyarrow as pa

    rows = 0
    schema = stream.schema

    def feed(write: Callable[[Any], object]) -> str | None:
        """Receive every batch, handing each to ``write`` on the writer thread; return ``check()``."""
        nonlocal rows
        beside = _WriteAhead(write)
        try:
            for batch in stream:
                rows += batch.num_rows
                beside.put(batch)
            reason = check()
        except BaseException:
            beside.abort()
            raise
        beside.finish()
        return reason

    if kind == "arrow":
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
            reason = feed(writer.write_batch)
            if reason is not None:  # the footer's schema was fixed at the start: a last, marked batch says it
                empty = pa.record_batch([pa.array([], f.type) for f in schema], schema=schema)
                writer.write_batch(empty, custom_metadata=truncation_metadata(reason, rows))
    elif kind == "parquet":
        import pyarrow.parquet as pq

        with pq.ParquetWriter(str(path), schema, **parquet_writer_options(schema)) as writer:
            group: list[Any] = []
            group_bytes = 0

            def add(batch: Any) -> None:
                nonlocal group_bytes
                group.append(batch)
                group_bytes += batch.nbytes
                if group_bytes >= PARQUET_ROW_GROUP_BYTES:
                    flush()

            def flush() -> None:
                nonlocal group_bytes
                if group:
                    table = pa.Table.from_batches(group, schema=schema)
                    writer.write_table(table, row_group_size=table.num_rows)
                    group.clear()
                    group_bytes = 0

            reason = feed(add)
            flush()
            if reason is not None:  # file metadata, written with the footer
                writer.add_key_value_metadata({"dstp:truncated": "true", "dstp:truncated_reason": reason})
    elif kind == "csv":
        with open(path, "wb") as f:
            f.write(csv_header(schema))
            reason = feed(lambda b: f.write(csv_rows(b)))
            if reason is not None:
                f.write(csv_truncation_line(reason, rows))
    else:
        batches: list[Any] = []
        for b in stream:
            rows += b.num_rows
            batches.append(b)
        table = pa.Table.from_batches(batches, schema=schema)
        write_netcdf(_marked(table, check()), path, time_units)
    return rows


def _marked(table: pa.Table, reason: str | None) -> pa.Table:
    """Return ``table`` with ``dstp:truncated`` and its reason in the schema metadata when ``reason`` is given."""
    if reason is None:
        return table
    meta = dict(table.schema.metadata or {})
    meta.update({b"dstp:truncated": b"true", b"dstp:truncated_reason": reason.encode()})
    return table.replace_schema_metadata(meta)


def check_file_format(out: Path, schema: pa.Schema) -> str:
    """Return what ``save_result`` writes to ``out`` (by its extension); raise ValueError if it cannot."""
    kind = FILE_FORMATS.get(out.suffix.lower())
    if kind is None:
        raise ValueError(f"cannot tell the format of {out.name} from its extension; "
                         "use .arrow, .parquet, .csv or .nc")
    if kind == "nc":
        from dstp.result_grid import missing_grid_columns

        grid, missing = missing_grid_columns(schema)
        if missing:
            raise ValueError(
                f"{out.name}: netCDF rebuilds the grid ({' × '.join(grid)}), but the result lacks the coordinate "
                f"columns of {', '.join(missing)}; add them to the select list (or use select *), or save as "
                ".parquet, .arrow or .csv"
            )
    return kind


def save_result(stream: QueryStream, out: str | os.PathLike[str], *, allow_truncated: bool = False,
                time_units: Mapping[str, str] | None = None, accept: str = "pass allow_truncated=True") -> int:
    """Save a query's records to ``out`` whole or not at all; return the number of records.

    The format follows the extension (.arrow/.feather/.ipc, .parquet, .csv,
    .nc). The records go to :func:`partial_name` beside ``out``, which
    replaces ``out`` only once the result is complete (every batch and the
    summary arrived). On any failure — the transfer breaking, Ctrl-C, a result
    cut at a server limit without ``allow_truncated`` (TruncatedResultError,
    whose message suggests ``accept``) — the temporary file is removed and
    ``out`` is left as it was. An accepted cut result is marked in every
    format: CSV ends with a ``# dstp-truncated: {…}`` line, Arrow with an
    empty record batch whose custom metadata holds ``dstp:truncated``,
    ``dstp:truncated_reason`` and ``dstp:truncated_rows`` (the HTTP API's
    marks), Parquet has ``dstp:truncated`` and ``dstp:truncated_reason`` in its
    file metadata, netCDF the global attribute ``dstp_truncated``.
    """
    from dstp.client._stream import truncation_message

    out = Path(out)
    kind = check_file_format(out, stream.schema)
    stream.allow_truncated, stream._warn = True, False  # decided here, once every record is in

    def check() -> str | None:
        reason = stream.truncated_reason
        if reason is not None and not allow_truncated:
            err = TruncatedResultError(truncation_message(stream.summary or {}, accept) +
                                       f"; {out} was not written")
            err.summary = stream.summary
            raise err
        return reason

    remove_stale_partials(out)  # a killed save of the same file left one: it would stay, hidden, forever
    partial = partial_name(out)
    try:
        rows = _write(stream, partial, kind, check, time_units)
        with open(partial, "rb") as f:
            os.fsync(f.fileno())  # the bytes are on disk before the name says the file is complete
        os.replace(partial, out)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return rows

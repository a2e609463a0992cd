"""Coordinate values of datasets, read once per dataset version, for the doors that cut hyperslabs (Zarr, EDR).

Each dimension's coordinate column is read by one query the caller's service
runs (so a hidden dataset stays hidden) and kept as the Arrow column read and
the :class:`~dstp.hyperslabs.Axis` whose values the slab queries compare.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable

import numpy as np
import pyarrow as pa

from dstp.hyperslabs import Axis, quote_name
from dstp.zarr_v3 import axis_columns
from dstp.metadata import DatasetDetails

__all__ = ["AxisCache"]


#: Datasets whose coordinate values are kept at once (the least recently used is dropped first).
KEPT_DATASETS = 64


class AxisCache:
    """Coordinate values per (dataset, version): the Arrow column as read, and the Axis the slab queries use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: OrderedDict[tuple[str, object], tuple[dict[str, Axis], dict[str, pa.Array]]] = OrderedDict()

    def of(self, store_id: str, version: object, details: DatasetDetails, run: Callable[[str], pa.Table]
           ) -> tuple[dict[str, Axis], dict[str, pa.Array]]:
        key = (store_id, version)
        with self._lock:
            found = self._kept.get(key)
            if found is not None:
                self._kept.move_to_end(key)
                return found
        columns = axis_columns(details)
        axes: dict[str, Axis] = {}
        raw: dict[str, pa.Array] = {}
        for d in details.dimensions:
            column = columns.get(d.name)
            if column is None:
                axes[d.name] = Axis(d.name, d.size)
                continue
            values = run(f"select {quote_name(column)} from {quote_name(store_id)}").column(0).combine_chunks()
            raw[d.name] = values
            compared = np.asarray(values.to_numpy(zero_copy_only=False))
            if compared.dtype.kind == "M":
                compared = compared.astype("datetime64[us]")
            axes[d.name] = Axis(d.name, d.size, column, compared, d.order)
        with self._lock:
            self._kept[key] = (axes, raw)
            while len(self._kept) > KEPT_DATASETS:
                self._kept.popitem(last=False)
        return axes, raw

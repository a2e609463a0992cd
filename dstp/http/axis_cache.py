"""Coordinate values of datasets, per dataset version, for the doors that cut hyperslabs (Zarr, EDR).

Each dimension's values come from ``DstpService.axis_values`` (the catalog's
memory: no query, no admission slot; a hidden dataset is not found) and are
kept as the Arrow column and the :class:`~dstp.hyperslabs.Axis` whose values
the slab queries compare.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
import numpy as np
import pyarrow as pa

from dstp.auth import Principal
from dstp.hyperslabs import Axis
from dstp.zarr_v3 import axis_columns
from dstp.metadata import DatasetDetails
from dstp.service import DstpService

__all__ = ["AxisCache"]


#: Datasets whose coordinate values are kept at once (the least recently used is dropped first).
KEPT_DATASETS = 64


class AxisCache:
    """Coordinate values per (dataset, version): the Arrow column as read, and the Axis the slab queries use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: OrderedDict[tuple[str, object], tuple[dict[str, Axis], dict[str, pa.Array]]] = OrderedDict()

    def of(self, service: DstpService, details: DatasetDetails, principal: Principal
           ) -> tuple[dict[str, Axis], dict[str, pa.Array]]:
        store_id = details.summary.id
        service.require(principal, store_id)
        key = (store_id, details.summary.version)
        with self._lock:
            found = self._kept.get(key)
            if found is not None:
                self._kept.move_to_end(key)
                return found
        columns = axis_columns(details)
        axes: dict[str, Axis] = {}
        raw: dict[str, pa.Array] = {}
        arrays = service.axes(store_id, [d.name for d in details.dimensions if d.name in columns], principal)
        for d in details.dimensions:
            column = columns.get(d.name)
            if column is None:
                axes[d.name] = Axis(d.name, d.size)
                continue
            values = arrays[d.name]
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

"""The Table 4 records, read straight from the ccm3 netCDF files with netCDF4 + numpy (no dstp code).

``select temperature, time from ccm3 where humidity > 50 limit N`` means: walk the grid
(time, lev, lat, lon) in C order, files in time order, keep the points whose relative
humidity (int16 ``RELHUM``, packed with ``scale_factor``/``add_offset``, ``_FillValue`` =
missing) unpacks to more than 50, and stop after N of them. The SOAP and Flight peers use
this module inside their own server processes; the OPeNDAP client applies the same rule to
the raw hyperslabs it downloads (:func:`humidity_mask`, :func:`time_labels`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import cftime
import netCDF4
import numpy as np

#: Bytes of one record's payload as the peers carry it natively: float32 temperature + int64 µs time.
RECORD_PAYLOAD_BYTES = 12


@dataclass(frozen=True, slots=True)
class RecordChunk:
    """Matching records of one time step: temperatures (float32) and their time label."""

    temperature: np.ndarray
    time: np.datetime64

    def __len__(self) -> int:
        """Return the number of records in the chunk."""
        return int(self.temperature.size)


def ccm3_files(root: Path) -> list[Path]:
    """Return the ccm3 files under catalog ``root`` (or a ccm3 folder itself) in time order."""
    folder = root / "ccm3" if (root / "ccm3").is_dir() else root
    files = sorted(folder.glob("ccm3_*.nc"))
    if not files:
        raise FileNotFoundError(f"no ccm3_*.nc files in {folder}")
    return files


def time_labels(values: np.ndarray, units: str, calendar: str) -> np.ndarray:
    """Return CF time ``values`` as datetime64[us] calendar labels (every noleap date is a Gregorian date)."""
    dates = cftime.num2date(np.asarray(values), units, calendar=calendar, only_use_cftime_datetimes=True)
    return np.array([f"{d.year:04d}-{d.month:02d}-{d.day:02d}T{d.hour:02d}:{d.minute:02d}:{d.second:02d}"
                     for d in np.atleast_1d(dates)], dtype="datetime64[us]")


def humidity_mask(raw: np.ndarray, attrs: dict[str, Any], threshold: float) -> np.ndarray:
    """Return where packed humidity ``raw`` is not missing and unpacks to more than ``threshold``."""
    fill = attrs.get("_FillValue", attrs.get("missing_value"))
    scale = np.float64(attrs.get("scale_factor", 1.0))
    offset = np.float64(attrs.get("add_offset", 0.0))
    values = raw.astype(np.float64) * scale + offset
    keep = values > threshold
    if fill is not None:
        keep &= raw != np.asarray(fill).astype(raw.dtype)
    return keep


def matching_chunks(root: Path, threshold: float = 50.0, limit: int | None = None) -> Iterator[RecordChunk]:
    """Return the matching records in grid order, one chunk per time step, at most ``limit`` in all."""
    left = limit if limit is not None else -1
    for path in ccm3_files(root):
        with netCDF4.Dataset(path) as nc:
            nc.set_auto_maskandscale(False)
            hum, temp = nc["RELHUM"], nc["T"]
            attrs = {k: hum.getncattr(k) for k in hum.ncattrs()}
            times = time_labels(nc["time"][:], nc["time"].units, getattr(nc["time"], "calendar", "standard"))
            for step, label in enumerate(times):
                if left == 0:
                    return
                keep = humidity_mask(np.asarray(hum[step]).reshape(-1), attrs, threshold)
                selected = np.asarray(temp[step], dtype=np.float32).reshape(-1)[keep]
                if left > 0:
                    selected = selected[:left]
                    left -= selected.size
                if selected.size:
                    yield RecordChunk(selected, label)

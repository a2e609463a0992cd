"""Packed variables whose values reach their ``_FillValue``: what ``dstp catalog validate`` warns about.

Packing by hand (``scale_factor``/``add_offset`` into 16-bit integers) easily puts the data's minimum on
the fill value — ``add_offset = (max + min) / 2`` with ``scale_factor = (max - min) / 65534`` packs the
maximum to 32767 and the minimum to -32767, a common ``_FillValue`` — or keeps ``_FillValue = 0`` where
``add_offset = 0`` packs every zero to 0. Readers (dstp, xarray, netCDF-C) then mask those real values as
missing, and nothing says so. The raw values tell, per file: a fill value between the smallest and
largest packed value (values on both sides pack to it); the mirror of a packing that reaches the
integer type's end (the data at 32767, the fill at -32767); a fill right next to the data; a declared
``valid_range`` holding the fill. A fill at the integer type's own end (-32768 for int16) below data
that stop at -32767 is the usual reserved value, and is not warned about.
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np

from dstp.catalog.dataset import GriddedDataset

__all__ = ["fills_in_packed_range"]

#: Values read at once while scanning a variable (bounded memory for any file size).
BLOCK_ELEMENTS = 2**22


def _blocks(shape: tuple[int, ...]) -> Iterator[tuple[slice, ...]]:
    """Yield index tuples covering ``shape`` in blocks of at most about BLOCK_ELEMENTS values."""
    if not shape:
        yield ()
        return
    inner = int(np.prod(shape[1:], dtype=np.int64)) or 1
    step = max(1, BLOCK_ELEMENTS // inner)
    for start in range(0, shape[0], step):
        yield (slice(start, min(shape[0], start + step)), *(slice(None),) * (len(shape) - 1))


def _raw_range(ds: GriddedDataset, path: Any, variable: str, shape: tuple[int, ...], view: np.dtype | None,
               fills: list[int]) -> tuple[int, int] | None:
    """Return the smallest and largest raw value of ``variable`` in ``path`` that is no fill value, or None."""
    lo: int | None = None
    hi: int | None = None
    for index in _blocks(shape):
        raw = np.asarray(ds.handles.read(path, variable, index))
        if np.ma.isMaskedArray(raw):
            raw = np.ma.getdata(raw)
        if view is not None:
            raw = raw.view(view)
        values = raw[~np.isin(raw, fills)] if fills else raw.reshape(-1)
        if values.size:
            lo = int(values.min()) if lo is None else min(lo, int(values.min()))
            hi = int(values.max()) if hi is None else max(hi, int(values.max()))
    return None if lo is None or hi is None else (lo, hi)


def _valid_range(attrs: dict[str, Any]) -> tuple[float, float] | None:
    if "valid_range" in attrs:
        pair = np.asarray(attrs["valid_range"]).reshape(-1)
        if pair.size == 2:
            return float(pair[0]), float(pair[1])
    if "valid_min" in attrs or "valid_max" in attrs:
        return float(attrs.get("valid_min", -np.inf)), float(attrs.get("valid_max", np.inf))
    return None


def fills_in_packed_range(ds: GriddedDataset) -> list[str]:
    """Return one warning per packed variable and file whose fill value real values pack to (see the module doc)."""
    found: list[str] = []
    for column in ds.attributes.values():
        for file, dec in zip(ds.files, column.file_decodings):
            if dec is None or not dec.packed or not dec.fill_values:
                continue
            meta = ds.handles.inspect(file.path).variables.get(column.spec.variable or column.name)
            raw_type = dec.view if dec.view is not None else (meta.dtype if meta is not None else None)
            if meta is None or raw_type is None or raw_type.kind not in "iu":
                continue
            fills = sorted({int(f) for f in dec.fill_values if isinstance(f, (int, np.integer))
                            or (isinstance(f, (float, np.floating)) and float(f).is_integer())})
            if not fills:
                continue
            scale = float(dec.scale_factor) if dec.scale_factor is not None else 1.0
            offset = float(dec.add_offset) if dec.add_offset is not None else 0.0
            units = f" {column.spec.units}" if column.spec.units else ""
            where = f"{column.name!r} ({column.spec.variable or column.name} in {file.path.name})"
            valid = _valid_range(meta.attrs)
            extremes = {int(np.iinfo(raw_type).min), int(np.iinfo(raw_type).max)}
            seen = _raw_range(ds, file.path, column.spec.variable or column.name, meta.shape, dec.view, fills)
            for fill in fills:
                means = f"{fill} unpacks to {fill * scale + offset:.6g}{units}"
                if valid is not None and valid[0] <= fill <= valid[1]:
                    found.append(f"{where}: its _FillValue {fill} is inside its valid range [{valid[0]:g}, "
                                 f"{valid[1]:g}] ({means}): real values packed to it read as missing; choose a "
                                 "_FillValue outside the valid range")
                    continue
                if seen is None:
                    continue
                lo, hi = seen
                if lo < fill < hi:
                    found.append(f"{where}: its packed values run from {lo} to {hi}, around its _FillValue {fill} "
                                 f"({means}): every value packed to {fill} reads as missing; pack the data clear of "
                                 f"the fill value, or set _FillValue outside {lo}…{hi}")
                elif fill not in extremes and (fill == -hi and hi >= max(extremes) - 1
                                               or fill == -lo and lo <= min(extremes) + 2):
                    end = hi if fill == -hi else lo
                    found.append(f"{where}: its packed values reach {end} and its _FillValue {fill} is the other "
                                 f"end of that span ({means}): packing centred on add_offset put the data's "
                                 f"{'minimum' if fill < 0 else 'maximum'} on {fill}, where it reads as missing; "
                                 f"pack to ±{abs(end) - 1}, or use _FillValue {min(extremes)}")
                elif fill in (lo - 1, hi + 1) and fill not in extremes:
                    side = "smallest" if fill == lo - 1 else "largest"
                    found.append(f"{where}: its {side} packed value ({lo if side == 'smallest' else hi}) is next to "
                                 f"its _FillValue {fill} ({means}): packing that put the data's "
                                 f"{'minimum' if side == 'smallest' else 'maximum'} on {fill} makes those values "
                                 f"read as missing; pack to {lo}…{hi} with _FillValue {min(extremes)} or "
                                 f"{max(extremes)}, or check the packing")
    return found

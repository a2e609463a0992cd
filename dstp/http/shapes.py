"""The JSON shapes of discovery metadata, shared by the pages and the HTTP API.

These shapes are a contract (the R client and ``docs/web.md`` rely on them):
each mirrors the fields of its :mod:`dstp.metadata` dataclass, with tuples as
arrays, CF and global attributes as JSON objects, and ``bbox`` as
``[lat_min, lat_max, lon_min, lon_max]`` or ``null``.
"""

from __future__ import annotations

from typing import Any

from dstp.metadata import ColumnInfo, DatasetDetails, DatasetSummary, DimensionInfo, FileInfo, KeyInfo

__all__ = ["column_json", "details_json", "summary_json"]


def summary_json(s: DatasetSummary) -> dict[str, Any]:
    """Return the JSON object of one catalog entry."""
    return {
        "id": s.id,
        "title": s.title,
        "summary": s.summary,
        "keywords": list(s.keywords),
        "attributes": list(s.attributes),
        "default_grid": list(s.default_grid),
        "default_grid_rows": s.default_grid_rows,
        "time_start": s.time_start,
        "time_end": s.time_end,
        "bbox": list(s.bbox) if s.bbox is not None else None,
        "size_bytes": s.size_bytes,
        "access_policy": s.access_policy,
    }


def column_json(c: ColumnInfo) -> dict[str, Any]:
    """Return the JSON object of one coordinate or attribute column."""
    return {
        "name": c.name,
        "variable": c.variable,
        "dimensions": list(c.dimensions),
        "units": c.units,
        "description": c.description,
        "arrow_type": c.arrow_type,
        "cf": dict(c.cf),
        "packed": c.packed,
        "nullable": c.nullable,
        "coordinate": c.coordinate,
        "missing_from": list(c.missing_from),
        "role": c.role,
        "note": c.note,
    }


def _dimension_json(d: DimensionInfo) -> dict[str, Any]:
    return {
        "name": d.name, "size": d.size, "coordinate": d.coordinate, "min": d.min, "max": d.max,
        "order": d.order, "units": d.units, "calendar": d.calendar, "axis": d.axis,
    }


def _file_json(f: FileInfo) -> dict[str, Any]:
    return {"name": f.name, "size_bytes": f.size_bytes, "format": f.format, "start": f.start, "count": f.count,
            "first": f.first, "last": f.last}


def _key_json(k: KeyInfo) -> dict[str, Any]:
    return {"name": k.name, "column": k.column, "standard_name": k.standard_name, "units": k.units}


def details_json(d: DatasetDetails) -> dict[str, Any]:
    """Return the JSON object of a full dataset description."""
    return {
        "summary": summary_json(d.summary),
        "dimensions": [_dimension_json(x) for x in d.dimensions],
        "coordinates": [column_json(c) for c in d.coordinates],
        "attributes": [column_json(c) for c in d.attributes],
        "files": [_file_json(f) for f in d.files],
        "correlation_keys": [_key_json(k) for k in d.correlation_keys],
        "aggregate_dimension": d.aggregate_dimension,
        "global_attributes": dict(d.global_attributes),
        "license": d.license,
        "source": d.source,
        "descriptor_xml": d.descriptor_xml,
        "coverage": [{"first": r.first, "last": r.last, "start": r.start, "stop": r.stop} for r in d.coverage],
        "warnings": list(d.warnings),
        "grid_mappings": [
            {"name": m.name, "grid_mapping_name": m.grid_mapping_name, "parameters": dict(m.parameters),
             "wkt": m.wkt, "proj": m.proj, "problem": m.problem}
            for m in d.grid_mappings
        ],
    }

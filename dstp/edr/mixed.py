"""EDR answers of parameters on different dimensions (ccm3's ``pressure(time, lat, lon)`` with
``cloud(time, lev, lat, lon)``): each set of dimensions is queried and answered on its own axes.

One SQL query over every parameter would give each record every dimension of the union, so a 2-D ``pressure``
would be repeated along ``lev`` and claim a level it does not have. Instead the parameters are grouped by their
dimensions (:func:`dimension_groups`), each group is its own query (:func:`group_query`: the ``z`` of a group
without a vertical axis, the ``datetime`` of one without time, are not its to narrow) and the answers are joined:

- CoverageJSON: a ``CoverageCollection`` of one Coverage per group (its own domain; the collection's
  ``parameters`` are all of them, each Coverage's its own);
- CSV and Parquet: the records of each group after the other, in the order of the groups' first parameters, with
  the columns of all; a record has no value (empty, null) in a column its group does not have — a 2-D parameter's
  records have no level, and the 3-D parameters are empty in them;
- GeoJSON: the features of each group after the other, each with only its group's properties;
- netCDF: each variable on its own dimensions (a grid: the axes shared; a trajectory or points: one ``obs_<i>``
  dimension per group, with its own coordinates ``time_<i>``, ``lat_<i>``, …).

A query whose parameters share their dimensions is answered as before, by :mod:`dstp.edr.answers`.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import replace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from dstp.edr.answers import _parameter, coverage_json, geojson, iso, netcdf_bytes, netcdf_dataset
from dstp.edr.query import EdrQuery, axes_by_kind, points, records
from dstp.metadata import DatasetDetails

__all__ = ["dimension_groups", "group_query", "mixed_coverage_json", "mixed_csv_text", "mixed_geojson_bytes",
           "mixed_netcdf", "mixed_parquet", "mixed_records"]

#: A group's query and the records its SQL returned.
Part = tuple[EdrQuery, pa.Table]


def dimension_groups(q: EdrQuery, details: DatasetDetails) -> list[tuple[str, ...]]:
    """Return the query's parameters grouped by their set of dimensions, in the order they were asked."""
    cols = {c.name: c for c in details.attributes}
    groups: dict[frozenset[str], list[str]] = {}
    for p in q.parameters:
        groups.setdefault(frozenset(cols[p].dimensions), []).append(p)
    return [tuple(g) for g in groups.values()]


def group_query(q: EdrQuery, details: DatasetDetails, parameters: tuple[str, ...]) -> EdrQuery:
    """Return ``q`` for ``parameters`` alone (one set of dimensions): without the vertical or time selection
    of an axis they do not have."""
    cols = {c.name: c for c in details.attributes}
    dims = set(cols[parameters[0]].dimensions)
    by_axis = axes_by_kind(details)
    one = replace(q, parameters=parameters)
    if "Z" in by_axis and by_axis["Z"].name not in dims:
        # a corridor's cells stay those the 3-D corridor keeps; a 2-D parameter has no level to narrow
        one = replace(one, z=None, z_list=False, picked_z=(), cell_heights=None)
    if "T" in by_axis and by_axis["T"].name not in dims:
        one = replace(one, start=None, end=None, picked_t=())
    return one


def mixed_coverage_json(parts: list[Part], details: DatasetDetails) -> dict[str, Any]:
    """Return a CoverageCollection of each group's Coverage (or, of a MULTIPOINT, each group's PointSeries)."""
    coverages: list[dict[str, Any]] = []
    for q, table in parts:
        one = coverage_json(q, details, table)
        coverages += one["coverages"] if one["type"] == "CoverageCollection" else [one]
    cols = {c.name: c for c in details.attributes}
    asked = [p for q, _ in parts for p in q.parameters]
    return {"type": "CoverageCollection", "coverages": coverages,
            "parameters": {p: _parameter(cols[p]) for p in asked}}


def mixed_records(parts: list[Part], details: DatasetDetails) -> pa.Table:
    """Return each group's records after the other's, with the columns of all (null where a group has none)."""
    tables = [records(q, details, table) for q, table in parts]
    order = [d.coordinate for d in details.dimensions if d.coordinate and any(d.coordinate in t.column_names
                                                                               for t in tables)]
    order += [p for q, _ in parts for p in q.parameters]
    fields = {f.name: f for t in tables for f in t.schema}
    whole = [pa.table({name: t.column(name) if name in t.column_names else pa.nulls(t.num_rows, fields[name].type)
                       for name in order}) for t in tables]
    return pa.concat_tables(whole)


def mixed_csv_text(parts: list[Part], details: DatasetDetails) -> str:
    """Return the records of every group as one CSV (a column a group does not have is empty in its rows),
    each value written as :func:`dstp.edr.answers.csv_text` writes it."""
    table = mixed_records(parts, details)
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(table.column_names)
    for row in table.to_pylist():
        writer.writerow(["" if v is None else iso(v) if hasattr(v, "isoformat") else v for v in row.values()])
    return out.getvalue()


def mixed_parquet(parts: list[Part], details: DatasetDetails) -> bytes:
    out = io.BytesIO()
    pq.write_table(mixed_records(parts, details), out)
    return out.getvalue()


def mixed_geojson_bytes(parts: list[Part], details: DatasetDetails) -> bytes:
    """Return the features of every group, each with its own group's properties only."""
    features = [f for q, table in parts for f in geojson(q, details, table)["features"]]
    return json.dumps({"type": "FeatureCollection", "features": features, "numberReturned": len(features)},
                      separators=(",", ":")).encode()


def mixed_netcdf(parts: list[Part], details: DatasetDetails) -> bytes:
    """Return one CF netCDF-4 file holding each variable on its own dimensions."""
    import xarray as xr

    q = parts[0][0]
    datasets = [netcdf_dataset(one, details, table) for one, table in parts]
    if q.kind == "trajectory" or points(q):  # one observation dimension, and its coordinates, per group
        datasets = [ds.rename({name: f"{name}_{i}" for name in [*ds.dims, *ds.coords]})
                    for i, ds in enumerate(datasets, start=1)]
    merged = xr.merge(datasets, join="outer", compat="no_conflicts", combine_attrs="override")
    return netcdf_bytes(merged, replace(q, parameters=tuple(p for one, _ in parts for p in one.parameters)),
                        details)

"""ERDDAP's catalog tables: a dataset's info, search results, allDatasets — as ERDDAP lays them out.

Built from the service's descriptions (DatasetDetails), never from files;
rendered like any ERDDAP table by :mod:`dstp.erddap.formats`.

* info (``/erddap/info/ID/index.csv``): ``Row Type, Variable Name, Attribute Name, Data Type, Value``
  — the global attributes, then each dimension and variable with its attributes (erddapy's
  ``get_var_by_attr`` and ``_get_variables`` read this).
* search and dataset lists: ERDDAP's columns, ``griddap … Dataset ID`` (erddapy reads ``Dataset ID``).
* allDatasets: one row per dataset with ERDDAP's allDatasets columns; the query string picks
  columns (``?datasetID,title``); constraints on it are not supported.
"""

from __future__ import annotations

import re
from typing import Any, Sequence
from urllib.parse import unquote_plus

import numpy as np

from dstp.errors import QueryError
from dstp.erddap.dataset import ErddapDataset, erddap_type
from dstp.erddap.formats import ErddapTable, _axis_attrs, _attrs_of
from dstp.http.search import CatalogFilter, SearchIndex
from dstp.metadata import DatasetDetails

__all__ = ["all_datasets", "cdm_data_type", "info_table", "search_table"]

SEARCH_COLUMNS = ["griddap", "Subset", "tabledap", "Make A Graph", "wms", "files", "Accessible", "Title", "Summary",
                  "FGDC", "ISO 19115", "Info", "Background Info", "RSS", "Email", "Institution", "Dataset ID"]


def info_table(ds: ErddapDataset) -> ErddapTable:
    """Return ERDDAP's info table of a dataset."""
    rows: list[tuple[str, str, str, str, str]] = []
    for k, v in ds.details.global_attributes:
        rows.append(("attribute", "NC_GLOBAL", k, "String", v))
    rows.append(("attribute", "NC_GLOBAL", "cdm_data_type", "String", "Grid" if ds.axes else "Point"))
    grid = {d.name for d in ds.axes}
    for d in ds.details.dimensions:
        if d.name not in grid or not d.coordinate:
            continue
        values = ds.axis_values.get(d.name)
        spacing = ""
        if values is not None and len(values) > 1:
            numbers = ds.axis_numbers(d)
            steps = np.diff(numbers)
            even = bool(np.allclose(steps, steps[0], rtol=1e-6))
            spacing = f", evenlySpaced={'true' if even else 'false'}, averageSpacing={float(np.mean(steps))!r}"
        typ = "double" if ds.time_axis(d.coordinate) is not None else erddap_type(ds.columns[d.coordinate].arrow_type)
        rows.append(("dimension", d.coordinate, "", typ, f"nValues={d.size}{spacing}"))
        rows += [("attribute", d.coordinate, key, "double" if kind == "Float64" else "String", value.replace(" ", ", ")
                  if kind == "Float64" else value) for kind, key, value in _axis_attrs(ds, d)]
    for name, info in ds.columns.items():
        if ds.axes and name in {d.coordinate for d in ds.axes}:
            continue
        rows.append(("variable", name, "", erddap_type(info.arrow_type) if " since " not in info.units else "double",
                     ", ".join(info.dimensions)))
        rows += [("attribute", name, k, "String", v) for k, v in _attrs_of(ds, name).items()]
    columns = [list(c) for c in zip(*rows)] if rows else [[] for _ in range(5)]
    return ErddapTable(["Row Type", "Variable Name", "Attribute Name", "Data Type", "Value"],
                       ["String"] * 5, [""] * 5, columns, metadata=True)


def _griddable(d: DatasetDetails) -> bool:
    return not d.feature_type and bool(d.summary.default_grid)


def cdm_data_type(d: DatasetDetails) -> str:
    """Return the dataset's ERDDAP cdm_data_type: Grid, else its CF featureType (TimeSeries…), else Other."""
    if _griddable(d):
        return "Grid"
    return (d.feature_type[:1].upper() + d.feature_type[1:]) if d.feature_type else "Other"


def erddap_matches(index: SearchIndex, words: str, protocol: str) -> list[DatasetDetails]:
    """Return the datasets of ``index`` that match ``words`` (best first; every one, by id, when empty) and that
    ``protocol`` serves ("": any)."""
    if protocol not in ("", "griddap", "tabledap"):
        raise QueryError(f"protocol={protocol!r}: use griddap, tabledap or (ANY)")
    found = [index.details(h.summary.id) for h in index.search(CatalogFilter.parse(words, [], "", "", ""))]
    return [d for d in found if protocol != "griddap" or _griddable(d)]


def listing_table(details: Sequence[DatasetDetails], base: str) -> ErddapTable:
    """Return ERDDAP's search (or list) table of ``details``, in their order."""
    rows: list[list[Any]] = []
    for d in details:
        i = d.summary.id
        rows.append([f"{base}/erddap/griddap/{i}" if _griddable(d) else "", f"{base}/erddap/tabledap/{i}.subset",
                     f"{base}/erddap/tabledap/{i}", "", "", "", "public" if d.summary.access_policy == "public" else
                     d.summary.access_policy, d.summary.title, d.summary.summary, "", "",
                     f"{base}/erddap/info/{i}/index.html", f"{base}/datasets/{i}", "", "",
                     dict(d.global_attributes).get("institution", ""), i])
    columns = [list(c) for c in zip(*rows)] if rows else [[] for _ in SEARCH_COLUMNS]
    return ErddapTable(list(SEARCH_COLUMNS), ["String"] * len(SEARCH_COLUMNS), [""] * len(SEARCH_COLUMNS), columns,
                       metadata=True)


def search_table(details: Sequence[DatasetDetails], base: str, words: str, protocol: str) -> ErddapTable:
    """Return ERDDAP's search (or list) table of the datasets matching ``words`` (all, when empty)."""
    return listing_table(erddap_matches(SearchIndex(details), words, protocol), base)


_ALL = ["datasetID", "accessible", "institution", "dataStructure", "cdm_data_type", "class", "title",
        "minLongitude", "maxLongitude", "minLatitude", "maxLatitude", "minTime", "maxTime", "griddap", "subset",
        "tabledap", "files", "infoUrl", "summary", "license"]


def all_datasets(details: Sequence[DatasetDetails], base: str, query: str) -> ErddapTable:
    """Return the allDatasets table, with the columns the query string names (all when none)."""
    text = unquote_plus(query).strip()
    head = re.split(r"&", text, maxsplit=1)
    if len(head) > 1 and head[1].strip():
        raise QueryError("allDatasets takes a list of columns only (?datasetID,title); filter the rows yourself")
    wanted = [c.strip() for c in head[0].split(",") if c.strip()] or list(_ALL)
    for c in wanted:
        if c not in _ALL:
            raise QueryError(f"allDatasets has no column {c!r} (columns: {', '.join(_ALL)})")
    rows = []
    for d in sorted(details, key=lambda x: x.summary.id):
        s = d.summary
        box = s.bbox
        record = {"datasetID": s.id, "accessible": "public" if s.access_policy == "public" else s.access_policy,
                  "institution": dict(d.global_attributes).get("institution", ""),
                  "dataStructure": "grid" if _griddable(d) else "table",
                  "cdm_data_type": cdm_data_type(d),
                  "class": "dstp", "title": s.title,
                  "minLongitude": box[2] if box else None, "maxLongitude": box[3] if box else None,
                  "minLatitude": box[0] if box else None, "maxLatitude": box[1] if box else None,
                  "minTime": (s.time_start + "Z") if s.time_start else "",
                  "maxTime": (s.time_end + "Z") if s.time_end else "",
                  "griddap": f"{base}/erddap/griddap/{s.id}" if _griddable(d) else "",
                  "subset": "", "tabledap": f"{base}/erddap/tabledap/{s.id}", "files": "",
                  "infoUrl": f"{base}/datasets/{s.id}", "summary": s.summary, "license": d.license}
        rows.append([record[c] for c in wanted])
    types = ["double" if c.startswith(("min", "max")) and "Time" not in c else "String" for c in wanted]
    units = ["degrees_east" if "Longitude" in c else "degrees_north" if "Latitude" in c else
             "UTC" if c.endswith("Time") else "" for c in wanted]
    columns = [list(col) for col in zip(*rows)] if rows else [[] for _ in wanted]
    return ErddapTable(wanted, types, units, columns)

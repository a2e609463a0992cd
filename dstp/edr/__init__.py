"""OGC API – Environmental Data Retrieval 1.1 on the query engine: position, radius, area, cube, trajectory,
corridor, and the items (stations) of station datasets.

Framework-free: :mod:`dstp.http.edr_routes` serves it at ``/edr``. An EDR
query becomes one dstp SQL query (the service runs it under the caller's
policy, admission and audit) and its records become CoverageJSON or CSV, or
netCDF (CF), GeoJSON or Parquet (``f=``; see :func:`netcdf`, :func:`geojson`, :func:`parquet`):

- **position** ``coords=POINT(lon lat)``: the grid cell nearest the point
  (nearest coordinate value along each horizontal axis, as
  ``ds.sel(lat=…, lon=…, method="nearest")``; of two as near, the larger value, as xarray takes it),
  every time and level asked for — a CoverageJSON ``PointSeries``;
- **area** ``coords=POLYGON((…))``: the cells whose centres lie inside the
  polygon (or on its edge) — a ``Grid`` whose cells outside are null;
- **cube** ``bbox=west,south,east,north``: the cells whose centres lie in the box — a ``Grid``;
- **radius** ``coords=POINT(lon lat)&within=R&within-units=km``: the cells whose centres lie within R
  along the great circle (haversine on the IUGG mean sphere, 6371.0088 km) — a ``Grid``, cells outside null;
- **trajectory** ``coords=LINESTRING(lon lat, …)``: vertex by vertex, the nearest cell's values at every
  time and level asked for — a ``Trajectory`` (a composite axis of (t, z, x, y) tuples). ``LINESTRING Z``
  gives each vertex its level (the nearest), ``LINESTRING M`` its time (Unix seconds, the nearest time),
  ``ZM`` both; ``MULTILINESTRING`` is answered part after part;
- **corridor** ``coords=LINESTRING(…)&corridor-width=W&width-units=km``: the cells whose centres lie within
  W/2 of the line along the WGS84 ellipsoid (:mod:`dstp.edr.corridor`) — a ``Grid``, cells outside null;
  with ``LINESTRING Z`` and ``corridor-height=H&height-units=`` (the levels' units), each cell keeps the levels
  within H/2 of the line's height at the point nearest it;
- **items** of a station dataset (CF ``timeSeries``): its stations as GeoJSON, and a station's
  observations (:mod:`dstp.edr.items`).

``datetime`` (an instant, or ``a/b`` with ``..`` for an open end) and ``z``
(a value, ``a/b``, or a list ``a,b``) narrow the time and vertical axes;
``parameter-name`` picks the variables (default: all). A collection lists exactly the queries it answers and the
parameters it offers (:mod:`dstp.edr.offers`); a query parameter a route does not read is refused. Longitudes are
−180…180 in requests whatever the files store (0…360 is converted). Before
anything is read the size is known from the axes; past :data:`MAX_VALUES`
values the query is refused (413) with that figure.
"""

from dstp.edr.answers import (MEDIA_TYPES, collection, coverage_json, csv_text, geojson, geojson_bytes, iso, landing,
                              netcdf, parquet, station_coverage)
from dstp.edr.mixed import (dimension_groups, group_query, mixed_coverage_json, mixed_csv_text, mixed_geojson_bytes,
                             mixed_netcdf, mixed_parquet)
from dstp.edr.offers import (QUERY_PARAMETERS, declared_parameters, not_offered, parameters_of, queries_of,
                             query_parameters)
from dstp.edr.query import (CONFORMANCE, DISTANCE_UNITS, FORMATS, ITEM_FORMATS, MAX_VALUES, QUERY_TYPES, EdrQuery,
                            common_parameters, parse_query, plan_sql, records, refuse_over_limit, resolve)

__all__ = ["CONFORMANCE", "DISTANCE_UNITS", "FORMATS", "ITEM_FORMATS", "MAX_VALUES", "MEDIA_TYPES", "QUERY_PARAMETERS",
           "QUERY_TYPES", "EdrQuery", "collection", "declared_parameters", "common_parameters", "coverage_json", "csv_text", "dimension_groups",
           "geojson", "geojson_bytes", "group_query", "iso", "landing", "netcdf", "not_offered", "parameters_of", "parquet", "parse_query", "plan_sql",
           "queries_of", "query_parameters", "records", "refuse_over_limit", "resolve", "station_coverage"]

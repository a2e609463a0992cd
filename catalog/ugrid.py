"""UGRID meshes (CF-UGRID 1.0 and 0.9; LFRic, ICON, FESOM, ADCIRC, SCHISM output): structure, locations, face areas.

A mesh is described by a *topology* variable (``cf_role = "mesh_topology"``), usually 0-d and holding no value,
whose attributes name the *connectivity* variables (``face_node_connectivity``, ``edge_node_connectivity``, …)
and the coordinates of each location (``node_coordinates``, ``face_coordinates``, ``edge_coordinates``). Data
variables say where they live with ``mesh`` and ``location``.

* The topology and connectivity variables are structure (:func:`structure_variables`): never coordinates, never
  records.
* Each location's coordinates are coordinates of the data on that location (:func:`location_coordinates`).
* The node, edge and face dimensions of a mesh are never paired in one record (:func:`location_homes`): a face
  value beside a node's longitude would be a cross product of unrelated points.
* :func:`face_areas` gives each face's area on the sphere from its nodes (``area_weight``), with pyproj's
  ``Geod.polygon_area_perimeter`` (GeographicLib: edges are great-circle arcs between consecutive nodes, as
  UGRID tools take them); ``start_index`` and the fill value of ``face_node_connectivity`` are honoured, so
  triangles and quadrilaterals can share one connectivity array.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

__all__ = ["EARTH_RADIUS", "Mesh", "face_areas", "location_coordinates", "location_homes", "mesh_areas", "meshes",
           "structure_variables"]

#: The sphere's radius when the file gives none: the IUGG mean Earth radius R1, in metres.
EARTH_RADIUS = 6_371_008.8
_CONNECTIVITY = ("face_node_connectivity", "edge_node_connectivity", "face_edge_connectivity",
                 "face_face_connectivity", "edge_face_connectivity", "boundary_node_connectivity",
                 "volume_node_connectivity", "volume_edge_connectivity", "volume_face_connectivity",
                 "volume_volume_connectivity", "volume_shape_type")
_LOCATIONS = ("node", "edge", "face", "volume")


@dataclass(frozen=True, slots=True)
class Mesh:
    """One UGRID mesh: its topology variable, connectivities and each location's coordinates and dimension."""

    name: str
    #: attribute name (``face_node_connectivity``) -> variable key
    connectivity: dict[str, str]
    #: location (``node``) -> its coordinate variable keys, x first
    coordinates: dict[str, tuple[str, ...]]
    #: location -> its dimension
    dimensions: dict[str, str]


def _resolve(variables: Mapping[str, Any], owner: str, name: str) -> str | None:
    """Return the key of ``name`` seen from ``owner``'s group (CF 1.8 §2.7), or None if it is not there."""
    group = owner.rsplit("/", 1)[0] if "/" in owner else ""
    while True:
        key = f"{group}/{name}" if group else name
        if key in variables:
            return key
        if not group:
            return None
        group = group.rsplit("/", 1)[0] if "/" in group else ""


def _names(value: Any) -> list[str]:
    return value.split() if isinstance(value, str) else []


def meshes(variables: Mapping[str, Any]) -> dict[str, Mesh]:
    """Return the meshes of a file by topology variable key (``variables``: key -> VariableMeta-like)."""
    out: dict[str, Mesh] = {}
    for key, var in variables.items():
        if str(var.attrs.get("cf_role", "")).strip() != "mesh_topology":
            continue
        connectivity = {}
        for attr in _CONNECTIVITY:
            for name in _names(var.attrs.get(attr))[:1]:
                found = _resolve(variables, key, name)
                if found is not None:
                    connectivity[attr] = found
        coordinates: dict[str, tuple[str, ...]] = {}
        dimensions: dict[str, str] = {}
        for location in _LOCATIONS:
            keys = tuple(k for k in (_resolve(variables, key, n) for n in _names(var.attrs.get(f"{location}_coordinates")))
                         if k is not None)
            if keys:
                coordinates[location] = keys
                dims = variables[keys[0]].dimensions
                if len(dims) == 1:
                    dimensions[location] = dims[0]
            declared = var.attrs.get(f"{location}_dimension")
            if isinstance(declared, str) and declared.strip():
                dimensions.setdefault(location, _dimension_key(variables, declared.strip()))
            conn = connectivity.get(f"{location}_node_connectivity")
            if conn is not None and location not in dimensions:
                dims = variables[conn].dimensions
                if dims:
                    dimensions[location] = dims[0]
        out[key] = Mesh(key, connectivity, coordinates, dimensions)
    return out


def _dimension_key(variables: Mapping[str, Any], name: str) -> str:
    """Return the key by which variables know a dimension a topology attribute names (plain, or a group's)."""
    for var in variables.values():
        for d in var.dimensions:
            if d == name or d.endswith("/" + name):
                return str(d)
    return name


def structure_variables(variables: Mapping[str, Any]) -> set[str]:
    """Return the keys of every topology and connectivity variable: structure, never columns."""
    out: set[str] = set()
    for key, var in variables.items():
        role = str(var.attrs.get("cf_role", "")).strip()
        if role == "mesh_topology" or role.endswith("_connectivity"):
            out.add(key)
    for mesh in meshes(variables).values():
        out.add(mesh.name)
        out.update(mesh.connectivity.values())
    return out


def location_coordinates(variables: Mapping[str, Any]) -> set[str]:
    """Return the keys of every mesh location's coordinate variables (``node_x``, ``face_y``, …)."""
    return {k for mesh in meshes(variables).values() for keys in mesh.coordinates.values() for k in keys}


def location_homes(variables: Mapping[str, Any]) -> dict[str, str]:
    """Return {dimension: "mesh 'M' nodes"} for each location dimension: no record pairs two locations."""
    out: dict[str, str] = {}
    for mesh in meshes(variables).values():
        label = mesh.name.rsplit("/", 1)[-1]
        for location, dim in mesh.dimensions.items():
            out.setdefault(dim, f"mesh {label!r} {location}s")
    return out


def face_areas(lon: np.ndarray, lat: np.ndarray, faces: np.ndarray, missing: np.ndarray | None,
               radius: float = EARTH_RADIUS) -> np.ndarray:
    """Return the area (m2) of each face on a sphere of ``radius`` metres; NaN where a face has fewer than 3 nodes
    or a node without coordinates.

    ``faces`` holds 0-based node numbers, one face per row; ``missing`` marks the unused places of faces with
    fewer nodes than the row has (the connectivity's fill value). ValueError if a node number is out of range.
    """
    import pyproj

    lon = np.asarray(lon, dtype=np.float64)
    lat = np.asarray(lat, dtype=np.float64)
    faces = np.asarray(faces)
    used = ~missing if missing is not None else np.ones(faces.shape, bool)
    numbers = faces[used]
    if numbers.size and (numbers.min() < 0 or numbers.max() >= len(lon)):
        bad = int(numbers[(numbers < 0) | (numbers >= len(lon))][0])
        raise ValueError(f"face_node_connectivity names node {bad}, but the mesh has nodes 0 to {len(lon) - 1}")
    geod = pyproj.Geod(a=radius, b=radius)
    out = np.full(faces.shape[0], np.nan)
    for k in range(faces.shape[0]):
        nodes = faces[k][used[k]]
        if len(nodes) < 3:
            continue
        x, y = lon[nodes], lat[nodes]
        if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
            continue
        area, _ = geod.polygon_area_perimeter(x, y)
        out[k] = abs(area)
    return out


def _geographic(var: Any, which: str) -> bool:
    from dstp.catalog.cf import LAT_UNITS, LON_UNITS

    units = str(var.attrs.get("units", "")).replace(" ", "").lower()
    return str(var.attrs.get("standard_name", "")).lower() == which or \
        units in (LAT_UNITS if which == "latitude" else LON_UNITS)


def mesh_areas(variables: Mapping[str, Any], read: Callable[[str], tuple[np.ndarray, np.ndarray | None]],
               in_use: set[str], radius: float, limit: int) -> tuple[str, np.ndarray, str] | str | None:
    """Return (face dimension, face areas in m2, how) of the mesh whose faces records are on (``in_use``: the
    dataset's dimensions); a sentence when a mesh's faces are in use but their areas cannot be had; None when no
    mesh's faces are. ``read(variable)`` gives a variable's decoded values and null mask (ValueError: unreadable).
    Meshes of more than ``limit`` nodes or face-node places are not weighted (their areas are held in memory).
    """
    for mesh in meshes(variables).values():
        face_dim = mesh.dimensions.get("face")
        if face_dim is None or face_dim not in in_use:
            continue
        label = mesh.name.rsplit("/", 1)[-1]
        connectivity = mesh.connectivity.get("face_node_connectivity")
        nodes = mesh.coordinates.get("node", ())
        if connectivity is None or len(nodes) < 2:
            return f"mesh {label!r} names no face_node_connectivity or node_coordinates to compute face areas from"
        x, y = nodes[0], nodes[1]
        places, count = int(np.prod(variables[connectivity].shape)), int(np.prod(variables[x].shape))
        if max(places, count) > limit:
            return (f"mesh {label!r} has {count:,} nodes and {places:,} face-node places; dstp computes face areas "
                    f"of meshes of up to {limit:,} of each — name the face areas with CF cell_measures = "
                    "\"area: VARIABLE\"")
        if _geographic(variables[x], "latitude") and _geographic(variables[y], "longitude"):
            x, y = y, x
        if not (_geographic(variables[x], "longitude") and _geographic(variables[y], "latitude")):
            return (f"the node coordinates {x!r}, {y!r} of mesh {label!r} are not longitude and latitude in degrees; "
                    "name the face areas with CF cell_measures = \"area: VARIABLE\"")
        try:
            lon, lon_mask = read(x)
            lat, lat_mask = read(y)
            faces, missing = read(connectivity)
            start = int(np.asarray(variables[connectivity].attrs.get("start_index", 0)).reshape(-1)[0])
            lon = np.where(lon_mask, np.nan, lon) if lon_mask is not None else lon
            lat = np.where(lat_mask, np.nan, lat) if lat_mask is not None else lat
            faces = np.asarray(faces)
            # a node number below start_index is no node: a fill value the file did not declare (-1 is common)
            below = faces < start
            missing = below if missing is None else (np.asarray(missing) | below)
            if faces.ndim != 2 or variables[connectivity].dimensions[0] != face_dim:
                return f"{connectivity!r} of mesh {label!r} is not ({face_dim}, nodes of a face)"
            areas = face_areas(lon, lat, np.where(missing, start, faces).astype(np.int64) - start, missing, radius)
        except ValueError as exc:
            return f"mesh {label!r}: {exc}"
        how = (f"the area of each face of mesh {label!r} on a sphere of radius {radius:.1f} m, from its nodes "
               f"({x}, {y}) and {connectivity.rsplit('/', 1)[-1]} (pyproj Geod: great-circle edges), in m2")
        return face_dim, areas, how
    on_mesh = sorted(f"{loc}s" for mesh in meshes(variables).values() for loc, d in mesh.dimensions.items()
                     if d in in_use and loc != "face")
    if on_mesh:  # cos(latitude) of a node is not proportional to any area
        return (f"the records are on a mesh's {' and '.join(dict.fromkeys(on_mesh))}, and UGRID gives only faces an "
                "area; name the areas with CF cell_measures = \"area: VARIABLE\"")
    return None

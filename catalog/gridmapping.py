"""CF grid mappings: a projected or rotated grid's coordinate reference system, through pyproj.

A data variable's ``grid_mapping`` attribute names a variable whose
attributes describe the grid's CRS (CF §5.6). :func:`grid_mappings` reads
them and asks pyproj (``CRS.from_cf``) for the WKT and PROJ forms, which
``describe``, the dataset page and the result schema carry. When a grid has
only its projection axes (``x``/``y`` or ``rlon``/``rlat``) and no 2-D
latitude/longitude, :func:`geographic` computes them, so the grid can still be
asked for ``lat between 50 and 60``: those columns are documented as derived.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from dstp.catalog.netcdf4_ import resolve_in_group

__all__ = ["GridMapping", "cell_areas", "geographic", "grid_mapping_names", "grid_mappings", "metres_per_unit"]

_LENGTH_TO_METRES = {"m": 1.0, "metre": 1.0, "meter": 1.0, "metres": 1.0, "meters": 1.0,
                     "km": 1000.0, "kilometre": 1000.0, "kilometer": 1000.0, "kilometres": 1000.0,
                     "kilometers": 1000.0}


@dataclass(frozen=True, slots=True)
class GridMapping:
    """A grid mapping variable: its CF parameters and the CRS pyproj builds from them."""

    #: The grid mapping variable's name.
    name: str
    #: CF ``grid_mapping_name`` (``rotated_latitude_longitude``, ``lambert_conformal_conic``, …).
    grid_mapping_name: str
    #: Every attribute of the variable, as text.
    parameters: tuple[tuple[str, str], ...]
    #: OGC WKT 2 of the CRS, or "" when pyproj cannot build it (``problem`` says why).
    wkt: str
    #: The PROJ string (lossy: for display and old tools).
    proj: str
    problem: str = ""

    def crs(self) -> Any:
        """Return the pyproj CRS, or None when it could not be built."""
        if not self.wkt:
            return None
        import pyproj

        return pyproj.CRS.from_wkt(self.wkt)


def grid_mapping_names(value: Any) -> list[str]:
    """Return the variable names a ``grid_mapping`` attribute refers to (plain or CF 1.7 extended form)."""
    if not isinstance(value, str):
        return []
    tokens = value.split()
    if any(t.endswith(":") for t in tokens):
        return [t[:-1] for t in tokens if t.endswith(":")]
    return tokens[:1]


def _text(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return " ".join(str(v) for v in value.reshape(-1).tolist())
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value.item() if isinstance(value, np.generic) else value)


def grid_mappings(variables: Mapping[str, Any], used_by: list[tuple[str, Mapping[str, Any]]]
                  ) -> dict[str, GridMapping]:
    """Return the grid mappings named by ``used_by`` ((variable, its attributes) pairs), read from ``variables``.

    A name is looked up from the naming variable's group upward (CF 1.8 §2.7): ``/Grid/tas``'s
    ``grid_mapping = "crs"`` is ``Grid/crs``.
    """
    import pyproj

    out: dict[str, GridMapping] = {}
    for owner, attrs in used_by:
        group = owner.rsplit("/", 1)[0] if "/" in owner else ""
        for name in (resolve_in_group(variables, group, n) for n in grid_mapping_names(attrs.get("grid_mapping"))):
            var = variables.get(name)
            if var is None or name in out:
                continue
            params = {k: (v.tolist() if isinstance(v, np.ndarray) else v.item() if isinstance(v, np.generic) else v)
                      for k, v in var.attrs.items()}
            wkt = proj = problem = ""
            try:
                crs = pyproj.CRS.from_cf(params)
                wkt = crs.to_wkt()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", UserWarning)  # "you will lose information": it is for display
                    proj = crs.to_proj4() or ""
            except (pyproj.exceptions.CRSError, KeyError, TypeError, ValueError) as exc:
                problem = f"pyproj cannot build a CRS from {name!r}: {exc}"
            out[name] = GridMapping(
                name=name,
                grid_mapping_name=str(params.get("grid_mapping_name", "")),
                parameters=tuple((k, _text(v)) for k, v in var.attrs.items()),
                wkt=wkt,
                proj=proj,
                problem=problem,
            )
    return out


def metres_per_unit(units: str | None) -> float | None:
    """Return the factor from ``units`` to metres, or None when they are not a length (degrees)."""
    return _LENGTH_TO_METRES.get((units or "m").strip().lower())


def geographic(
    mapping: GridMapping, x: np.ndarray, y: np.ndarray, x_units: str | None, y_units: str | None
) -> tuple[np.ndarray, np.ndarray]:
    """Return (lat, lon) on the (y, x) grid of a projected or rotated grid, in degrees (WGS 84)."""
    import pyproj

    crs = mapping.crs()
    if crs is None:
        raise ValueError(mapping.problem or f"grid mapping {mapping.name!r} has no CRS")
    xs, ys = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if crs.is_projected:
        fx, fy = metres_per_unit(x_units), metres_per_unit(y_units)
        if fx is None or fy is None:
            raise ValueError(f"projection axes in {x_units!r}/{y_units!r}, not a length")
        xs, ys = xs * fx, ys * fy
    grid_x, grid_y = np.meshgrid(xs, ys)
    to_wgs84 = pyproj.Transformer.from_crs(crs, "EPSG:4326", always_xy=True)
    lon, lat = to_wgs84.transform(grid_x, grid_y)
    return np.asarray(lat, dtype=np.float64), np.asarray(lon, dtype=np.float64)


def cell_areas(
    mapping: GridMapping, x: np.ndarray, y: np.ndarray, x_units: str | None, y_units: str | None
) -> tuple[np.ndarray, str, str]:
    """Return (areas on the (y, x) grid, their units, how they were found) for a rotated or projected grid.

    A rotated-pole grid is a regular latitude-longitude grid on the rotated sphere, and rotation keeps
    areas: a cell's area is proportional to cos(rotated latitude), the weight a regular grid gets. A
    projected cell of |dx|·|dy| on the map covers |dx|·|dy| / k on the ellipsoid, k being the map's areal
    scale factor there (pyproj); each point's spacing is half the distance between its neighbours, so
    uneven axes are weighted by their own cells.
    """
    import pyproj

    crs = mapping.crs()
    if crs is None:
        raise ValueError(mapping.problem or f"grid mapping {mapping.name!r} has no CRS")
    xs, ys = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if mapping.grid_mapping_name == "rotated_latitude_longitude":
        weights = np.broadcast_to(np.cos(np.deg2rad(ys))[:, None], (len(ys), len(xs))).copy()
        return weights, "1", "cos(rotated latitude), proportional to the area of a rotated-pole cell"
    if not crs.is_projected:
        raise ValueError(f"grid mapping {mapping.grid_mapping_name!r} is neither rotated nor projected")
    fx, fy = metres_per_unit(x_units), metres_per_unit(y_units)
    if fx is None or fy is None:
        raise ValueError(f"projection axes in {x_units!r}/{y_units!r}, not a length")
    xs, ys = xs * fx, ys * fy
    grid_x, grid_y = np.meshgrid(xs, ys)
    lon, lat = pyproj.Transformer.from_crs(crs, "EPSG:4326", always_xy=True).transform(grid_x, grid_y)
    scale = np.asarray(pyproj.Proj(crs).get_factors(lon, lat).areal_scale, dtype=np.float64)
    if not np.all(np.isfinite(scale) & (scale > 0)):
        raise ValueError("pyproj gives no areal scale for part of the grid")
    map_area = np.abs(np.gradient(ys))[:, None] * np.abs(np.gradient(xs))[None, :]
    return map_area / scale, "m2", f"|dx|·|dy| / the areal scale factor of {mapping.name!r} (pyproj), in m2"

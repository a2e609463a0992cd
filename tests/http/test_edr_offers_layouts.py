"""OGC API - EDR: a grid is offered the EDR queries exactly when its X and Y are longitude and latitude.

Hypothesis writes grids as archives name and mark their horizontal coordinates — longitude and latitude known by
``standard_name`` alone (units ``degrees``), by CF units alone (``degrees_east``, ``degree_E``, ``degreeE`` …) or by
both, under names such as ``lon``, ``longitude``, ``nav_lon``, ``x``; projected ``x``/``y`` in km or m; rotated-pole
``rlon``/``rlat`` in degrees with ``grid_longitude`` — and each file says what it is. A CRS84 point is matched
against X and Y as they are, so only the first kind may be offered (the others would be answered with the wrong
cells); a grid that is offered offers the parameters on both axes and no other.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import netCDF4
import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from dstp.catalog.publish import publish
from dstp.catalog.registry import Catalog
from dstp.edr import collection
from dstp.metadata import dataset_details

EAST = ["degrees_east", "degree_east", "degree_E", "degrees_E", "degreeE", "degreesE"]
NORTH = ["degrees_north", "degree_north", "degree_N", "degrees_N", "degreeN", "degreesN"]


@st.composite
def layouts(draw: st.DrawFn) -> dict:
    kind = draw(st.sampled_from(["geographic", "projected", "rotated"]))
    if kind == "geographic":
        names = draw(st.sampled_from([("lon", "lat"), ("longitude", "latitude"), ("nav_lon", "nav_lat"), ("x", "y")]))
        marks = draw(st.sampled_from(["standard_name", "units", "both"]))
        i = draw(st.integers(0, len(EAST) - 1))
        attrs = [{"standard_name": std} if marks == "standard_name" else {"units": units} if marks == "units" else
                 {"standard_name": std, "units": units}
                 for std, units in (("longitude", EAST[i]), ("latitude", NORTH[i]))]
        for a in attrs:
            a.setdefault("units", "degrees")
    elif kind == "projected":
        names = draw(st.sampled_from([("x", "y"), ("xc", "yc")]))
        units = draw(st.sampled_from(["km", "m"]))
        attrs = [{"units": units, "standard_name": f"projection_{a}_coordinate"} for a in ("x", "y")]
    else:
        names = ("rlon", "rlat")
        attrs = [{"units": "degrees", "standard_name": f"grid_{a}"} for a in ("longitude", "latitude")]
    if draw(st.booleans()):  # many files say axis = "X"/"Y" too; it does not make a coordinate geographic
        attrs[0]["axis"], attrs[1]["axis"] = "X", "Y"
    return {"kind": kind, "names": names, "attrs": attrs, "descending": draw(st.booleans())}


def _write(folder: Path, layout: dict) -> Path:
    folder.mkdir(parents=True)
    path = folder / "grid.nc"
    (x, y), (xa, ya) = layout["names"], layout["attrs"]
    with netCDF4.Dataset(path, "w") as nc:
        nc.createDimension("time", None)
        nc.createDimension(y, 4)
        nc.createDimension(x, 5)
        t = nc.createVariable("time", "f8", ("time",))
        t.units, t.standard_name, t.calendar = "days since 2000-01-01", "time", "standard"
        t[:] = [0.0, 1.0]
        xv = nc.createVariable(x, "f8", (x,))
        xv.setncatts(xa)
        xv[:] = np.linspace(-8, 8, 5) * (100.0 if layout["kind"] == "projected" else 1.0)
        yv = nc.createVariable(y, "f8", (y,))
        yv.setncatts(ya)
        ys = np.linspace(-5, 5, 4) * (100.0 if layout["kind"] == "projected" else 1.0)
        yv[:] = ys[::-1] if layout["descending"] else ys
        v = nc.createVariable("tas", "f4", ("time", y, x))
        v.units = "K"
        v[:] = np.arange(40, dtype="f4").reshape(2, 4, 5)
        w = nc.createVariable("weights", "f8", (y,))  # on one horizontal axis only: no cell to pick
        w[:] = 1.0
    return path


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layout=layouts())
def test_a_grid_is_offered_the_queries_exactly_when_x_and_y_are_longitude_and_latitude(layout: dict) -> None:
    with tempfile.TemporaryDirectory(prefix="dstp-edr-offers-") as folder:
        root = Path(folder)
        publish([_write(root / "grid", layout)], "grid")
        catalog = Catalog.scan(root, index=root / "index.sqlite")
        try:
            assert not catalog.problems, catalog.problems
            details = dataset_details(catalog.get("grid"))
        finally:
            catalog.close()
    geographic = layout["kind"] == "geographic"
    described = collection(details, "http://127.0.0.1")
    assert list(described["data_queries"]) == (
        ["position", "radius", "area", "cube", "trajectory", "corridor"] if geographic else []), layout
    assert list(described["parameter_names"]) == (["tas"] if geographic else [])

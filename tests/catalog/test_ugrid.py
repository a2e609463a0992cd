"""UGRID meshes (CF-UGRID 1.0): structure stays structure, data are records with their location's coordinates,
and ``area_weight`` is each face's area.

The meshes are written with netCDF4 as LFRic, ICON, FESOM or ADCIRC write theirs: a 0-d ``mesh_topology``
variable that holds no value, ``face_node_connectivity`` with a fill value where triangles and quadrilaterals
share one array, ``start_index`` 0 or 1. The face areas are checked against formulas that owe nothing to
dstp's: Girard's theorem (a spherical polygon's area is R² times its angle excess) computed from the node
vectors, the whole sphere (4πR²) for a cubed sphere, and R²·Δλ·(sin φ₂ − sin φ₁) for latitude-longitude cells.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import netCDF4
import numpy as np
import pyarrow as pa
import pytest
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oracle import assert_same_records, run_sql

from dstp.catalog.publish import draft_descriptor, publish
from dstp.catalog.registry import Catalog
from dstp.catalog.ugrid import EARTH_RADIUS
from dstp.errors import QueryError, UnknownColumnError
from dstp.query.execute import QueryExecution, prepare_query
from dstp.settings import Settings

SETTINGS = Settings(batch_rows=16)


def answer(catalog: Catalog, sql: str) -> pa.Table:
    prepared = prepare_query(sql, catalog, SETTINGS)
    return pa.Table.from_batches(list(QueryExecution(prepared, SETTINGS).batches()), schema=prepared.schema)


def cubed_sphere(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return (lon, lat, faces) of an equiangular gnomonic cubed sphere of 6·n² quadrilaterals, nodes shared."""
    t = np.tan(np.linspace(-np.pi / 4, np.pi / 4, n + 1))
    points: dict[tuple[float, float, float], int] = {}
    xyz: list[np.ndarray] = []
    faces = []
    for axis in range(3):
        for sign in (-1.0, 1.0):
            def node(i: int, j: int, axis: int = axis, sign: float = sign) -> int:
                p = np.empty(3)
                p[axis] = sign
                p[(axis + 1) % 3], p[(axis + 2) % 3] = t[i], t[j]
                p /= np.linalg.norm(p)
                key = tuple(np.round(p, 12))
                if key not in points:
                    points[key] = len(xyz)
                    xyz.append(p)
                return points[key]

            for i in range(n):
                for j in range(n):
                    faces.append([node(i, j), node(i + 1, j), node(i + 1, j + 1), node(i, j + 1)])
    v = np.array(xyz)
    return np.degrees(np.arctan2(v[:, 1], v[:, 0])), np.degrees(np.arcsin(np.clip(v[:, 2], -1, 1))), np.array(faces)


def girard_areas(lon: np.ndarray, lat: np.ndarray, faces: list[list[int]], radius: float) -> np.ndarray:
    """Return R²·(Σ interior angles − (n − 2)π) of each convex face: Girard's theorem, from the node vectors."""
    lam, phi = np.radians(lon), np.radians(lat)
    v = np.stack([np.cos(phi) * np.cos(lam), np.cos(phi) * np.sin(lam), np.sin(phi)], axis=1)
    out = []
    for face in faces:
        p = v[face]
        total = 0.0
        for k in range(len(face)):
            a, b, c = p[k - 1], p[k], p[(k + 1) % len(face)]
            ta, tc = a - (a @ b) * b, c - (c @ b) * b
            total += np.arccos(np.clip(ta @ tc / np.linalg.norm(ta) / np.linalg.norm(tc), -1, 1))
        out.append(radius**2 * (total - (len(face) - 2) * np.pi))
    return np.array(out)


def write_mesh(path: Path, lon: np.ndarray, lat: np.ndarray, faces: list[list[int]], *, start_index: int = 0,
               fill: int | None = -999, declare_fill: bool = True, steps: int = 2, seed: int = 0,
               edges: bool = True, projected: bool = False, topology_value: bool = False) -> dict[str, np.ndarray]:
    """Write a UGRID 1.0 file: 0-d topology holding no value, mixed faces, data on faces, nodes and edges.

    Returns the arrays written, for the oracle.
    """
    rng = np.random.default_rng(seed)
    width = max(len(f) for f in faces)
    pad = fill if fill is not None else -1
    conn = np.array([[k + start_index for k in f] + [pad] * (width - len(f)) for f in faces])
    centre_lon = np.array([np.degrees(np.angle(np.exp(1j * np.radians(lon[f])).mean())) for f in faces])
    centre_lat = np.array([lat[f].mean() for f in faces])
    edge_pairs = sorted({tuple(sorted((f[k], f[(k + 1) % len(f)]))) for f in faces for k in range(len(f))})
    out = {"face_value": np.round(rng.uniform(250, 300, (steps, len(faces))), 2),
           "node_value": np.round(rng.uniform(0, 5, (steps, len(lon))), 2),
           "edge_value": np.round(rng.uniform(-1, 1, (steps, len(edge_pairs))), 3),
           "face_x": centre_lon, "face_y": centre_lat, "node_x": lon, "node_y": lat}
    with netCDF4.Dataset(path, "w") as nc:
        nc.Conventions = "CF-1.8 UGRID-1.0"
        nc.createDimension("nMesh2d_node", len(lon))
        nc.createDimension("nMesh2d_face", len(faces))
        nc.createDimension("nMesh2d_edge", len(edge_pairs))
        nc.createDimension("nMesh2d_face_max_nodes", width)
        nc.createDimension("Two", 2)
        nc.createDimension("time", steps)
        mesh = nc.createVariable("Mesh2d", "i4", ())  # holds no value: only its attributes matter
        if topology_value:  # some writers give it one (0 or 1)
            mesh.assignValue(0)
        mesh.cf_role, mesh.long_name, mesh.topology_dimension = "mesh_topology", "Topology of the mesh", 2
        mesh.node_coordinates, mesh.face_coordinates = "Mesh2d_node_x Mesh2d_node_y", "Mesh2d_face_x Mesh2d_face_y"
        mesh.face_node_connectivity, mesh.face_dimension = "Mesh2d_face_nodes", "nMesh2d_face"
        if edges:
            mesh.edge_node_connectivity, mesh.edge_dimension = "Mesh2d_edge_nodes", "nMesh2d_edge"
        kwargs = {"fill_value": fill} if declare_fill and fill is not None else {}
        c = nc.createVariable("Mesh2d_face_nodes", "i4", ("nMesh2d_face", "nMesh2d_face_max_nodes"), **kwargs)
        c.cf_role, c.start_index = "face_node_connectivity", np.int32(start_index)
        c[:] = conn
        if edges:
            e = nc.createVariable("Mesh2d_edge_nodes", "i4", ("nMesh2d_edge", "Two"))
            e.cf_role, e.start_index = "edge_node_connectivity", np.int32(start_index)
            e[:] = np.array(edge_pairs) + start_index
        for name, values, std, units in (("node_x", lon, "longitude", "degrees_east"),
                                         ("node_y", lat, "latitude", "degrees_north"),
                                         ("face_x", centre_lon, "longitude", "degrees_east"),
                                         ("face_y", centre_lat, "latitude", "degrees_north")):
            where = name.split("_")[0]
            v = nc.createVariable(f"Mesh2d_{name}", "f8", (f"nMesh2d_{where}",))
            if projected:
                v.standard_name, v.units = f"projection_{name[-1]}_coordinate", "m"
            else:
                v.standard_name, v.units = std, units
            v[:] = values
        t = nc.createVariable("time", "f8", ("time",))
        t.units, t.standard_name = "hours since 2020-01-01", "time"
        t[:] = np.arange(steps) * 6.0
        for name, location, dim in (("face_value", "face", "nMesh2d_face"), ("node_value", "node", "nMesh2d_node"),
                                    ("edge_value", "edge", "nMesh2d_edge")):
            if location == "edge" and not edges:
                continue
            v = nc.createVariable(name, "f8", ("time", dim))
            v.mesh, v.location, v.units = "Mesh2d", location, "K"
            if location == "face":
                v.coordinates = "Mesh2d_face_x Mesh2d_face_y"  # node data say where they are by mesh/location only
            v[:] = out[name]
    return out


def mixed_faces(quads: np.ndarray, split: list[bool]) -> list[list[int]]:
    """Return the quadrilaterals with those marked split into two triangles (triangles and quads in one array)."""
    out: list[list[int]] = []
    for quad, cut in zip(quads.tolist(), split):
        out += [quad[:3], [quad[0], quad[2], quad[3]]] if cut else [quad]
    return out


def _scan(folder: Path, path: Path, dataset_id: str = "mesh") -> Catalog:
    publish([path], dataset_id)
    catalog = Catalog.scan(folder)
    assert not catalog.problems, catalog.problems
    return catalog


def test_a_mesh_with_a_valueless_topology_publishes_and_its_records_are_xarrays(tmp_path: Path) -> None:
    lon, lat, quads = cubed_sphere(2)
    faces = mixed_faces(quads, [k % 3 == 0 for k in range(len(quads))])
    path = tmp_path / "lfric.nc"
    write_mesh(path, lon, lat, faces, start_index=1)
    desc = draft_descriptor([path], "mesh")
    variables = {c.variable for c in desc.coordinates} | {a.variable for a in desc.attributes}
    assert not variables & {"Mesh2d", "Mesh2d_face_nodes", "Mesh2d_edge_nodes"}  # structure, not columns
    catalog = _scan(tmp_path, path)
    try:
        with xr.open_dataset(path) as nc:
            truth = nc.load()
        truth = truth.set_coords(["Mesh2d_node_x", "Mesh2d_node_y", "Mesh2d_face_x", "Mesh2d_face_y"])
        face = truth[["face_value"]].to_dataframe().reset_index()
        node = truth[["node_value"]].to_dataframe().reset_index()
        edge = truth[["edge_value"]].to_dataframe().reset_index()
        for frame in (face, node, edge):
            frame["time"] = frame["time"].astype("datetime64[us]")
        for sql, frame in (
            ("select time, Mesh2d_face_x, Mesh2d_face_y, face_value from mesh where Mesh2d_face_y > 10", face),
            ("select time, nMesh2d_face, Mesh2d_face_x, Mesh2d_face_y, face_value from mesh where face_value > 280",
             face),
            ("select time, Mesh2d_node_x, Mesh2d_node_y, node_value from mesh where node_value < 2", node),
            ("select time, edge_value from mesh where edge_value > 0", edge),
        ):
            assert_same_records(answer(catalog, sql), run_sql(frame, sql, "mesh"))
        # select *: the faces' records with their coordinates; no topology, no connectivity, no node column
        assert set(answer(catalog, "select * from mesh limit 1").column_names) == {
            "nMesh2d_face", "time", "Mesh2d_face_x", "Mesh2d_face_y", "face_value"}
        with pytest.raises(QueryError, match=r"column face_value is on dimension 'nMesh2d_face' of mesh 'Mesh2d' faces "
                                             r"and column Mesh2d_node_x on dimension 'nMesh2d_node' of mesh 'Mesh2d' "
                                             r"nodes; these dimensions are not tied to each other"):
            answer(catalog, "select Mesh2d_node_x, face_value from mesh")
    finally:
        catalog.close()


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 6), start_index=st.sampled_from([0, 1]), fill=st.sampled_from([-999, -1, None]),
       declare_fill=st.booleans(), reverse=st.booleans(), split_seed=st.integers(0, 2**16),
       topology_value=st.booleans())
def test_face_areas_of_a_cubed_sphere_are_girards_and_cover_the_sphere(
        n: int, start_index: int, fill: int | None, declare_fill: bool, reverse: bool, split_seed: int,
        topology_value: bool) -> None:
    lon, lat, quads = cubed_sphere(n)
    split = list(np.random.default_rng(split_seed).random(len(quads)) < 0.5)
    faces = mixed_faces(quads, split)
    if reverse:  # clockwise faces: UGRID says anticlockwise, files do not always
        faces = [f[::-1] for f in faces]
    if fill == -1 and start_index == 1:
        fill = 0  # below start_index 1, as files that pad 1-based faces with 0 do
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        path = folder / "mesh.nc"
        written = write_mesh(path, lon, lat, faces, start_index=start_index, fill=fill,
                             declare_fill=declare_fill and fill is not None, edges=False,
                             topology_value=topology_value)
        catalog = _scan(folder, path)
        try:
            table = answer(catalog, "select nMesh2d_face, area_weight from mesh "
                                    "where time = (select min(time) from mesh) order by nMesh2d_face")
            areas = table.column("area_weight").to_numpy()
            want = girard_areas(lon, lat, faces, EARTH_RADIUS)
            np.testing.assert_allclose(areas, want, rtol=1e-9)
            assert abs(areas.sum() / (4 * np.pi * EARTH_RADIUS**2) - 1) < 1e-12
            mean = answer(catalog, "select weighted_avg(face_value, area_weight) as m from mesh").column("m")[0].as_py()
            values = written["face_value"]
            assert mean == pytest.approx((values * want).sum() / (want.sum() * values.shape[0]), rel=1e-12)
        finally:
            catalog.close()


def test_face_areas_of_a_latitude_longitude_mesh_are_its_cells(tmp_path: Path) -> None:
    """1° cells: a cell's great-circle edges and its parallels bound areas within 5.1e-5 of each other."""
    lons, lats = np.arange(-20.0, 21.0), np.arange(40.0, 91.0)  # up to the pole: its row of cells are triangles
    grid_lon, grid_lat = np.meshgrid(lons, lats)
    lon, lat = grid_lon.ravel(), grid_lat.ravel()
    number = np.arange(lon.size).reshape(grid_lon.shape)
    faces, exact = [], []
    for j in range(len(lats) - 1):
        for i in range(len(lons) - 1):
            face = [number[j, i], number[j, i + 1], number[j + 1, i + 1], number[j + 1, i]]
            if lats[j + 1] == 90:
                face = face[:3]  # the pole is one node
            faces.append(face)
            exact.append(EARTH_RADIUS**2 * np.radians(1.0) *
                         (np.sin(np.radians(lats[j + 1])) - np.sin(np.radians(lats[j]))))
    pole = number[-1, 0]
    faces = [[pole if lat[k] == 90 else k for k in f] for f in faces]
    path = tmp_path / "latlon.nc"
    write_mesh(path, lon, lat, faces, edges=False)
    catalog = _scan(tmp_path, path)
    try:
        areas = answer(catalog, "select nMesh2d_face, area_weight from mesh where time = (select min(time) from mesh) "
                                "order by nMesh2d_face").column("area_weight").to_numpy()
        np.testing.assert_allclose(areas, exact, rtol=5.1e-5)
        # Girard's arccos loses ~1e-8 on the small cells by the pole (its values differ along a row; dstp's do not)
        np.testing.assert_allclose(areas, girard_areas(lon, lat, faces, EARTH_RADIUS), rtol=1e-7)
    finally:
        catalog.close()


def test_a_mesh_without_geographic_nodes_has_no_area_weight_and_says_why(tmp_path: Path) -> None:
    lon, lat, quads = cubed_sphere(1)
    path = tmp_path / "adcirc.nc"
    write_mesh(path, lon * 1000, lat * 1000, quads.tolist(), projected=True, edges=False)
    catalog = _scan(tmp_path, path)
    try:
        with pytest.raises(UnknownColumnError, match=r"area_weight.*the node coordinates 'Mesh2d_node_x', "
                                                     r"'Mesh2d_node_y' of mesh 'Mesh2d' are not longitude and latitude"):
            answer(catalog, "select weighted_avg(face_value, area_weight) from mesh")
    finally:
        catalog.close()


def test_mpas_area_cell_is_the_area_weight(tmp_path: Path) -> None:
    path = tmp_path / "mpas.nc"
    rng = np.random.default_rng(2)
    area = rng.uniform(1e9, 3e9, 7)
    with netCDF4.Dataset(path, "w") as nc:
        nc.on_a_sphere, nc.sphere_radius = "YES", 6371229.0
        nc.createDimension("nCells", 7)
        nc.createDimension("Time", 2)
        for name, values, units in (("latCell", rng.uniform(-1, 1, 7), "radians"),
                                    ("lonCell", rng.uniform(0, 6, 7), "radians"), ("areaCell", area, "m^2")):
            v = nc.createVariable(name, "f8", ("nCells",))
            v.units = units
            v[:] = values
        v = nc.createVariable("temperature", "f8", ("Time", "nCells"))
        v.units = "K"
        v[:] = rng.uniform(250, 300, (2, 7))
        values = v[:].data
    publish([path], "mpas")
    catalog = Catalog.scan(tmp_path)
    try:
        got = answer(catalog, "select weighted_avg(temperature, area_weight) as m from mpas").column("m")[0].as_py()
        assert got == pytest.approx((values * area).sum() / (area.sum() * 2), rel=1e-12)
    finally:
        catalog.close()


def test_a_descriptor_naming_the_topology_as_a_coordinate_gets_a_message_without_none(tmp_path: Path) -> None:
    lon, lat, quads = cubed_sphere(1)
    write_mesh(tmp_path / "mesh.nc", lon, lat, quads.tolist(), edges=False)
    (tmp_path / "old.dstp.xml").write_text("""<?xml version="1.0"?>
<dataset xmlns="urn:dstp:descriptor:1" id="old" version="1"><title>old</title>
  <files glob="mesh.nc"/>
  <coordinates>
    <coordinate name="time" dimension="time" axis="T"/>
    <coordinate name="nMesh2d_face" dimension="nMesh2d_face"/>
    <coordinate name="Mesh2d"/>
  </coordinates>
  <attributes default-grid="time nMesh2d_face">
    <attribute name="face_value" dimensions="time nMesh2d_face"/>
  </attributes>
</dataset>""")
    catalog = Catalog.scan(tmp_path)
    try:
        [problem] = catalog.problems
        assert "None" not in problem.message
        assert ("scalar coordinate 'Mesh2d' holds no value: variable 'Mesh2d' is the mesh_topology of a mesh (UGRID)"
                in problem.message)
        assert 'remove <coordinate name="Mesh2d"> from the descriptor' in problem.message
    finally:
        catalog.close()


def test_records_only_on_nodes_get_no_cos_latitude_weight(tmp_path: Path) -> None:
    lon, lat, quads = cubed_sphere(2)
    path = tmp_path / "nodes.nc"
    write_mesh(path, lon, lat, quads.tolist(), edges=False)
    with netCDF4.Dataset(path, "a") as nc:
        nc.renameVariable("face_value", "unused")  # keep the file valid, but publish only node data below
    (tmp_path / "nodes.dstp.xml").write_text("""<?xml version="1.0"?>
<dataset xmlns="urn:dstp:descriptor:1" id="nodes" version="1"><title>nodes</title>
  <files glob="nodes.nc"/>
  <coordinates>
    <coordinate name="time" dimension="time" axis="T"/>
    <coordinate name="node" variable="nMesh2d_node" dimension="nMesh2d_node"/>
    <coordinate name="lat" variable="Mesh2d_node_y" dimensions="nMesh2d_node" axis="Y" units="degrees_north">
      <cf name="standard_name">latitude</cf>
    </coordinate>
  </coordinates>
  <attributes default-grid="time nMesh2d_node">
    <attribute name="node_value" dimensions="time nMesh2d_node"/>
  </attributes>
</dataset>""")
    catalog = Catalog.scan(tmp_path)
    try:
        assert not catalog.problems, catalog.problems
        with pytest.raises(UnknownColumnError, match=r"area_weight.*the records are on a mesh's nodes, and UGRID gives "
                                                     r"only faces an area"):
            answer(catalog, "select weighted_avg(node_value, area_weight) from nodes")
    finally:
        catalog.close()

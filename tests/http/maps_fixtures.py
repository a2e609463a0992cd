"""A server for the map tests: ccm3, ocean restricted to the group ``polar``, rotated-pole and projected grids.

``rot`` has 2-D lat/lon and its grid mapping; ``rotgm`` the same grid with only its grid mapping (the catalog
derives lat/lon); ``rotonly`` neither; ``polar`` a polar stereographic grid in metres and ``polarkm`` the same
in km; ``rect`` a 360_day rectilinear grid with two levels, ``stations`` a CF timeSeries table of three stations and ``mesh`` a UGRID mesh's nodes
(:mod:`map_archives`).

alice has a token in ``polar``, bob one without groups; anonymous reading is on.
The oracle helpers read the files with xarray (each file on its own) and colour
with matplotlib, independently of dstp's renderer.
"""

from __future__ import annotations

import io
import shutil
from pathlib import Path
from typing import Iterator

import httpx
import netCDF4
import numpy as np
import pytest
from PIL import Image

from builders import rotated_pole
from map_archives import write_curv, write_mesh, write_polar, write_rect, write_stations
from dstp.auth import TokenStore
from dstp.catalog.publish import publish
from dstp.server import DstpServer
from dstp.settings import Settings


def serve(catalog_root: Path, root: Path) -> Iterator[tuple[DstpServer, dict[str, str]]]:
    shutil.copytree(catalog_root / "ccm3", root / "ccm3")
    shutil.copytree(catalog_root / "ocean", root / "ocean")
    xml = root / "ocean" / "ocean.dstp.xml"
    xml.write_text(xml.read_text().replace('<access policy="public"/>',
                                           '<access policy="restricted" groups="polar"/>'))
    (root / "rot").mkdir()
    rotated_pole(root / "rot" / "rot.nc", "tas",
                 lambda lat, lon: np.stack([250 + lat + 0.1 * lon, 260 + lat - 0.1 * lon]),
                 rlat=np.linspace(-10, 10, 30), rlon=np.linspace(-12, 12, 36), times=[0, 1])
    publish([root / "rot" / "rot.nc"], "rot")
    # the same grid without its 2-D latitude/longitude: its axes are rotated degrees, not geographic ones
    (root / "rotonly").mkdir()
    with netCDF4.Dataset(root / "rot" / "rot.nc") as src, netCDF4.Dataset(root / "rotonly" / "rotonly.nc", "w") as nc:
        for name in ("time", "rlat", "rlon"):
            nc.createDimension(name, None if name == "time" else len(src.dimensions[name]))
        for name in ("time", "rlat", "rlon", "tas"):
            v = src[name]
            out = nc.createVariable(name, v.dtype, v.dimensions)
            out.setncatts({k: v.getncattr(k) for k in v.ncattrs() if k not in ("coordinates", "grid_mapping")})
            out[:] = v[:]
    publish([root / "rotonly" / "rotonly.nc"], "rotonly")
    # the same grid with its grid mapping but without 2-D latitude/longitude
    (root / "rotgm").mkdir()
    with netCDF4.Dataset(root / "rot" / "rot.nc") as src, netCDF4.Dataset(root / "rotgm" / "rotgm.nc", "w") as nc:
        for name in ("time", "rlat", "rlon"):
            nc.createDimension(name, None if name == "time" else len(src.dimensions[name]))
        for name in ("time", "rlat", "rlon", "rotated_pole", "tas"):
            v = src[name]
            out = nc.createVariable(name, v.dtype, v.dimensions)
            out.setncatts({k: v.getncattr(k) for k in v.ncattrs() if k != "coordinates"})
            out[:] = v[:]
    publish([root / "rotgm" / "rotgm.nc"], "rotgm")
    write_polar(root / "polar")
    write_polar(root / "polarkm", km=True)
    write_stations(root / "stations")
    write_rect(root / "rect")
    write_mesh(root / "mesh")
    write_curv(root / "curv")
    store = root / "tokens.json"
    tokens = TokenStore(store)
    issued = {"alice": tokens.create("alice", ["polar"]).secret, "bob": tokens.create("bob").secret}
    settings = Settings(catalog_root=root, port=0, http_port=0, data_port=-1, udt_port=-1,
                        token_store=store, allow_anonymous="true")
    with DstpServer(settings) as srv:
        yield srv, issued


def client(srv: DstpServer, token: str = "") -> httpx.Client:
    assert srv.endpoints is not None
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=f"http://{srv.endpoints.http}", headers=headers, timeout=60)


def rgba(body: bytes) -> np.ndarray:
    image = Image.open(io.BytesIO(body))
    assert image.format == "PNG"
    return np.asarray(image.convert("RGBA"))


def oracle_colour(values: np.ndarray, colormap: str, vmin: float, vmax: float) -> np.ndarray:
    from matplotlib import colormaps

    return np.asarray(colormaps[colormap]((np.asarray(values, dtype=np.float64) - vmin) / (vmax - vmin),
                                          bytes=True))


@pytest.fixture(scope="module")
def maps_server(catalog_root: Path, tmp_path_factory: pytest.TempPathFactory
                ) -> Iterator[tuple[DstpServer, dict[str, str]]]:
    yield from serve(catalog_root, tmp_path_factory.mktemp("maps"))

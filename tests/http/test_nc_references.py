"""netCDF answers name only variables they hold (issue 32, item 8).

``/query?format=nc`` wrote ``grid_mapping = "crs"`` and ``coordinates = "…"`` for variables the file did not
have; griddap ``.nc`` dropped ``grid_mapping``. Every netCDF answer is opened with netCDF4 and with xarray
(``decode_coords="all"``, which resolves the references) and compared with the source files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import httpx
import netCDF4
import numpy as np
import pyproj
import pytest
import xarray as xr
from hypothesis import HealthCheck, given, settings, strategies as st

from dstp.catalog.publish import publish
from dstp.server import DstpServer
from dstp.settings import Settings

from facade_archives import Layout, model_archive

REFERENCES = ("coordinates", "grid_mapping", "bounds", "ancillary_variables", "cell_measures", "climatology")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[httpx.Client, Path]]:
    root = tmp_path_factory.mktemp("nc-references")
    publish(model_archive(root / "grid", Layout(calendar="noleap", lon="west")), "grid")
    srv = DstpServer(Settings(catalog_root=root, port=0, http_port=0, data_port=-1, udt_port=-1))
    srv.start()
    assert srv.endpoints is not None
    with httpx.Client(base_url=f"http://{srv.endpoints.http}", timeout=30) as c:
        yield c, root
    srv.stop()


def dangling(path: Path) -> list[str]:
    """Return every ``variable:attribute -> name`` whose name the file does not hold."""
    out = []
    with netCDF4.Dataset(path) as nc:
        for var in nc.variables.values():
            for key in REFERENCES:
                if key in var.ncattrs():
                    text = str(var.getncattr(key)).replace(":", " ")
                    out += [f"{var.name}:{key} -> {n}" for n in text.split()
                            if n not in nc.variables and n not in ("area", "volume")]
    return out


def source_crs(root: Path) -> tuple[dict, int]:
    with netCDF4.Dataset(sorted((root / "grid").glob("*.nc"))[0]) as nc:
        crs = nc["crs"]
        return {k: crs.getncattr(k) for k in crs.ncattrs()}, int(crs[...])


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(extra=st.lists(st.sampled_from(["tas", "forecast_reference_time"]), unique=True))
def test_query_nc_names_only_variables_it_holds(site: tuple[httpx.Client, Path], tmp_path: Path,
                                                extra: list[str]) -> None:
    http, root = site
    columns = ["time", "lat", "lon", *extra] if extra else ["time", "lat", "lon", "tas"]
    r = http.get("/query", params={"sql": f"select {', '.join(columns)} from grid", "format": "nc"})
    assert r.status_code == 200, r.text
    path = tmp_path / f"q{len(extra)}.nc"
    path.write_bytes(r.content)
    assert dangling(path) == []
    with xr.open_dataset(path, decode_coords="all") as got, \
            xr.open_mfdataset(sorted((root / "grid").glob("*.nc")), decode_coords="all", combine="nested",
                              concat_dim="time", data_vars="minimal", coords="minimal", compat="override") as want:
        if "tas" in columns:
            np.testing.assert_array_equal(got["tas"].values, want["tas"].values)
            params, _ = source_crs(root)
            assert got["tas"].encoding.get("grid_mapping") == "crs"
            assert pyproj.CRS.from_wkt(got["crs"].attrs["crs_wkt"]) == pyproj.CRS.from_cf(params)


def test_griddap_nc_keeps_the_grid_mapping(site: tuple[httpx.Client, Path], tmp_path: Path) -> None:
    http, root = site
    r = http.get("/erddap/griddap/grid.nc?tas[0:1:2][0:1:4][0:1:5]")
    assert r.status_code == 200, r.text
    path = tmp_path / "g.nc"
    path.write_bytes(r.content)
    assert dangling(path) == []
    params, value = source_crs(root)
    with netCDF4.Dataset(path) as nc:
        assert nc["tas"].grid_mapping == "crs"
        crs = nc["crs"]
        assert {k: crs.getncattr(k) for k in params} == params and int(crs[...]) == value
    with xr.open_dataset(path, decode_coords="all") as got:
        assert "crs" in got.coords and got["tas"].encoding["grid_mapping"] == "crs"

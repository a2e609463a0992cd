"""Publishing: descriptors drafted from CF/ACDD metadata, checked against what the files say."""

from __future__ import annotations

from pathlib import Path

import netCDF4
import pytest

import builders
from dstp.catalog.descriptor import read_descriptor
from dstp.catalog.publish import coordinate_axis, draft_descriptor, publish
from dstp.catalog.registry import Catalog
from dstp.errors import CatalogError


def test_draft_recognises_cf_roles(tmp_path: Path) -> None:
    d = draft_descriptor(builders.edge_station(tmp_path / "s"), "station")
    coords = {c.name: c for c in d.coordinates}
    assert coords["time"].axis == "T" and coords["time"].calendar == "standard"
    assert coords["lat"].axis == "Y" and coords["lon"].axis == "X"
    assert coords["height"].dimension is None and coords["height"].axis == "Z"  # scalar coordinate
    assert coords["band"].axis == "other" and coords["band"].dimension == "band"  # index only
    names = [a.name for a in d.attributes]
    assert names == ["t2m", "d2m", "spectrum"]  # no lat_bnds (bounds), no crs (grid mapping)
    assert d.default_grid == ("time", "lat", "lon")
    assert d.title.startswith("Edge cases") and d.license == "CC0-1.0"
    assert {k.name for k in d.correlation_keys} == {"time", "latitude", "longitude"}


def test_draft_finds_axes_by_attribute_and_aggregates_in_time_order(tmp_path: Path) -> None:
    files = builders.edge_axes(tmp_path / "a")
    d = draft_descriptor(files, "axes")
    coords = {c.name: c for c in d.coordinates}
    assert coords["latitude"].dimension == "y" and coords["latitude"].axis == "Y"
    assert coords["xc"].axis == "X" and coords["step"].axis == "T" and coords["step"].calendar == "360_day"
    assert d.aggregate == "step" and d.files_glob == "*.nc"
    assert {k.name: k.column for k in d.correlation_keys} == {"time": "step", "latitude": "latitude", "x": "xc"}
    path = publish(files, "axes")
    ds = next(iter(Catalog.scan(tmp_path)))
    assert [f.path.name for f in ds.files] == ["a_first.nc", "b_second.nc"]  # by first time, not by name
    assert ds.dimensions["step"].size == 12
    assert read_descriptor(path).aggregate == "step"


@pytest.mark.parametrize(
    "name, attrs, axis",
    [
        ("t", {"units": "days since 2000-01-01"}, "T"),
        ("whatever", {"standard_name": "latitude"}, "Y"),
        ("g", {"units": "degrees_east"}, "X"),
        ("p", {"units": "hPa"}, "Z"),
        ("depth", {"positive": "down"}, "Z"),
        ("lev", {}, "Z"),
        ("q", {"axis": "x"}, "X"),
        ("temperature", {"units": "K"}, None),
    ],
)
def test_coordinate_axis(name, attrs, axis) -> None:
    assert coordinate_axis(name, attrs) == axis


def test_publish_refuses_to_overwrite_and_to_catch_strangers(tmp_path: Path) -> None:
    files = builders.edge_station(tmp_path)
    publish(files, "station")
    with pytest.raises(CatalogError, match="overwrite"):
        publish(files, "station")
    # a stranger file matching a drafted multi-file glob would silently join the dataset
    files2 = builders.edge_axes(tmp_path / "mixed")
    (tmp_path / "mixed" / "zz_other.nc").write_bytes(files2[0].read_bytes())
    with pytest.raises(CatalogError, match="also match"):
        publish(files2, "axes")


def test_publish_needs_numeric_data(tmp_path: Path) -> None:
    path = tmp_path / "empty.nc"
    with netCDF4.Dataset(path, "w") as nc:
        nc.createDimension("x", 3)
        nc.createVariable("x", "f8", ("x",))
    with pytest.raises(CatalogError, match="no numeric data variables"):
        draft_descriptor([path], "empty")


def test_catalog_reports_descriptor_file_mismatch(tmp_path: Path) -> None:
    files = builders.edge_station(tmp_path / "s")
    path = publish(files, "station")
    path.write_text(path.read_text().replace('name="t2m" dimensions="time lat lon"',
                                             'name="t2m" dimensions="time lon lat"'))
    catalog = Catalog.scan(tmp_path)
    assert len(catalog) == 0
    assert "descriptor says dimensions time lon lat" in str(catalog.problems[0])

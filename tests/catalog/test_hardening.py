"""Hostile files: a dimension its file cannot back, a published file swapped for a symlink after start.

Findings of issue 13: a 10⁹-point dimension with no coordinate variable made the server allocate
7.45 GiB at start (its index coordinate, ``arange``) and serve nothing; a file replaced by a symlink to
/etc/passwd after the server started was served (bulk download) — the symlink check ran at scan only.
"""

from __future__ import annotations

import os
import resource
import shutil
import time
from pathlib import Path

import grpc
import netCDF4
import numpy as np
import pytest

import dstp
from dstp.catalog.registry import Catalog
from dstp.proto import dstp_pb2 as pb
from dstp.proto import dstp_pb2_grpc as pb_grpc
from dstp.server import DstpServer
from dstp.settings import Settings

HUGE = 10**9

DESCRIPTOR = """<?xml version="1.0"?>
<dataset xmlns="urn:dstp:descriptor:1" id="{id}" version="1">
  <title>{id}</title>
  <files glob="{glob}"/>
  <coordinates><coordinate name="x" dimension="x"/></coordinates>
  <attributes default-grid="x"><attribute name="v" dimensions="x"/></attributes>
</dataset>
"""


def _dimension_bomb(folder: Path, size: int) -> Path:
    """A netCDF-4 file of a few kilobytes declaring a ``size``-point dimension, with no coordinate variable."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "bomb.nc"
    with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        nc.createDimension("x", size)
        nc.createVariable("v", "f4", ("x",), zlib=True, chunksizes=(1024,))  # never written: no chunk stored
    (folder / "bomb.dstp.xml").write_text(DESCRIPTOR.format(id=folder.name, glob="bomb.nc"))
    return path


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def test_a_dimension_the_file_cannot_back_is_refused_before_anything_is_allocated(tmp_path: Path) -> None:
    path = _dimension_bomb(tmp_path / "bomb", HUGE)
    assert path.stat().st_size < 100_000
    before = _peak_rss()
    started = time.monotonic()
    catalog = Catalog.scan(tmp_path)
    try:
        assert time.monotonic() - started < 30
        assert _peak_rss() - before < 2**30  # not the 7.45 GiB of arange(10⁹)
        assert len(catalog) == 0
        [problem] = catalog.problems
        assert "declares 1,000,000,000 points" in problem.message and "bomb.nc" in problem.message
    finally:
        catalog.close()


def test_an_honest_dimension_of_the_same_file_kind_is_served(tmp_path: Path) -> None:
    _dimension_bomb(tmp_path / "small", 5000)  # small enough to be believed whatever the file holds
    catalog = Catalog.scan(tmp_path)
    try:
        assert catalog.problems == [] and catalog.get("small").dimensions["x"].size == 5000
    finally:
        catalog.close()


@pytest.fixture()
def private_ccm3(tmp_path: Path, catalog_root: Path) -> Path:
    root = tmp_path / "catalog"
    shutil.copytree(catalog_root / "ccm3", root / "ccm3")
    return root


def _swap_for_symlink(path: Path, target: str) -> None:
    moved = path.with_suffix(".moved")
    path.rename(moved)
    os.symlink(target, path)


@pytest.mark.parametrize("direct_chunks", [False, True], ids=["netcdf-c", "chunk-reader"])
def test_a_published_file_swapped_for_a_symlink_is_not_served(private_ccm3: Path, direct_chunks: bool) -> None:
    settings = Settings(catalog_root=private_ccm3, port=0, http_port=-1, data_port=-1, udt_port=-1, open_files=1,
                        direct_chunks=direct_chunks)
    victim = private_ccm3 / "ccm3" / "ccm3_1990-01.nc"
    with DstpServer(settings) as srv, dstp.connect(srv.endpoints.grpc) as c:
        assert c.query("select temperature from ccm3 limit 1").num_rows == 1
        _swap_for_symlink(victim, "/etc/passwd")
        # The bulk-file path: opened at OpenFile and again when the ticket is redeemed.
        with grpc.insecure_channel(srv.endpoints.grpc) as channel, pytest.raises(grpc.RpcError) as info:
            pb_grpc.DstpStub(channel).OpenFile(pb.OpenFileRequest(dataset="ccm3", file=victim.name))
        assert dict(info.value.trailing_metadata())["dstp-error-code"] == "bad_data_file"
        assert "replaced" in info.value.details() and "root:" not in info.value.details()
        with pytest.raises(dstp.DstpError) as err:
            c.get("ccm3", victim.name, private_ccm3.parent / "copy.nc")
        assert "root:" not in str(err.value)
        assert not (private_ccm3.parent / "copy.nc").exists()
        # The netCDF path: the file is out of the handle cache (open_files=1) and is reopened by name.
        c.query("select temperature from ccm3 where time >= '1990-06-01' limit 1")
        with pytest.raises(dstp.DataFileError, match="replaced|changed"):
            c.query("select temperature from ccm3")
        assert c.query("select temperature from ccm3 where time >= '1990-06-01' limit 1").num_rows == 1


@pytest.mark.parametrize("direct_chunks", [False, True], ids=["netcdf-c", "chunk-reader"])
def test_a_file_replaced_by_another_file_is_refused_too(private_ccm3: Path, direct_chunks: bool) -> None:
    settings = Settings(catalog_root=private_ccm3, port=0, http_port=-1, data_port=-1, udt_port=-1,
                        direct_chunks=direct_chunks)
    victim = private_ccm3 / "ccm3" / "ccm3_1990-05.nc"
    with DstpServer(settings) as srv, dstp.connect(srv.endpoints.grpc) as c:
        whole = "select temperature from ccm3"
        assert c.query(whole).num_rows > 0  # every file read once (the chunk reader keeps descriptors)
        assert srv.catalog is not None
        chunks = srv.catalog.handles.chunks
        assert (chunks is not None and chunks.reads > 0) if direct_chunks else chunks is None
        copy = victim.with_suffix(".copy")
        shutil.copy2(victim, copy)
        copy.replace(victim)  # same bytes, same size and times: another file (inode) all the same
        with grpc.insecure_channel(srv.endpoints.grpc) as channel, pytest.raises(grpc.RpcError) as info:
            pb_grpc.DstpStub(channel).OpenFile(pb.OpenFileRequest(dataset="ccm3", file=victim.name))
        assert "replaced" in info.value.details()
        with pytest.raises(dstp.DataFileError, match="replaced"):
            c.query(whole)


def test_bulk_downloads_of_untouched_files_still_work(private_ccm3: Path, tmp_path: Path) -> None:
    settings = Settings(catalog_root=private_ccm3, port=0, http_port=-1, data_port=-1, udt_port=-1)
    source = private_ccm3 / "ccm3" / "ccm3_1990-09.nc"
    with DstpServer(settings) as srv, dstp.connect(srv.endpoints.grpc) as c:
        c.get("ccm3", source.name, tmp_path / "out.nc")
    assert (tmp_path / "out.nc").read_bytes() == source.read_bytes()
    assert np.asarray(netCDF4.Dataset(tmp_path / "out.nc")["T"][0]).size > 0


@pytest.mark.parametrize("direct_chunks", [False, True], ids=["netcdf-c", "chunk-reader"])
def test_the_server_log_says_how_files_are_read(private_ccm3: Path, direct_chunks: bool,
                                                caplog: pytest.LogCaptureFixture) -> None:
    """An operator sees the file settings in effect (they were once silently ignored), not the ones asked for."""
    settings = Settings(catalog_root=private_ccm3, port=0, http_port=-1, data_port=-1, udt_port=-1, open_files=5,
                        chunk_cache_bytes=3 * 2**20, direct_chunks=direct_chunks)
    with caplog.at_level("INFO", logger="dstp.server"), DstpServer(settings) as srv:
        assert srv.catalog is not None
        effective = srv.catalog.handles
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("files: ")]
    assert len(lines) == 1
    assert "up to 5 files open, 3 MiB chunk cache per variable" in lines[0]
    assert ("outside the netCDF lock" in lines[0]) == direct_chunks == (effective.chunks is not None)


def test_an_hdf_eos_grid_definition_its_fields_do_not_back_allocates_nothing(tmp_path: Path) -> None:
    """StructMetadata.0 is text: XDim = 10⁹ over a 4 × 2 field must not make the server build 10⁹ longitudes."""
    import h5py

    text = ('GROUP=GridStructure\n\tGROUP=GRID_1\n\t\tGridName="G"\n\t\tXDim=1000000000\n\t\tYDim=2\n'
            "\t\tUpperLeftPointMtrs=(-180000000.000000,90000000.000000)\n"
            "\t\tLowerRightMtrs=(180000000.000000,-90000000.000000)\n\t\tProjection=HE5_GCTP_GEO\n"
            '\t\tGROUP=DataField\n\t\t\tOBJECT=DataField_1\n\t\t\t\tDataFieldName="V"\n'
            '\t\t\t\tDimList=("YDim","XDim")\n\t\t\tEND_OBJECT=DataField_1\n\t\tEND_GROUP=DataField\n'
            "\tEND_GROUP=GRID_1\nEND_GROUP=GridStructure\nEND\n")
    folder = tmp_path / "eos"
    folder.mkdir()
    with h5py.File(folder / "g.he5", "w") as f:
        f.create_group("HDFEOS INFORMATION").create_dataset("StructMetadata.0", data=np.array(text.encode(), "S32000"))
        f.create_group("HDFEOS/GRIDS/G/Data Fields").create_dataset("V", data=np.arange(8, dtype="f4").reshape(2, 4))
    (folder / "eos.dstp.xml").write_text(DESCRIPTOR.replace('<coordinate name="x" dimension="x"/>',
                                                            '<coordinate name="XDim" dimension="XDim"/>')
                                         .replace('default-grid="x"', 'default-grid="YDim XDim"')
                                         .replace('<attribute name="v" dimensions="x"/>',
                                                  '<attribute name="v" variable="HDFEOS/GRIDS/G/Data Fields/V" '
                                                  'dimensions="YDim XDim"/>')
                                         .format(id="eos", glob="g.he5"))
    before = _peak_rss()
    catalog = Catalog.scan(tmp_path)
    try:
        assert _peak_rss() - before < 2**30  # not the 8 GB of 10⁹ longitudes
        assert catalog.problems == [], catalog.problems
        ds = catalog.get("eos")
        assert ds.dimensions["XDim"].size == 4 and "lon" not in ds.column_names()
        assert any("XDim = 1000000000, YDim = 2, but its fields have 4 × 2 points; no lat/lon" in w
                   for w in ds.warnings)
    finally:
        catalog.close()


def test_a_mesh_declaring_more_nodes_than_it_holds_is_not_read_for_areas(tmp_path: Path) -> None:
    """A UGRID file of a few kilobytes declaring 10⁹ nodes: area_weight must not read them into memory."""
    folder = tmp_path / "mesh"
    folder.mkdir()
    with netCDF4.Dataset(folder / "mesh.nc", "w") as nc:
        nc.createDimension("node", HUGE)
        nc.createDimension("x", 2)  # the faces
        nc.createDimension("corner", 3)
        mesh = nc.createVariable("mesh", "i4", ())
        mesh.cf_role, mesh.node_coordinates, mesh.face_node_connectivity = "mesh_topology", "lon lat", "faces"
        for name, units in (("lon", "degrees_east"), ("lat", "degrees_north")):
            nc.createVariable(name, "f8", ("node",), zlib=True, chunksizes=(1024,)).units = units  # never written
        nc.createVariable("faces", "i4", ("x", "corner"))[:] = [[0, 1, 2], [1, 2, 3]]
        nc.createVariable("v", "f4", ("x",))[:] = [1.0, 2.0]
    (folder / "mesh.dstp.xml").write_text(DESCRIPTOR.format(id="mesh", glob="mesh.nc"))
    before = _peak_rss()
    catalog = Catalog.scan(tmp_path)
    try:
        assert _peak_rss() - before < 2**30
        assert catalog.problems == [], catalog.problems
        assert any("mesh 'mesh' has 1,000,000,000 nodes" in w for w in catalog.get("mesh").warnings)
    finally:
        catalog.close()

"""A published file changed behind the server's back keeping its inode, size and mtime is refused (issue 33).

Before: the identity check compared device, inode, size and mtime, so a replacement that reused the freed
inode with size and mtime copied (``touch -r``) — or, the same in effect, an in-place rewrite that restores
the mtime — was served as the file the catalog scanned. The inode's ctime cannot be set from user space:
now it is compared too. Here the bytes of the file's data are rewritten in place and its times restored,
so dev, inode, size and mtime all stay the same.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import dstp
import netCDF4
import numpy as np
import pytest

from dstp.server import DstpServer
from dstp.settings import Settings


@pytest.mark.parametrize("direct_chunks", [False, True], ids=["netcdf-c", "chunk-reader"])
def test_a_file_rewritten_in_place_with_its_times_restored_is_refused(tmp_path: Path, catalog_root: Path,
                                                                       direct_chunks: bool) -> None:
    root = tmp_path / "catalog"
    shutil.copytree(catalog_root / "ccm3", root / "ccm3")
    victim = root / "ccm3" / "ccm3_1990-05.nc"
    settings = Settings(catalog_root=root, port=0, http_port=-1, data_port=-1, udt_port=-1, open_files=1,
                        direct_chunks=direct_chunks)
    with DstpServer(settings) as srv, dstp.connect(srv.endpoints.grpc) as c:
        whole = "select temperature from ccm3"
        assert c.query(whole).num_rows > 0
        before = os.stat(victim)
        with netCDF4.Dataset(victim, "r+") as nc:  # other values, same layout: the same size
            nc["T"][0, 0, 0, 0] = np.float32(nc["T"][0, 0, 0, 0]) + np.float32(1)
        os.utime(victim, ns=(before.st_atime_ns, before.st_mtime_ns))  # touch -r
        after = os.stat(victim)
        assert (after.st_dev, after.st_ino, after.st_size, after.st_mtime_ns) == \
            (before.st_dev, before.st_ino, before.st_size, before.st_mtime_ns)
        with pytest.raises(dstp.DataFileError, match="changed on disk .*its inode changed"):
            c.query(whole)

"""A download to a full disk fails once, naming the disk, and leaves nothing that looks complete (issue 33).

Before: a striped `dstp get` onto a full disk printed a traceback from every stripe thread and left a
0-byte ``.dstp-partial.tmp`` beside the download. The disk is a real tmpfs of 256 KiB mounted for the
test (the machine's tests run as root); the files are the samples' netCDF files of ~560 KB.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

import dstp
from dstp.server import DstpServer
from dstp.settings import Settings
from dstp.transport.client.files import DiskWriteError


@pytest.fixture(scope="module")
def server(catalog_root: Path) -> Iterator[DstpServer]:
    settings = Settings(catalog_root=catalog_root, port=0, http_port=-1, data_port=0, udt_port=-1,
                        block_bytes=64 * 1024)
    with DstpServer(settings) as srv:
        yield srv


@pytest.fixture()
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _a_file(client: dstp.Client) -> str:
    return sorted(f.name for f in client.describe("ccm3").files)[0]


def test_dstp_get_onto_a_disk_too_small_says_so_once(server, small_disk: Path) -> None:
    with dstp.connect(server.endpoints.grpc) as c:
        name = _a_file(c)
    out = small_disk / "copy.nc"
    result = subprocess.run([sys.executable, "-m", "dstp.cli", "get", "ccm3", name, "--server", server.endpoints.grpc,
                             "-o", str(out), "--transport", "striped", "--streams", "4"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("dstp: error: "), result.stderr
    assert f"not enough space on the disk of {small_disk}" in lines[0] and "bytes needed" in lines[0]
    assert not out.exists() and not list(small_disk.glob("*.tmp"))


def test_a_disk_that_fills_during_a_striped_download_ends_it_with_one_error(server, small_disk: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # The disk has room when the download starts (as statvfs is told here), and fills while the stripes write.
    real = os.statvfs

    def roomy(path: os.PathLike[str] | str) -> os.statvfs_result:
        st = real(path)
        return os.statvfs_result((st.f_bsize, st.f_frsize, st.f_blocks, st.f_bfree, 10**9, *tuple(st)[5:]))

    monkeypatch.setattr(os, "statvfs", roomy)
    out = small_disk / "copy.nc"
    with dstp.connect(server.endpoints.grpc) as c, pytest.raises(DiskWriteError) as info:
        c.get("ccm3", _a_file(c), out, transport="striped", streams=4)
    assert f"the disk of {small_disk} is full" in str(info.value) and "resumes" in str(info.value)
    assert not out.exists() and not list(small_disk.glob("*.tmp"))

"""OPeNDAP through netCDF-Java, the library inside Panoply, IDV and THREDDS, each answer compared with xarray.

netCDF-Java 4.2 (``edu.ucar:netcdf`` on Maven Central, fetched by ``./dev install`` with a pinned SHA-256) is
the newest netCDF-Java whose DAP2 client is on Central; it was written for THREDDS servers and shares nothing
with dstp. ``tests/http/java/NcjRead.java`` opens ``dods://`` URLs with ``NetcdfDataset.openDataset`` — what
Panoply's "Open Remote Dataset" does — and prints what it sees. The sites are those of
tests/http/test_opendap_clients.py: three files per dataset on the standard, noleap and 360_day calendars,
latitudes north to south, ``pr`` packed differently in every file.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import cftime
import numpy as np
import pytest

from opendap_site import DATASETS, labels, local, same, serve, write_site

JAR = Path(sys.prefix) / "share" / "java" / "netcdf-4.2.jar"
SOURCE = Path(__file__).parent / "java" / "NcjRead.java"


def _java(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: ./dev installs it (Debian default-jdk-headless)")
    return path


@pytest.fixture(scope="module")
def classes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not JAR.is_file():
        pytest.fail(f"{JAR} is missing: ./dev install fetches it from Maven Central")
    out = tmp_path_factory.mktemp("ncj")
    subprocess.run([_java("javac"), "-nowarn", "-cp", str(JAR), "-d", str(out), str(SOURCE)],
                   check=True, capture_output=True, timeout=180)
    return out


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("opendap-java")
    write_site(root)
    srv = serve(root)
    assert srv.endpoints is not None
    yield {"root": root, "dods": f"dods://{srv.endpoints.http}/opendap"}
    srv.stop()


class Seen:
    """What NcjRead printed: variables with dimensions and attributes, and each section's values."""

    def __init__(self, text: str) -> None:
        self.dims: dict[str, dict[str, int]] = {}
        self.attrs: dict[str, dict[str, str]] = {}
        self.data: list[np.ndarray] = []
        lines = iter(text.splitlines())
        for line in lines:
            kind, rest = line.split(" ", 1)
            if kind == "VAR":
                name, _type, *dims = rest.split(" ")
                self.dims[name] = {d.split("=")[0]: int(d.split("=")[1]) for d in dims}
                self.attrs[name] = {}
            elif kind == "ATT":
                name, key, value = (rest.split(" ", 2) + [""])[:3]
                self.attrs[name][key] = value
            elif kind == "DATA":
                shape = tuple(int(n) for n in rest.split(" ")[1:])
                values = [float(next(lines)) for _ in range(int(np.prod(shape)))]
                self.data.append(np.array(values).reshape(shape))


def ncj(classes: Path, url: str, *reads: str, sections: bool = False) -> Seen:
    """Run NcjRead; ``sections`` makes netCDF-Java ask the server for each section (a DAP2 constraint)."""
    flags = ["--sections"] if sections else []
    result = subprocess.run([_java("java"), "-cp", f"{JAR}:{classes}", "NcjRead", *flags, url, *reads],
                            capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, f"NcjRead {url} {reads}: {result.stderr[-3000:]}"
    return Seen(result.stdout)


@pytest.mark.parametrize("name", DATASETS)
def test_netcdf_java_sees_every_variable_with_its_dimensions_and_cf_attributes(site: dict[str, Any],
                                                                                classes: Path, name: str) -> None:
    want = local(site["root"], name)
    seen = ncj(classes, f"{site['dods']}/{name}")
    for v in ("tas", "pr"):
        assert seen.dims[v] == {d: want.sizes[d] for d in want[v].dims}
        for key in ("units", "long_name", "standard_name"):
            assert seen.attrs[v].get(key) == want[v].attrs.get(key), (v, key)
        # values are served decoded: no packing attribute may tell netCDF-Java to decode them again
        assert "scale_factor" not in seen.attrs[v] and "add_offset" not in seen.attrs[v]
    assert seen.attrs["time"]["calendar"] == want.time.encoding["calendar"]


@pytest.mark.parametrize("name", DATASETS)
def test_netcdf_java_reads_strided_sections_equal_to_the_files(site: dict[str, Any], classes: Path,
                                                               name: str) -> None:
    """Each section goes to the server as ``pr[start:stride:stop]…`` (preload and caching off)."""
    want = local(site["root"], name)
    rng = np.random.default_rng(sum(map(ord, name)))
    reads, keys = [], []
    for _ in range(8):
        variable = ("tas", "pr")[int(rng.integers(2))]
        parts, key = [], []
        for n in want[variable].shape:
            start = int(rng.integers(0, n))
            stop = int(rng.integers(start, n))
            stride = int(rng.integers(1, 4))
            parts.append(f"{start}:{stop}:{stride}")
            key.append(slice(start, stop + 1, stride))
        reads.append(f"{variable}?{','.join(parts)}")
        keys.append((variable, tuple(key)))
    seen = ncj(classes, f"{site['dods']}/{name}", *reads, sections=True)
    assert len(seen.data) == len(keys)
    for got, (variable, key) in zip(seen.data, keys):
        same(got.astype("f4"), want[variable].values[key])


@pytest.mark.parametrize("name", DATASETS)
def test_netcdf_java_reads_times_and_whole_variables_as_the_files(site: dict[str, Any], classes: Path, name: str) -> None:
    want = local(site["root"], name)
    seen = ncj(classes, f"{site['dods']}/{name}", "time", "lat", "lon", "tas", "pr")
    times, lat, lon, tas, pr = seen.data
    units, calendar = seen.attrs["time"]["units"], seen.attrs["time"]["calendar"]
    assert re.match(r"\w+ since ", units), units
    assert labels(cftime.num2date(times, units, calendar)) == labels(want.time.values)
    same(lat, want.lat.values)
    same(lon, want.lon.values)
    # read whole at open (netCDF-Java's preload), as Panoply reads a small dataset
    same(tas.astype("f4"), want.tas.values)
    same(pr.astype("f4"), want.pr.values)

"""A cold build's fast header read (catalog/fastheader.py) gives exactly what netCDF4-python's read gives.

The oracle is the path it replaces in the helper processes: ``FileHandles.read_once`` through netCDF4-python
(``read_header`` and ``var[...]``, raw). The header must pickle to the same bytes (every attribute's numpy type,
scalars against 1-element arrays, char attributes as text, default fill values, unlimited dimensions, the order
of everything, and which equal values are one object: a pickle refers back to an object it met, and the name a
header is stored by is the hash of its pickle), and each value read ahead must have the same dtype, shape and
elements. Files it must not read (groups, strings, VLEN, enum) are declined and then read by netCDF4-python as
before.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

import netCDF4
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from test_index import archive

from dstp.catalog import fastheader
from dstp.catalog._stored import dumps
from dstp.catalog.netcdf4_ import NETCDF_LOCK, FileHandles, FileMeta

def _old(path: Path) -> tuple[FileMeta, dict[str, np.ndarray]]:
    handles = FileHandles(direct_chunks=False)
    try:
        found = handles.read_once(path, lambda meta, identity: _wanted(meta))
    finally:
        handles.close()
    assert found is not None
    return found[0], found[2]


def _wanted(meta: FileMeta) -> list[str]:
    return list(meta.variables)  # every variable: the tests' files are small


def _fast(path: Path, wanted: Callable[[FileMeta], Any] = _wanted) -> tuple[FileMeta, dict[str, np.ndarray]] | None:
    with NETCDF_LOCK:
        return fastheader.read_plain(os.path.realpath(path), path, wanted)


def _assert_same(path: Path, fast: tuple[FileMeta, dict[str, np.ndarray]],
                 old: tuple[FileMeta, dict[str, np.ndarray]]) -> None:
    assert dumps(fast[0]) == dumps(old[0]), (path, fast[0], old[0])
    assert list(fast[1]) == list(old[1]), path
    for name, want in old[1].items():
        got = fast[1][name]
        assert type(got) is type(want) and got.dtype == want.dtype and got.shape == want.shape, (path, name)
        np.testing.assert_array_equal(got, want, strict=True)


def test_every_kind_of_archive_file_reads_alike(tmp_path: Path) -> None:
    root = archive(tmp_path / "root")
    paths = sorted(p for p in root.rglob("*") if p.suffix in (".nc", ".he5"))
    fast_read = []
    for path in paths:
        fast = _fast(path)
        if fast is None:  # declined: read_once with the fast path on is the old read
            assert path.suffix == ".he5", path  # HDF-EOS5: groups
            continue
        _assert_same(path, fast, _old(path))
        fast_read.append(path)
    assert len(fast_read) == len(paths) - 1 and len(fast_read) > 10, (fast_read, paths)


def test_the_sample_files_read_alike(tmp_path: Path) -> None:
    from samples.generate import generate_samples

    generate_samples(tmp_path, "small")
    paths = sorted(tmp_path.rglob("*.nc"))
    assert paths
    for path in paths:
        fast = _fast(path)
        assert fast is not None, path
        _assert_same(path, fast, _old(path))


# -- generated files -----------------------------------------------------------------------------------------

_NUMERIC = ["i1", "u1", "i2", "u2", "i4", "u4", "i8", "u8", "f4", "f8"]
_CLASSIC_NUMERIC = ["i1", "i2", "i4", "f4", "f8"]
_FORMATS = ["NETCDF3_CLASSIC", "NETCDF3_64BIT_OFFSET", "NETCDF3_64BIT_DATA", "NETCDF4_CLASSIC", "NETCDF4"]


@st.composite
def _attribute(draw: st.DrawFn, types: list[str]) -> Any:
    kind = draw(st.sampled_from([*types, "text"]))
    if kind == "text":
        # as bytes, which netCDF4-python writes as char (a str of non-ASCII text it writes as a string)
        return draw(st.one_of(st.text(st.characters(codec="utf-8"), max_size=6)
                              .map(lambda t: t.encode("utf-8")), st.binary(max_size=6)))
    n = draw(st.integers(1, 3))
    info = np.iinfo(kind) if kind[0] in "iu" else None
    element = st.integers(int(info.min), int(info.max)) if info is not None else \
        st.floats(width=32 if kind == "f4" else 64, allow_nan=False)
    values = np.array(draw(st.lists(element, min_size=n, max_size=n)), kind)
    return values if n > 1 or draw(st.booleans()) else values[0]  # a 1-element array or a scalar


@st.composite
def netcdf_files(draw: st.DrawFn) -> dict[str, Any]:
    fmt = draw(st.sampled_from(_FORMATS))
    types = _NUMERIC if fmt in ("NETCDF4", "NETCDF3_64BIT_DATA") else _CLASSIC_NUMERIC
    dims = draw(st.lists(st.sampled_from(["time", "lat", "lon", "strlen", "z"]), min_size=1, max_size=4,
                         unique=True))
    sizes = {d: draw(st.integers(1, 4)) for d in dims}
    unlimited = draw(st.sampled_from([None, *dims]))
    if fmt.startswith("NETCDF3") and unlimited is not None:
        dims.remove(unlimited)
        dims.insert(0, unlimited)
    variables = []
    for k in range(draw(st.integers(0, 4))):
        vdims = draw(st.lists(st.sampled_from(dims), max_size=3, unique=True))
        if fmt.startswith("NETCDF3") and unlimited in vdims:
            vdims.remove(unlimited)
            vdims.insert(0, unlimited)
        dtype = draw(st.sampled_from([*types, "S1"]))
        attrs = draw(st.dictionaries(st.sampled_from(["units", "scale_factor", "add_offset", "valid_range",
                                                       "long_name", "flag_values", "missing_value", "a1"]),
                                     _attribute(types), max_size=4))
        fill = draw(st.sampled_from(["absent", "given", "nofill"]))
        variables.append({"name": f"v{k}", "dims": tuple(vdims), "dtype": dtype, "attrs": attrs, "fill": fill,
                          "endian": draw(st.sampled_from(["native", "big"])) if fmt == "NETCDF4" else "native",
                          "seed": draw(st.integers(0, 2**16)), "written": draw(st.integers(0, 3))})
    globals_ = draw(st.dictionaries(st.sampled_from(["title", "history", "version", "Conventions", "g"]),
                                    _attribute(types), max_size=4))
    return {"format": fmt, "dims": dims, "sizes": sizes, "unlimited": unlimited, "variables": variables,
            "globals": globals_, "records": draw(st.integers(0, 3))}


def write(spec: dict[str, Any], path: Path) -> None:
    with netCDF4.Dataset(path, "w", format=spec["format"]) as ds:
        for d in spec["dims"]:
            ds.createDimension(d, None if d == spec["unlimited"] else spec["sizes"][d])
        for key, value in spec["globals"].items():
            ds.setncattr(key, value)
        for v in spec["variables"]:
            dtype = v["dtype"]
            kwargs: dict[str, Any] = {"endian": v["endian"]}
            if v["fill"] == "given":
                kwargs["fill_value"] = b"x" if dtype == "S1" else np.array(1, dtype)
            elif v["fill"] == "nofill":
                kwargs["fill_value"] = False
            big = v["endian"] == "big" and dtype != "S1"
            kwargs["endian"] = "big" if big else "native"
            var = ds.createVariable(v["name"], np.dtype(dtype).newbyteorder(">") if big else dtype, v["dims"],
                                    **kwargs)
            for key, value in v["attrs"].items():
                var.setncattr(key, value)
            shape = tuple(spec["records"] if d == spec["unlimited"] else spec["sizes"][d] for d in v["dims"])
            rng = np.random.default_rng(v["seed"])
            if dtype == "S1":
                data = rng.choice(np.array(list(b"abc \x00"), "u1"), size=shape).astype("u1").view("S1")
            elif dtype[0] == "f":
                data = rng.normal(size=shape).astype(dtype)
            else:
                info = np.iinfo(dtype)
                data = rng.integers(max(info.min, -100), min(info.max, 100), size=shape, endpoint=True).astype(dtype)
            var.set_auto_maskandscale(False)
            # records written: some variables fewer than others (read back as fill values), some none
            written = slice(0, min(v["written"], spec["records"]))
            part = tuple(written if d == spec["unlimited"] else slice(None) for d in v["dims"])
            if data[part].size or not v["dims"]:
                var[part] = data[part]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(spec=netcdf_files())
def test_generated_files_read_alike(spec: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> None:
    path = tmp_path_factory.mktemp("gen") / "g.nc"
    write(spec, path)
    fast = _fast(path)
    assert fast is not None  # every generated file is one the fast path reads
    _assert_same(path, fast, _old(path))


def test_a_float32_attribute_read_as_float64_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "packed.nc"
    with netCDF4.Dataset(path, "w", format="NETCDF4") as ds:
        ds.createDimension("x", 2)
        var = ds.createVariable("t", "i2", ("x",))
        var.scale_factor = np.float32(0.01)
        var[:] = [1, 2]
    _assert_same(path, _fast(path), _old(path))  # type: ignore[arg-type]
    monkeypatch.setitem(fastheader._TYPES, 5, "f8")  # a slip: NC_FLOAT attributes (and variables) as float64
    with pytest.raises(AssertionError):
        _assert_same(path, _fast(path), _old(path))  # type: ignore[arg-type]


# -- files it declines ---------------------------------------------------------------------------------------

def _declined_files(folder: Path) -> list[Path]:
    out = []
    grouped = folder / "grouped.nc"
    with netCDF4.Dataset(grouped, "w") as ds:
        g = ds.createGroup("Grid")
        g.createDimension("x", 2)
        g.createVariable("x", "f4", ("x",))[:] = [1, 2]
    out.append(grouped)
    strings = folder / "strings.nc"
    with netCDF4.Dataset(strings, "w") as ds:
        ds.createDimension("n", 2)
        v = ds.createVariable("name", str, ("n",))
        v[0], v[1] = "a", "bc"
    out.append(strings)
    string_attr = folder / "string_attr.nc"
    with netCDF4.Dataset(string_attr, "w") as ds:
        ds.createDimension("n", 2)
        ds.createVariable("x", "f8", ("n",))[:] = [1, 2]
        ds.setncattr_string("title", "a string attribute")
    out.append(string_attr)
    vlen = folder / "vlen.nc"
    with netCDF4.Dataset(vlen, "w") as ds:
        ds.createDimension("n", 2)
        t = ds.createVLType(np.int32, "ragged")
        v = ds.createVariable("r", t, ("n",))
        v[0], v[1] = np.array([1], "i4"), np.array([2, 3], "i4")
    out.append(vlen)
    enum = folder / "enum.nc"
    with netCDF4.Dataset(enum, "w") as ds:
        ds.createDimension("n", 2)
        cloud = ds.createEnumType(np.uint8, "cloud", {"clear": 0, "cloudy": 1})
        ds.createVariable("c", cloud, ("n",))[:] = np.array([0, 1], "u1")
    out.append(enum)
    return out


def test_files_it_cannot_read_exactly_are_declined_and_read_as_before(tmp_path: Path) -> None:
    for path in _declined_files(tmp_path):
        assert _fast(path) is None, path
        fast_on = FileHandles(direct_chunks=False)
        fast_on.fast_headers = True
        try:
            found = fast_on.read_once(path, lambda meta, identity: _wanted(meta))
        finally:
            fast_on.close()
        assert found is not None
        old = _old(path)
        assert dumps(found[0]) == dumps(old[0]), path
        assert list(found[2]) == list(old[1]), path
        for name, want in old[1].items():
            got = found[2][name]
            assert got.dtype == want.dtype and got.shape == want.shape
            for a, b in zip(got.reshape(-1), want.reshape(-1)) if want.dtype.kind == "O" else [(got, want)]:
                np.testing.assert_array_equal(a, b, strict=True)


def test_an_hdf5_file_without_dimension_scales_reads_alike(tmp_path: Path) -> None:
    import h5py

    path = tmp_path / "plain.h5"
    with h5py.File(path, "w") as f:
        d = f.create_dataset("counts", data=np.arange(6, dtype=">u2").reshape(2, 3))  # netCDF-C: phony_dim_0, _1
        d.attrs["scale_factor"] = np.float32(0.5)
        d.attrs["valid_range"] = np.array([0, 9], "i8")
        d.attrs["units"] = np.bytes_(b"1")  # fixed length: char
        f.create_dataset("x", data=np.linspace(0, 1, 3))
        f.attrs["one"] = np.array([7], "i1")
    fast = _fast(path)
    assert fast is not None
    assert fast[0].homes == {"phony_dim_0": "group /", "phony_dim_1": "group /"}
    _assert_same(path, fast, _old(path))

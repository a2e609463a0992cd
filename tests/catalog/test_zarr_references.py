"""kerchunk reference files (made by kerchunk's own ``SingleHdf5ToZarr``, as users make them) published as the
files of a dataset: every answer equals xarray on the original netCDF-4 files, each decoded on its own and
concatenated along time (the generator of ``test_aggregation_oracle``: per-file packing, fill values, time units
and calendars, deflate and shuffle); a reference whose target is missing or cut short is a clear refusal."""

from __future__ import annotations

import json
import random
import re
import tempfile
from dataclasses import replace
from pathlib import Path

import cftime
import numpy as np
import pytest
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from test_aggregation_oracle import (ArchiveSpec, FileSpec, _literal, _mask_default_fill, _mask_unsigned_missing, archives,
                                     dstp_answer, oracle_records, write_archive)
from oracle import assert_same_records, run_sql

from dstp.catalog.publish import publish
from dstp.catalog.registry import Catalog

#: kerchunk writes attributes as JSON numbers: a float32 scale_factor or add_offset becomes a double, and the
#: reference file no longer says it was float32. Decoded as the reference says (in double precision), where
#: xarray on the netCDF file decodes in float32: the oracle decodes each file with its packing attributes as the
#: reference file holds them (docs/zarr-sources.md).
PACKING = ("scale_factor", "add_offset")


def make_references(paths: list[Path], refs: Path, *, inline: int = 0, relative: bool = False) -> list[Path]:
    """Write kerchunk's references of each file to ``refs``; return their paths."""
    import kerchunk.hdf

    refs.mkdir(exist_ok=True)
    out = []
    for p in paths:
        made = kerchunk.hdf.SingleHdf5ToZarr(str(p), inline_threshold=inline).translate()
        if relative:
            for value in made["refs"].values():
                if isinstance(value, list):
                    value[0] = f"../{p.parent.name}/{p.name}"
        out.append(refs / f"{p.stem}.json")
        out[-1].write_text(json.dumps(made))
    return out


def reference_oracle(paths: list[Path]) -> xr.Dataset:
    """xarray on the netCDF files, each decoded on its own with its packing attributes as doubles."""
    coder = xr.coders.CFDatetimeCoder(use_cftime=True)
    parts = []
    for p in paths:
        with xr.open_dataset(p, decode_cf=False) as raw:
            raw = raw.load()
        for var in raw.variables.values():
            for name in PACKING:
                if name in var.attrs:
                    var.attrs[name] = float(var.attrs[name])
        decoded = xr.decode_cf(raw, decode_times=coder, mask_and_scale=True)
        part = _mask_unsigned_missing(_mask_default_fill(decoded, raw), raw)
        if "humid" not in part:
            part["humid"] = xr.full_like(part["temp"], np.nan, dtype=np.float32)
        parts.append(part)
    if len(parts) == 1:
        return parts[0]
    return xr.concat(parts, dim="time", data_vars="minimal", coords="minimal", compat="override", join="exact")


def publish_references(root: Path, paths: list[Path], glob: str, dataset: str = "arch", store: str | None = None
                       ) -> Path:
    """Write a descriptor drafted from the netCDF files, its files glob naming the reference files."""
    drafted = publish(paths, dataset)
    xml, n = re.subn(r'<files glob="[^"]+"', f'<files {f"store={store!r} " if store else ""}glob="{glob}"',
                     drafted.read_text())
    drafted.unlink()
    assert n == 1
    target = root / f"{dataset}.dstp.xml"
    target.write_text(xml.replace("'", '"') if store else xml)
    return target


#: Archives whose files kerchunk can describe: no file with no records yet (kerchunk leaves its empty time
#: coordinate out). Variables whose last records were never written (fill "default_fill") stay: kerchunk gives
#: them their shorter HDF5 shape, and dstp reads the rest as netCDF-C does, as fill values.
def describable(spec: ArchiveSpec) -> ArchiveSpec:
    return replace(spec, empty_at=-1)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=archives().map(describable), inline=st.sampled_from([0, 100, 5000]), relative=st.booleans(),
       pick=st.randoms(use_true_random=False))
def test_kerchunk_references_answer_as_xarray_on_the_netcdf_files(spec: ArchiveSpec, inline: int, relative: bool,
                                                                   pick: random.Random) -> None:
    with tempfile.TemporaryDirectory(prefix="dstp-refs-") as tmp:
        root = Path(tmp)
        (root / "nc").mkdir()
        paths = write_archive(spec, root / "nc")
        make_references(sorted((root / "nc").glob("arch_*.nc")), root / "refs", inline=inline, relative=relative)
        publish_references(root, sorted((root / "nc").glob("arch_*.nc")), "refs/arch_*.json")
        catalog = Catalog.scan(root, direct_chunks=spec.direct_chunks)
        try:
            assert not catalog.problems, catalog.problems
            assert [f.path.suffix for f in catalog.get("arch").files] == [".json"] * len(paths)
            truth = reference_oracle(paths)
            records = oracle_records(truth, ["temp", "humid"], ["time", "lat", "lon"])
            queries = ["select time, lat, lon, temp, humid from arch",
                       "select time, temp from arch where humid is null order by time desc, temp"]
            temps = records["temp"].dropna().to_numpy()
            if temps.size:
                queries.append(f"select time, temp from arch where temp > {_literal(pick.choice(list(temps)))}")
            times = sorted(set(records["time"]))
            t = str(pick.choice(times))[:19]
            queries.append(f"select time, lat, humid from arch where time >= '{t}'")
            for sql in queries:
                assert_same_records(dstp_answer(catalog, sql), run_sql(records, sql, "arch"),
                                    ordered="order by" in sql)
            weights = oracle_records(truth, ["gw"], ["lat"])
            assert_same_records(dstp_answer(catalog, "select lat, gw from arch"),
                                run_sql(weights, "select lat, gw from arch", "arch"))
        finally:
            catalog.close()


# ------------------------------------------------------------------ faults, named

SPEC = ArchiveSpec(calendar="noleap", lat_descending=True, nlat=3, nlon=2, gaps=(0, 1), names=(0, 1), files=(
    FileSpec(steps=3, units="hours", epoch="1999-11-20", float_time=False, calendar_name="noleap",
             encoding="int16_f64", fill="fill_attr", has_humid=True, seed=3, deflate=2),
    FileSpec(steps=2, units="days", epoch="2000-01-01", float_time=True, calendar_name="365_day",
             encoding="float32", fill="missing_value", has_humid=True, seed=4, deflate=1)))


def _archive(root: Path, **kwargs: object) -> tuple[list[Path], list[Path]]:
    (root / "nc").mkdir()
    paths = write_archive(SPEC, root / "nc")
    refs = make_references(paths, root / "refs", **kwargs)  # type: ignore[arg-type]
    publish_references(root, paths, "refs/arch_*.json")
    return paths, refs


def _problems(catalog: Catalog) -> str:
    return "\n".join(p.message for p in catalog.problems) + "\n".join(h.reason for h in catalog.held_back)


def test_a_missing_target_is_refused_naming_reference_file_key_and_target(tmp_path: Path) -> None:
    paths, refs = _archive(tmp_path)
    paths[1].unlink()
    catalog = Catalog.scan(tmp_path)
    try:
        text = _problems(catalog)
        assert re.search(r"reference file arch_01\.json: key '[^']+' names target .*/nc/arch_01\.nc: .*arch_01\.nc "
                         r"cannot be read \(No such file or directory\)", text), text
        assert "arch" not in catalog or len(catalog.get("arch").files) == 1
    finally:
        catalog.close()


def _chunk_refs(ref: Path, variable: str) -> list[tuple[str, int, int]]:
    spec = json.loads(ref.read_text())["refs"]
    return sorted((k, v[1], v[2]) for k, v in spec.items() if k.startswith(variable + "/") and isinstance(v, list))


def test_a_target_cut_short_of_a_referenced_range_is_refused_never_read_as_fill(tmp_path: Path) -> None:
    paths, refs = _archive(tmp_path)
    key, offset, size = max(_chunk_refs(refs[0], "temp"), key=lambda r: r[1])
    tail = max(off + n for _, off, n in _chunk_refs(refs[0], "temp") + _chunk_refs(refs[0], "humid"))
    coordinates = max(off + n for v in ("time", "lat", "lon", "gw", "time_bnds") for _, off, n in _chunk_refs(refs[0], v))
    assert coordinates <= offset < tail  # the cut leaves the coordinates whole: the catalog loads
    with open(paths[0], "r+b") as f:
        f.truncate(offset + size // 2)
    catalog = Catalog.scan(tmp_path)
    try:
        assert not catalog.problems, _problems(catalog)
        with pytest.raises(Exception) as caught:
            dstp_answer(catalog, "select time, lat, lon, temp from arch")
        text = str(caught.value)
        assert re.search(rf"reference file arch_00\.json: key '{re.escape(key)}' names bytes {offset}–{offset + size} "
                         rf"of target .*/nc/arch_00\.nc, which is {offset + size // 2} bytes long", text), text
        assert type(caught.value).__name__ == "DataFileError"
    finally:
        catalog.close()


def test_a_target_replaced_after_the_catalog_opened_it_is_refused(tmp_path: Path) -> None:
    paths, refs = _archive(tmp_path)
    catalog = Catalog.scan(tmp_path)
    try:
        assert not catalog.problems, _problems(catalog)
        before = dstp_answer(catalog, "select time, temp from arch")
        data = paths[1].read_bytes()
        paths[1].unlink()
        paths[1].write_bytes(data[:len(data) // 2] + bytes(len(data) - len(data) // 2))  # zeros where chunks were
        with pytest.raises(Exception) as caught:
            dstp_answer(catalog, "select time, humid from arch")
        assert re.search(r"reference file arch_01\.json: target .*arch_01\.nc of key '[^']+' changed after the "
                         r"references were opened", str(caught.value)), str(caught.value)
        assert before.num_rows == 5 * 3 * 2
    finally:
        catalog.close()


def test_a_url_no_configured_store_covers_is_refused_and_never_fetched(tmp_path: Path) -> None:
    paths, refs = _archive(tmp_path)
    spec = json.loads(refs[0].read_text())
    for value in spec["refs"].values():
        if isinstance(value, list):
            value[0] = "https://example.invalid/era5/arch_00.nc"
    refs[0].write_text(json.dumps(spec))
    catalog = Catalog.scan(tmp_path)
    try:
        text = _problems(catalog)
        assert re.search(r"reference file arch_00\.json: key '[^']+' names target https://example\.invalid/era5/"
                         r"arch_00\.nc: https://example\.invalid/era5/arch_00\.nc is covered by no configured store",
                         text), text
    finally:
        catalog.close()


def test_a_netcdf_variable_shorter_than_its_unlimited_dimension_reads_its_unwritten_records_as_missing(
        tmp_path: Path) -> None:
    # netCDF-C reads the unwritten last record as fill values; kerchunk gives the variable its shorter HDF5 shape
    spec = replace(SPEC, files=(replace(SPEC.files[0], fill="default_fill"), SPEC.files[1]))
    (tmp_path / "nc").mkdir()
    paths = write_archive(spec, tmp_path / "nc")
    refs = make_references(paths, tmp_path / "refs")
    assert json.loads(json.loads(refs[0].read_text())["refs"]["temp/.zarray"])["shape"][0] == 2  # of 3 records
    publish_references(tmp_path, paths, "refs/arch_*.json")
    catalog = Catalog.scan(tmp_path)
    try:
        assert not catalog.problems, _problems(catalog)
        records = oracle_records(reference_oracle(paths), ["temp", "humid"], ["time", "lat", "lon"])
        for sql in ("select time, lat, lon, temp, humid from arch", "select time, lat, temp from arch where temp is null",
                    "select lat, lon, temp from arch where time = '2000-01-03'"):
            assert_same_records(dstp_answer(catalog, sql), run_sql(records, sql, "arch"))
        assert records["temp"].isna().sum() >= 6  # the unwritten record: missing, never 0
    finally:
        catalog.close()


def test_dstp_publish_drafts_a_descriptor_from_the_reference_files_themselves(tmp_path: Path) -> None:
    (tmp_path / "nc").mkdir()
    paths = write_archive(SPEC, tmp_path / "nc")
    refs = make_references(paths, tmp_path / "refs")
    drafted = publish(refs, "arch")
    assert drafted.parent == tmp_path / "refs" and '<files glob="arch_*.json" aggregate="time"/>' in drafted.read_text()
    catalog = Catalog.scan(tmp_path)
    try:
        assert not catalog.problems, _problems(catalog)
        records = oracle_records(reference_oracle(paths), ["temp", "humid"], ["time", "lat", "lon"])
        sql = "select time, lat, lon, temp, humid from arch"
        assert_same_records(dstp_answer(catalog, sql), run_sql(records, sql, "arch"))
    finally:
        catalog.close()

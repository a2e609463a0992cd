"""kerchunk reference files (made by kerchunk's own ``SingleHdf5ToZarr``, as users make them) published as the
files of a dataset: every answer equals xarray on the original netCDF-4 files, each decoded on its own and
concatenated along time (the generator of ``test_aggregation_oracle``: per-file packing, fill values, time units
and calendars, deflate and shuffle); a reference whose target is missing or cut short is a clear refusal."""

from __future__ import annotations

import json
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

from test_aggregation_oracle import (ArchiveSpec, _literal, _mask_default_fill, _mask_unsigned_missing, archives,
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


#: Archives whose files kerchunk can describe: every variable as long as its dimensions (a netCDF variable with
#: unwritten records at the end is shorter in HDF5 than its unlimited dimension: kerchunk gives its HDF5 shape,
#: refused as below), and no file with no records yet (kerchunk leaves its empty time coordinate out).
def describable(spec: ArchiveSpec) -> ArchiveSpec:
    files = tuple(replace(f, fill="fill_attr") if f.fill == "default_fill" and f.steps > 1 else f
                  for f in spec.files)
    return replace(spec, files=files, empty_at=-1)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=archives().map(describable), inline=st.sampled_from([0, 100, 5000]), relative=st.booleans(),
       pick=st.randoms(use_true_random=False))
def test_kerchunk_references_answer_as_xarray_on_the_netcdf_files(spec: ArchiveSpec, inline: int, relative: bool,
                                                                   pick: object) -> None:
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

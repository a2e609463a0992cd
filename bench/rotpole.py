"""A small region of a 0.11° rotated-pole grid: what 2-D latitude/longitude pushdown saves.

The grid is EURO-CORDEX's EUR-11: ``pr(time, rlat, rlon)`` on 412 × 424
points at 0.11° (rlat from -23.375, rlon from -28.375, pole at 39.25 N,
162 W), 365 daily steps, with 2-D ``lat``/``lon`` auxiliary coordinates and a
``rotated_pole`` grid mapping (written here with netCDF4-python; float32,
about 255 MB). Two layouts: contiguous (netCDF-4 classic model, no
compression) and chunked per day with zlib level 1 (what many producers write).

Measured, medians of interleaved runs, in one process (dstp's query engine,
``prepare_query`` + ``QueryExecution``; no network):

* **full scan** -- ``select pr from rotpole where pr > 1e30``: every value is
  read and tested, nothing matches;
* **band** -- ``… where lat between 50 and 52 and pr > 1e30``: the planner
  tests the 2-D latitude cell by cell and reads only the cells around the
  matching ones: the index box cut into a few strips of rows, each with its
  own column range (a latitude band crosses a rotated grid diagonally);
* **band, records** -- ``select lat, lon, pr … where lat between 50 and 52``
  returned to a client over gRPC from a ``dstp serve`` process (whole query,
  client's clock).

Bytes read are dstp's own counters (the values netCDF handed back); for the
chunked layout HDF5 decompresses whole chunks, so its disk reads are larger —
which is why the chunked rows are shown apart. Target (issue 12): the band
reads ≤ 10 % of the full scan's bytes and takes ≤ 20 % of its time.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import netCDF4
import numpy as np
import platformdirs
import pyarrow as pa
import pyproj

import dstp
from bench.dstp_process import serve
from bench.report import markdown_table, median, write_json, write_markdown

NAME = "rotpole"
ROTATED = {"grid_mapping_name": "rotated_latitude_longitude",
           "grid_north_pole_latitude": 39.25, "grid_north_pole_longitude": -162.0}
FULL = "select pr from rotpole where pr > 1e30"
BAND = "select pr from rotpole where lat between 50 and 52 and pr > 1e30"
RECORDS = "select lat, lon, pr from rotpole where lat between 50 and 52"


def write_grid(folder: Path, ny: int, nx: int, days: int, chunked: bool) -> Path:
    """Write the rotated-pole file (once) and its descriptor; return the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "pr_EUR-11_day.nc"
    if path.exists() and (folder / "rotpole.dstp.xml").exists():
        return folder
    rlat = -23.375 + 0.11 * np.arange(ny) * (412 / ny)
    rlon = -28.375 + 0.11 * np.arange(nx) * (424 / nx)
    crs = pyproj.CRS.from_cf(ROTATED)
    grid_x, grid_y = np.meshgrid(rlon, rlat)
    lon, lat = pyproj.Transformer.from_crs(crs, "EPSG:4326", always_xy=True).transform(grid_x, grid_y)
    rng = np.random.default_rng(11)
    partial = path.with_suffix(".partial")
    kwargs: dict[str, Any] = {"zlib": True, "complevel": 1, "chunksizes": (1, ny, nx)} if chunked \
        else {"contiguous": True}
    with netCDF4.Dataset(partial, "w", format="NETCDF4" if chunked else "NETCDF4_CLASSIC") as nc:
        nc.createDimension("time", days)
        nc.createDimension("rlat", ny)
        nc.createDimension("rlon", nx)
        t = nc.createVariable("time", "f8", ("time",))
        t.units, t.calendar, t.standard_name = "days since 2001-01-01", "standard", "time"
        t[:] = np.arange(days) + 0.5
        for name, values, std in (("rlat", rlat, "grid_latitude"), ("rlon", rlon, "grid_longitude")):
            v = nc.createVariable(name, "f8", (name,))
            v.units, v.standard_name, v.axis = "degrees", std, "Y" if name == "rlat" else "X"
            v[:] = values
        for name, values, std, units in (("lat", lat, "latitude", "degrees_north"),
                                         ("lon", lon, "longitude", "degrees_east")):
            v = nc.createVariable(name, "f8", ("rlat", "rlon"))
            v.units, v.standard_name = units, std
            v[:] = values
        gm = nc.createVariable("rotated_pole", "i4", ())
        for k, v in ROTATED.items():
            gm.setncattr(k, v)
        pr = nc.createVariable("pr", "f4", ("time", "rlat", "rlon"), **kwargs)
        pr.units, pr.standard_name = "kg m-2 s-1", "precipitation_flux"
        pr.coordinates, pr.grid_mapping = "lat lon", "rotated_pole"
        for day in range(days):
            pr[day] = (rng.random((ny, nx)) * 1e-4).astype(np.float32)
    partial.rename(path)
    from dstp.catalog.publish import publish

    publish([path], "rotpole", overwrite=True)
    return folder


def _engine(folder: Path, sql: str) -> dict[str, Any]:
    """Run ``sql`` in process; return seconds, rows and what dstp read."""
    from dstp.catalog.registry import Catalog
    from dstp.query.execute import QueryExecution, prepare_query
    from dstp.settings import Settings

    settings = Settings(catalog_root=folder)
    catalog = Catalog.scan(folder)
    try:
        started = time.perf_counter()
        prepared = prepare_query(sql, catalog, settings)
        execution = QueryExecution(prepared, settings)
        rows = sum(b.num_rows for b in execution.batches())
        seconds = time.perf_counter() - started
        stats = execution.summary.stats
        return {"seconds": seconds, "rows": rows, "bytes_read": stats.bytes, "elements_read": stats.elements,
                "hyperslab": {d: list(v) for d, v in prepared.plan.hyperslab.as_dict().items()},
                "strips": len(prepared.plan.hyperslab.strips)}
    finally:
        catalog.close()


def _layout(folder: Path, repeats: int, label: str) -> dict[str, Any]:
    _engine(folder, FULL)  # warm the page cache
    full, band = [], []
    for _ in range(repeats):
        full.append(_engine(folder, FULL))
        band.append(_engine(folder, BAND))
    full_s = median([r["seconds"] for r in full])
    band_s = median([r["seconds"] for r in band])
    return {
        "layout": label,
        "full_s": full_s, "band_s": band_s,
        "full_bytes_read": full[0]["bytes_read"], "band_bytes_read": band[0]["bytes_read"],
        "bytes_ratio": band[0]["bytes_read"] / full[0]["bytes_read"],
        "time_ratio": band_s / full_s,
        "band_hyperslab": band[0]["hyperslab"], "band_strips": band[0]["strips"],
        "full_runs_s": [r["seconds"] for r in full], "band_runs_s": [r["seconds"] for r in band],
    }


def run(quick: bool, samples: dict[str, Path], repeats: int = 5) -> dict[str, Any]:
    cache = Path(platformdirs.user_cache_dir("dstp")) / "bench" / "rotpole"
    ny, nx, days = (60, 55, 8) if quick else (412, 424, 365)
    repeats = 1 if quick else repeats
    layouts = []
    for chunked in (False, True):
        label = "chunked (1 day), zlib 1" if chunked else "contiguous"
        folder = write_grid(cache / f"{'chunked' if chunked else 'contiguous'}-{ny}x{nx}x{days}", ny, nx, days,
                            chunked)
        layouts.append(_layout(folder, repeats, label))
    records = []
    with serve(cache / f"contiguous-{ny}x{nx}x{days}") as srv, dstp.connect(srv.endpoints["grpc"]) as client:
        for _ in range(repeats):
            started = time.perf_counter()
            table: pa.Table = client.query(RECORDS)
            records.append((time.perf_counter() - started, table.num_rows))
    result = {
        "grid": [ny, nx, days], "full_sql": FULL, "band_sql": BAND, "records_sql": RECORDS,
        "layouts": layouts,
        "records_median_s": median([s for s, _ in records]), "records_rows": records[0][1],
        "target_bytes_ratio": 0.10, "target_time_ratio": 0.20,
    }
    if not quick:
        write_json(NAME, result)
        table = markdown_table(
            [{"layout": r["layout"], "full": f"{r['full_s']:.3f}", "band": f"{r['band_s']:.3f}",
              "time": f"{r['time_ratio']:.3f}", "fb": f"{r['full_bytes_read'] / 2**20:.1f}",
              "bb": f"{r['band_bytes_read'] / 2**20:.1f}", "bytes": f"{r['bytes_ratio']:.3f}"} for r in layouts],
            [("layout", "layout"), ("full", "full scan s"), ("band", "band s"), ("time", "time ratio"),
             ("fb", "full MiB read"), ("bb", "band MiB read"), ("bytes", "bytes ratio")],
        )
        write_markdown(NAME, "2-D latitude pushdown on a 0.11° rotated-pole grid", (
            f"`pr(time, rlat, rlon)` on {ny} × {nx} points × {days} days; medians of {repeats} interleaved "
            f"in-process runs (dstp's query engine, no network).\n\n"
            f"* full scan: `{FULL}`\n* band: `{BAND}`\n\n{table}\n\n"
            f"Targets: bytes ratio ≤ 0.10, time ratio ≤ 0.20 (contiguous layout). The band's bounding box: "
            f"{layouts[0]['band_hyperslab']}, read as {layouts[0]['band_strips']} strips.\n\n"
            f"Whole query through a `dstp serve` process over gRPC, `{RECORDS}`: "
            f"{result['records_rows']:,} records in {result['records_median_s']:.2f} s (median of {repeats})."
        ))
    return result

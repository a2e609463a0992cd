"""OPeNDAP against the native paths: one slab through DAP2/DAP4 (netCDF-C, pydap), the dstp client, Flight and xarray.

Everything runs on loopback against a ``dstp serve`` process (gRPC, HTTP, Flight) over the ccm3 sample
files. **The slab**: ``temperature`` (``T`` in the files) at time indices 4…9 (across two files), every
level, latitude indices n/4…3n/4−1, every longitude — 6 × 18 × 32 × 128 float32 on the medium sample.
Each path is timed on the client's clock from opening the dataset to holding the numpy array (medians of
interleaved runs after one warm-up each), and its values are checked against xarray on the files:

* *xarray, local files*: ``xr.open_mfdataset(files)`` then ``.T[slab].values`` (the reference);
* *dstp client (gRPC)* and *Flight*: the same slab as SQL (coordinate ranges equal to the indices), Arrow
  to numpy — the native paths the facade is measured against;
* *netCDF-C DAP2* / *netCDF-C DAP4*: ``netCDF4.Dataset(url)`` (``http://`` or ``dap4://``) then the slice;
* *pydap DAP2* / *pydap DAP4*: ``pydap.client.open_url(url, protocol=…)`` then the slice.

Goal (issue 37): each DAP path within 2× of the native one. ``--quick`` uses the small sample, one run.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from bench.dstp_process import serve
from bench.report import markdown_table, median, write_json, write_markdown

NAME = "dap"


def _timed(fn: Callable[[], np.ndarray], repeats: int) -> tuple[float, np.ndarray, list[float]]:
    fn()  # warm-up: connections, caches, the server's axis values
    runs, result = [], np.empty(0)
    for _ in range(repeats):
        started = time.perf_counter()
        result = fn()
        runs.append(time.perf_counter() - started)
    return median(runs), result, runs


def ccm3_slab(files: list[Path]) -> tuple[tuple[slice, ...], np.ndarray, np.ndarray, np.ndarray]:
    """Return the slab's index ``T[4:10, :, n/4:3n/4, :]``, xarray's values of it on the files, its times and
    latitudes (the slab the DAP and Zarr/EDR benchmarks read)."""
    import xarray as xr

    with xr.open_mfdataset(files, combine="nested", concat_dim="time", data_vars="minimal", coords="minimal",
                           compat="override") as local:
        nlat = local.sizes["lat"]
        key = (slice(4, 10), slice(None), slice(nlat // 4, 3 * nlat // 4), slice(None))
        return key, local.T.values[key], local.time.values[key[0]], local.lat.values[key[2]]


def read_local(files: list[Path], key: tuple[slice, ...]) -> np.ndarray:
    """Return the slab as a user with the files on disk reads it: ``xr.open_mfdataset`` then ``.T[key]``."""
    import xarray as xr

    with xr.open_mfdataset(files, combine="nested", concat_dim="time", data_vars="minimal", coords="minimal",
                           compat="override") as ds:
        return np.asarray(ds.T[key].values)


def run(quick: bool, samples: dict[str, Path], repeats: int = 5) -> dict[str, Any]:
    import netCDF4
    import pyarrow.flight as fl
    from pydap.client import open_url

    import dstp

    root = samples["small" if quick else "medium"]
    repeats = 1 if quick else repeats
    files = sorted((root / "ccm3").glob("ccm3_*.nc"))
    key, want, times, lats = ccm3_slab(files)

    def via_xarray() -> np.ndarray:
        return read_local(files, key)

    rows: list[dict[str, Any]] = []
    with serve(root, "--http-port", "0", "--data-port", "-1", "--udt-port", "-1", "--flight-port", "0") as srv:
        http, grpc, flight = srv.endpoints["http"], srv.endpoints["grpc"], srv.endpoints["flight"]
        url = f"http://{http}/opendap/ccm3"
        low, high = sorted((float(lats[0]), float(lats[-1])))
        first, last = (str(np.datetime64(t.isoformat(), "us")).replace("T", " ") if hasattr(t, "isoformat")
                       else str(t).replace("T", " ") for t in (times[0], times[-1]))
        sql = (f"select temperature from ccm3 where time between timestamp '{first}' and timestamp '{last}' "
               f"and lat between {low!r} and {high!r}")

        def via_client() -> np.ndarray:
            with dstp.connect(grpc) as client:
                column = client.query(sql).column(0).to_numpy()
            return np.asarray(column).reshape(want.shape)

        def via_flight() -> np.ndarray:
            c = fl.connect(f"grpc+tcp://{flight}")
            try:
                info = c.get_flight_info(fl.FlightDescriptor.for_command(sql))
                table = c.do_get(info.endpoints[0].ticket).read_all()
            finally:
                c.close()
            return np.asarray(table.column(0).to_numpy()).reshape(want.shape)

        def via_netcdf_c(scheme: str) -> Callable[[], np.ndarray]:
            def read() -> np.ndarray:
                with netCDF4.Dataset(url.replace("http", scheme, 1)) as nc:
                    return np.ma.filled(nc["temperature"][key], np.nan)
            return read

        def via_pydap(protocol: str) -> Callable[[], np.ndarray]:
            def read() -> np.ndarray:
                remote = open_url(url, protocol=protocol)
                array = remote["temperature"]["temperature"] if protocol == "dap2" else remote["temperature"]
                return np.asarray(array[key].data)
            return read

        paths: list[tuple[str, Callable[[], np.ndarray]]] = [
            ("xarray, local files", via_xarray), ("dstp client (gRPC)", via_client), ("Flight", via_flight),
            ("netCDF-C DAP2", via_netcdf_c("http")), ("netCDF-C DAP4", via_netcdf_c("dap4")),
            ("pydap DAP2", via_pydap("dap2")), ("pydap DAP4", via_pydap("dap4"))]
        for how, fn in paths:
            seconds, got, runs = _timed(fn, repeats)
            np.testing.assert_array_equal(np.asarray(got, dtype="f4"), np.asarray(want, dtype="f4"))
            rows.append({"how": how, "seconds": seconds, "values": int(got.size), "runs": runs,
                         "mb_per_s": got.size * 4 / 2**20 / seconds if seconds else None})
    native = min(r["seconds"] for r in rows if r["how"] in ("dstp client (gRPC)", "Flight"))
    for r in rows:
        r["vs_native"] = r["seconds"] / native
    result = {"rows": rows, "slab": f"T[4:10, :, {key[2].start}:{key[2].stop}, :]", "sql": sql,
              "sample": "small" if quick else "medium", "repeats": repeats}
    if not quick:
        write_json(NAME, result)
        table = markdown_table(rows, [("how", "path"), ("seconds", "median s"), ("vs_native", "× native"),
                                      ("mb_per_s", "MiB/s"), ("values", "values")])
        write_markdown(NAME, "OPeNDAP: one slab through DAP2/DAP4 vs the native paths", (
            f"ccm3 ({result['sample']} sample), `{result['slab']}` = `{sql}`; open + read on the client's clock, "
            f"medians of {repeats} runs after a warm-up, loopback. × native: over the faster of the dstp client "
            f"and Flight.\n\n{table}\n"))
    return result

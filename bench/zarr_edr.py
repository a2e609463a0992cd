"""The Zarr and EDR doors against the native path and xarray on the local files: one slab, five ways.

Everything runs on loopback against a ``dstp serve`` process over the ccm3 sample files. **The slab** is
the OPeNDAP benchmark's (bench/dap.py): ``temperature`` (``T`` in the files) at time indices 4…9 (across
two files), every level, latitude indices n/4…3n/4−1, every longitude — 6 × 18 × 32 × 128 float32 on the
medium sample. Each path is timed on the client's clock from opening the dataset to holding the numpy
array (opening included: what a user's script does each time; medians of the runs after one warm-up each),
and its values are checked equal to xarray's on the files:

* *xarray, local files*: ``xr.open_mfdataset(files)`` then ``.T[slab].values`` (the reference);
* *dstp client (gRPC)*: the slab as SQL (coordinate ranges equal to the indices), Arrow to numpy — the
  native path each door is measured against (the issue's goal: within 2×);
* *Zarr: xr.open_zarr*: ``xr.open_zarr("http://…/zarr/ccm3")["temperature"][slab]`` (zarr-python 3, fsspec
  HTTP; the chunks the slab touches, whole). ccm3's ``T`` is deflate+shuffle in chunks of one time step
  alike in every file, so its chunks pass through unchanged (``X-Dstp-Chunk: stored``; the result records
  which path was taken);
* *EDR cube, CoverageJSON*: ``GET /edr/collections/ccm3/cube?bbox=-180,lat0,180,lat1&datetime=t0/t1``,
  the JSON parsed into a numpy array;
* *EDR cube, netCDF*: the same with ``f=netCDF``, opened with xarray.

``--quick`` uses the small sample, one run, and writes nothing.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np

from bench.dap import _timed, ccm3_slab, read_local
from bench.dstp_process import serve
from bench.report import markdown_table, write_json, write_markdown

NAME = "zarr_edr"


def run(quick: bool, samples: dict[str, Path], repeats: int = 5) -> dict[str, Any]:
    import warnings

    import httpx
    import xarray as xr

    import dstp

    root = samples["small" if quick else "medium"]
    repeats = 1 if quick else repeats
    files = sorted((root / "ccm3").glob("ccm3_*.nc"))
    key, want, times, lats = ccm3_slab(files)

    def via_xarray() -> np.ndarray:
        return read_local(files, key)

    rows: list[dict[str, Any]] = []
    with serve(root, "--http-port", "0", "--data-port", "-1", "--udt-port", "-1") as srv, \
            httpx.Client(timeout=300) as http, tempfile.TemporaryDirectory(prefix="dstp-bench-edr-") as tmp:
        base, grpc = f"http://{srv.endpoints['http']}", srv.endpoints["grpc"]
        low, high = sorted((float(lats[0]), float(lats[-1])))
        iso = [str(np.datetime64(t, "s")) for t in (times[0], times[-1])]
        sql = (f"select temperature from ccm3 where time between timestamp '{iso[0].replace('T', ' ')}' and "
               f"timestamp '{iso[1].replace('T', ' ')}' and lat between {low!r} and {high!r}")
        chunk_path = http.get(f"{base}/zarr/ccm3/temperature/c/0/0/0/0").headers.get("X-Dstp-Chunk", "")

        def via_client() -> np.ndarray:
            with dstp.connect(grpc) as client:
                column = client.query(sql).column(0).to_numpy()
            return np.asarray(column).reshape(want.shape)

        def via_zarr() -> np.ndarray:
            with warnings.catch_warnings():  # zarr-python: numcodecs' zlib/shuffle are not core Zarr v3 codecs
                warnings.filterwarnings("ignore", "Numcodecs codecs are not in the Zarr version 3")
                ds = xr.open_zarr(f"{base}/zarr/ccm3", zarr_format=3, consolidated=True)
                return np.asarray(ds["temperature"][key].values)

        edr = {"bbox": f"-180,{low!r},180,{high!r}", "datetime": f"{iso[0]}Z/{iso[1]}Z",
               "parameter-name": "temperature"}

        def via_covjson() -> np.ndarray:
            answer = http.get(f"{base}/edr/collections/ccm3/cube", params=edr)
            answer.raise_for_status()
            r = json.loads(answer.content)["ranges"]["temperature"]
            return np.array([np.nan if v is None else v for v in r["values"]], "f4").reshape(r["shape"])

        def via_netcdf() -> np.ndarray:
            answer = http.get(f"{base}/edr/collections/ccm3/cube", params={**edr, "f": "netCDF"})
            answer.raise_for_status()
            path = Path(tmp) / "cube.nc"
            path.write_bytes(answer.content)
            with xr.open_dataset(path) as ds:
                return np.asarray(ds["temperature"].values)

        paths: list[tuple[str, Callable[[], np.ndarray]]] = [
            ("xarray, local files", via_xarray), ("dstp client (gRPC)", via_client),
            ("Zarr: xr.open_zarr", via_zarr), ("EDR cube, CoverageJSON", via_covjson),
            ("EDR cube, netCDF", via_netcdf)]
        for how, fn in paths:
            seconds, got, runs = _timed(fn, repeats)
            np.testing.assert_array_equal(np.asarray(got, dtype="f4"), np.asarray(want, dtype="f4"), err_msg=how)
            rows.append({"how": how, "seconds": seconds, "values": int(got.size), "runs": runs,
                         "mb_per_s": got.size * 4 / 2**20 / seconds if seconds else None})
    native = next(r["seconds"] for r in rows if r["how"] == "dstp client (gRPC)")
    for r in rows:
        r["vs_native"] = r["seconds"] / native
    result = {"rows": rows, "slab": f"T[4:10, :, {key[2].start}:{key[2].stop}, :]", "sql": sql,
              "zarr_chunks": chunk_path, "sample": "small" if quick else "medium", "repeats": repeats,
              "all_equal": True}
    if not quick:
        write_json(NAME, result)
        table = markdown_table(rows, [("how", "path"), ("seconds", "median s"), ("vs_native", "× native"),
                                      ("mb_per_s", "MiB/s"), ("values", "values")])
        write_markdown(NAME, "Zarr and EDR: one slab through the doors vs the native path", (
            f"ccm3 ({result['sample']} sample), `{result['slab']}` = `{sql}`; open + read on the client's clock, "
            f"medians of {repeats} runs after a warm-up, loopback; every answer equal to xarray's on the files. "
            f"Zarr chunks of `temperature`: `{chunk_path}`. × native: over the dstp client (gRPC).\n\n{table}\n"))
    return result

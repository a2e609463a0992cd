"""Compute near the data: a server-side reduction and a federated matchup against moving the records.

What is measured, on loopback (medians of ``repeats`` interleaved runs; the
three paths of each task take turns within every round):

**Monthly mean per level** of the ``medium`` ccm3 sample (36 × 18 × 64 × 128 =
5.3 M temperatures): ``select lev, month(time) as month, avg(temperature) ...
group by lev, month``.

* **dstp server-side** — ``client.query(SQL)`` against a ``dstp serve``
  process: the server reads, reduces and sends 216 records.
* **download + xarray** — ``client.query`` of every ``(time, lev, lat, lon,
  temperature)`` record, ``dstp.to_xarray``, then ``groupby("time.month")
  .mean(...)``: what a user without server-side reductions does.
* **xarray on local files** — ``open_mfdataset`` of the same files and the same
  ``groupby``: no network, the files on this machine.

Bytes are what the data channel carried to the client (``wire_bytes`` of the
transfer summary); for local xarray, the bytes of ``T`` in the files.

**Matchup of station records against a remote grid**: ~100 k buoy records on
server A, the medium ccm3 grid on server B, named on A by a ``<remote>``
descriptor. ``matchup(buoys, ccm3_far, time => interval '20 days')`` at the
lowest level through A (A pulls from B only the index box the buoys need)
against pulling the grid level from B and matching in xarray
(``sel(method="nearest")``) on the client.

The monthly means are also measured across the emulated transatlantic path of
:mod:`bench.wan` (110 ms RTT, 1 Gb/s, MTU 1500): the server in one network
namespace, a client process in the other running the two network paths in
turn (``--wan``, or ``python -m bench run --only reductions`` when the
emulator can be set up: root and ``ip netns``). The matchup stays on loopback.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import xarray as xr

import dstp
from bench.dstp_process import serve
from bench.report import markdown_table, median, write_json, write_markdown

NAME = "reductions"
SQL = "select lev, month(time) as month, avg(temperature) as t from ccm3 group by lev, month order by lev, month"
RECORDS_SQL = "select time, lev, lat, lon, temperature from ccm3"
LEVEL = 992.6
MATCHUP_SQL = ("select b.station_name, b.time, b.sst, m.temperature, m.time as model_time from "
               "matchup(buoys as b, ccm3_far as m, time => interval '20 days') as mu where m.lev = {level}")
GRID_SQL = "select time, lev, lat, lon, temperature from ccm3 where lev = {level}"
REMOTE_XML = """<?xml version="1.0"?>
<dataset xmlns="urn:dstp:descriptor:1" id="ccm3_far" version="1">
  <title>ccm3, served by the other server</title>
  <remote server="{server}" dataset="ccm3"/>
</dataset>
"""


def _wire(client: dstp.Client) -> int:
    s = client.last_summary
    return int(s["wire_bytes"] or s["bytes"]) if s is not None else 0


def server_side(client: dstp.Client) -> tuple[np.ndarray, int]:
    table = client.query(SQL)
    return np.asarray(table.column("t").to_numpy()), _wire(client)


def download_then_xarray(client: dstp.Client) -> tuple[np.ndarray, int]:
    table = client.query(RECORDS_SQL)
    wire = _wire(client)
    ds = dstp.to_xarray(table)
    mean = ds["temperature"].astype("f8").groupby("time.month").mean(["time", "lat", "lon"])
    return mean.transpose("lev", "month").values.reshape(-1), wire


def local_xarray(folder: Path) -> tuple[np.ndarray, int]:
    files = sorted(folder.glob("ccm3_*.nc"))
    with xr.open_mfdataset(files, combine="nested", concat_dim="time", data_vars="minimal", coords="minimal",
                           compat="override", decode_times=xr.coders.CFDatetimeCoder(use_cftime=True)) as ds:
        mean = ds["T"].astype("f8").groupby("time.month").mean(["time", "lat", "lon"]).compute()
        nbytes = int(ds["T"].nbytes)
    return mean.transpose("lev", "month").values.reshape(-1), nbytes


def _timed(fn: Callable[[], tuple[Any, int]]) -> tuple[Any, int, float]:
    started = time.perf_counter()
    value, nbytes = fn()
    return value, nbytes, time.perf_counter() - started


def monthly_means(root: Path, repeats: int) -> dict[str, Any]:
    paths: dict[str, Callable[[], tuple[Any, int]]] = {}
    runs: dict[str, list[float]] = {}
    moved: dict[str, int] = {}
    answers: dict[str, np.ndarray] = {}
    with serve(root) as srv, dstp.connect(srv.endpoints["grpc"]) as client:
        paths = {"dstp server-side": lambda: server_side(client),
                 "download + xarray": lambda: download_then_xarray(client),
                 "xarray on local files": lambda: local_xarray(root / "ccm3")}
        for fn in paths.values():  # warm the page cache and the server
            fn()
        for _ in range(repeats):
            for name, fn in paths.items():
                value, nbytes, seconds = _timed(fn)
                runs.setdefault(name, []).append(seconds)
                moved[name], answers[name] = nbytes, value
    reference = answers["xarray on local files"]
    agree = {n: float(np.max(np.abs(a - reference))) for n, a in answers.items()}
    return {"sql": SQL, "runs_s": runs, "median_s": {n: median(r) for n, r in runs.items()}, "bytes": moved,
            "max_abs_difference_vs_local_xarray": agree}


#: The client side of the WAN measurement, run in the client's network namespace: the two network paths in
#: turn, ``repeats`` rounds, after one warm-up each; prints the runs and bytes as JSON.
WAN_CLIENT = """
import json, sys, time
import numpy as np
import dstp
from bench.reductions import server_side, download_then_xarray
target, repeats = sys.argv[1], int(sys.argv[2])
out = {"runs_s": {}, "bytes": {}, "answers": {}}
with dstp.connect(target) as client:
    paths = {"dstp server-side": lambda: server_side(client), "download + xarray": lambda: download_then_xarray(client)}
    for fn in paths.values():
        fn()
    for _ in range(repeats):
        for name, fn in paths.items():
            started = time.perf_counter()
            value, nbytes = fn()
            out["runs_s"].setdefault(name, []).append(time.perf_counter() - started)
            out["bytes"][name], out["answers"][name] = nbytes, [float(v) for v in value]
print(json.dumps(out))
"""


def monthly_means_wan(root: Path, repeats: int) -> dict[str, Any]:
    """Return the two network paths of the monthly means measured across the emulated 110 ms path."""
    from bench.table4 import wan_path

    with wan_path() as (wan, info), serve(root, "--host", wan.server_addr,
                                           prefix=wan.exec_argv(wan.server_ns, [])) as srv:
        argv = wan.exec_argv(wan.client_ns, [sys.executable, "-c", WAN_CLIENT, srv.endpoints["grpc"], str(repeats)])
        done = subprocess.run(argv, capture_output=True, text=True, timeout=1800, cwd=Path(__file__).parent.parent)
        if done.returncode != 0:
            raise RuntimeError(f"the WAN client failed: {done.stderr[-2000:]}")
        out = json.loads(done.stdout.strip().splitlines()[-1])
    reference = local_xarray(root / "ccm3")[0]
    agree = {n: float(np.max(np.abs(np.asarray(a) - reference))) for n, a in out["answers"].items()}
    return {"sql": SQL, "path": info, "runs_s": out["runs_s"], "bytes": out["bytes"],
            "median_s": {n: median(r) for n, r in out["runs_s"].items()},
            "max_abs_difference_vs_local_xarray": agree}


def _buoys(folder: Path, records: int) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    import builders  # the test suite's builder of CF station files

    from dstp.catalog.publish import publish

    stations = max(4, records // 750)  # each buoy reports 500 to 1000 times
    publish(builders.buoys(folder, stations=stations, per_station=1000, start="1990-01-01", days=1090), "buoys")


def matchup(root: Path, repeats: int, records: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="dstp-bench-matchup-"))
    try:
        with serve(root) as far:
            (work / "far").mkdir()
            (work / "far" / "ccm3_far.dstp.xml").write_text(REMOTE_XML.format(server=far.endpoints["grpc"]))
            _buoys(work / "buoys", records)
            with serve(work) as near, dstp.connect(near.endpoints["grpc"]) as a, \
                    dstp.connect(far.endpoints["grpc"]) as b:
                n_records = a.query("select count(*) as n from buoys").column("n")[0].as_py()

                def federated() -> tuple[Any, int]:
                    table = a.query(MATCHUP_SQL.format(level=LEVEL))
                    return table, _wire(a)

                def pull_grid() -> tuple[Any, int]:
                    grid = b.query(GRID_SQL.format(level=LEVEL))
                    wire = _wire(b)
                    buoys = a.query("select station_name, time, sst, lat, lon from buoys").to_pandas()
                    wire += _wire(a)
                    ds = dstp.to_xarray(grid)
                    sel = ds["temperature"].isel(lev=0).sel(time=xr.DataArray(buoys["time"].to_numpy(), dims="obs"),
                                                lat=xr.DataArray(buoys["lat"].to_numpy(), dims="obs"),
                                                lon=xr.DataArray(np.mod(buoys["lon"].to_numpy(), 360), dims="obs"),
                                                method="nearest")
                    return sel.values, wire

                paths = {"dstp matchup (A pulls the box from B)": federated,
                         "pull the grid level + xarray sel nearest": pull_grid}
                for fn in paths.values():
                    fn()
                runs: dict[str, list[float]] = {}
                moved: dict[str, int] = {}
                rows = 0
                for _ in range(repeats):
                    for name, fn in paths.items():
                        value, nbytes, seconds = _timed(fn)
                        runs.setdefault(name, []).append(seconds)
                        moved[name] = nbytes
                        if name.startswith("dstp"):
                            rows = value.num_rows
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"sql": MATCHUP_SQL.format(level=LEVEL), "station_records": n_records, "result_rows": rows,
            "runs_s": runs, "median_s": {n: median(r) for n, r in runs.items()}, "bytes_to_client": moved}


def _wan_section(w: dict[str, Any] | None) -> str:
    if not w:
        return "The 110 ms WAN path was not run."
    if "error" in w:
        return f"The 110 ms WAN path could not be set up here: {w['error']}"
    rows = [{"path": n, "s": w["median_s"][n], "bytes": w["bytes"][n],
             "diff": w["max_abs_difference_vs_local_xarray"][n]} for n in w["median_s"]]
    table = markdown_table(rows, [("path", "path"), ("s", "median s"), ("bytes", "bytes moved"),
                                  ("diff", "max abs difference vs local xarray (K)")])
    ratio_t = w["median_s"]["download + xarray"] / w["median_s"]["dstp server-side"]
    ratio_b = w["bytes"]["download + xarray"] / max(1, w["bytes"]["dstp server-side"])
    return (f"Across the emulated path (110 ms RTT, 1 Gb/s; server and client in their own network namespaces, "
            f"client process in the client namespace):\n\n{table}\n\n**download-then-aggregate moves "
            f"{ratio_b:.0f}× the bytes and takes {ratio_t:.1f}× the time of the server-side reduction** (WAN).")


def run(quick: bool, samples: dict[str, Path], repeats: int = 3, wan: bool = True) -> dict[str, Any]:
    root = samples["small" if quick else "medium"]
    result: dict[str, Any] = {"samples": "small" if quick else "medium", "path": "loopback",
              "monthly_means": monthly_means(root, 1 if quick else repeats),
              "matchup": matchup(root, 1 if quick else repeats, 2_000 if quick else 100_000)}
    if not quick and wan:
        try:
            result["monthly_means_wan"] = monthly_means_wan(root, repeats)
        except Exception as exc:  # noqa: BLE001 - the emulator needs root and netns; say why it was not run
            result["monthly_means_wan"] = {"error": f"{type(exc).__name__}: {exc}"}
    m = result["monthly_means"]
    dstp_s, dstp_b = m["median_s"]["dstp server-side"], m["bytes"]["dstp server-side"]
    result["bytes_ratio_download_vs_server"] = m["bytes"]["download + xarray"] / max(1, dstp_b)
    result["time_ratio_download_vs_server"] = m["median_s"]["download + xarray"] / dstp_s
    if not quick:
        write_json(NAME, result)
        rows = [{"path": n, "s": m["median_s"][n], "bytes": m["bytes"][n],
                 "diff": m["max_abs_difference_vs_local_xarray"][n]} for n in m["median_s"]]
        table = markdown_table(rows, [("path", "path"), ("s", "median s"), ("bytes", "bytes moved"),
                                      ("diff", "max abs difference vs local xarray (K)")])
        mu = result["matchup"]
        rows2 = [{"path": n, "s": mu["median_s"][n], "bytes": mu["bytes_to_client"][n]} for n in mu["median_s"]]
        table2 = markdown_table(rows2, [("path", "path"), ("s", "median s"), ("bytes", "bytes to the client")])
        write_markdown(NAME, "Reductions and matchups near the data", (
            f"Monthly mean per level of the medium ccm3 sample (5.3 M records), loopback, medians of {repeats} "
            f"interleaved runs.\n\n`{SQL}`\n\n{table}\n\n"
            f"**download-then-aggregate moves {result['bytes_ratio_download_vs_server']:.0f}× the bytes and takes "
            f"{result['time_ratio_download_vs_server']:.1f}× the time of the server-side reduction** (loopback).\n\n"
            f"Matchup of {mu['station_records']:,} buoy records (server A) against the medium ccm3 grid on server B "
            f"(a `<remote>` dataset on A), lowest level, {mu['result_rows']:,} rows:\n\n{table2}\n\n"
            "Bytes for the matchup are what reached the client; what A pulled from B is not in the transfer "
            "summary.\n\n" + _wan_section(result.get("monthly_means_wan"))
        ))
    return result

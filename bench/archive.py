"""An archive of many files: publish, cold and warm start, and how soon a new file is queryable (issue 35).

Tiny CF files — one day each, ``t2m(time, lat, lon)`` on 73 × 144, int16 packed, zlib — because the cost
is per file. Two layouts:

* ``one dataset`` — N daily files of one dataset (ERA5-like), N = 100, 1,000, 10,000 and 100,000;
* ``N datasets`` — N one-file datasets, each in its own folder with its own descriptor, N = 1,000 and 10,000.

Per case, each measured in a fresh ``dstp serve`` process (``bench.dstp_process.serve``), on loopback:

* ``publish`` (one dataset only) — ``dstp publish DIR --glob 'era5_*.nc'``, whole process: headers read
  by helper processes, the draft, and the check that the server would serve it;
* ``cold start`` — the server with an empty state folder: spawn until it listens (it reads every header
  and builds the catalog index); the server's own log line gives the header reading alone;
* ``warm start`` — the same server started again on the unchanged archive (it reads no data file);
* ``new file`` — on the warm server (file watch on, default ``catalog_settle_s`` of 1 s), a new day written
  under a name the glob does not match, then renamed into place: from the rename until a client's query
  ``select t2m … where time = <that day>`` returns its records (N datasets: a new dataset's folder
  renamed into the root, until its first query answers);
* RSS — the server's resident and peak memory after its start (``/proc``), and its CPU seconds;
* ``floor`` — measured just before each cold start, on the same files: netCDF-C (netCDF4-python) opening
  each file, reading its header (dimensions, variables, their attributes) and closing it, in as many processes
  as the server's ``catalog_build_processes`` (the cores); ``floor + coordinates`` also reads each file's
  coordinate variables whole, which a cold build must keep too. No index, no dataset, no server: what the
  machine allows at that moment, so a cold build's files/s reads against the floor of the same minute.

Where the time goes: ``Catalog.scan`` of the largest one-dataset archive, cold and warm, is run once more
in a process of its own under cProfile; the functions with the most cumulative time are kept in the JSON
(``profile``). The machine is shared: the load average at each measurement is recorded beside it.

Archives are generated once into the user cache (``~/.cache/dstp/bench/archive``) and reused. ``--quick``:
40 and 300 files (the helper processes read headers from 256 files on), 30 datasets; nothing written.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

import numpy as np

NAME = "archive"
SIZES = (100, 1_000, 10_000, 100_000)
MANY = (1_000, 10_000)
QUICK_SIZES = (40, 300)
QUICK_MANY = (30,)
GRID = (73, 144)
GOALS = {"warm_start_s": 5.0, "new_file_s": 5.0, "cold_files_per_s": 2_000.0}
#: Longest the benchmark waits for a new file to become queryable before it records a failure.
NEW_FILE_TIMEOUT_S = 600.0


# -- the archives -----------------------------------------------------------------------------------------------

def write_day(path: Path, day: int) -> None:
    """Write one daily file (``day`` days after 1950-01-01) at ``path``."""
    import netCDF4

    lat, lon = np.linspace(-90, 90, GRID[0]), np.arange(GRID[1]) * (360.0 / GRID[1])
    with netCDF4.Dataset(path, "w") as nc:
        nc.createDimension("time", None)
        nc.createDimension("lat", GRID[0])
        nc.createDimension("lon", GRID[1])
        t = nc.createVariable("time", "f8", ("time",))
        t.units, t.calendar, t.standard_name, t.axis = "days since 1950-01-01", "standard", "time", "T"
        la = nc.createVariable("lat", "f4", ("lat",))
        la.units, la.standard_name = "degrees_north", "latitude"
        la[:] = lat
        lo = nc.createVariable("lon", "f4", ("lon",))
        lo.units, lo.standard_name = "degrees_east", "longitude"
        lo[:] = lon
        v = nc.createVariable("t2m", "i2", ("time", *("lat", "lon")), zlib=True, complevel=1,
                              fill_value=np.int16(-32767))
        v.units, v.standard_name, v.scale_factor, v.add_offset = "K", "air_temperature", 0.01, 273.15
        t[0] = day
        v[0] = ((np.add.outer(np.cos(np.radians(lat)) * 30, np.sin(np.radians(lon)) * 5) + day % 365 / 40)
                / 0.01).astype(np.int16)


def _write_range(folder: str, start: int, stop: int, layout: str) -> None:
    for i in range(start, stop):
        if layout == "one":
            write_day(Path(folder) / f"era5_{i:06d}.nc", i)
        else:
            sub = Path(folder) / f"ds_{i:05d}"
            sub.mkdir(exist_ok=True)
            write_day(sub / f"ds_{i:05d}.nc", i)


def _generate(folder: Path, n: int, layout: str) -> None:
    """Write ``n`` files (in parallel processes), once: a ``.complete`` marker says they are there."""
    if (folder / ".complete").exists():
        return
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    target = folder / "era5" if layout == "one" else folder
    target.mkdir(exist_ok=True)
    workers = max(1, os.cpu_count() or 1)
    step = -(-n // workers)
    procs = [subprocess.Popen([sys.executable, "-c", f"from bench.archive import _write_range; "
                               f"_write_range({str(target)!r}, {a}, {min(n, a + step)}, {layout!r})"],
                              cwd=Path(__file__).resolve().parents[1]) for a in range(0, n, step)]
    if any(p.wait() for p in procs):
        raise RuntimeError(f"could not write the files of {folder}")
    if layout == "many":
        _descriptors(target, n)
    (folder / ".complete").touch()


def _descriptors(root: Path, n: int) -> None:
    """Give each one-file folder a descriptor: the first drafted by dstp publish, the others its copies."""
    from dstp.catalog.publish import publish

    first = publish([root / "ds_00000" / "ds_00000.nc"], "ds_00000")
    text = first.read_text()
    for i in range(1, n):
        name = f"ds_{i:05d}"
        (root / name / f"{name}.dstp.xml").write_text(text.replace("ds_00000", name))


# -- measurements ---------------------------------------------------------------------------------------------

@contextlib.contextmanager
def _served(root: Path, state: Path) -> Iterator[tuple[Any, float, str]]:
    """Yield (server, seconds from spawn until it listens, its log) for ``dstp serve root``."""
    from bench.dstp_process import serve

    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    env = {"DSTP_STATE_DIR": str(state), "DSTP_DATA_PORT": "-1", "DSTP_UDT_PORT": "-1"}
    started = time.monotonic()
    try:
        with serve(root, "--verbose", env=env, timeout=3600, stderr=log) as server:
            seconds = time.monotonic() - started
            log.flush()
            yield server, seconds, Path(log.name).read_text()
    finally:
        log.close()
        os.unlink(log.name)


def _header_seconds(log: str) -> float | None:
    import re

    found = re.findall(r"read the headers of (\d+) file\(s\) in ([\d.]+) s", log)
    return sum(float(s) for _, s in found) if found else None


#: One process of the floor: opens each file named on stdin and reads its header (and, with "coordinates", the
#: values of its 1-D variables named like their dimension), as a cold build must at the least.
_FLOOR = r"""
import sys, netCDF4
coordinates = sys.argv[1] == "coordinates"
for path in sys.stdin.read().split("\n"):
    if not path:
        continue
    with netCDF4.Dataset(path) as ds:
        ds.set_auto_maskandscale(False)  # raw values, as the catalog reads them
        for d in ds.dimensions.values():
            len(d), d.isunlimited()
        for name, v in ds.variables.items():
            v.dimensions, v.shape, v.dtype
            for k in v.ncattrs():
                v.getncattr(k)
            if coordinates and v.dimensions == (name,):
                v[...]
        for k in ds.ncattrs():
            ds.getncattr(k)
"""


def _floor(root: Path, coordinates: bool) -> dict[str, Any]:
    """Return the header-read floor over every file of ``root``: files/s of netCDF-C alone, in as many processes
    as the server reads headers with (the cores), and their CPU seconds."""
    import resource

    files = sorted(str(p) for p in root.rglob("*.nc"))
    processes = os.cpu_count() or 1
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-c", _FLOOR, "coordinates" if coordinates else "header"],
                              stdin=subprocess.PIPE, text=True) for _ in range(processes)]
    for k, proc in enumerate(procs):
        assert proc.stdin is not None
        proc.stdin.write("\n".join(files[k::processes]))
        proc.stdin.close()
    if any(proc.wait() for proc in procs):
        raise RuntimeError("the header-read floor failed")
    seconds = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {"seconds": seconds, "files_per_s": len(files) / seconds, "cpu_s": cpu, "processes": processes,
            "load": load}


def _start(root: Path, state: Path, n: int) -> dict[str, Any]:
    load = os.getloadavg()[0]
    with _served(root, state) as (server, seconds, log):
        rss, peak = server.rss_bytes()
        return {"seconds": seconds, "headers_s": _header_seconds(log), "rss_MB": rss / 2**20,
                "peak_rss_MB": peak / 2**20, "cpu_s": server.cpu_seconds(), "load": load,
                "files_per_s": n / seconds}


def _new_file(root: Path, state: Path, n: int, layout: str) -> dict[str, Any]:
    """Measure from a rename into place until a query answers over the new file (on a started server)."""
    import dstp

    with _served(root, state) as (server, _, _log), dstp.connect(server.endpoints["grpc"]) as client:
        load = os.getloadavg()[0]
        if layout == "one":
            folder = root / "era5"
            part = folder / f".era5_{n:06d}.nc.part"
            write_day(part, n)
            day = np.datetime64("1950-01-01") + np.timedelta64(n, "D")
            sql = f"select t2m from era5 where time = '{day}T00:00:00'"
            target = folder / f"era5_{n:06d}.nc"
        else:
            name = f"ds_{n:05d}"
            part = root.parent / f".{name}"
            shutil.rmtree(part, ignore_errors=True)
            part.mkdir()
            write_day(part / f"{name}.nc", n)
            template = (root / "ds_00000" / "ds_00000.dstp.xml").read_text()
            (part / f"{name}.dstp.xml").write_text(template.replace("ds_00000", name))
            sql = f"select count(*) as n from {name}"
            target = root / name
        started = time.monotonic()
        os.rename(part, target)
        try:
            while time.monotonic() - started < NEW_FILE_TIMEOUT_S:
                try:
                    if client.query(sql).num_rows:
                        return {"seconds": time.monotonic() - started, "load": load}
                except dstp.DstpError:
                    pass  # the dataset is not there yet
                time.sleep(0.05)
            return {"seconds": None, "load": load, "error": f"not queryable within {NEW_FILE_TIMEOUT_S:g} s"}
        finally:
            if target.is_dir():
                shutil.rmtree(target)
            else:
                target.unlink()


def _publish(root: Path, state: Path, n: int) -> dict[str, Any]:
    (root / "era5" / "era5.dstp.xml").unlink(missing_ok=True)
    load = os.getloadavg()[0]
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "dstp.cli", "publish", str(root / "era5"), "--glob", "era5_*.nc",
                           "--id", "era5"], capture_output=True, text=True, env={**os.environ,
                                                                                "DSTP_STATE_DIR": str(state)})
    seconds = time.monotonic() - started
    if done.returncode:
        raise RuntimeError(f"dstp publish failed: {done.stderr[-500:]}")
    return {"seconds": seconds, "files_per_s": n / seconds, "load": load}


def _profile(root: Path, state: Path, top: int = 14) -> list[dict[str, Any]]:
    """Return the functions with the most cumulative time of one ``Catalog.scan`` of ``root`` (own process)."""
    code = f"""
import cProfile, io, json, pstats, time
from pathlib import Path
from dstp.catalog.index import index_path
from dstp.catalog.registry import Catalog
index = index_path(Path({str(state)!r}), Path({str(root)!r}))
profile = cProfile.Profile()
started = time.perf_counter()
profile.enable()
catalog = Catalog.scan(Path({str(root)!r}), index=index, processes=__import__('os').cpu_count())
profile.disable()
total = time.perf_counter() - started
catalog.close()
stats = pstats.Stats(profile)
rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][3])[:{top}]
print(json.dumps({{"total_s": total, "rows": [
    {{"function": f"{{Path(k[0]).name}}:{{k[1]}}({{k[2]}})", "calls": v[1], "own_s": v[2], "cumulative_s": v[3]}}
    for k, v in rows]}}))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if done.returncode:
        return [{"function": "profile failed", "error": done.stderr[-400:]}]
    return json.loads(done.stdout.strip().splitlines()[-1])


_COLD_SCAN = """
import json, os, resource, sys, tempfile, time
from pathlib import Path
from dstp.catalog.registry import Catalog
root = Path(sys.argv[1])
with tempfile.TemporaryDirectory() as state:
    started = time.monotonic()
    catalog = Catalog.scan(root, index=Path(state) / "index.sqlite", processes=os.cpu_count() or 1)
    seconds = time.monotonic() - started
    files = sum(len(ds.files) for ds in catalog)
    catalog.close()
usage = [resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
print(json.dumps({"seconds": seconds, "files": files, "cpu_s": sum(u.ru_utime + u.ru_stime for u in usage)}))
"""


def cold_rounds(root: Path, rounds: int = 3) -> list[dict[str, Any]]:
    """Return, per round, the floor, the floor with coordinates and a cold ``Catalog.scan`` of ``root`` (index
    built, helper processes as many as the cores, in a fresh process: its CPU counts the helpers'), one after the
    other, so that each cold build reads against the floor of the same minute. Prints one line per measurement.

    ``python -c "from bench.archive import cold_rounds; cold_rounds(Path(...))"`` on an archive of
    :func:`_generate` (``~/.cache/dstp/bench/archive/one-10000``).
    """
    out = []
    for k in range(rounds):
        floor, coordinates = _floor(root, coordinates=False), _floor(root, coordinates=True)
        load = os.getloadavg()[0]
        done = subprocess.run([sys.executable, "-c", _COLD_SCAN, str(root)], capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"the cold scan failed: {done.stderr[-500:]}")
        cold = json.loads(done.stdout.strip().splitlines()[-1])
        cold.update(files_per_s=cold["files"] / cold["seconds"], load=load)
        row = {"floor": floor, "floor_coordinates": coordinates, "cold_scan": cold}
        for name, m in row.items():
            files = cold["files"]
            print(f"round {k + 1} {name:18s} {m['files_per_s']:7,.0f} files/s  {m['seconds']:6.2f} s  CPU "
                  f"{m['cpu_s'] / files * 1e3:.3f} ms/file  load {m['load']:.1f}", flush=True)
        out.append(row)
    return out


def measure(base: Path, n: int, layout: str, quick: bool) -> dict[str, Any]:
    """Return the figures of one archive (generated under ``base`` if need be)."""
    root = base / f"{layout}-{n}"
    _generate(root, n, layout)
    state = Path(tempfile.mkdtemp(prefix="dstp-bench-archive-state-"))
    row: dict[str, Any] = {"layout": "one dataset" if layout == "one" else "N datasets", "files": n}
    try:
        if layout == "one":
            row["publish"] = _publish(root, state, n)
        if layout == "many" and not (root / "ds_00000" / "ds_00000.dstp.xml").exists():
            _descriptors(root, n)
        shutil.rmtree(state)
        state.mkdir()
        row["floor"] = _floor(root, coordinates=False)
        row["floor_coordinates"] = _floor(root, coordinates=True)
        row["cold"] = _start(root, state, n)
        row["warm"] = _start(root, state, n)
        if not quick and layout == "one" and n == max(SIZES):
            row["profile_warm"] = _profile(root, state)  # before the new file: the index is current
        row["new_file"] = _new_file(root, state, n, layout)
        if not quick and layout == "one" and n == max(SIZES):
            shutil.rmtree(state)
            state.mkdir()
            row["profile_cold"] = _profile(root, state)
    finally:
        shutil.rmtree(state, ignore_errors=True)
    print(json.dumps({k: v for k, v in row.items() if not k.startswith("profile")}), file=sys.stderr)
    return row


def run(quick: bool, samples: dict[str, Path]) -> dict[str, Any]:
    """Return the archive figures; a full run writes bench/results/archive.{json,md,png}."""
    import platformdirs

    from bench.report import RESULTS, machine, write_json, write_markdown

    base = Path(platformdirs.user_cache_dir("dstp")) / "bench" / "archive"
    if quick:
        base = Path(tempfile.mkdtemp(prefix="dstp-bench-archive-"))
    sizes, many = (QUICK_SIZES, QUICK_MANY) if quick else (SIZES, MANY)
    started = time.monotonic()
    try:
        rows = [measure(base, n, "one", quick) for n in sizes] + [measure(base, n, "many", quick) for n in many]
    finally:
        if quick:
            shutil.rmtree(base, ignore_errors=True)
    result: dict[str, Any] = {"mode": "quick" if quick else "full", "grid": GRID, "goals": GOALS, "rows": rows,
                              "machine": machine(), "suite_seconds": round(time.monotonic() - started, 1)}
    if not quick:
        write_json(NAME, result)
        write_markdown(NAME, "An archive of many files: publish, start, new files", report(result))
        plot(result, RESULTS)
    largest = max((r for r in rows if r["layout"] == "one dataset"), key=lambda r: r["files"])
    return {"mode": result["mode"], "largest": largest["files"], "warm_start_s": largest["warm"]["seconds"],
            "cold_start_s": largest["cold"]["seconds"], "new_file_s": largest["new_file"]["seconds"]}


def report(result: dict[str, Any]) -> str:
    """Return the markdown table (and the profiles) of a full run."""
    g = result["goals"]
    lines = [f"Tiny daily CF files ({result['grid'][0]} × {result['grid'][1]}, int16 packed, zlib); each start a "
             f"fresh `dstp serve` process, spawn until it listens. Goals: warm start of 100,000 files ≤ "
             f"{g['warm_start_s']:g} s, a new file queryable ≤ {g['new_file_s']:g} s after its rename, cold index "
             f"build ≥ {g['cold_files_per_s']:,.0f} files/s. Machine: {result['machine']['cores']} cores, shared "
             "(the 1-minute load average at each measurement is in archive.json).", "",
             "| layout | files | publish s | publish files/s | cold start s | cold files/s | floor files/s | floor + "
             "coordinates files/s | headers s | warm start s | new file s | RSS warm MB | peak RSS cold MB | CPU s cold "
             "| CPU s warm |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]

    def f(v: Any, digits: int = 2) -> str:
        return "–" if v is None else f"{v:,.{digits}f}"

    for r in result["rows"]:
        p = r.get("publish", {})
        lines.append(
            f"| {r['layout']} | {r['files']:,} | {f(p.get('seconds'))} | {f(p.get('files_per_s'), 0)} | "
            f"{f(r['cold']['seconds'])} | {f(r['cold']['files_per_s'], 0)} | "
            f"{f(r.get('floor', {}).get('files_per_s'), 0)} | {f(r.get('floor_coordinates', {}).get('files_per_s'), 0)} | "
            f"{f(r['cold']['headers_s'])} | "
            f"{f(r['warm']['seconds'])} | {f(r['new_file']['seconds'])} | {f(r['warm']['rss_MB'], 0)} | "
            f"{f(r['cold']['peak_rss_MB'], 0)} | {f(r['cold']['cpu_s'], 1)} | {f(r['warm']['cpu_s'], 1)} |")
    for key, title in (("profile_cold", "cold"), ("profile_warm", "warm")):
        for r in result["rows"]:
            prof = r.get(key)
            if not prof or "rows" not in prof:
                continue
            lines += ["", f"Where a {title} `Catalog.scan` of {r['files']:,} files spends its "
                          f"{prof['total_s']:.1f} s (cProfile, own process; cumulative seconds):", "",
                      "| function | calls | own s | cumulative s |", "|---|---:|---:|---:|"]
            lines += [f"| `{x['function']}` | {x['calls']:,} | {x['own_s']:.2f} | {x['cumulative_s']:.2f} |"
                      for x in prof["rows"]]
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result["rows"] if r["layout"] == "one dataset"]
    files = [r["files"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4))
    for key, label, color in (("cold", "cold start (index built)", "#c73"), ("warm", "warm start (index)", "#3a7")):
        ax.plot(files, [r[key]["seconds"] for r in rows], "o-", color=color, label=label)
    ax.plot(files, [r["publish"]["seconds"] for r in rows], "s--", color="#777", label="dstp publish --glob")
    new = [(r["files"], r["new_file"]["seconds"]) for r in rows if r["new_file"]["seconds"] is not None]
    if new:
        ax.plot(*zip(*new), "^:", color="#36c", label="new file queryable")
    ax.axhline(result["goals"]["warm_start_s"], color="#c33", linestyle="--", linewidth=0.8, label="5 s goal")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("files in one dataset")
    ax.set_ylabel("seconds")
    ax.set_title("dstp serve on a growing archive")
    ax.legend(fontsize=8)
    from bench.report import save_figure

    save_figure(fig, out / f"{NAME}.png")


if __name__ == "__main__":
    from bench.report import command_line

    command_line(run)

"""kerchunk reference files against the netCDF files they describe: the same catalog, two ways of reading it.

The ccm3 sample's files (netCDF-4, ``T`` deflate + shuffle in chunks of one time step) are described by
kerchunk's ``SingleHdf5ToZarr`` (one reference file per netCDF file, absolute targets, chunks under 300 bytes
inline), and the sample's descriptor is published twice: over the netCDF files, and over the reference files
(``<files glob="refs/*.json"/>``, docs/zarr-sources.md). In one process, on the catalog's own clock
(``Catalog.scan`` with no index, then queries through the query engine, no server):

* *references*: seconds to make the reference files of every file;
* *open*: ``Catalog.scan`` of the dataset (headers and coordinates read);
* *scan*: ``select count(*), sum(temperature)`` — every value of the variable; *first* is the first run after the
  open, *again* the median of the runs after it (what caches hold by then: the netCDF path keeps decoded chunks,
  the reference path keeps none);
* *point series*: ``temperature`` at one grid point, every time step and level.

Each answer through the references is checked equal to the one through the netCDF files (it raises otherwise).
``--quick`` uses the small sample, one run, and writes nothing.
"""

from __future__ import annotations

import json
import re
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa

from bench.report import markdown_table, write_json, write_markdown

NAME = "zarr_sources"


def _references(files: list[Path], out: Path) -> float:
    import kerchunk.hdf

    started = time.perf_counter()
    for nc in files:
        refs = kerchunk.hdf.SingleHdf5ToZarr(str(nc.resolve()), inline_threshold=300).translate()
        (out / f"{nc.stem}.json").write_text(json.dumps(refs))
    return time.perf_counter() - started


def _timed(fn: Callable[[], pa.Table]) -> tuple[float, pa.Table]:
    started = time.perf_counter()
    table = fn()
    return time.perf_counter() - started, table


def run(quick: bool, samples: dict[str, Path], repeats: int = 5) -> dict[str, Any]:
    from dstp.catalog.registry import Catalog
    from dstp.query.execute import QueryExecution, prepare_query
    from dstp.settings import Settings

    size = "small" if quick else "medium"
    descriptor = next(p for p in sorted(samples[size].rglob("*.dstp.xml")) if "ccm3" in p.name)
    files = sorted(descriptor.parent.glob("*.nc"))
    dataset = re.search(r'id="([^"]+)"', descriptor.read_text())
    assert dataset is not None
    did = dataset.group(1)
    settings = Settings()
    queries = {"scan": f"select count(*), sum(temperature) from {did}",
               "point series": f"select time, lev, temperature from {did} where lat = (select min(lat) from {did}) "
                               f"and lon = (select min(lon) from {did}) order by time, lev"}
    rows: list[dict[str, Any]] = []
    answers: dict[str, dict[str, pa.Table]] = {}
    with tempfile.TemporaryDirectory(prefix="dstp-bench-refs-") as tmp:
        root = Path(tmp)
        (root / "nc").mkdir()
        for nc in files:  # copies: the catalog serves no link whose target lies outside the descriptor's folder
            shutil.copyfile(nc, root / "nc" / nc.name)
        (root / "nc" / descriptor.name).write_text(descriptor.read_text())
        (root / "refs").mkdir()
        made = _references(sorted((root / "nc").glob("*.nc")), root / "refs")
        (root / "refs-dataset").mkdir()
        (root / "refs").rename(root / "refs-dataset" / "refs")
        (root / "refs-dataset" / descriptor.name).write_text(
            re.sub(r'<files glob="[^"]+"', '<files glob="refs/*.json"', descriptor.read_text()))
        for how, folder in (("netCDF files", root / "nc"), ("kerchunk references", root / "refs-dataset")):
            started = time.perf_counter()
            catalog = Catalog.scan(folder, index=root / f"{folder.name}.index")
            opened = time.perf_counter() - started
            try:
                assert not catalog.problems, catalog.problems
                row: dict[str, Any] = {"how": how, "open_s": opened,
                                       "references_s": made if how.startswith("kerchunk") else float("nan")}
                for name, sql in queries.items():
                    def query(sql: str = sql) -> pa.Table:
                        prepared = prepare_query(sql, catalog, settings)
                        return pa.Table.from_batches(list(QueryExecution(prepared, settings).batches()),
                                                     schema=prepared.schema)
                    first, table = _timed(query)
                    again = [_timed(query)[0] for _ in range(1 if quick else repeats)]
                    row[f"{name}_first_s"], row[f"{name}_again_s"] = first, statistics.median(again)
                    answers.setdefault(name, {})[how] = table
                rows.append(row)
            finally:
                catalog.close()
    for name, by_how in answers.items():
        tables = list(by_how.values())
        if not tables[0].equals(tables[1]):
            raise AssertionError(f"{name}: the references answered differently from the netCDF files")
    result = {"sample": size, "files": len(files), "megabytes": round(sum(p.stat().st_size for p in files) / 2**20, 1),
              "rows": rows, "equal": True}
    if not quick:
        write_json(NAME, result)
        columns = [("how", "read through"), ("references_s", "make references s"), ("open_s", "open s"),
                   ("scan_first_s", "scan first s"), ("scan_again_s", "scan again s"),
                   ("point series_first_s", "point series first s"), ("point series_again_s", "point series again s")]
        write_markdown(NAME, f"kerchunk references vs netCDF files ({size} ccm3: {len(files)} files, "
                             f"{result['megabytes']} MiB)",
                       markdown_table(rows, columns) + "\n\nGenerated by `python -m bench run --only zarr_sources` "
                       "(bench/zarr_sources.py says what is measured). Answers equal on both paths.")
    return result


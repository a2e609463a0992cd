"""Map tiles: latency of ``/tiles/ccm3/temperature/{z}/{x}/{y}.png`` cold, rendered and warm, alone and under
16 concurrent clients (issue 39).

One ``dstp serve`` process over the ccm3 sample (medium; ``--quick``: small), HTTP on loopback. Up to
``PER_ZOOM`` tiles per zoom (the ones round the map's centre). Three kinds of request, each timed from sending
to the whole PNG read (httpx, kept connections):

* ``cold`` — the first tile of a time and level not drawn before: the slab is read by a query through the
  service (admission, audit), then sampled, coloured and encoded;
* ``render`` — the slab is in memory, the tile is not (a new colour map): sampling, colouring, PNG;
* ``warm`` — the same tile again: the cached PNG (access is still asked first).

Sequential: one client, each zoom. Concurrent: ``CLIENTS`` threads, each with its own connection, ask every
tile of every zoom (warm) and again with a new colour map (render), shuffled; p50/p99 over all requests.
Goal (issue 39): p50 warm ≤ 20 ms, cold ≤ 300 ms on the medium samples.
"""

from __future__ import annotations

import json
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

NAME = "tiles"
ZOOMS = tuple(range(0, 7))
QUICK_ZOOMS = (0, 1, 2)
PER_ZOOM = 8
CLIENTS = 16
QUICK_CLIENTS = 4
COLD_ROUNDS = 5
GOALS_MS = {"warm": 20.0, "cold": 300.0}
WMS = "{http://www.opengis.net/wms}"
LAYER = ("ccm3", "temperature")


def _tiles(z: int) -> list[tuple[int, int, int]]:
    n = 2**z
    side = max(1, min(n, int(PER_ZOOM**0.5 + 0.99)))
    first = max(0, n // 2 - side // 2)
    return [(z, x, y) for x in range(first, first + side) for y in range(first, first + side)][:PER_ZOOM]


def _percentiles(seconds: list[float]) -> dict[str, float]:
    ordered = sorted(seconds)
    return {"p50_ms": statistics.median(ordered) * 1000,
            "p99_ms": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1000, "requests": len(ordered)}


def _combos(http: Any) -> list[tuple[str, str]]:
    """Return every (time, elevation) of the layer, from the WMS capabilities."""
    caps = ET.fromstring(http.get("/wms", params={"SERVICE": "WMS", "REQUEST": "GetCapabilities"}).content)
    for layer in caps.iter(f"{WMS}Layer"):
        if layer.findtext(f"{WMS}Name") == "/".join(LAYER):
            dims = {d.get("name"): (d.text or "").split(",") for d in layer.iter(f"{WMS}Dimension")}
            return [(t.rstrip("Z"), e) for t in dims.get("time", [""]) for e in dims.get("elevation", [""])]
    raise RuntimeError("the layer is not in the capabilities")


def measure(root: Path, zooms: tuple[int, ...], clients: int, cold_rounds: int) -> dict[str, Any]:
    """Return the sequential and concurrent latencies of the tiles of ``root``'s ccm3."""
    import httpx

    from bench.dstp_process import serve

    def get(http: httpx.Client, tile: tuple[int, int, int], params: dict[str, str]) -> float:
        z, x, y = tile
        started = time.perf_counter()
        answer = http.get(f"/tiles/{LAYER[0]}/{LAYER[1]}/{z}/{x}/{y}.png", params=params)
        answer.raise_for_status()
        assert answer.content[:4] == b"\x89PNG"
        return time.perf_counter() - started

    rows: list[dict[str, Any]] = []
    with serve(root, "--http-port", "0", env={"DSTP_DATA_PORT": "-1", "DSTP_UDT_PORT": "-1"}) as server:
        base = f"http://{server.endpoints['http']}"
        with httpx.Client(base_url=base, timeout=600) as http:
            combos = _combos(http)
            fresh = iter(combos[1:])  # combos[0] is the one warm/render use
            for z in zooms:
                tiles = _tiles(z)
                cold = []
                for _ in range(cold_rounds):
                    time_, level = next(fresh)
                    cold.append(get(http, tiles[0], {"time": time_, "elevation": level}))
                first = {"time": combos[0][0], "elevation": combos[0][1]}
                render = [get(http, t, first | {"colormap": "magma"}) for t in tiles]
                warm = [get(http, t, first | {"colormap": "magma"}) for _ in range(5) for t in tiles]
                for kind, seconds in (("cold", cold), ("render", render), ("warm", warm)):
                    rows.append({"mode": "sequential", "zoom": z, "kind": kind, **_percentiles(seconds)})
                    print(json.dumps(rows[-1]), file=sys.stderr)
        every = [t for z in zooms for t in _tiles(z)]
        first = {"time": combos[0][0], "elevation": combos[0][1]}
        for kind, colormap in (("render", "cividis"), ("warm", "cividis")):
            together: list[float] = []
            lock = threading.Lock()

            def client(seed: int, colormap: str = colormap) -> None:
                order = every[:]
                random.Random(seed).shuffle(order)
                with httpx.Client(base_url=base, timeout=600) as http:
                    got = [get(http, t, first | {"colormap": colormap}) for t in order]
                with lock:
                    together.extend(got)

            threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            rows.append({"mode": f"{clients} clients", "zoom": f"{zooms[0]}–{zooms[-1]}", "kind": kind,
                         **_percentiles(together)})
            print(json.dumps(rows[-1]), file=sys.stderr)
    return {"rows": rows}


def run(quick: bool, samples: dict[str, Path]) -> dict[str, Any]:
    """Return the tile figures; a full run writes bench/results/tiles.{json,md}."""
    from bench.report import machine, write_json, write_markdown

    size = "small" if quick else "medium"
    root = Path(tempfile.mkdtemp(prefix="dstp-bench-tiles-"))
    try:
        shutil.copytree(samples[size] / "ccm3", root / "ccm3")
        zooms, clients, rounds = (QUICK_ZOOMS, QUICK_CLIENTS, 2) if quick else (ZOOMS, CLIENTS, COLD_ROUNDS)
        result = {"mode": "quick" if quick else "full", "samples": size, "goals_ms": GOALS_MS,
                  **measure(root, zooms, clients, rounds), "machine": machine()}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if not quick:
        write_json(NAME, result)
        write_markdown(NAME, "Map tiles: cold, rendered and warm latency", report(result))
    seq = [r for r in result["rows"] if r["mode"] == "sequential"]
    return {"mode": result["mode"],
            "warm_p50_ms": statistics.median(r["p50_ms"] for r in seq if r["kind"] == "warm"),
            "cold_p50_ms": statistics.median(r["p50_ms"] for r in seq if r["kind"] == "cold")}


def report(result: dict[str, Any]) -> str:
    """Return the markdown table of a run."""
    lines = [f"ccm3 temperature, {result['samples']} samples, 256 × 256 PNG tiles on loopback. cold: a time and "
             "level not read before (one slab query + drawing); render: slab in memory, new colour map; warm: "
             f"cached PNG. Goals: p50 warm ≤ {GOALS_MS['warm']:g} ms, cold ≤ {GOALS_MS['cold']:g} ms. Machine: "
             f"{result['machine']['cores']} cores, shared.", "",
             "| mode | zoom | kind | p50 ms | p99 ms | requests |", "|---|---|---|---:|---:|---:|"]
    for r in result["rows"]:
        lines.append(f"| {r['mode']} | {r['zoom']} | {r['kind']} | {r['p50_ms']:,.1f} | {r['p99_ms']:,.1f} | "
                     f"{r['requests']} |")
    return "\n".join(lines) + "\n"

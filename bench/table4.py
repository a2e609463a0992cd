"""Paper 003's Table 4: SOAP vs dstp (and OPeNDAP, HTTP CSV, Arrow Flight) for attribute retrieval.

The question is ``select temperature, time from ccm3 where humidity > 50 limit N`` for N =
10k, 50k, 150k, 375k and 1M records over the medium samples (the full query returns 1,596,909
records; ``limit`` keeps the first N matching records in grid order, and every peer returns
exactly those). Every peer is a real service in its own process that reads the same netCDF
files itself (see :mod:`bench.peers`):

* ``soap`` — spyne SOAP 1.1 on waitress, zeep client;
* ``opendap`` — pydap's DAP2 server (netCDF handler) on waitress, pydap client filtering hyperslabs;
* ``http-csv`` — dstp's HTTP API ``/query?format=csv`` read with ``pyarrow.csv``;
* ``flight`` — a ``pyarrow.flight`` DoGet server (netCDF4 + numpy inside), ``read_all()``;
* ``dstp-grpc``, ``dstp-striped8``, ``dstp-auto``, ``dstp-udt`` — ``dstp serve`` and the Python
  client over each data channel.

Measured on loopback and on the emulated transatlantic path (:mod:`bench.wan`: 110 ms RTT,
1 Gb/s, MTU 1500, no loss, stock TCP buffers), servers in the server namespace and client
drivers in the client namespace. Each peer has one client process per path that is set up
first (imports, WSDL, catalog, channel: untimed), warmed by one untimed request, then asked for
every size ``repeats`` times; peers are interleaved request by request (order rotated each
round), so drift hits all. The time is taken inside the client process around one request:
from sending the question to having every record decoded in client memory.

SOAP costs about 0.1 ms of CPU per record (spyne serialising, zeep parsing: a 1M call takes
1.5–2 minutes here), so to keep the suite near its 8-minute budget SOAP is asked ``repeats``
times only at 10k, once at the larger sizes, and not at all at 375k on the WAN path
(:data:`SOAP_PLAN`); the 1M calls behind the headline ratios are made on both paths.
Across the WAN a peer's requests are minutes apart (the SOAP calls in between), and there the 1M
times of the fast peers spread widely from run to run (dstp ``auto`` 0.24–0.73 s in one run). A
second WAN segment, ``wan-110ms-back-to-back``, asks the headline peers (:data:`BACK_TO_BACK_PEERS`)
for 10k and 1M records :data:`BACK_TO_BACK_REPEATS` times with only each other's requests in between
(fresh servers and clients, set up and warmed the same way): what a script that asks one question
after another sees, with more runs behind each median.
The quick mode runs that segment on loopback, once, so its harness is exercised.
Per (path, peer, size): median seconds, records/s, payload MB/s (12 bytes per record: the
float32 + int64 µs the records carry natively), and on the WAN path the IP bytes the relay
carried server → client (bytes on the wire, median over runs).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

from bench.peers.client import PEERS
from bench.peers.process import ClientDriver, last_exception, serve_all
from bench.peers.records import RECORD_PAYLOAD_BYTES
from bench.peers.sql import SQL
from bench.report import RESULTS, markdown_table, median, write_json, write_markdown

NAME = "table4"
SIZES = (10_000, 50_000, 150_000, 375_000, 1_000_000)
QUICK_SIZES = (1_000, 10_000)
REPEATS = 3
SOAP_REPEATED_UP_TO = 10_000  # SOAP is asked once, not `repeats` times, above this size
SOAP_SKIPPED = {"wan-110ms": (375_000,)}  # (path -> sizes) SOAP is not asked at all: ~45 s of CPU for one call
SOAP_PLAN = (f"SOAP: {REPEATS} runs up to {SOAP_REPEATED_UP_TO:,} records, 1 run above; "
             "not run at 375,000 on wan-110ms (one call is ~45 s of spyne/zeep CPU; suite budget)")
WAN_RTT_MS, WAN_RATE_BPS, WAN_LOSS, WAN_MTU = 110.0, 1e9, 0.0, 1500  # the transatlantic path
WAN_NAME = "dstpwan-table4"
REFERENCE = "dstp-grpc"  # every other peer's records are checked against this one's
#: Back to back: the headline peers again, with only each other's requests between one peer's requests (no
#: SOAP call of minutes in between).
BACK_TO_BACK_PEERS = ("flight", "dstp-grpc", "dstp-auto", "dstp-udt", "dstp-striped8")
BACK_TO_BACK_SIZES = (10_000, 1_000_000)
BACK_TO_BACK_REPEATS = 7
BACK_TO_BACK = "-back-to-back"  # the suffix of such a path's label
PAPER = {10_000: (0.65, 0.21), 50_000: (2.57, 0.72), 150_000: (11.13, 2.05), 375_000: (51.18, 5.01),
         1_000_000: (352.10, 13.43)}  # paper 003 Table 4: (SOAP s, DSTP/UDT s), Amsterdam–Chicago


def _timeout_s(peer: str, size: int) -> float:
    """Return how long one request may take before its driver is stopped."""
    return 60 + size * (400e-6 if peer == "soap" else 100e-6)


def _relay_bytes(path: Any) -> dict[str, int]:
    """Return the relay's cumulative IP byte counters per direction (WAN path only)."""
    dirs = path.stats()["dirs"]
    return {"srv_to_cli": int(dirs["srv_to_cli"]["rx_bytes"]), "cli_to_srv": int(dirs["cli_to_srv"]["rx_bytes"])}


def measure_path(label: str, root: Path, sizes: Sequence[int], repeats: int, peers: Sequence[str],
                 host: str = "127.0.0.1", wan: Any = None) -> dict[str, Any]:
    """Return every request's outcome on one network path, plus the peers' set-up notes."""
    server_prefix = wan.exec_argv(wan.server_ns, []) if wan else []
    client_prefix = wan.exec_argv(wan.client_ns, []) if wan else []
    runs: list[dict[str, Any]] = []
    notes: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="dstp-table4-clients-") as logs, \
            serve_all(root, host, prefix=server_prefix) as endpoints, contextlib.ExitStack() as stack:
        drivers: dict[str, ClientDriver] = {}
        for peer in peers:
            service, key, _ = PEERS[peer]
            url = endpoints.get(service, {}).get(key)
            if url is None:
                notes[peer] = {"error": endpoints.get(service, {}).get("error", f"no {key} endpoint")}
                continue
            drivers[peer] = ClientDriver(peer, url, Path(logs), prefix=client_prefix)
            stack.callback(drivers[peer].close)
        for peer, driver in drivers.items():
            ready = driver.wait_ready()
            notes[peer] = {k: v for k, v in ready.items() if k not in ("peer",)}
        for peer, driver in drivers.items():  # warm-up: page cache, server code paths, connections
            notes[peer]["warmup"] = driver.request(sizes[0], _timeout_s(peer, sizes[0]))
        order = list(peers)
        rounds = itertools.count()
        for rep in range(repeats):
            for size in sizes:
                shift = next(rounds) % len(order)
                for peer in order[shift:] + order[:shift]:
                    if peer == "soap" and size in SOAP_SKIPPED.get(label, ()):
                        if rep == 0:
                            runs.append({"path": label, "peer": peer, "size": size, "rep": rep,
                                         "skipped": "not run (suite time budget)"})
                        continue
                    if peer == "soap" and size > SOAP_REPEATED_UP_TO and rep > 0:
                        continue
                    if peer not in drivers:
                        runs.append({"path": label, "peer": peer, "size": size, "rep": rep,
                                     "error": notes[peer]["error"]})
                        continue
                    before = _relay_bytes(wan) if wan else None
                    answer = drivers[peer].request(size, _timeout_s(peer, size))
                    run = {"path": label, "peer": peer, "rep": rep, **answer}
                    if wan and before:
                        after = _relay_bytes(wan)
                        run["wire_bytes"] = after["srv_to_cli"] - before["srv_to_cli"]
                        run["wire_bytes_up"] = after["cli_to_srv"] - before["cli_to_srv"]
                    runs.append(run)
        for peer in drivers:  # a server-side failure behind a client's error, e.g. pydap's hyperslab bug
            log = endpoints.get(PEERS[peer][0], {}).get("log")
            if log and (line := last_exception(log)):
                notes[peer].setdefault("notes", {})["server_log"] = line
    return {"runs": runs, "notes": notes,
            "endpoints": {k: {n: v for n, v in e.items() if n != "log"} for k, e in endpoints.items()}}


def summarize(runs: list[dict[str, Any]], peers: Sequence[str], sizes: Sequence[int]) -> list[dict[str, Any]]:
    """Return one row per (path, peer, size): medians, rates, and the check against the reference peer."""
    rows = []
    paths = list(dict.fromkeys(r["path"] for r in runs))
    for path, size in itertools.product(paths, sizes):
        mine = [r for r in runs if r["path"] == path and r["size"] == size]
        ref = next((r for r in mine if r["peer"] == REFERENCE and "error" not in r), None)
        asked = {r["peer"] for r in runs if r["path"] == path}
        if not mine:  # a path measured at fewer sizes (back to back)
            continue
        for peer in (p for p in peers if p in asked):
            got = [r for r in mine if r["peer"] == peer]
            ok = [r for r in got if "error" not in r and "skipped" not in r]
            row: dict[str, Any] = {"path": path, "peer": peer, "size": size, "runs": len(ok)}
            if got and all("skipped" in r for r in got):
                row["skipped"] = got[0]["skipped"]
                rows.append(row)
                continue
            if not ok:
                row["error"] = got[0]["error"] if got else "not measured"
                rows.append(row)
                continue
            seconds = median(r["seconds"] for r in ok)
            row.update(median_s=seconds, min_s=min(r["seconds"] for r in ok), seconds=[r["seconds"] for r in ok],
                       records=ok[0]["rows"], records_per_s=ok[0]["rows"] / seconds,
                       payload_MBps=ok[0]["rows"] * RECORD_PAYLOAD_BYTES / seconds / 1e6,
                       check=_check(ok[0], ref, size))
            if "wire_bytes" in ok[0]:
                row["wire_bytes"] = int(median(r["wire_bytes"] for r in ok))
            if ok[0].get("channel"):
                row["channel"] = ok[0]["channel"]
            if len(ok) < len(got):
                row["error"] = next(r["error"] for r in got if "error" in r)
            rows.append(row)
    return rows


def _check(answer: dict[str, Any], ref: dict[str, Any] | None, size: int) -> str:
    """Return "ok" if ``answer`` has the reference peer's records (count, temperature sum, times)."""
    if answer["rows"] != size:
        return f"{answer['rows']} records, not {size}"
    if ref is None:
        return "no reference"
    if answer["rows"] != ref["rows"]:
        return f"{answer['rows']} records, {REFERENCE} had {ref['rows']}"
    if not math.isclose(answer["temperature_sum"], ref["temperature_sum"], rel_tol=1e-6):
        return f"temperature sum {answer['temperature_sum']:.6g} != {ref['temperature_sum']:.6g}"
    if (answer["time_first"], answer["time_last"]) != (ref["time_first"], ref["time_last"]):
        return f"times {answer['time_first']}..{answer['time_last']} != {ref['time_first']}..{ref['time_last']}"
    return "ok"


def ratios(rows: list[dict[str, Any]], path: str, size: int) -> dict[str, float | None]:
    """Return SOAP and Flight time over dstp's (gRPC, UDT, best channel) at ``size`` on ``path``."""
    def t(peer: str) -> float | None:
        row = next((r for r in rows if (r["path"], r["peer"], r["size"]) == (path, peer, size)), None)
        return row.get("median_s") if row and row.get("check") == "ok" else None

    dstp = {p: t(p) for p in PEERS if p.startswith("dstp-")}
    best = min((v for v in dstp.values() if v), default=None)
    out: dict[str, float | None] = {}
    for peer in ("soap", "flight"):
        mine = t(peer)
        for name, ref in (("dstp_grpc", dstp.get("dstp-grpc")), ("dstp_udt", dstp.get("dstp-udt")), ("best_dstp", best)):
            out[f"{peer}_over_{name}"] = mine / ref if mine and ref else None
    return out


def headline(rows: list[dict[str, Any]], size: int) -> dict[str, float | None]:
    """Return the ratios of :func:`ratios` at ``size`` for every path, keys suffixed with the path."""
    return {f"{k}_{path}": v for path in dict.fromkeys(r["path"] for r in rows)
            for k, v in ratios(rows, path, size).items()}


def _fmt_size(n: int) -> str:
    """Return 10k / 1M style labels."""
    return f"{n // 1_000_000}M" if n % 1_000_000 == 0 else f"{n // 1000}k"


def markdown(result: dict[str, Any]) -> str:
    """Return the markdown section: per-path tables, details, ratios, paper numbers, notes."""
    rows, sizes, peers = result["rows"], result["sizes"], result["peers"]
    parts = [f"`{SQL} limit N` on the medium samples; medians of {result['repeats']} interleaved runs "
             f"({SOAP_PLAN}); seconds measured inside the client process "
             "(request sent → all records decoded in client memory). Generated by "
             "`python -m bench run --only table4`."]
    for path in dict.fromkeys(r["path"] for r in rows):
        table = []
        path_sizes = [s for s in sizes if any((r["path"], r["size"]) == (path, s) for r in rows)]
        path_peers = [p for p in peers if any((r["path"], r["peer"]) == (path, p) for r in rows)]
        if path.endswith(BACK_TO_BACK):
            n = result.get("back_to_back_repeats", 1)
            parts.append(f"### {path}\n\nThe headline peers again on this path, {n} interleaved "
                         f"round{'s' if n != 1 else ''}, with nothing between one peer's requests but the other "
                         "peers' (above, SOAP calls of up to minutes sit between rounds). Fresh servers and "
                         "client processes, set up and warmed as above.")
        for size in path_sizes:
            line: dict[str, Any] = {"size": size}
            for peer in path_peers:
                row = next(r for r in rows if (r["path"], r["peer"], r["size"]) == (path, peer, size))
                line[peer] = row.get("median_s") if row.get("check") == "ok" else "not run" if "skipped" in row else (
                    "error" if "median_s" not in row else f"{row['median_s']:.3f} ✗")
            line["soap_ratio"] = ratios(rows, path, size)["soap_over_best_dstp"]
            table.append(line)
        ratio = ([("soap_ratio", "SOAP ÷ best dstp")] if "soap" in path_peers else
                 [("flight_ratio", "best dstp ÷ Flight")])
        for line in table:
            flight_over = ratios(rows, path, line["size"])["flight_over_best_dstp"]
            line["flight_ratio"] = 1 / flight_over if flight_over else None
        parts.append(f"### {path}: median seconds\n\n" + markdown_table(
            table, [("size", "records")] + [(p, p) for p in path_peers] + ratio))
        detail = [{**r, "MBps": r.get("payload_MBps"), "wire_MB": r["wire_bytes"] / 1e6 if "wire_bytes" in r else None,
                   "note": r.get("error") or r.get("skipped") or ("" if r.get("check") == "ok" else r.get("check"))}
                  for r in rows if r["path"] == path]
        parts.append(f"<details><summary>{path}: every peer and size</summary>\n\n" + markdown_table(
            detail, [("peer", "peer"), ("size", "records"), ("runs", "runs"), ("median_s", "median s"),
                     ("min_s", "min s"), ("records_per_s", "records/s"), ("MBps", "payload MB/s"),
                     ("wire_MB", "wire MB (srv→cli)"), ("channel", "channel"), ("note", "note")]) + "\n\n</details>")
    top = max(sizes)
    ratio_rows = [{"path": path, **ratios(rows, path, top)} for path in dict.fromkeys(r["path"] for r in rows)
                  if any((r["path"], r["size"]) == (path, top) for r in rows)]
    parts.append(f"### Time ratios at {_fmt_size(top)} records (> 1: the first peer is slower)\n\n"
                 + markdown_table(ratio_rows, [("path", "path"), ("soap_over_dstp_grpc", "SOAP ÷ dstp gRPC"),
                                               ("soap_over_dstp_udt", "SOAP ÷ dstp UDT"),
                                               ("soap_over_best_dstp", "SOAP ÷ best dstp"),
                                               ("flight_over_dstp_grpc", "Flight ÷ dstp gRPC"),
                                               ("flight_over_best_dstp", "Flight ÷ best dstp")]))
    parts.append("### Paper 003 (Amsterdam–Chicago, 2003)\n\n" + markdown_table(
        [{"size": s, "soap": PAPER[s][0], "dstp": PAPER[s][1], "ratio": PAPER[s][0] / PAPER[s][1]} for s in SIZES],
        [("size", "records"), ("soap", "SOAP s"), ("dstp", "DSTP/UDT s"), ("ratio", "SOAP/DSTP")]))
    notes = [f"* **{path}**: {info['error']}" for path, info in result["paths"].items() if "error" in info]
    notes += [f"* **{peer}** on {path}: {k}: {v}" for path, peer_notes in result["notes"].items()
             for peer, note in peer_notes.items()
             for k, v in [*note.get("notes", {}).items(), *(("error", e) for e in [note.get("error")] if e)]]
    parts.append("### Notes recorded by the run\n\n" + "\n".join(notes) if notes else "")
    parts.append("Plots: " + ", ".join(f"`bench/results/{p}`" for p in result.get("plots", [])))
    return "\n\n".join(p for p in parts if p)


def plot(rows: list[dict[str, Any]], path: str, peers: Sequence[str], out: Path) -> Path:
    """Return the PNG of seconds vs records (log-log), one line per peer, for one network path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 5))
    for peer in peers:
        pts = [(r["size"], r["median_s"]) for r in rows
               if r["path"] == path and r["peer"] == peer and r.get("check") == "ok"]
        if pts:
            xs, ys = zip(*pts, strict=True)
            ax.plot(xs, ys, marker="o", label=peer, linestyle="--" if peer.startswith("dstp") else "-")
    if path != "loopback":  # the paper measured across the Atlantic: show its numbers for scale
        for i, what in enumerate(("SOAP", "DSTP/UDT")):
            ax.plot(list(PAPER), [v[i] for v in PAPER.values()], marker="x", linestyle=":", color="0.4" if i else "0",
                    label=f"paper 003 {what} (2003)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("records returned")
    ax.set_ylabel("median seconds (client-side)")
    ax.set_title(f"Table 4 query, {path}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"{NAME}_{path}.png"
    fig.tight_layout()
    fig.savefig(target, dpi=110)
    plt.close(fig)
    return target


@contextlib.contextmanager
def wan_path() -> Iterator[tuple[Any, dict[str, Any]]]:
    """Return (as a context) the emulated 110 ms path and its settings with a ping measurement."""
    from bench.wan import WanPath, ping_rtt

    with WanPath.up(name=WAN_NAME, rtt_ms=WAN_RTT_MS, rate_bps=WAN_RATE_BPS, loss=WAN_LOSS, mtu=WAN_MTU) as path:
        yield path, {**path.describe(), "ping": ping_rtt(path, count=10)}


def peer_versions() -> dict[str, str | None]:
    """Return the installed versions of the peers' libraries (bench.report records dstp's own)."""
    from importlib import metadata

    out: dict[str, str | None] = {}
    for name in ("spyne", "zeep", "lxml", "pydap", "waitress", "requests", "pyarrow"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def run(quick: bool, samples: dict[str, Path], repeats: int = REPEATS) -> dict[str, Any]:
    """Return the Table 4 results; in full mode also write JSON, markdown and plots to bench/results."""
    started = time.monotonic()
    root = samples["small" if quick else "medium"]
    sizes = QUICK_SIZES if quick else SIZES
    repeats = 1 if quick else repeats
    peers = list(PEERS)
    measured = {"loopback": measure_path("loopback", root, sizes, repeats, peers)}
    if quick:  # the back-to-back segment's harness, exercised at toy size (the full run does it across the WAN)
        label = f"loopback{BACK_TO_BACK}"
        measured[label] = measure_path(label, root, sizes[-1:], 1, BACK_TO_BACK_PEERS)
    paths = {"loopback": {"kind": "loopback", "addr": "127.0.0.1"}}
    if not quick:
        try:
            with wan_path() as (wan, info):
                paths["wan-110ms"] = info
                measured["wan-110ms"] = measure_path("wan-110ms", root, sizes, repeats, peers,
                                                     host=wan.server_addr, wan=wan)
                label = f"wan-110ms{BACK_TO_BACK}"
                measured[label] = measure_path(label, root, BACK_TO_BACK_SIZES, BACK_TO_BACK_REPEATS,
                                               BACK_TO_BACK_PEERS, host=wan.server_addr, wan=wan)
        except (RuntimeError, OSError, ValueError) as exc:  # no namespaces here: say so, keep loopback
            paths["wan-110ms"] = {"error": f"the emulated WAN path could not be used: {exc}"}
    runs = [r for m in measured.values() for r in m["runs"]]
    rows = summarize(runs, peers, sizes)
    result: dict[str, Any] = {
        "sql": SQL, "samples": "small" if quick else "medium", "sizes": list(sizes), "repeats": repeats,
        "soap_plan": SOAP_PLAN, "peers": peers, "paths": paths,
        "back_to_back_repeats": 1 if quick else BACK_TO_BACK_REPEATS,
        "peer_versions": peer_versions(),
        "notes": {k: m["notes"] for k, m in measured.items()}, "rows": rows, "runs": runs,
        "headline": headline(rows, max(sizes)),
    }
    result.update({k: round(v, 2) if v else v for k, v in result["headline"].items() if "best" in k})
    result["all_checks_ok"] = all(r.get("check") == "ok" for r in rows if "skipped" not in r)
    result["suite_seconds"] = time.monotonic() - started
    if not quick:
        result["plots"] = [plot(rows, p, peers, RESULTS).name for p in measured if not p.endswith(BACK_TO_BACK)]
        write_json(NAME, result)
        write_markdown(NAME, "Table 4: SOAP vs dstp for attribute retrieval (paper 003 §5.3)", markdown(result))
    return result

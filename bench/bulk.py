"""Bulk transfer, like paper 003 Table 3 and paper 004 Table 1: ``python -m bench run --only bulk``.

Every peer runs in the same run, as separate processes, interleaved run by run
(the tool order rotates each repetition); medians over ``REPEATS`` runs.

* **Loopback, tmpfs to tmpfs** (a published dataset of random-byte netCDF files
  in /dev/shm, outputs in /dev/shm): files of 100 MiB and 1 GiB with
  ``iperf3 -n SIZE`` (-P 1, -P 8: the memory-to-memory ceiling),
  ``globus-url-copy -p 1|8`` against a one-shot anonymous
  ``globus-gridftp-server`` on 127.0.0.1, and ``dstp get`` with 1 and 8
  stripes, ``auto`` (no flags) and UDT. Throughput is the file size over the
  client process's wall time (spawn to exit: imports, connection setup, the
  data, dstp's final CRC-32C check). A large query result (``SQL_LARGE`` on the
  large samples: 25 M records, 1.10 GB of Arrow) striped ×8, auto, gRPC stream
  and UDT, each in a fresh client process. The UDT channel against raw libudt
  (``bench/udt_raw``'s C++ peers) at the channel's own MSS, buffers and flow
  windows — and at 64 MiB buffers, the best raw setting measured here.
* **Emulated WAN paths** (``bench/wan``, 1 Gb/s, MTU 1500, stock TCP buffers):
  every run moves the 1 GiB file (iperf3: 1 GiB) or stops at ``CAP_S`` seconds
  (SIGINT; the bytes that arrived count), so slow start never dominates and a
  CUBIC stream at 0.1 % loss does not take half an hour.
  The default cut (about 15 minutes with the loopback part) measures the
  issue's criteria: 100 ms without loss (dstp at 4 and 8 stripes under the
  server's default congestion control, BBR, and auto, against iperf3 -P 8
  BBR), and 200 ms with 0.1 % loss (one CUBIC iperf3 stream, dstp ×8 BBR,
  auto and UDT). ``DSTP_BENCH_FULL=1`` runs the whole matrix: 60 and 200 ms ×
  loss 0, 0.01 %, 0.1 % with every peer (iperf3 ×1 CUBIC and BBR, ×8 BBR,
  GridFTP -p 1/-p 8, dstp ×1 and ×8 under CUBIC and BBR, auto, UDT), the
  100 ms cell with 1, 2, 4, 8 and 16 stripes and UDT, and a steady-state
  100 ms cell (a 4 GiB file, every run cut at 30 s) — about 2 hours.
* **auto learns first.** ``dstp get`` with no flags keeps GridCopy's tuning
  cache per server; each place gets an empty cache of its own
  (``XDG_CACHE_HOME``; the fixed-stripe and UDT runs use another, so they teach
  auto nothing) and up to ``WARMUP_MAX`` warm-up transfers of the same file
  until the tuner has settled (stream count no longer decreasing, no UDT probe
  pending). The warm-ups are recorded; the measured auto runs keep learning,
  as a user's would.

CPU seconds per GB: client process (``wait4``: all threads) plus server
process (a long-running ``dstp serve``: its /proc delta; one-shot iperf3 and
GridFTP servers: ``wait4``). The WAN relay's CPU is the emulator's, not counted.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import dstp
from dstp.transport.client.tuning import AutoTuner

from bench import bulk_tools as tools
from bench.bulk_catalog import BulkCatalog, BulkFile, make_catalog
from bench.bulk_tools import Place, Run
from bench.dstp_process import AgentProcess, ServerProcess, agent, serve
from bench.report import median

NAME = "bulk"
FULL_ENV = "DSTP_BENCH_FULL"  # "1": the whole WAN matrix (about 2 hours)
REPEATS = 3
CAP_S = 30.0  # a WAN run moves 1 GiB or stops here
WARMUP_MAX = 6
PROBE_BYTES = 256 * 2**20  # the size of auto's UDT probe during warm-up
WAN_NAME = "dstpwan-bulk"
WAN_PORT = 50051  # fixed, so auto's tuning cache (keyed by address) survives a server restart
SQL_LARGE = "select * from ccm3 limit 25000000"  # 25 M records × 44 bytes = 1.10 GB of Arrow
SQL_QUICK = "select * from ccm3"
TMPFS = Path("/dev/shm")


@dataclass(frozen=True, slots=True)
class Tool:
    """One row: a peer and its settings."""

    name: str
    kind: str  # iperf3 | iperf3_file | splice | gridftp | dstp | query | udt_raw | copy
    streams: int = 0
    congestion: str = ""
    transport: str = "striped"
    agent: bool = False  # `dstp get` handed to the bench's `dstp agent` (warm connections, no gRPC import)


@dataclass(frozen=True, slots=True)
class Cell:
    """One emulated path and the peers measured on it."""

    rtt_ms: float
    loss: float
    tools: tuple[Tool, ...]
    rate_bps: float = 1e9
    mtu: int = 1500
    file: str = "1GiB"  # the catalog file each run moves (or starts to move, until the cap)

    @property
    def label(self) -> str:
        size = "" if self.file == "1GiB" else f", {self.file} file"
        mtu = "" if self.mtu == 1500 else f", MTU {self.mtu}"
        return f"{self.rtt_ms:g} ms, {self.rate_bps / 1e9:g} Gb/s, loss {self.loss * 100:g} %{mtu}{size}"


def _iperf(n: int, cc: str = "") -> Tool:
    return Tool(f"iperf3 ×{n}" + (f" {cc}" if cc else ""), "iperf3", n, cc)


def _gridftp(n: int) -> Tool:
    return Tool(f"GridFTP -p {n}", "gridftp", n)


def _dstp(n: int, cc: str = "") -> Tool:
    return Tool(f"dstp ×{n}" + (f" {cc}" if cc else ""), "dstp", n, cc)


AUTO = Tool("dstp auto", "dstp", transport="auto")
AUTO_AGENT = Tool("dstp auto via agent", "dstp", transport="auto", agent=True)
UDT = Tool("dstp UDT", "dstp", transport="udt")
LOOPBACK_TOOLS = (_iperf(1), _iperf(8), _gridftp(1), _gridftp(8), _dstp(1), _dstp(8), AUTO, AUTO_AGENT, UDT)
QUERY_TOOLS = (Tool("query striped ×8", "query", 8), Tool("query auto", "query", transport="auto"),
               Tool("query gRPC stream", "query", transport="grpc"), Tool("query UDT", "query", transport="udt"))
WAN_ALL = (_iperf(1, "cubic"), _iperf(1, "bbr"), _iperf(8, "bbr"), _gridftp(1), _gridftp(8), _dstp(1, "cubic"),
           _dstp(1, "bbr"), _dstp(8, "cubic"), _dstp(8, "bbr"), AUTO, UDT)
#: Issue 15's own cell: 512 MiB across 100 ms / 1 Gb/s with jumbo frames (×8 ≥ 0.85, auto ≥ 0.80 Gb/s).
ISSUE15_WAN = Cell(100, 0.0, (_iperf(8, "bbr"), _dstp(8), AUTO, AUTO_AGENT, Tool("dstp ×8 via agent", "dstp", 8, agent=True)),
                   mtu=9000, file="512MiB")
DEFAULT_CELLS = (
    Cell(100, 0.0, (_iperf(8, "bbr"), _dstp(4), _dstp(8), AUTO)),
    ISSUE15_WAN,
    Cell(200, 1e-3, (_iperf(1, "cubic"), _dstp(8, "bbr"), AUTO, UDT)),
)
FULL_CELLS = (
    Cell(100, 0.0, (_iperf(8, "bbr"), _dstp(1), _dstp(2), _dstp(4), _dstp(8), _dstp(16), AUTO, UDT)),
    Cell(100, 0.0, (_iperf(8, "bbr"), _dstp(8), AUTO), file="4GiB"),  # steady state: 30 s runs, ~3.4 GiB
    ISSUE15_WAN,
    *(Cell(rtt, loss, WAN_ALL) for rtt in (60, 200) for loss in (0.0, 1e-4, 1e-3)),
)
LOOPBACK_FILES = ("100MiB", "1GiB")


def full_mode() -> bool:
    """Return True when the extended matrix was asked for (``DSTP_BENCH_FULL=1``)."""
    return os.environ.get(FULL_ENV, "") not in ("", "0")


# -- one place: a server, the peers, interleaved repetitions ------------------------------


class Bench:
    """What running a tool needs at one place, including the ``dstp serve`` process (restartable)."""

    def __init__(self, place: Place, work: Path, cap_s: float | None, compare_bytes: bool, *,
                 root: Path | None = None, serve_args: Sequence[str] = (), sql: str = "") -> None:
        self.place, self.work, self.cap_s, self.compare_bytes, self.sql = place, work, cap_s, compare_bytes, sql
        self.gridftp_ok = tools.installed("globus-gridftp-server") and tools.installed("globus-url-copy")
        self.work.mkdir(parents=True, exist_ok=True)
        self._root, self._serve_args = root, tuple(serve_args)
        self._prefix = ["ip", "netns", "exec", place.server_ns] if place.server_ns else []
        self._stack = contextlib.ExitStack()
        self._agents = contextlib.ExitStack()
        self._agent: AgentProcess | None = None
        self.server: ServerProcess | None = None
        self.restarts = 0
        if root is not None:
            self._start()

    def _start(self) -> None:
        assert self._root is not None
        self.server = self._stack.enter_context(serve(self._root, *self._serve_args, prefix=self._prefix))

    def restart(self) -> None:
        """Replace the server: a client killed at the cap leaves its transfer waiting for a resume (60 s)
        and holding one of the server's transfer slots; a fresh server on the same port is clean."""
        self._stack.close()
        self._stack = contextlib.ExitStack()
        self.restarts += 1
        self._start()

    def close(self) -> None:
        self._agents.close()
        self._stack.close()

    def agent(self) -> AgentProcess:
        """Return the bench's ``dstp agent`` on the client side (started on first use; it outlives server restarts)."""
        if self._agent is None:
            self._agent = self._agents.enter_context(
                agent(self.work / "agent.sock", prefix=self.place.client([]),
                      env={"XDG_CACHE_HOME": str(self.agent_cache)}))
        return self._agent

    def __enter__(self) -> Bench:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def endpoint(self) -> str:
        assert self.server is not None
        return self.server.endpoints["grpc"]

    @property
    def out(self) -> Path:
        return self.work / "out.nc"

    @property
    def fixed_cache(self) -> Path:
        return self.work / "cache-fixed"

    @property
    def auto_cache(self) -> Path:
        return self.work / "cache-auto"

    @property
    def agent_cache(self) -> Path:
        return self.work / "cache-agent"

    def cache(self, tool: Tool) -> Path:
        """Return the tuning cache ``tool`` learns in: the agent's, auto's, or the fixed-count runs'."""
        return self.agent_cache if tool.agent else self.auto_cache if tool.transport == "auto" else self.fixed_cache


def run_tool(tool: Tool, bench: Bench, source: BulkFile | None, length: int = -1) -> Run:
    """Return one run of ``tool`` (a failed run is a Run with ok=False, never an exception)."""
    predicted = predict_choice(bench, tool) if tool.transport == "auto" and bench.server is not None else ""
    try:
        run = _run_tool(tool, bench, source, length)
    except Exception as exc:  # noqa: BLE001 - one broken peer must not lose the others' results
        return Run(tool.name, 0, 0.0, 0.0, 0.0, False, ok=False, detail={"error": f"{type(exc).__name__}: {exc}"})
    if predicted and not run.detail.get("choice"):  # cut at the cap: `dstp get -v` prints the choice at the end
        run.detail["choice"] = predicted
    if tool.kind in ("dstp", "query") and not run.complete:
        bench.restart()
    return run


def _run_tool(tool: Tool, bench: Bench, source: BulkFile | None, length: int) -> Run:
    p, cap = bench.place, bench.cap_s
    if tool.kind in ("iperf3", "iperf3_file"):
        if not tools.installed("iperf3"):
            return Run(tool.name, 0, 0.0, 0.0, 0.0, False, ok=False, detail={"error": "not installed"})
        assert source is not None
        return tools.iperf3(p, tool.name, tool.streams, source.size, cap_s=cap, congestion=tool.congestion or None,
                            files=(source, bench.out) if tool.kind == "iperf3_file" else None)
    if tool.kind == "copy":
        assert source is not None
        return tools.local_copy(tool.name, source, bench.out, compare_bytes=bench.compare_bytes)
    if tool.kind == "splice":
        assert source is not None
        return tools.splice_floor(p, tool.name, tool.streams, source, bench.out, cap_s=cap,
                                  compare_bytes=bench.compare_bytes)
    if tool.kind == "gridftp":
        if not bench.gridftp_ok:
            return Run(tool.name, 0, 0.0, 0.0, 0.0, False, ok=False, detail={"error": "not installed"})
        assert source is not None
        return tools.gridftp(p, tool.name, tool.streams, source, bench.out, cap_s=cap,
                             compare_bytes=bench.compare_bytes)
    assert bench.server is not None
    if tool.kind == "dstp":
        assert source is not None
        return tools.dstp_get(p, tool.name, bench.server, source, bench.out, bench.cache(tool),
                              transport=tool.transport, streams=tool.streams, congestion=tool.congestion, cap_s=cap,
                              compare_bytes=bench.compare_bytes, length=length,
                              agent=bench.agent() if tool.agent else None)
    if tool.kind == "query":
        return tools.dstp_query(p, tool.name, bench.server, bench.sql, bench.cache(tool), transport=tool.transport,
                                streams=tool.streams, digest=bench.compare_bytes)
    raise ValueError(f"unknown tool kind {tool.kind!r}")


def interleaved(tool_list: Sequence[Tool], repeats: int, one: Callable[[Tool], Run]) -> dict[str, list[Run]]:
    """Return every tool's runs; each repetition runs every tool once, the order rotating by one."""
    runs: dict[str, list[Run]] = {t.name: [] for t in tool_list}
    for rep in range(repeats):
        k = rep % len(tool_list)
        for tool in (*tool_list[k:], *tool_list[:k]):
            run = one(tool)
            runs[tool.name].append(run)
            print(f"  {tool.name:28s} {run.mb_per_s * 8:10.1f} Mb/s  {run.seconds:6.2f} s"
                  + ("" if run.complete else "  (capped)" if run.ok else f"  FAILED {run.detail.get('error', '')}"),
                  flush=True)
    return runs


def predict_choice(bench: Bench, tool: Tool) -> str:
    """Return what ``auto`` will choose for a large transfer, read from its tuning cache as the client reads it.

    The client pings for a fresh RTT; this uses the RTT stored with the last transfer, which
    gives the same decisions unless the RTT moved by more than 30 %.
    """
    tuner = AutoTuner(bench.cache(tool) / "dstp" / "tuning.json")
    rec = tuner.record_for(bench.endpoint)
    if rec is None:
        return f"auto: striped × {tuner.default_streams} (first transfer) [predicted]"
    plan = tuner.plan(bench.endpoint, rec.rtt_s, allowed_cc=("bbr", "cubic", "reno"))
    kind, why = tuner.choose_channel(bench.endpoint, ["striped", "udt"], rec.rtt_s)
    detail = f" × {plan.streams} ({plan.reason})" if kind == "striped" else ""
    return f"auto: {why}{detail} [predicted from the tuning cache: the run was cut at the cap]"


def tuner_state(cache: Path, endpoint: str) -> tuple[bool, bool, str]:
    """Return (settled?, probing UDT next?, why) for the auto-tuner's state about ``endpoint`` in ``cache``."""
    tuner = AutoTuner(cache / "dstp" / "tuning.json")
    rec = tuner.record_for(endpoint)
    if rec is None or rec.best_bps == 0:
        return False, False, "no stripe record yet"
    kind, why = tuner.choose_channel(endpoint, ["striped", "udt"], rec.rtt_s)
    if why.startswith("probing"):
        return False, True, why
    if kind == "striped" and rec.increase and rec.streams * 2 <= tuner.max_streams:
        return False, False, f"still to try more than {rec.streams} streams"
    if kind == "striped" and rec.decrease and rec.streams > 1:
        return False, False, f"still trying fewer than {rec.streams} streams"
    return True, False, f"{why}; {rec.streams} streams, {rec.congestion_control or 'server default'} congestion control"


def warm_up(tool: Tool, bench: Bench, source: BulkFile | None, limit: int) -> list[dict[str, Any]]:
    """Return the learning transfers auto made before the measured runs (until the tuner settles).

    A warm-up may take twice the cap (an interrupted transfer teaches nothing). The one-time
    UDT probe moves ``PROBE_BYTES`` (a byte range), so that a slow UDT path is learned in
    well under the cap instead of never; two warm-ups in a row that teach nothing end the
    warm-up (auto is then measured unsettled, and the log says why).
    """
    log: list[dict[str, Any]] = []
    cap = bench.cap_s
    bench.cap_s = None if cap is None else 2 * cap
    wasted = 0
    try:
        for _ in range(limit):
            done, probe, why = tuner_state(bench.cache(tool), bench.endpoint)
            if done or wasted >= 2:
                break
            length = PROBE_BYTES if probe and source is not None and source.size > PROBE_BYTES else -1
            run = run_tool(tool, bench, source, length)
            wasted = 0 if run.complete else wasted + 1
            log.append({"Mbps": round(run.mb_per_s * 8, 1), "seconds": round(run.seconds, 2), "bytes": run.bytes,
                        "complete": run.complete, "choice": run.detail.get("choice"), "before": why})
            print(f"  warm-up {tool.name}: {run.mb_per_s * 8:.1f} Mb/s, {run.bytes / 2**20:.0f} MiB"
                  f"{'' if run.complete else ' (cut: teaches nothing)'} — {run.detail.get('choice', '')}", flush=True)
        done, _, why = tuner_state(bench.cache(tool), bench.endpoint)
        log.append({"settled": done, "state": why})
    finally:
        bench.cap_s = cap
    return log


def summarize(name: str, runs: list[Run]) -> dict[str, Any]:
    """Return a row: medians over the successful runs, plus every run."""
    good = [r for r in runs if r.ok]
    timed = [r for r in good if r.transfer_s]
    ids = [r.identical for r in runs if r.identical is not None]
    return {
        "tool": name, "n": len(good), "runs": [r.as_dict() for r in runs],
        "MBps": median(r.mb_per_s for r in good), "Mbps": median(r.mb_per_s * 8 for r in good),
        "transfer_MBps": median(r.bytes / r.transfer_s / 1e6 for r in timed if r.transfer_s),
        "seconds": median(r.seconds for r in good), "bytes": median(r.bytes for r in good),
        "cpu_s_per_GB": median(r.cpu_s_per_gb for r in good),
        "client_cpu_s": median(r.client_cpu_s for r in good), "server_cpu_s": median(r.server_cpu_s for r in good),
        "complete": bool(good) and all(r.complete for r in good), "identical": all(ids) if ids else None,
        "choices": [r.detail["choice"] for r in runs if r.detail.get("choice")],
        "errors": sorted({str(r.detail.get("error")) for r in runs if not r.ok}),
    }


# -- loopback -----------------------------------------------------------------------------


def udt_channel_settings() -> dict[str, int]:
    """Return the MSS, buffers and flow windows dstp's UDT channel uses on loopback (server sends, client receives)."""
    from dstp.transport.server.udt_listener import UdtChannelListener
    from dstp.transport.wire import udt
    from dstp.transport.udt_socket import flow_window_for, tuned_options

    mss = min(udt.MAX_MSS, udt.path_mtu("127.0.0.1", 9))
    send_buffer = int(inspect.signature(UdtChannelListener).parameters["buffer_bytes"].default)
    client = tuned_options(0.001, 1e9, mss)  # the client's dial(): RTT floored at 1 ms, 1 Gb/s assumed
    return {"mss": mss, "recv_buffer": client["buffer_bytes"], "recv_fc": client["flow_window"],
            "send_buffer": send_buffer, "send_fc": flow_window_for(send_buffer, mss)}


def loopback(catalog: BulkCatalog, samples: dict[str, Path], work: Path, repeats: int, quick: bool) -> dict[str, Any]:
    """Return the loopback results: files, a large query result, UDT channel vs raw libudt."""
    out: dict[str, Any] = {"files": {}}
    udt_set = udt_channel_settings()
    raw_channel = Tool("raw libudt, channel's settings", "udt_raw")
    raw_64 = Tool("raw libudt, 64 MiB buffers", "udt_raw")
    raw_settings = {raw_channel.name: udt_set,
                    raw_64.name: {**udt_set, "recv_buffer": 64 << 20, "send_buffer": 64 << 20,
                                  "recv_fc": udt_set["send_fc"], "send_fc": udt_set["send_fc"]}}
    with Bench(tools.LOOPBACK, work / "loopback", None, quick, root=catalog.root) as bench:
        out["gridftp"] = "installed" if bench.gridftp_ok else "not installed"
        files = [f for f in catalog.files if quick or f.label in LOOPBACK_FILES]
        largest = files[-1]
        for source in reversed(files):
            print(f"loopback, {source.label} file", flush=True)
            row_tools: tuple[Tool, ...] = LOOPBACK_TOOLS
            if source is largest:
                row_tools += (raw_channel, raw_64)
                out["auto_warmup"] = warm_up(AUTO, bench, source, 0 if quick else WARMUP_MAX)
                out["agent_warmup"] = warm_up(AUTO_AGENT, bench, source, 0 if quick else WARMUP_MAX)

            def one(tool: Tool, source: BulkFile = source) -> Run:
                if tool.kind == "udt_raw":
                    try:
                        return tools.udt_raw(tool.name, source.size, **raw_settings[tool.name])
                    except Exception as exc:  # noqa: BLE001
                        return Run(tool.name, 0, 0.0, 0.0, 0.0, False, ok=False, detail={"error": str(exc)})
                return run_tool(tool, bench, source)

            runs = interleaved(row_tools, repeats, one)
            out["files"][source.label] = {"bytes": source.size, "rows": [summarize(n, r) for n, r in runs.items()]}
    out["udt_settings"] = raw_settings
    root = samples["small" if quick else "large"]
    sql = SQL_QUICK if quick else SQL_LARGE
    print(f"loopback, query result: {sql}", flush=True)
    with Bench(tools.LOOPBACK, work / "query", None, quick, root=root, sql=sql) as bench:
        warm = warm_up(QUERY_TOOLS[1], bench, None, 0 if quick else 3)
        runs = interleaved(QUERY_TOOLS, repeats, lambda t: run_tool(t, bench, None))
    out["query"] = {"sql": sql, "samples": "small" if quick else "large", "auto_warmup": warm,
                    "rows": [summarize(n, r) for n, r in runs.items()]}
    return out


# -- emulated paths -----------------------------------------------------------------------


def wan_cell(cell: Cell, catalog: BulkCatalog, work: Path, repeats: int, name: str = WAN_NAME) -> dict[str, Any]:
    """Return one emulated path's results: every peer ``repeats`` times, auto after its warm-up."""
    from bench.wan import WanPath

    source = catalog.file(cell.file)
    print(f"WAN {cell.label}: {source.label} or {CAP_S:.0f} s per run", flush=True)
    started = time.monotonic()
    with WanPath.up(rtt_ms=cell.rtt_ms, rate_bps=cell.rate_bps, loss=cell.loss, mtu=cell.mtu, name=name) as path:
        place = Place(path.server_ns, path.client_ns, path.server_addr, path.client_addr)
        before = path.stats()
        with Bench(place, work / f"wan-{cell.rtt_ms:g}-{cell.loss:g}", CAP_S, False, root=catalog.root,
                   serve_args=("--host", path.server_addr, "--port", str(WAN_PORT))) as bench:
            warm = warm_up(AUTO, bench, source, WARMUP_MAX) if AUTO in cell.tools else []
            warm_agent = warm_up(AUTO_AGENT, bench, source, WARMUP_MAX) if AUTO_AGENT in cell.tools else []
            runs = interleaved(cell.tools, repeats, lambda t: run_tool(t, bench, source))
            restarts = bench.restarts
        after = path.stats()
        described = path.describe()
    relay = {k: sum(after["dirs"][d][k] - before["dirs"][d][k] for d in after["dirs"])
             for k in ("rx_packets", "drop_loss", "drop_queue", "drop_ring")}
    return {"cell": cell.label, "rtt_ms": cell.rtt_ms, "loss": cell.loss, "rate_bps": cell.rate_bps, "mtu": cell.mtu,
            "path": described, "relay": relay, "auto_warmup": warm, "agent_warmup": warm_agent, "server_restarts": restarts, "seconds": round(time.monotonic() - started, 1),
            "rows": [summarize(n, r) for n, r in runs.items()]}


# -- the suite ----------------------------------------------------------------------------


@contextlib.contextmanager
def workspace(tag: str) -> Iterator[Path]:
    """Return (as a context) a fresh folder on tmpfs, removed afterwards."""
    root = (TMPFS if TMPFS.is_dir() else Path("/tmp")) / f"dstp-bench-{tag}-{os.getpid()}"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run(quick: bool, samples: dict[str, Path], repeats: int = REPEATS) -> dict[str, Any]:
    """Return the bulk results; in full mode also write bench/results/bulk.{json,md} and PNG plots."""
    from bench import bulk_report

    started = time.monotonic()
    full = full_mode() and not quick
    repeats = 1 if quick else repeats
    sizes = (8,) if quick else (100, 512, 1024, 4096) if full else (100, 512, 1024)
    cells = () if quick else FULL_CELLS if full else DEFAULT_CELLS
    result: dict[str, Any] = {"mode": "quick" if quick else "full" if full else "default", "repeats": repeats,
                              "cap_s": CAP_S, "warmup_max": WARMUP_MAX,
                              "dstp_package": str(Path(dstp.__file__).parent)}  # which tree was measured
    with workspace(NAME) as work:
        catalog = make_catalog(work / "catalog", sizes)
        result["files"] = {f.label: {"name": f.name, "bytes": f.size, "crc32c": f"{f.crc32c:08x}"}
                           for f in catalog.files}
        result["loopback"] = loopback(catalog, samples, work, repeats, quick)
        result["wan"] = [wan_cell(cell, catalog, work, repeats) for cell in cells]
    result["targets"] = bulk_report.targets(result)
    result["seconds"] = round(time.monotonic() - started, 1)
    if not quick:
        bulk_report.write(result)
    return result


def quick_wan(name: str, seconds: float = 10.0, capped_s: float = 4.0) -> list[Run]:
    """Return ``dstp get`` runs of an 8 MiB file over a 20 ms / 200 Mb/s emulated path (byte-compared), then
    one of a 128 MiB file cut at ``capped_s`` (the link needs 5.4 s for it), as the WAN cells cut slow peers."""
    from bench.wan import WanPath

    with workspace("bulk-wan") as work:
        catalog = make_catalog(work / "catalog", (8, 128))
        small, big = catalog.file("8MiB"), catalog.file("128MiB")
        with WanPath.up(rtt_ms=20, rate_bps=200e6, loss=0.0, name=name) as path:
            place = Place(path.server_ns, path.client_ns, path.server_addr, path.client_addr)
            with Bench(place, work, seconds, True, root=catalog.root,
                       serve_args=("--host", path.server_addr, "--port", str(WAN_PORT))) as bench:
                runs = [run_tool(t, bench, small) for t in (_dstp(4), AUTO, AUTO_AGENT)]
                assert bench.server is not None
                runs.append(tools.dstp_get(place, "dstp ×4 cut at the cap", bench.server, big, bench.out,
                                     bench.fixed_cache, transport="striped", streams=4, cap_s=capped_s))
                return runs

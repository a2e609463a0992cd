"""Start-up: how long a fresh client process takes to reach its first bytes.

Issue 15 asks for "a client process start-up + connect + first block under 0.1 s". Each
measurement is one fresh process, timed from ``fork`` to exit by this harness (whole process);
the variants run interleaved, order rotated each round, ``REPEATS`` rounds, medians reported:

* ``python -c pass`` — the interpreter alone (the floor of any Python client);
* ``import grpc`` — the gRPC library every dstp client needs for its control plane;
* ``import dstp.cli`` — what every ``dstp`` command loads before parsing its arguments;
* ``dstp get`` of one ccm3 sample file (0.56 MB: its first block is most of it) on one stripe;
* ``dstp query … limit 1`` over striped TCP (connect, plan, one record back);
* ``script: connect + ping`` — ``import dstp; dstp.connect(url).ping()``;
* the same ``dstp get``, and one with no flags (``auto``), handed to a ``dstp agent`` started for the
  run (``DSTP_AGENT_SOCK``): the command loads no gRPC and the agent's client, control channel and
  stripes are warm (the agent's first request, which dials them, is the untimed warm-up run; its
  time is kept in the JSON as ``agent_first_request_s``);
* the same ``dstp query … limit 1`` handed to that agent (it writes to the command's stdout).

Own clock beside it: ``python -X importtime`` of the ``dstp get`` process, the cumulative
import time of ``dstp.client`` and its largest pieces (inflated by the tracing itself).

Byte code is compiled first (``compileall``), as ``./dev install`` does: with
``PYTHONDONTWRITEBYTECODE`` set and no ``__pycache__``, every import compiles from source
and start-up doubles (recorded in the JSON as ``bytecode_note``).
"""

from __future__ import annotations

import compileall
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from bench.report import command_line, save_figure

NAME = "startup"
REPEATS = 9
SQL = "select temperature from ccm3 limit 1"
SAMPLE_FILE = ("ccm3", "ccm3_1990-01.nc")
TARGET_S = 0.1
ROOT = Path(__file__).resolve().parents[1]


GET = "dstp get (0.56 MB, striped x1)"
AGENT_ENV = "DSTP_AGENT_SOCK"


def _variants(url: str, work: Path, agent: Path) -> dict[str, tuple[list[str], dict[str, str]]]:
    """Return each variant's argv and environment."""
    py = sys.executable
    dataset, name = SAMPLE_FILE
    alone = {k: v for k, v in os.environ.items() if k != AGENT_ENV}
    via = {**alone, AGENT_ENV: str(agent)}
    get = [py, "-m", "dstp.cli", "get", dataset, name, "-o", str(work / name), "--server", url, "--no-progress"]
    query = [py, "-m", "dstp.cli", "query", SQL, "--server", url, "--transport", "striped"]
    return {
        "python -c pass": ([py, "-c", "pass"], alone),
        "import grpc": ([py, "-c", "import grpc"], alone),
        "import dstp.cli": ([py, "-c", "import dstp.cli"], alone),
        GET: ([*get, "--transport", "striped", "--streams", "1"], alone),
        "dstp query limit 1 (striped)": (query, alone),
        "script: connect + ping": ([py, "-c", f"import dstp; dstp.connect({url!r}).ping()"], alone),
        "dstp get via agent (striped x1)": ([*get, "--transport", "striped", "--streams", "1"], via),
        "dstp get via agent (auto)": (get, via),
        "dstp query limit 1 via agent (striped)": (query, via),
    }


def _timed(argv: Sequence[str], work: Path, env: dict[str, str] | None = None) -> tuple[float, bool]:
    for leftover in work.glob(f"{SAMPLE_FILE[1]}*"):
        leftover.unlink()
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        print(f"{argv[2:5]} exited {done.returncode}: {done.stderr[-300:]}", file=sys.stderr)
    return seconds, done.returncode == 0


def importtime(argv: Sequence[str], work: Path, env: dict[str, str] | None = None) -> dict[str, float]:
    """Return cumulative import milliseconds of dstp.client and its largest children, by ``-X importtime``."""
    for leftover in work.glob(f"{SAMPLE_FILE[1]}*"):
        leftover.unlink()
    done = subprocess.run([argv[0], "-X", "importtime", *argv[1:]], cwd=work, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, env=env)
    cumulative: dict[str, float] = {}
    for line in done.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \| (\s*)(\S+)", line)
        if m:
            cumulative[m.group(4)] = int(m.group(2)) / 1000
    wanted = ("grpc", "dstp.proto.dstp_pb2", "dstp.client._codec", "dstp.metadata", "dstp.transport.client.receiver",
              "dstp.transport.client.tuning", "dstp.client._policy", "dstp.client._download", "cryptography",
              "encodings.idna", "dstp.client", "dstp.cli", "dstp.agent", "rich")
    return {k: cumulative[k] for k in wanted if k in cumulative} | {"all": sum(
        int(m.group(1)) for m in re.finditer(r"import time:\s+(\d+) \|", done.stderr)) / 1000}


def run(quick: bool, samples: dict[str, Path], repeats: int = REPEATS) -> dict[str, Any]:
    """Return the start-up figures; a full run writes bench/results/startup.{json,md,png}."""
    from bench.dstp_process import agent, serve
    from bench.report import RESULTS, machine, write_json, write_markdown

    repeats = 1 if quick else repeats
    for folder in ("dstp", "transport", "catalog", "clients", "proto"):
        compileall.compile_dir(str(ROOT / folder), quiet=1)
    result: dict[str, Any] = {"mode": "quick" if quick else "full", "repeats": repeats, "machine": machine(),
                              "target_s": TARGET_S, "load_before": os.getloadavg(),
                              "bytecode_note": "byte code compiled before timing; "
                                               f"PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE', '')!r}"}
    alone = {k: v for k, v in os.environ.items() if k != AGENT_ENV}
    with tempfile.TemporaryDirectory(prefix="dstp-startup-") as tmp, serve(samples["small"]) as server, \
            agent(Path(tmp) / "agent.sock", env=alone) as kept:
        work = Path(tmp)
        url = server.endpoints["grpc"]
        variants = _variants(url, work, kept.socket)
        names = list(variants)
        for name in names:  # one untimed run each: file system caches, the server's first answers, the agent's dial
            seconds, _ = _timed(variants[name][0], work, variants[name][1])
            if name == "dstp get via agent (striped x1)":
                result["agent_first_request_s"] = seconds
        times: dict[str, list[float]] = {n: [] for n in names}
        failures: dict[str, int] = {n: 0 for n in names}
        for round_ in range(repeats):
            order = names[round_ % len(names):] + names[:round_ % len(names)]
            for name in order:
                seconds, ok = _timed(variants[name][0], work, variants[name][1])
                if ok:
                    times[name].append(seconds)
                else:
                    failures[name] += 1
        result["own_clock_importtime_ms"] = importtime(variants[GET][0], work, variants[GET][1])
        via = variants["dstp get via agent (striped x1)"]
        result["own_clock_importtime_ms_agent"] = importtime(via[0], work, via[1])
    result["rows"] = [{"variant": n, "median_s": statistics.median(times[n]) if times[n] else None,
                       "min_s": min(times[n], default=None), "max_s": max(times[n], default=None),
                       "runs_s": times[n], "failures": failures[n]} for n in names]
    if not quick:
        write_json(NAME, result)
        write_markdown(NAME, "Client start-up, whole process", report(result))
        plot(result, RESULTS)
    return {"mode": result["mode"], **{r["variant"]: r["median_s"] for r in result["rows"]}}


def report(result: dict[str, Any]) -> str:
    lines = [f"Fresh process per run, {result['repeats']} interleaved rounds, loopback, small samples; "
             f"target for start-up + connect + first block: < {result['target_s']} s. {result['bytecode_note']}.",
             "", "| variant | median s | min s | max s | failures |", "|---|---|---|---|---|"]
    for r in result["rows"]:
        if r["median_s"] is None:
            lines.append(f"| {r['variant']} | — | — | — | {r['failures']} |")
        else:
            lines.append(f"| {r['variant']} | {r['median_s']:.3f} | {r['min_s']:.3f} | {r['max_s']:.3f} | "
                         f"{r['failures']} |")
    if "agent_first_request_s" in result:
        lines += ["", f"The agent's first request (it dials the server: untimed warm-up run) took "
                      f"{result['agent_first_request_s']:.3f} s whole process."]
    own = result["own_clock_importtime_ms"]
    agent = result.get("own_clock_importtime_ms_agent", {})
    lines += ["", "`python -X importtime` of the `dstp get` process (ms, cumulative; the tracing inflates them), "
                  "alone and handed to the agent:",
              "", "| module | alone ms | via agent ms |", "|---|---|---|"]
    lines += [f"| {k} | {v:.1f} | {agent[k]:.1f} |" if k in agent else f"| {k} | {v:.1f} | – |"
              for k, v in own.items()]
    lines += [f"| {k} | – | {v:.1f} |" for k, v in agent.items() if k not in own]
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result["rows"] if r["median_s"] is not None]
    fig, ax = plt.subplots(figsize=(7.5, 3.4))
    ax.barh([r["variant"] for r in rows][::-1], [r["median_s"] for r in rows][::-1], color="#3a7")
    ax.axvline(result["target_s"], color="#c33", linestyle="--", label=f"target {result['target_s']} s")
    ax.set_xlabel("seconds, whole process (median)")
    ax.set_title("Client start-up on loopback")
    ax.legend(loc="lower right")
    save_figure(fig, out / f"{NAME}.png")


if __name__ == "__main__":
    command_line(run)

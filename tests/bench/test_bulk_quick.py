"""The bulk benchmark's quick mode (bench/bulk.py): every peer runs, every file arrives intact.

No timing assertions: the quick mode moves an 8 MiB file once per peer on
loopback and checks the output byte by byte. The emulated-path test is
skipped only where a network namespace cannot be created.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from namespaces import namespaces_unavailable

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import bulk  # noqa: E402
from bench.__main__ import samples  # noqa: E402


@pytest.fixture(scope="module")
def quick() -> dict[str, Any]:
    return bulk.run(True, samples(True))


def _rows(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    files = result["loopback"]["files"]
    assert list(files) == ["8MiB"]
    return {r["tool"]: r for r in files["8MiB"]["rows"]}


@pytest.mark.timeout(90)
def test_every_download_is_byte_identical(quick: dict[str, Any]) -> None:
    rows = _rows(quick)
    assert {"dstp ×1", "dstp ×8", "dstp auto", "dstp auto via agent", "dstp UDT", "GridFTP -p 1",
            "GridFTP -p 8"} <= set(rows)
    for name, row in rows.items():
        if name.startswith("GridFTP") and quick["loopback"]["gridftp"] == "not installed":
            assert row["n"] == 0 and row["errors"] == ["not installed"]
            continue
        if name.startswith(("dstp", "GridFTP")):
            assert row["n"] == 1 and row["complete"], row
            run = row["runs"][0]
            assert run["verified"] == "bytes" and run["identical"] is True, run
            assert run["bytes"] == quick["files"]["8MiB"]["bytes"]
    assert rows["dstp UDT"]["runs"][0]["detail"]["transport"] == "udt"
    assert rows["dstp ×8"]["runs"][0]["detail"]["streams"] == 8


def test_iperf3_and_raw_udt_move_data(quick: dict[str, Any]) -> None:
    rows = _rows(quick)
    for name in ("iperf3 ×1", "iperf3 ×8"):
        if shutil.which("iperf3") is None:
            assert rows[name]["errors"] == ["not installed"]
        else:
            assert rows[name]["n"] == 1 and rows[name]["Mbps"] > 0, rows[name]
    for name in ("raw libudt, channel's settings", "raw libudt, 64 MiB buffers"):
        assert rows[name]["complete"] and rows[name]["bytes"] == quick["files"]["8MiB"]["bytes"], rows[name]


def test_query_rows_agree_across_channels(quick: dict[str, Any]) -> None:
    rows = {r["tool"]: r for r in quick["loopback"]["query"]["rows"]}
    assert set(rows) == {"query striped ×8", "query auto", "query gRPC stream", "query UDT"}
    counts = {r["runs"][0]["detail"]["rows"] for r in rows.values()}
    assert all(r["n"] == 1 for r in rows.values()), rows
    assert len(counts) == 1 and counts.pop() > 0
    assert rows["query UDT"]["runs"][0]["detail"]["transport"] == "udt"
    assert quick["wan"] == [] and quick["mode"] == "quick"


def _netns_ok() -> str | None:
    return namespaces_unavailable(f"dstpwan-q{os.getpid() % 100000}{secrets.token_hex(2)}-probe")


@pytest.mark.netns
@pytest.mark.timeout(60)
def test_dstp_get_over_an_emulated_path() -> None:
    reason = _netns_ok()
    if reason:
        pytest.skip(reason)
    name = f"dstpwan-q{os.getpid() % 100000}{secrets.token_hex(2)}"
    try:
        runs = bulk.quick_wan(name)
    finally:
        subprocess.run([sys.executable, "-m", "bench.wan", "down", "--name", name], cwd=REPO, capture_output=True,
                       timeout=60)
    assert [r.tool for r in runs] == ["dstp ×4", "dstp auto", "dstp auto via agent", "dstp ×4 cut at the cap"]
    for run in runs[:3]:  # the agent's run went through the agent (bulk_tools fails it otherwise)
        assert run.ok and run.complete, run
        assert run.verified == "bytes" and run.identical, run
    cut = runs[3]  # counted from the partial file the download was writing (it used to read as 0 bytes)
    assert not cut.complete and cut.ok and 0 < cut.bytes < 128 * 2**20, cut
    assert not any(line.startswith(name) for line in subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True, timeout=30).stdout.splitlines())


def test_issue_15s_jumbo_frame_cell_is_judged_by_its_own_targets() -> None:
    """The 512 MiB / 100 ms / MTU 9000 cell carries the issue's two goals: ×8 ≥ 0.85 and auto ≥ 0.80 Gb/s."""
    from bench import bulk_report

    cell = bulk.ISSUE15_WAN
    assert cell.mtu == 9000 and cell.file == "512MiB" and "MTU 9000" in cell.label
    rows = [{"tool": "dstp ×8", "n": 3, "Mbps": 870.0, "transfer_MBps": 112.0},
            {"tool": "dstp auto", "n": 3, "Mbps": 790.0, "transfer_MBps": 105.0},
            {"tool": "iperf3 ×8 bbr", "n": 3, "Mbps": 650.0, "transfer_MBps": 100.0},
            {"tool": "dstp ×8 via agent", "n": 3, "Mbps": 849.0, "transfer_MBps": 112.0},
            {"tool": "dstp auto via agent", "n": 3, "Mbps": 800.0, "transfer_MBps": 110.0}]
    result = {"wan": [{"cell": cell.label, "rtt_ms": cell.rtt_ms, "loss": cell.loss, "rate_bps": cell.rate_bps,
                       "mtu": cell.mtu, "rows": rows, "auto_warmup": []}]}
    verdicts = {t["target"]: t for t in bulk_report.targets(result)}
    assert verdicts[f"{cell.label}: dstp ×8 ≥ 85 % of the link (whole process)"]["met"] is True
    auto = verdicts[f"{cell.label}: auto ≥ 0.80 Gb/s (whole process, after learning)"]
    assert auto["met"] is False and auto["value"] == 0.79
    via = "the agent's connections kept warm"
    assert verdicts[f"{cell.label}: dstp ×8 via agent ≥ 0.85 Gb/s (whole `dstp get` process; {via})"]["met"] is False
    assert verdicts[f"{cell.label}: dstp auto via agent ≥ 0.80 Gb/s (whole `dstp get` process; {via})"]["met"] is True

"""bench.table4 in quick mode: every peer answers the Table 4 query with dstp's records.

Runs the suite in-process at toy size (small samples, 1k and 10k records, one run, loopback,
nothing written) so its harness never rots: the SOAP (spyne + zeep), OPeNDAP (pydap), HTTP CSV,
Arrow Flight and dstp gRPC/striped/auto/UDT paths are all exercised through real servers and
client processes. The assertions are about correctness, never timing: every peer returns the
same number of records as dstp, and the same records (temperature sum and first/last times,
checked by the suite against ``dstp-grpc``).

No warning filter is needed here: spyne, zeep and pydap are imported only by the peer server
and client-driver *subprocesses* (spyne's vendored ``six`` emits an ``ImportWarning`` on
Python 3.11 that would otherwise be an error under this project's ``filterwarnings = error``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import table4  # noqa: E402
from bench.report import RESULTS  # noqa: E402
from dstp.samples import generate_samples  # noqa: E402
from dstp.transport.wire import udt  # noqa: E402


@pytest.fixture(scope="module")
def quick_result(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The suite's quick-mode result over freshly generated small samples."""
    root = tmp_path_factory.mktemp("table4-samples")
    generate_samples(root, "small")
    before = sorted(RESULTS.glob("table4*")) if RESULTS.exists() else []
    result = table4.run(True, {"small": root})
    result["results_before"], result["results_after"] = before, (
        sorted(RESULTS.glob("table4*")) if RESULTS.exists() else [])
    return result


def test_every_peer_returns_dstps_records(quick_result: dict[str, Any]) -> None:
    rows = quick_result["rows"]
    assert {r["peer"] for r in rows} == set(table4.PEERS)
    assert {r["size"] for r in rows} == set(table4.QUICK_SIZES)
    for size in table4.QUICK_SIZES:
        reference = next(r for r in rows if r["peer"] == table4.REFERENCE and r["size"] == size)
        assert reference.get("records") == size, reference
        for row in (r for r in rows if r["size"] == size):
            if row["peer"] == "dstp-udt" and not udt.available():
                assert "error" in row, row  # recorded, not dropped
                continue
            assert "error" not in row, row
            assert row["records"] == reference["records"], row
            assert row["check"] == "ok", row


def test_quick_mode_runs_once_on_loopback_and_writes_nothing(quick_result: dict[str, Any]) -> None:
    assert quick_result["paths"] == {"loopback": {"kind": "loopback", "addr": "127.0.0.1"}}
    assert quick_result["repeats"] == 1
    assert quick_result["results_after"] == quick_result["results_before"]


def test_the_back_to_back_segment_asks_the_headline_peers(quick_result: dict[str, Any]) -> None:
    label = "loopback" + table4.BACK_TO_BACK
    rows = [r for r in quick_result["rows"] if r["path"] == label]
    assert {r["peer"] for r in rows} == set(table4.BACK_TO_BACK_PEERS)
    assert {r["size"] for r in rows} == {max(table4.QUICK_SIZES)}
    for row in rows:
        if row["peer"] == "dstp-udt" and not udt.available():
            continue
        assert row["check"] == "ok", row
    text = table4.markdown({**quick_result, "plots": []})
    assert f"### {label}: median seconds" in text and "best dstp ÷ Flight" in text


def test_opendap_hyperslab_outcome_is_recorded(quick_result: dict[str, Any]) -> None:
    # pydap 3.5.9's netCDF handler fails strict subsets (pydap#130); the run must say so, or say "ok".
    notes = quick_result["notes"]["loopback"]["opendap"]["notes"]
    assert notes["hyperslab_request"]


def test_markdown_renders_from_a_result(quick_result: dict[str, Any]) -> None:
    text = table4.markdown({**quick_result, "plots": []})
    assert "### loopback: median seconds" in text
    for peer in table4.PEERS:
        assert peer in text

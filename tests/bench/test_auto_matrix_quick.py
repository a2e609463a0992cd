"""bench.auto_matrix in quick mode: every peer answers every cell with the grpc path's records; no timing checks."""

from __future__ import annotations

from pathlib import Path

from bench import auto_matrix
from dstp.samples import generate_samples


def test_quick_matrix_runs_every_peer_and_the_records_agree(tmp_path: Path) -> None:
    generate_samples(tmp_path / "small", "small")
    result = auto_matrix.run(True, {"small": tmp_path / "small"})
    rows = result["paths"][0]["rows"]
    assert {(r["size"], r["mode"]) for r in rows} == {(s, m) for s in auto_matrix.QUICK_SIZES for m in ("cold", "warm")}
    assert all(r["records_equal"] for r in rows)
    for r in rows:
        assert r["auto_channel"] == "grpc"  # small results on this host: the Run call's stream
        assert all(f"{p}_s" in r for p in result["peers"])
    runs = result["paths"][0]["runs"]
    assert {r["peer"] for r in runs} == set(result["peers"]) and "auto" in result["peers"]
    assert all(r["check"][0] == round(r["size"] / 12) for r in runs)  # LIMIT N records arrived

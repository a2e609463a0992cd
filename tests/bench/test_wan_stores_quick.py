"""The WAN stores benchmark's quick mode (bench/wan_stores.py): across the emulated path, dstp's answers equal
xarray + s3fs's on the same objects, a restart on the index reads no header, and each reader ran (no timing is
checked)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from namespaces import skip_without_namespaces

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import wan_stores  # noqa: E402


def test_quick_run_answers_as_xarray_across_the_wan() -> None:
    name = f"dstpwan-ws{os.getpid() % 100000}"
    skip_without_namespaces(f"{name}-probe")
    result = wan_stores.run(True, {}, wan_name=name)
    rows = result["rows"]
    assert {(r["question"], r["reader"]) for r in rows} == \
        {(q, r) for q in wan_stores.QUESTIONS for r in wan_stores.READERS}
    for row in rows:
        if row["reader"] != "kerchunk":  # kerchunk's one set of packing attributes: recorded, not required
            assert row["errors"] == [] and row["answer_equals_xarray"], row
    assert result["answers_agree"]["dstp_cold"] and result["answers_agree"]["dstp_warm"]
    for row in rows:
        if row["reader"] == "dstp_warm":
            assert row["open_gets"] == 0  # the index holds headers and chunk listings: the restart reads none
        if row["reader"] == "dstp_cold":
            assert 0 < row["open_bytes"] <= 2 * 2 * 64 * 2**10  # two files, a 64 KiB block or two each
    assert "| 20 ms | point | dstp_warm |" in wan_stores.markdown(result)

"""The UDT benchmark's quick mode (bench/udt_get.py): dstp and raw libudt at both settings run and succeed.

No timing assertions: the quick mode moves an 8 MiB file once per peer on loopback; a peer that failed has no
median, and the raw row at the best setting is the one bench/results/udt_settings.json names.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import udt_get  # noqa: E402
from bench.__main__ import samples  # noqa: E402


def test_dstp_and_raw_libudt_at_the_channels_and_the_best_setting_all_run() -> None:
    label, settings = udt_get.best_raw_setting()
    assert settings["mss"] >= 1500 and label in (REPO / "bench" / "results" / "udt_settings.md").read_text()
    result = udt_get.run(True, samples(True))
    assert result["mode"] == "quick"
    assert result["dstp_MBps"] and result["dstp_MBps"] > 0  # dstp's get succeeded and its output was checked
    assert result["raw_MBps"] and result["raw_MBps"] > 0

"""Shared fixtures: sample and edge-case catalogs on disk, a live server on loopback, a client."""

from __future__ import annotations

import faulthandler
import os
import shutil
import sys
import tempfile
import threading
from pathlib import Path
from typing import Iterator

import pytest

sys.path.insert(0, str(Path(__file__).parent))
# A developer's shell may name a running `dstp agent`: the tests' `dstp get` processes use one only where a test
# starts it, so every other test runs the command as it runs alone.
os.environ.pop("DSTP_AGENT_SOCK", None)
# Servers keep their catalog index in the user's state folder (platformdirs): the tests' go to a folder of the run.
os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="dstp-test-state-")

import builders  # noqa: E402
from hang_dump import native_stacks  # noqa: E402

import dstp  # noqa: E402
from dstp.catalog.publish import publish  # noqa: E402
from dstp.samples import generate_samples  # noqa: E402
from dstp.server import DstpServer  # noqa: E402
from dstp.settings import Settings  # noqa: E402

BROKEN_XML = b"""<?xml version="1.0"?>
<dataset xmlns="urn:dstp:descriptor:1" id="broken" version="1">
  <title>Broken on purpose</title>
  <files glob="*.nc"/>
  <coordinates><coordinate name="x" dimension="x"/>
  </coordinates>
"""


@pytest.fixture(scope="session")
def catalog_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A catalog with the small samples, the edge cases, and two datasets that must be skipped."""
    root = tmp_path_factory.mktemp("catalog")
    generate_samples(root, "small")
    publish(builders.edge_station(root / "station"), "station")
    publish(builders.edge_axes(root / "axes"), "axes")
    # A descriptor that is not well-formed XML.
    (root / "broken").mkdir()
    (root / "broken" / "broken.dstp.xml").write_bytes(BROKEN_XML)
    # A dataset whose only file is truncated.
    trunc = root / "truncated"
    builders.truncated_copy(root / "ccm3" / "ccm3_1990-01.nc", trunc / "cut_1990-01.nc")
    xml = (root / "ccm3" / "ccm3.dstp.xml").read_text().replace('id="ccm3"', 'id="truncated"')
    xml = xml.replace('glob="ccm3_*.nc"', 'glob="cut_*.nc"')
    (trunc / "truncated.dstp.xml").write_text(xml)
    # A netCDF3 file cut short: netCDF-C would read it and invent fill values.
    cut3 = root / "truncated3"
    builders.truncated_copy(root / "ocean" / "ocean_2000-01.nc", cut3 / "ocean_2000-01.nc", keep=0.95)
    xml = (root / "ocean" / "ocean.dstp.xml").read_text().replace('id="ocean"', 'id="truncated3"')
    (cut3 / "truncated3.dstp.xml").write_text(xml)
    return root


@pytest.fixture(scope="session")
def server(catalog_root: Path) -> Iterator[DstpServer]:
    settings = Settings(catalog_root=catalog_root, port=0, http_port=-1, data_port=-1, udt_port=-1,
                        batch_rows=4096)
    srv = DstpServer(settings)
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def client(server: DstpServer) -> Iterator[dstp.Client]:
    assert server.endpoints is not None
    with dstp.connect(server.endpoints.grpc) as c:
        yield c


@pytest.fixture()
def scratch(tmp_path: Path) -> Path:
    """An empty folder, removed after the test."""
    yield tmp_path
    shutil.rmtree(tmp_path, ignore_errors=True)


# pytest-timeout fails a test that outlives its timeout by raising in the main thread, which cannot
# happen while that thread is blocked inside a C extension (a libudt lock, say): such a test would
# hang the run until CI gives up. So a test still running HARD_EXIT_AFTER_S past its timeout gets every
# thread's stacks written to the terminal, Python's and (where gdb is installed) the native ones, and
# the run ends with exit status 1.
HARD_EXIT_AFTER_S = 60.0


def _timeout_s(item: pytest.Item) -> float:
    """Return the test's pytest-timeout limit: its mark, else ``--timeout``, else the ini value (0: none)."""
    mark = item.get_closest_marker("timeout")
    if mark is not None and mark.args:
        return float(mark.args[0])
    given = item.config.getoption("timeout", None)
    return float(given if given is not None else item.config.getini("timeout") or 0)


def _stacks_and_exit(item: pytest.Item, after_s: float) -> None:
    capture = item.config.pluginmanager.getplugin("capturemanager")
    if capture is not None:
        capture.suspend_global_capture(in_=True)  # write to the terminal, as pytest-timeout does
    err = sys.stderr
    err.write(f"\n=== {item.nodeid} is still running after {after_s:.0f} s, past its timeout: its main thread "
              f"is blocked where pytest-timeout cannot interrupt it. Stacks follow; the run ends. ===\n")
    err.flush()
    faulthandler.dump_traceback(file=err, all_threads=True)
    err.write(native_stacks(os.getpid()))
    err.write(f"=== the run ended: {item.nodeid} hung ===\n")
    err.flush()
    os._exit(1)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """End the run, with every thread's stacks, when a test outlives its timeout by ``HARD_EXIT_AFTER_S``."""
    timeout = _timeout_s(item)
    if timeout <= 0:
        yield
        return
    after = timeout + HARD_EXIT_AFTER_S
    watchdog = threading.Timer(after, _stacks_and_exit, args=(item, after))
    watchdog.daemon = True
    watchdog.start()
    try:
        yield
    finally:
        watchdog.cancel()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """On a failure in a process that loaded libudt, report its recent send-queue teardowns.

    A slow teardown holds libudt's socket table (docs/udt.md, "A stalled socket table"); reading these
    figures takes only the extension's own lock, so it works while libudt is stuck.
    """
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    udt = sys.modules.get("dstp.transport._udt")
    if report.failed and udt is not None and hasattr(udt, "_teardowns"):
        count, recent = udt._teardowns()
        slow = [(port, round(seconds, 3)) for port, seconds in recent if seconds > 0.5]
        report.sections.append(("libudt", f"send-queue teardowns so far: {count}; slower than 0.5 s among the "
                                          f"last {len(recent)}: {slow or 'none'}; threads inside libudt calls: "
                                          f"{udt.inflight_calls()}"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests of the slow files (tests/slow_files.py) ``slow``, so ``-m "not slow"`` is the fast loop."""
    from slow_files import SLOW_FILES

    root = Path(str(config.rootpath))
    for item in items:
        if Path(str(item.path)).relative_to(root).as_posix() in SLOW_FILES:
            item.add_marker(pytest.mark.slow)

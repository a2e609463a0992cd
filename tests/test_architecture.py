"""docs/architecture.md tells the truth: each path it names is the path a real request takes.

The page lists, for the path of a query, of a ticket and of an axis value, the functions a request passes
through (``<!-- path: NAME -->`` tables of ``module:Qualified.name``), and for the axis value the functions
it must never reach (``<!-- never: axis -->``). Each test starts a server on loopback, records every call of
those functions in every thread (``sys.setprofile``/``threading.setprofile`` set before the server starts its
threads), sends one real request, and fails unless the listed functions were called in the listed order —
or, for the "never" list, were not called at all. A renamed or bypassed step fails here until the page is
redrawn.
"""

from __future__ import annotations

import dis
import importlib
import inspect
import re
import sys
import threading
from pathlib import Path
from types import CodeType, FrameType
from typing import Any, Callable, Iterator

import pytest

import dstp
from dstp.server import DstpServer
from dstp.settings import Settings

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
SQL = "select lat, lon, temperature from ccm3 limit 100"  # streams from the scan in the door's thread


def _steps(kind: str, name: str) -> list[str]:
    """Return the functions of the ``<!-- kind: name -->`` table of the page, in order."""
    text = DOC.read_text(encoding="utf-8")
    found = re.search(rf"<!-- {kind}: {name} -->\n(.*?)<!-- /{kind} -->", text, re.S)
    assert found is not None, f"docs/architecture.md has no {kind} table {name!r}"
    steps = re.findall(r"^\|[^|]*\| `([\w.]+:[\w.]+)` \|$", found.group(1), re.M)
    assert len(steps) >= 4, found.group(1)
    return steps


def _code(target: str) -> CodeType:
    module, qualified = target.split(":")
    obj: Any = importlib.import_module(module)
    for part in qualified.split("."):
        obj = getattr(obj, part)
    obj = getattr(obj, "__func__", obj)
    return obj.__code__  # type: ignore[no-any-return]


class Calls:
    """Every call of the watched functions, in the order they happened, in any thread."""

    def __init__(self, targets: list[str]) -> None:
        self.names = {_code(t): t for t in targets}
        # A generator's frame reports "call" each time it resumes; only its start (the first RESUME) is a call.
        self.starts = {code: next(i.offset for i in dis.get_instructions(code) if i.opname == "RESUME")
                       for code in self.names if code.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE)}
        self.seen: list[str] = []
        self._lock = threading.Lock()

    def profile(self, frame: FrameType, event: str, arg: object) -> None:
        if event == "call":
            code = frame.f_code
            name = self.names.get(code)
            if name is not None and self.starts.get(code, frame.f_lasti) == frame.f_lasti:
                with self._lock:
                    self.seen.append(name)

    def clear(self) -> None:
        with self._lock:
            self.seen.clear()

    def in_order(self, steps: list[str]) -> None:
        """Fail unless ``steps`` happened in this order (other calls may come between)."""
        with self._lock:
            seen = list(self.seen)
        at = -1
        for step in steps:
            later = [i for i, name in enumerate(seen) if name == step and i > at]
            assert later, f"{step} was not called after {steps[steps.index(step) - 1] if at >= 0 else 'the start'}" \
                          f"; calls: {seen}"
            at = later[0]


@pytest.fixture(scope="module")
def calls() -> Iterator[Calls]:
    targets = sorted({*_steps("path", "query"), *_steps("path", "ticket"), *_steps("path", "axis"),
                      *_steps("never", "axis")})
    watcher = Calls(targets)
    previous: Callable[..., Any] | None = sys.getprofile()
    sys.setprofile(watcher.profile)
    threading.setprofile(watcher.profile)
    try:
        yield watcher
    finally:
        sys.setprofile(previous)
        threading.setprofile(None)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def server(calls: Calls, catalog_root: Path) -> Iterator[DstpServer]:
    settings = Settings(catalog_root=catalog_root, port=0, http_port=-1, data_port=0, udt_port=-1,
                        max_concurrent_queries=2)
    with DstpServer(settings) as srv:
        yield srv


@pytest.fixture()
def client(server: DstpServer, calls: Calls) -> Iterator[dstp.Client]:
    assert server.endpoints is not None
    with dstp.connect(server.endpoints.grpc) as c:
        calls.clear()
        yield c


def test_the_path_of_a_query(client: dstp.Client, calls: Calls) -> None:
    table = client.query(SQL, transport="grpc")
    assert table.num_rows == 100
    calls.in_order(_steps("path", "query"))


def test_the_path_of_a_ticket(client: dstp.Client, calls: Calls) -> None:
    table = client.query(SQL, transport="striped", streams=1)
    assert table.num_rows == 100
    calls.in_order(_steps("path", "ticket"))


def test_the_path_of_an_axis_value(client: dstp.Client, calls: Calls) -> None:
    values = client.axis_values("ccm3", "lat")
    assert len(values) == 32
    calls.in_order(_steps("path", "axis"))
    never = set(_steps("never", "axis"))
    assert [name for name in calls.seen if name in never] == []

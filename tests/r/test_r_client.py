"""The R client (clients/r): its testthat suite against a live server, and R CMD check.

Both install the package into a temporary library; nothing is written into the
repository. The R tests start their own dstp server (``python -m dstp.cli serve``)
with this interpreter (``DSTP_PYTHON``) on a catalog built here: the samples plus
the edge-case datasets of the Python suite, so the shared query set
(``tests/query_cases.py``, passed as ``DSTP_QUERY_CASES``) runs in full, R's
``dstp_query`` compared with the Python client's records value for value.

Skipped only when R (``Rscript``) is not installed; ``./dev`` installs it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import builders
from dstp.catalog.publish import publish
from dstp.samples import generate_samples

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "clients" / "r"
RSCRIPT = shutil.which("Rscript")
R = shutil.which("R")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(RSCRIPT is None or R is None, reason="R is not installed (./dev installs r-base-core)"),
]


@pytest.fixture(scope="module")
def r_catalog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("r-catalog")
    generate_samples(root, "small")
    publish(builders.edge_station(root / "station"), "station")
    publish(builders.edge_axes(root / "axes"), "axes")
    return root


def _env(r_catalog: Path, library: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "R_LIBS": str(library),
        "DSTP_PYTHON": sys.executable,
        "DSTP_R_CATALOG": str(r_catalog),
        "DSTP_QUERY_CASES": str(REPO / "tests" / "query_cases.py"),
        "LANG": env.get("LANG", "C.UTF-8") or "C.UTF-8",
        # arrow (Suggests) is not a Debian package: check the package without it
        "_R_CHECK_FORCE_SUGGESTS_": "false",
        # R CMD check would ask a web time server whether file times are in the future
        "_R_CHECK_FUTURE_FILE_TIMESTAMPS_": "false",
        "_R_CHECK_SYSTEM_CLOCK_": "false",
    })
    return env


def _run(cmd: list[str], env: dict[str, str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)


def _tail(text: str, lines: int = 80) -> str:
    return "\n".join(text.splitlines()[-lines:])


def _install(env: dict[str, str], library: Path, cwd: Path) -> None:
    library.mkdir(parents=True, exist_ok=True)
    done = _run([R, "CMD", "INSTALL", "--no-test-load", "-l", str(library), str(PACKAGE)], env, cwd, 300)
    assert done.returncode == 0, f"R CMD INSTALL failed:\n{_tail(done.stdout + done.stderr)}"


TESTTHAT = """
res <- as.data.frame(testthat::test_local({path}, reporter = "summary", stop_on_failure = FALSE,
                                          stop_on_warning = FALSE))
cat(sprintf("\\nTESTS: %d, Failed: %d, Errors: %d, Skipped: %d, Warnings: %d, Passed: %d\\n", nrow(res),
            sum(res$failed), sum(res$error), sum(res$skipped), sum(res$warning), sum(res$passed)))
"""


def test_r_client_testthat_suite(r_catalog: Path, tmp_path: Path) -> None:
    library = tmp_path / "lib"
    env = _env(r_catalog, library)
    _install(env, library, tmp_path)
    code = TESTTHAT.format(path=f'"{PACKAGE}"')
    done = _run([RSCRIPT, "-e", code], env, tmp_path, 420)
    out = done.stdout + done.stderr
    assert done.returncode == 0, f"the R test run failed (exit {done.returncode}):\n{_tail(out, 150)}"
    m = re.search(r"TESTS: (\d+), Failed: (\d+), Errors: (\d+), Skipped: (\d+), Warnings: (\d+), Passed: (\d+)", out)
    assert m is not None, f"no test summary in the output:\n{_tail(out, 150)}"
    tests, failed, errors, skipped, warnings, passed = map(int, m.groups())
    assert failed == 0 and errors == 0, f"{failed} failed, {errors} errors:\n{_tail(out, 150)}"
    # everything the suite needs is installed by ./dev: a skip here would hide an untested path
    assert skipped == 0 and warnings == 0, f"{skipped} skipped, {warnings} warnings:\n{_tail(out, 150)}"
    assert tests >= 25 and passed > 500, out


def test_r_cmd_check(r_catalog: Path, tmp_path: Path) -> None:
    library = tmp_path / "lib"
    env = _env(r_catalog, library)
    env.pop("DSTP_QUERY_CASES")  # the check's test run uses the R suite's own queries; the test above runs all
    library.mkdir()
    build = _run([R, "CMD", "build", "--no-build-vignettes", "--no-manual", str(PACKAGE)], env, tmp_path, 300)
    assert build.returncode == 0, f"R CMD build failed:\n{_tail(build.stdout + build.stderr)}"
    tarballs = list(tmp_path.glob("dstp_*.tar.gz"))
    assert len(tarballs) == 1, build.stdout
    check = _run([R, "CMD", "check", "--no-manual", "--no-build-vignettes", tarballs[0].name], env, tmp_path, 540)
    out = check.stdout + check.stderr
    status = re.search(r"^Status: (.*)$", out, re.MULTILINE)
    problems = "\n".join(line for line in out.splitlines() if re.search(r"\.\.\. (ERROR|WARNING|NOTE)$", line))
    details = f"{problems or '(no ERROR, WARNING or NOTE lines)'}\n--- tail of the check log ---\n{_tail(out, 120)}"
    assert status is not None, f"R CMD check did not finish (exit {check.returncode}):\n{details}"
    assert "ERROR" not in status.group(1) and check.returncode == 0, f"R CMD check: {status.group(1)}\n{details}"

"""Installing dstp says nothing alarming, and ships exactly its data files.

`./dev` printed setuptools' "Package would be ignored" block once per C++ source folder of the compiled
extensions (transport/_udt_src, _native_src, _cxx: ~130 lines on every install), which reads like a
failure. The folders hold sources that setup.py compiles and nothing ships; the build must not take
them for packages, and the files dstp does need at run time (templates, static files, the descriptor
schema, the proto) must still be in the package.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_building_says_no_package_would_be_ignored_and_ships_the_data_files(tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    cxx = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "transport").rglob("*") if p.suffix in (".cpp", ".h"))
    assert any("_cxx/" in p for p in cxx) and any("_native_src/" in p for p in cxx)
    # setup.py's extensions need pybind11 (a build requirement only); these list the same C++ files, which is
    # what makes setuptools look at their folders (an sdist's manifest lists every source and header).
    code = (
        "import setuptools\n"
        f"sources = {[p for p in cxx if p.endswith('.cpp')]!r}\n"
        f"headers = {[p for p in cxx if p.endswith('.h')]!r}\n"
        "setuptools.setup(ext_modules=[setuptools.Extension('dstp.transport._x', sources=sources, depends=headers)],\n"
        f"                 script_args=['-q', 'egg_info', '--egg-base', {str(tmp_path)!r}, 'build_py', '-d', {str(lib)!r}])\n"
    )
    built = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    said = built.stdout + built.stderr
    assert built.returncode == 0, said
    assert "would be ignored" not in said and "absent from the `packages` configuration" not in said, said
    shipped = {p.relative_to(lib).as_posix() for p in lib.rglob("*") if p.is_file() and p.suffix != ".py"}
    needed = {f"dstp/http/{p.relative_to(ROOT / 'dstp' / 'http').as_posix()}"
              for folder in ("templates", "static") for p in (ROOT / "dstp" / "http" / folder).iterdir() if p.is_file()}
    needed |= {f"dstp/catalog/schema/{p.name}" for p in (ROOT / "catalog" / "schema").glob("*.xsd")}
    needed |= {f"dstp/proto/{p.name}" for p in (ROOT / "proto").iterdir() if p.suffix in (".proto", ".pyi")}
    assert shipped == needed, (shipped ^ needed)

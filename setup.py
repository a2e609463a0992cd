"""Build hook for the optional compiled part of dstp.

All metadata lives in pyproject.toml; setuptools merges what this file adds:
only ``ext_modules`` and ``cmdclass``.

The UDT channel needs the extension ``dstp.transport._udt`` (pybind11 over
libudt, sources in ``transport/_udt_src/``). It is built only when libudt's
header is found; otherwise -- or when compiling/linking it fails -- the
pure-Python package still installs and the UDT channel reports itself
unavailable. Environment variables (see docs/udt.md):

``DSTP_UDT_DISABLE=1``
    never build the extension.
``DSTP_UDT_INCLUDE=DIR``
    look for ``udt.h`` or ``udt/udt.h`` in DIR only (os.pathsep-separated list allowed).
``DSTP_UDT_LIB=DIR``
    link against ``libudt`` from DIR (added to the library path and rpath).
``DSTP_UDT_SHARED=1``
    link the shared libudt.so even where libudt.a exists (without the teardown repair, docs/udt.md).
``DSTP_UDT_REQUIRED=1``
    make a missing header or a failed build an error instead of a notice
    (for CI jobs that must ship the UDT channel).

The native data path ``dstp.transport._native`` (pybind11, sources in
``transport/_native_src/``; no library beyond libc) moves file blocks between
sockets and files with CRC-32C in the same pass and the GIL released
(docs/transport.md). It is built whenever a C++ compiler is there; without it
dstp moves the same frames in Python (``dstp get -v`` says which path ran).

``DSTP_NATIVE_DISABLE=1``
    never build it.
``DSTP_NATIVE_REQUIRED=1``
    make a failed build an error instead of a notice.
"""

from __future__ import annotations

import os
import sys

from pybind11.setup_helpers import Pybind11Extension, build_ext  # in [build-system] requires
from setuptools import setup

UNAVAILABLE = "dstp: libudt headers not found; the UDT channel will be unavailable (install libudt-dev)"
DEFAULT_INCLUDE_DIRS = ["/usr/include", "/usr/local/include", "/opt/homebrew/include"]


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "no", "false")


def _notice(message: str) -> None:
    print(message, file=sys.stderr)


def find_udt_include() -> str | None:
    """Return the include dir holding ``udt/udt.h`` or ``udt.h``, or None."""
    override = os.environ.get("DSTP_UDT_INCLUDE")
    dirs = override.split(os.pathsep) if override else DEFAULT_INCLUDE_DIRS
    for d in filter(None, dirs):
        if os.path.isfile(os.path.join(d, "udt", "udt.h")) or os.path.isfile(os.path.join(d, "udt.h")):
            return d
    return None


#: Headers both extensions include (release_gil.h: the GIL released safely at interpreter exit).
CXX_COMMON = "transport/_cxx"


def udt_extensions() -> list[Pybind11Extension]:
    if _flag("DSTP_UDT_DISABLE"):
        _notice("dstp: DSTP_UDT_DISABLE is set; the UDT channel will be unavailable")
        return []
    include = find_udt_include()
    if include is None:
        if _flag("DSTP_UDT_REQUIRED"):
            raise SystemExit(UNAVAILABLE + " [DSTP_UDT_REQUIRED is set]")
        _notice(UNAVAILABLE)
        return []
    lib_dirs: list[str] = []
    if os.environ.get("DSTP_UDT_LIB"):
        lib_dirs = [d for d in os.environ["DSTP_UDT_LIB"].split(os.pathsep) if d]
    # The C++ source picks <udt/udt.h> or <udt.h> itself (__has_include).
    include_dirs = [CXX_COMMON] + ([] if include == "/usr/include" else [include])
    common = dict(include_dirs=include_dirs, extra_compile_args=["-O2"], cxx_std=17)
    shared = Pybind11Extension(
        "dstp.transport._udt",
        sources=["transport/_udt_src/udt_module.cpp"],
        depends=[f"{CXX_COMMON}/release_gil.h"],
        library_dirs=lib_dirs,
        runtime_library_dirs=lib_dirs,
        libraries=["udt", "pthread"],
        **common,
    )
    archive = None if _flag("DSTP_UDT_SHARED") else find_udt_archive(lib_dirs)
    if archive is not None:
        # libudt's archive linked in, with CSndQueue's init and destructor wrapped
        # (transport/_udt_src/libudt_fixes.cpp: a closed paced socket otherwise
        # locks libudt's socket table until its next packet would have been due), and its
        # 100 ms load-time clock probe replaced by a 10 ms calibration.
        static = Pybind11Extension(
            "dstp.transport._udt",
            sources=["transport/_udt_src/udt_module.cpp", "transport/_udt_src/libudt_fixes.cpp"],
            depends=[f"{CXX_COMMON}/release_gil.h", "transport/_udt_src/libudt_fixes.h"],
            define_macros=[("DSTP_UDT_STATIC", "1")],
            extra_objects=[archive],
            libraries=["pthread"],
            extra_link_args=["-Wl,--exclude-libs,ALL"] + [f"-Wl,--wrap={s}" for s in UDT_WRAPPED],
            **common,
        )
        static.shared_fallback = shared  # type: ignore[attr-defined]  # built if this link fails
        return [static]
    _notice(SHARED_NOTICE)
    return [shared]


SHARED_NOTICE = ("dstp: linking the shared libudt (no libudt.a, DSTP_UDT_SHARED set, or the static link failed): "
                 "a paced UDT socket closed mid-send can lock libudt's socket table (docs/udt.md)")


#: Symbols the static link wraps (mangled: CSndQueue::init(CChannel*, CTimer*), CSndQueue::~CSndQueue(); and
#: nanosleep, to skip libudt's 100 ms load-time clock probe — transport/_udt_src/libudt_fixes.cpp).
UDT_WRAPPED = ["_ZN9CSndQueue4initEP8CChannelP6CTimer", "_ZN9CSndQueueD1Ev", "nanosleep"]
DEFAULT_LIB_DIRS = ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib", "/usr/local/lib"]


def find_udt_archive(lib_dirs: list[str]) -> str | None:
    """Return libudt's static archive (libudt.a, from libudt-dev) where ``ld --wrap`` works, or None."""
    if not sys.platform.startswith("linux"):
        return None  # --wrap is a GNU ld / lld option
    for d in lib_dirs or DEFAULT_LIB_DIRS:
        path = os.path.join(d, "libudt.a")
        if os.path.isfile(path):
            return path
    return None


NATIVE = "dstp.transport._native"


def native_extensions() -> list[Pybind11Extension]:
    if _flag("DSTP_NATIVE_DISABLE"):
        _notice("dstp: DSTP_NATIVE_DISABLE is set; data channels will move bytes in Python")
        return []
    return [
        Pybind11Extension(
            NATIVE,
            sources=["transport/_native_src/native_module.cpp"],
            include_dirs=[CXX_COMMON],
            depends=[f"{CXX_COMMON}/release_gil.h"],
            extra_compile_args=["-O3"],
            cxx_std=17,
        )
    ]


def _required(name: str) -> bool:
    return _flag("DSTP_NATIVE_REQUIRED") if name == NATIVE else _flag("DSTP_UDT_REQUIRED")


def _build_errors() -> tuple[type[BaseException], ...]:
    from setuptools.errors import CCompilerError, CompileError, ExecError, LinkError, PlatformError

    return (CCompilerError, CompileError, ExecError, LinkError, PlatformError, OSError)


class optional_build_ext(build_ext):
    """build_ext that turns a failed optional build into a notice (unless DSTP_UDT_REQUIRED / DSTP_NATIVE_REQUIRED)."""

    def run(self) -> None:
        try:
            super().run()
        except _build_errors() as exc:  # e.g. no C++ compiler at all
            self._give_up(exc, None)

    def build_extension(self, ext) -> None:
        try:
            super().build_extension(ext)
        except _build_errors() as exc:  # CompileError, LinkError, ...
            fallback = getattr(ext, "shared_fallback", None)
            if fallback is None:
                self._give_up(exc, ext)
                return
            _notice(f"dstp: linking libudt.a into {ext.name} failed ({type(exc).__name__}); trying the shared libudt")
            _notice(SHARED_NOTICE)
            self.build_extension(fallback)

    def _give_up(self, exc: BaseException, ext) -> None:
        names = [ext.name] if ext is not None else [e.name for e in self.extensions]
        if any(_required(n) for n in names):
            raise exc
        reason = str(exc).splitlines()[0][:200] if isinstance(exc, OSError) else type(exc).__name__
        for name in names:
            what = "data channels will move bytes in Python" if name == NATIVE else "the UDT channel will be unavailable"
            _notice(f"dstp: building {name} failed ({reason}; see the compiler output above); {what}")
        # Forget the extension (rebinding, not mutating the list being iterated) so
        # that get_outputs() and the in-place copy of editable installs skip it.
        self.extensions = [e for e in self.extensions if ext is not None and e is not ext]  # type: ignore[has-type]


setup(ext_modules=udt_extensions() + native_extensions(), cmdclass={"build_ext": optional_build_ext})

"""The layers point one way: catalog → query → service → transport → adapters.

The core (errors, catalog, query) must import without gRPC, sockets or the web
framework, so a script that only reads a catalog or validates a query stays
light, and so the layering stays true as the code grows.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Top-level modules the core must never import.
ADAPTER_MODULES = ("grpc", "fastapi", "uvicorn", "starlette")
#: dstp modules the core must never import (transport, adapters, client).
OUTER = ("dstp.transport", "dstp.client", "dstp.grpc_app", "dstp.http_app", "dstp.http", "dstp.cli",
         "dstp.server", "dstp.proto", "dstp.web")


def test_the_core_imports_no_grpc_socket_web_or_client_module() -> None:
    code = (
        "import sys, dstp.errors, dstp.catalog, dstp.query\n"
        f"assert not {{m for m in sys.modules if m.split('.')[0] in {ADAPTER_MODULES!r}}}, 'adapter loaded'\n"
        "assert 'dstp.transport.tcp' not in sys.modules and 'dstp.client' not in sys.modules\n"
        "assert 'socket' not in sys.modules or 'dstp.transport' not in sys.modules\n"
        "import dstp\n"
        "assert 'dstp.client' not in sys.modules, 'import dstp loaded the client'\n"
        "assert callable(dstp.connect) and 'dstp.client' in sys.modules\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_catalog_and_query_never_import_transport_or_adapters() -> None:
    sources = [*(ROOT / "catalog").rglob("*.py"), *(ROOT / "dstp" / "query").rglob("*.py")]
    assert len(sources) > 10
    for path in sources:
        for name in _imports(path):
            assert not name.startswith(OUTER), f"{path.relative_to(ROOT)} imports {name}"
            assert name.split(".")[0] not in ADAPTER_MODULES, f"{path.relative_to(ROOT)} imports {name}"

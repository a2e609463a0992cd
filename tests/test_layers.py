"""The layers point one way: foundation → catalog → query → transport → service → adapters → clients → assembly.

Every pair of units is checked (``LAYERS``, ``SAME_LAYER``; docs/architecture.md draws the same table).

The core (errors, catalog, query) must import without gRPC, sockets or the web
framework, so a script that only reads a catalog or validates a query stays
light, and so the layering stays true as the code grows. Server code lives
under dstp/ (the HTTP adapter in dstp/http/) and never imports the clients
under clients/.
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
OUTER = ("dstp.transport", "dstp.client", "dstp.grpc_app", "dstp.http", "dstp.cli", "dstp.server", "dstp.proto")


def test_the_core_imports_no_grpc_socket_web_or_client_module() -> None:
    code = (
        "import sys, dstp.errors, dstp.catalog, dstp.query\n"
        f"assert not {{m for m in sys.modules if m.split('.')[0] in {ADAPTER_MODULES!r}}}, 'adapter loaded'\n"
        "assert 'dstp.transport.wire.tcp' not in sys.modules and 'dstp.client' not in sys.modules\n"
        "assert 'socket' not in sys.modules or 'dstp.transport' not in sys.modules\n"
        "import dstp\n"
        "assert 'dstp.client' not in sys.modules, 'import dstp loaded the client'\n"
        "assert callable(dstp.connect) and 'dstp.client' in sys.modules\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr


def test_the_service_loads_no_protobuf_or_grpc() -> None:
    # The service owns the values that cross the wire (dstp.transport.wire.values); their protobuf mapping
    # lives beside the gRPC door (dstp/grpc_codec.py) and in the client (clients/python/_codec.py).
    code = (
        "import dstp.service, sys\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] == 'grpc' or m.startswith('google.protobuf'))\n"
        "assert not loaded, loaded[:5]\n"
        "assert 'dstp.proto.dstp_pb2' not in sys.modules\n"
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
            if node.module in ("dstp", "dstp.transport"):  # from dstp import client; from dstp.transport import native
                found.update(f"{node.module}.{a.name}" for a in node.names)
            if node.module != "dstp.transport":  # a package of sub-packages, no unit itself
                found.add(node.module)
    return found


def test_catalog_and_query_never_import_transport_or_adapters() -> None:
    sources = [*(ROOT / "catalog").rglob("*.py"), *(ROOT / "dstp" / "query").rglob("*.py")]
    assert len(sources) > 10
    for path in sources:
        for name in _imports(path):
            assert not name.startswith(OUTER), f"{path.relative_to(ROOT)} imports {name}"
            assert name.split(".")[0] not in ADAPTER_MODULES, f"{path.relative_to(ROOT)} imports {name}"


# -- the layout of the house: server code under dstp/, clients under clients/ ---------------------

#: Server code that still imports the Python client, and what (none: the CSV and netCDF writers the HTTP formats
#: share with the CLI live in dstp/result_files.py). Add an entry only with a plan; the test fails once it is gone.
CLIENT_IMPORTS_TO_REMOVE: set[tuple[str, str]] = set()
#: dstp/ modules that are clients themselves: the CLI (dstp query, dstp get) and what its commands run
#: (dstp/commands.py, shared with dstp agent), the lazy `dstp.connect`, and federation, where this server
#: reads another server's datasets as its client (behind catalog.remote's RemoteSource protocol, injected by
#: dstp/server.py).
CLIENT_SIDE = ("dstp/cli.py", "dstp/commands.py", "dstp/__init__.py", "dstp/federation.py")


def test_server_code_imports_nothing_from_clients() -> None:
    sources = [p for folder in ("dstp", "catalog", "transport", "samples") for p in (ROOT / folder).rglob("*.py")]
    found = set()
    for path in sources:
        rel = path.relative_to(ROOT).as_posix()
        if rel in CLIENT_SIDE:
            continue
        found |= {(rel, name) for name in _imports(path) if name == "dstp.client" or name.startswith("dstp.client.")}
    assert found - CLIENT_IMPORTS_TO_REMOVE == set(), "server code must not import the client (clients/)"
    assert CLIENT_IMPORTS_TO_REMOVE - found == set(), "gone: remove these from CLIENT_IMPORTS_TO_REMOVE"


def test_clients_holds_only_clients() -> None:
    import tomllib

    assert sorted(p.name for p in (ROOT / "clients").iterdir() if not p.name.startswith(".")) == ["python", "r"]
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    from_clients = {pkg for pkg, folder in config["package-dir"].items() if folder.startswith("clients/")}
    assert from_clients == {"dstp.client"}
    assert {"dstp.http", "dstp.http.templates", "dstp.http.static"} <= set(config["packages"])
    assert not any(p.startswith("dstp.web") for p in config["packages"])


def test_the_http_adapter_is_dstp_http() -> None:
    code = (
        "import importlib.util, sys, dstp.http, dstp.http.pages\n"
        "assert not {m for m in sys.modules if m.split('.')[0] in ('fastapi', 'uvicorn', 'starlette')}, "
        "'the page models loaded the web framework'\n"
        "assert importlib.util.find_spec('dstp.web') is None\n"
        "assert (dstp.http.TEMPLATES_DIR / 'base.html').is_file() and (dstp.http.STATIC_DIR / 'query.js').is_file()\n"
        "from dstp.http.app import create_app, start_http_server\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr


def test_only_app_and_error_responses_import_the_web_framework() -> None:
    # the routers (included by app.py) and the ASGI limits middleware (wraps uvicorn's h11 protocol)
    framework = {"app.py", "error_responses.py", "facade_routes.py", "feed_routes.py", "limits.py",
                 "zarr_routes.py", "edr_routes.py", "map_routes.py", "opendap_routes.py",
                 "catalog_routes.py", "query_routes.py", "login_routes.py", "html_pages.py"}
    for path in (ROOT / "dstp" / "http").glob("*.py"):
        if path.name in framework:
            continue
        loaded = {name for name in _imports(path) if name.split(".")[0] in ADAPTER_MODULES}
        assert loaded == set(), f"{path.relative_to(ROOT)} imports {loaded}: keep it framework-free"


def test_every_python_package_is_installed() -> None:
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {folder: name for name, folder in config["package-dir"].items()}
    wanted = set()
    for folder, name in folders.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            if not any(part.startswith(("_", ".")) or part == "tests" for part in rel):
                wanted.add(".".join((name, *rel)))
    assert wanted - set(config["packages"]) == set(), "add these to [tool.setuptools] packages in pyproject.toml"


# -- the layer contract: every pair of units, one way ------------------------------------------------------

#: Every unit of the installed packages (a sub-package, or a module at the dstp/ root), by layer; a unit may
#: import units of lower layers, and of its own layer only where SAME_LAYER says. docs/architecture.md draws it.
LAYERS: dict[str, tuple[str, ...]] = {
    "foundation": ("dstp.errors", "dstp.settings", "dstp.log_limits", "dstp.incidents", "dstp.hyperslabs",
                   "dstp._chunk_index", "dstp._storage_layout", "dstp._error_tables", "dstp.__version__"),
    "catalog": ("dstp.catalog", "dstp.auth"),
    "query": ("dstp.query", "dstp.metadata", "dstp.listings", "dstp.samples"),
    # What crosses a data channel, the same for both ends: frames, CRC-32C, Arrow IPC, the links (TCP, UDT, pipes),
    # ticket proofs, and the values the service answers with; the compiled extensions' loaders beside them.
    "wire": ("dstp.transport.wire", "dstp.transport.native", "dstp.transport._native", "dstp.transport.udt_socket"),
    # The server's side of the data channels: tickets, sources, transfers, listeners; the doors' connection caps.
    "server channels": ("dstp.transport.server", "dstp.connections"),
    "service": ("dstp.service",),
    # The gRPC spec and its generated code, with the tables both protobuf codecs read: above the service, which
    # never loads protobuf (test_the_service_loads_no_protobuf_or_grpc), under the gRPC door and the client.
    "proto": ("dstp.proto",),
    # What a protocol's documents and answers are, free of web code: Zarr v3, EDR, OPeNDAP, map tiles, and the
    # values xarray expects (shared with the Python client).
    "formats": ("dstp.cf_encoding", "dstp.zarr_v3", "dstp.edr", "dstp.opendap", "dstp.render",
                "dstp.result_files", "dstp.result_grid", "dstp.erddap"),
    "adapters": ("dstp.grpc_app", "dstp.grpc_codec", "dstp.grpc_feed", "dstp.http", "dstp.flight", "dstp._flight_sql",
                 "dstp.webhooks", "dstp.cluster"),
    # The client's side of the data channels (receiver, kept connections, tuner, downloads) sits here: no
    # server layer may import it (test_the_server_and_the_client_sides_never_import_each_other).
    "clients": ("dstp.transport.client", "dstp.client", "dstp.credentials", "dstp.commands", "dstp.agent", "dstp",
                "dstp.federation"),
    "assembly": ("dstp.server", "dstp.maintenance", "dstp.cli", "dstp.cli_feed", "dstp.cli_agent", "dstp.cli_tokens",
                 "dstp.cli_references"),
}
#: Imports allowed inside one layer (an adapter and its own helpers; the client side's commands and agent).
SAME_LAYER = {
    ("dstp.grpc_app", "dstp.grpc_feed"), ("dstp.grpc_feed", "dstp.grpc_app"), ("dstp.grpc_app", "dstp.grpc_codec"),
    ("dstp.grpc_feed", "dstp.grpc_codec"), ("dstp.flight", "dstp._flight_sql"),
    ("dstp.catalog", "dstp.auth"), ("dstp.auth", "dstp.catalog"),
    ("dstp.query", "dstp.metadata"), ("dstp.metadata", "dstp.query"), ("dstp.listings", "dstp.metadata"),
    ("dstp.samples", "dstp.query"),
    ("dstp.transport.wire", "dstp.transport.native"), ("dstp.transport.wire", "dstp.transport.udt_socket"),
    ("dstp.transport.native", "dstp.transport._native"),
    ("dstp.client", "dstp.transport.client"), ("dstp.agent", "dstp.transport.client"),
    ("dstp.agent", "dstp.commands"), ("dstp.commands", "dstp.client"), ("dstp.agent", "dstp.client"),
    ("dstp", "dstp.client"), ("dstp.federation", "dstp.client"), ("dstp.client", "dstp.credentials"),
    ("dstp.cli", "dstp.cli_feed"), ("dstp.cli", "dstp.cli_agent"), ("dstp.cli", "dstp.cli_tokens"), ("dstp.cli", "dstp.cli_references"),
    ("dstp.cli_references", "dstp.server"), ("dstp.cli", "dstp.server"), ("dstp.cli", "dstp.maintenance"),
    ("dstp.maintenance", "dstp.server"), ("dstp.zarr_v3", "dstp.cf_encoding"), ("dstp.result_files", "dstp.result_grid"), ("dstp.opendap", "dstp.erddap"), ("dstp.edr", "dstp.cf_encoding"),
    *((a, b) for a in LAYERS["foundation"] for b in LAYERS["foundation"]),
}
#: Imports against the layers that are known and planned away (issue 34). The test fails once one is gone.
AGAINST_THE_LAYERS: dict[tuple[str, str], str] = {}


def _unit(module: str) -> str:
    parts = module.split(".")
    if parts[:2] == ["dstp", "transport"] and len(parts) > 2:  # its sub-packages are units of their own
        return ".".join(parts[:3])
    return "dstp" if len(parts) == 1 else ".".join(parts[:2])


def _unit_imports() -> set[tuple[str, str]]:
    import tomllib

    folders = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    pairs: set[tuple[str, str]] = set()
    for package, folder in folders.items():
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT / folder).with_suffix("").parts
            if package == "dstp" and rel[0] in ("catalog", "transport", "client", "samples", "proto"):
                continue  # not installed from there (each has its own folder)
            source = _unit(".".join((package, *rel)).removesuffix(".__init__"))
            for name in _imports(path):
                if name == "dstp" or not name.startswith("dstp."):
                    continue
                target = _unit(name)
                if target != source:
                    pairs.add((source, target))
    return pairs


def test_every_unit_has_a_layer() -> None:
    layer_of = {u: layer for layer, units in LAYERS.items() for u in units}
    units = {u for pair in _unit_imports() for u in pair}
    assert units - set(layer_of) == set(), "give these a layer in LAYERS (and docs/architecture.md)"


def _against(pairs: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """Return the pairs (importer, imported) that import against the layers."""
    order = list(LAYERS)
    rank = {u: order.index(layer) for layer, units in LAYERS.items() for u in units}
    return {(a, b) for a, b in pairs if rank[b] > rank[a] or (rank[b] == rank[a] and (a, b) not in SAME_LAYER)}


def test_every_pair_of_units_imports_one_way() -> None:
    against = _against(_unit_imports())
    assert against - set(AGAINST_THE_LAYERS) == set(), "an import against the layers (see docs/architecture.md)"
    assert set(AGAINST_THE_LAYERS) - against == set(), "gone: remove these from AGAINST_THE_LAYERS"


#: Units only a server runs (its data channels, the service, the doors), and units only a client runs.
SERVER_SIDE = ("dstp.transport.server", "dstp.connections", "dstp.service", *LAYERS["adapters"])
CLIENT_SIDE_UNITS = LAYERS["clients"]


def test_the_server_and_the_client_sides_never_import_each_other() -> None:
    pairs = _unit_imports()
    outside = CLIENT_SIDE_UNITS + LAYERS["assembly"]  # the assembly (dstp serve, the CLI) may use both
    server_to_client = {(a, b) for a, b in pairs if b in CLIENT_SIDE_UNITS and a not in outside}
    client_to_server = {(a, b) for a, b in pairs if a in CLIENT_SIDE_UNITS and b in SERVER_SIDE}
    assert server_to_client == set(), "server code imports the client side (dstp.transport.client, dstp.client)"
    assert client_to_server == set(), "the client side imports server channels, the service or a door"
    both = {("dstp.transport.client", "dstp.transport.wire"), ("dstp.transport.server", "dstp.transport.wire")}
    assert both <= pairs, "both sides build on the wire"


def test_the_contract_catches_upward_and_sideways_imports() -> None:
    assert _against({("dstp.catalog", "dstp.service"), ("dstp.query", "dstp.http"),
                     ("dstp.service", "dstp.transport.server"), ("dstp.flight", "dstp.grpc_app"),
                     ("dstp.http", "dstp.service"), ("dstp.service", "dstp.proto"),
                     ("dstp.transport.server", "dstp.transport.client"),
                     ("dstp.transport.wire", "dstp.transport.server"), ("dstp.transport.client", "dstp.transport.wire")}) == \
        {("dstp.catalog", "dstp.service"), ("dstp.query", "dstp.http"), ("dstp.flight", "dstp.grpc_app"),
         ("dstp.service", "dstp.proto"), ("dstp.transport.server", "dstp.transport.client"),
         ("dstp.transport.wire", "dstp.transport.server")}


def test_every_path_in_the_architecture_page_exists() -> None:
    import re

    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    paths = set(re.findall(r"\b((?:dstp|catalog|transport|clients|proto|samples|tests|bench|docs)/[\w./*-]*[\w*])", text))
    assert len(paths) > 40
    missing = sorted(p for p in paths if not any(ROOT.glob(p)))  # dstp/http/erddap*.py names several
    assert missing == [], f"docs/architecture.md names paths that do not exist: {missing}"


# -- one concept per module: none over 800 lines ------------------------------------------------------------

#: STYLE.md: "under ~500 lines is comfortable, over ~800 asks for a split".
MAX_MODULE_LINES = 800
#: The folders installed as dstp (pyproject.toml's package-dir); the generated protobuf modules are not written.
INSTALLED = ("dstp", "catalog", "transport", "clients/python", "samples", "proto")


def test_no_module_is_over_800_lines() -> None:
    sources = [p for folder in INSTALLED for p in (ROOT / folder).rglob("*.py") if "_pb2" not in p.name]
    assert len(sources) > 150
    long = {p.relative_to(ROOT).as_posix(): n for p in sources
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert long == {}, "split these along a seam (one concept per module)"


#: Each folder of tests/ tests one unit of the source, named here; a new folder says which, or why it cannot.
TEST_FOLDERS = {
    "auth": "dstp/auth", "catalog": "catalog", "client": "clients/python", "cluster": "dstp/cluster",
    "query": "dstp/query", "render": "dstp/render", "service": "dstp/service", "transport": "transport",
    "proto": "proto", "http": "dstp/http", "flight": "dstp/flight.py", "cli": "dstp/cli.py", "r": "clients/r",
    "bench": "bench",
}
#: Folders that test no one unit, and why.
CROSS_CUTTING = {"e2e": "whole servers, clients and commands together, across every layer"}


def test_the_tests_mirror_the_packages() -> None:
    folders = sorted(p.name for p in (ROOT / "tests").iterdir()
                     if p.is_dir() and not p.name.startswith((".", "_")))
    unnamed = [f for f in folders if f not in TEST_FOLDERS and f not in CROSS_CUTTING]
    assert unnamed == [], "name the unit each of these tests/ folders tests (TEST_FOLDERS), or why none (CROSS_CUTTING)"
    missing = {f: src for f, src in TEST_FOLDERS.items() if not (ROOT / src).exists()}
    assert missing == {}, "these tests/ folders name a unit that does not exist"
    assert set(folders) >= set(TEST_FOLDERS) | set(CROSS_CUTTING), "a named tests/ folder is gone: update the tables"

"""The ``dstp`` command: a thin command group over the library; its help is the reference.

    dstp serve [ROOT]                  run a server (no ROOT: the bundled samples)
    dstp samples DIR [--size S]        write the sample datasets
    dstp publish FILE… --id ID         draft a descriptor beside the files (or: DIR --glob 'x_*.nc',
                                       s3://bucket/prefix/ --glob 'x_*.nc' of a configured store)
    dstp catalog validate ROOT         check every descriptor under ROOT
    dstp catalog reload [ROOT]         make the server serving ROOT publish what changed now
    dstp catalog export-references ID -o F.json   kerchunk references of a dataset's files (--per-file)
    dstp ls | changes | describe ID | query SQL  ask a server (--server HOST:PORT [--token T] [--tls] [--ca-file PEM])
    dstp token create | list | revoke  API tokens of the server on this machine
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import os
import signal
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

from dstp.commands import (
    AGENT_QUERY_OPTIONS,
    Terminated,
    error,
    progress_display,
    query_on,
    run_command,
    stopped,
    terminate,
    unreachable_hint,
)
from dstp.cli_agent import cmd_agent
from dstp.cli_references import add_reference_command
from dstp.cli_tokens import add_token_commands
from dstp.errors import ServerUnreachableError

__all__ = ["main"]

DEFAULT_SERVER = "127.0.0.1:50051"

QUERY_EPILOG = """\
exit status:
  0    the whole result was printed or saved
  1    an error (bad query, server unreachable, the transfer broke off); with -o, FILE was not touched
  3    the server cut the result at its max_result_rows or max_result_bytes: a warning names the limit;
       with -o, FILE was not written (--allow-truncated writes it and exits 0, still warning)
  130  interrupted (Ctrl-C); with -o, FILE was not touched (143 for SIGTERM)

With -o, the records are written to .FILE.dstp-partial-<pid> beside FILE and renamed to FILE only when
the last batch and the server's summary have arrived, so a FILE that exists is complete (one left by a
killed dstp is removed by the next query -o FILE). An accepted
truncated result is marked in every format: a last line '# dstp-truncated: {...}' in CSV (on stdout
too), an empty last record batch with dstp:truncated metadata in Arrow, dstp:truncated file metadata in
Parquet, the global attribute dstp_truncated in netCDF.
"""


def _server_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--server",
        default=os.environ.get("DSTP_SERVER", DEFAULT_SERVER),
        metavar="HOST:PORT",
        help=f"gRPC address of the dstp server (default: $DSTP_SERVER or {DEFAULT_SERVER})",
    )
    p.add_argument("--token", default=None, metavar="TOKEN",
                   help="API token (or OIDC JWT) for a server that needs one (default: $DSTP_TOKEN)")
    p.add_argument("--tls", action="store_true", default=None,
                   help="speak TLS to the server (implied by --ca-file; default: $DSTP_TLS)")
    p.add_argument("--ca-file", default=None, metavar="PEM",
                   help="certificate to trust, e.g. a --tls-self-signed server's (default: $DSTP_CA_FILE)")


def _connect(args: argparse.Namespace) -> Any:
    """Return a client of ``--server`` with the command's token and TLS options."""
    import dstp

    return dstp.connect(args.server, token=args.token, tls=args.tls, ca_file=args.ca_file)


# ---------------------------------------------------------------------- serve


def cmd_serve(args: argparse.Namespace) -> int:
    from dstp.server import DstpServer
    from dstp.settings import Settings

    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    settings = Settings.from_env(
        tls_cert=Path(args.tls_cert) if args.tls_cert else None,
        tls_key=Path(args.tls_key) if args.tls_key else None,
        tls_self_signed=args.tls_self_signed,
        allow_anonymous=args.allow_anonymous,
        token_store=Path(args.token_store) if args.token_store else None,
        catalog_root=Path(args.root) if args.root else None,
        host=args.host,
        port=args.port,
        http_port=args.http_port,
        data_port=args.data_port,
        udt_port=args.udt_port,
        flight_port=args.flight_port,
    )
    server = DstpServer(settings, cluster=args.cluster, local_cluster=args.local_cluster)
    endpoints = server.start()
    # The handlers exist before the first line is printed: whoever waits for that line may stop the server at once.
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    signal.signal(signal.SIGHUP, lambda *_: server.reload())  # `dstp catalog reload`, kill -HUP: look again now
    catalog = server.catalog
    assert catalog is not None
    print(f"dstp serving {catalog.root} ({len(catalog)} datasets)", flush=True)
    for name, value in asdict(endpoints).items():
        if value and name != "tls":
            print(f"  {name:5s} {value}", flush=True)
    if server.catalog is not None and server.catalog.problems:
        print(f"  {len(server.catalog.problems)} descriptor(s) skipped; see the log or `dstp catalog validate`")
    tls = server.tls
    if tls is not None:
        print(f"  TLS certificate {tls.cert_path} (SHA-256 {tls.fingerprint}); data channels sealed", flush=True)
    auth = server.authenticator
    if auth is not None and not auth.allow_anonymous:
        print(f"  requests need a token (tokens: {auth.tokens.path if auth.tokens else 'none'}; "
              "make one with `dstp token create --user NAME --groups G1,G2`)", flush=True)
    if server.coordinator is not None:
        print(f"  cluster {server.coordinator.scheduler_address} ({len(server.coordinator.workers())} workers)",
              flush=True)
    if endpoints.http:
        print(f"browse: {'https' if tls else 'http'}://{endpoints.http}/", flush=True)
    trust = f" --ca-file {tls.cert_path}" if tls is not None else ""
    print(f"try:  {_try_hint(catalog)} --server {endpoints.grpc}{trust}", flush=True)
    while not stop.wait(0.5):  # a signal delivered to another thread runs its handler once this thread wakes
        pass
    print("stopping…", file=sys.stderr)
    server.stop()
    return 0


def _try_hint(catalog: Any) -> str:
    """Return a first command to paste, naming a dataset this catalog really has."""
    ids = sorted(ds.id for ds in catalog)
    if "ccm3" in ids:
        return 'dstp query "select temperature, time from ccm3 where humidity > 50 limit 5"'
    if not ids:
        return "dstp ls"
    ds = catalog.get(ids[0])
    column = next(iter(ds.attributes), "*")
    return f'dstp query "select {column} from {ds.id} limit 5"'


# -------------------------------------------------------------------- samples


def cmd_samples(args: argparse.Namespace) -> int:
    from dstp.samples import generate_samples

    out = generate_samples(Path(args.dir), args.size, progress=lambda m: print(m, file=sys.stderr))
    print(f"samples ({args.size}) written to {out}; serve them with: dstp serve {out}")
    return 0


# -------------------------------------------------------------------- publish


def cmd_publish(args: argparse.Namespace) -> int:
    from dstp.catalog.publish import publish

    rename = {}
    for item in args.rename or ():
        if "=" not in item:
            error(f"--rename takes VARIABLE=column, got {item!r}")
            return 2
        var, col = item.split("=", 1)
        rename[var] = col
    if "://" in args.files[0]:
        return _publish_from_store(args, rename)
    files = [Path(f) for f in args.files]
    if args.glob:  # one folder and a pattern: no path list (100,000 paths exceed the command line's limit)
        if len(files) != 1 or not files[0].is_dir() or "/" in args.glob:
            error("--glob takes one folder (publish DIR --glob 'era5_*.nc') and a pattern of file names in it")
            return 2
        files = sorted(p for p in files[0].glob(args.glob) if p.is_file())
        if not files:
            error(f"no file in {args.files[0]} matches {args.glob!r}")
            return 2
    notes: list[str] = []
    path = publish(files, args.id, rename=rename, title=args.title, overwrite=args.overwrite, group=args.group,
                   files_glob=args.glob or None, processes=args.processes or os.cpu_count() or 1, notes=notes)
    for note in notes:
        print(f"dstp: warning: {note}", file=sys.stderr)
    print(f"wrote {path}\nreview it, then check the catalog with: dstp catalog validate {path.parent}")
    return 0


def _publish_from_store(args: argparse.Namespace, rename: dict[str, str]) -> int:
    """``dstp publish s3://bucket/prefix/ --glob PATTERN``: objects of a configured store, headers by ranges."""
    from dstp.catalog.publish_store import publish_from_store
    from dstp.server import object_files
    from dstp.settings import Settings

    if len(args.files) != 1 or not args.glob:
        error("publish URL takes one store URL and --glob PATTERN (publish s3://bucket/prefix/ --glob 'era5_*.nc')")
        return 2
    settings = Settings.from_env()
    root = Path(args.catalog) if args.catalog else settings.catalog_root or Path.cwd()
    objects = object_files(settings)
    notes: list[str] = []
    try:
        path = publish_from_store(args.files[0], args.glob, args.id, objects, root, rename=rename, title=args.title,
                                  overwrite=args.overwrite, group=args.group, notes=notes)
    finally:
        if objects is not None:
            objects.close()
    for note in notes:
        print(f"dstp: warning: {note}", file=sys.stderr)
    print(f"wrote {path}\nreview it, then check the catalog with: dstp catalog validate {root}")
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from dstp.catalog.packing import fills_in_packed_range
    from dstp.server import scan_catalog
    from dstp.settings import Settings

    catalog = scan_catalog(Settings.from_env(), Path(args.root))  # from the catalog index where it is current
    for ds in catalog:
        print(f"ok      {ds.id:20s} {len(ds.files)} file(s), {len(ds.attributes)} attributes  ({ds.descriptor.path})")
        for warning in (*ds.warnings, *fills_in_packed_range(ds)):
            print(f"warning {ds.id:20s} {warning}")
        for column in ds.attributes.values():
            missing = ds.missing_from(column)
            if missing:
                shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
                print(f"note    {ds.id:20s} {column.name!r} is NULL on the records of {shown} (not in those files)")
    for problem in catalog.problems:
        print(f"ERROR   {problem}")
    for held in catalog.held_back:
        print(f"HELD    {held.reason}")
    print(f"{len(catalog)} dataset(s) valid, {len(catalog.problems)} problem(s)"
          + (f", {len(catalog.held_back)} file(s) held back" if catalog.held_back else ""))
    catalog.close()
    return 1 if catalog.problems or catalog.held_back or not len(catalog) else 0


def cmd_reload(args: argparse.Namespace) -> int:
    from dstp.maintenance import reload_server
    from dstp.settings import Settings

    settings = Settings.from_env()
    root = Path(args.root) if args.root else settings.catalog_root
    if root is None:
        from dstp.server import default_catalog_root

        root = default_catalog_root()
    done = reload_server(settings, root, timeout_s=args.timeout)
    print(f"server (process {done.pid}) looked at {Path(root).resolve()} again: catalog version {done.before} → "
          f"{done.version}")
    for change in done.changes:
        print(f"  {change.summary()}")
    return 0


# -------------------------------------------------------------- client commands


def cmd_ls(args: argparse.Namespace) -> int:
    from dstp.cli_feed import listing_pages

    datasets, total = [], 0
    with _connect(args) as c:  # a page at a time: 10,000 datasets are not one message
        for page, total in listing_pages(c, args.limit, args.search):
            datasets += page
    if args.json:
        print(json.dumps([asdict(d) for d in datasets], indent=2))
        return 0
    from rich.console import Console

    from dstp.listings import ls_table

    console = Console()
    if not datasets:
        print("no datasets on this server (or none you may read)")
        return 0
    console.print(ls_table(datasets, console.width))
    if total > len(datasets):
        print(f"{len(datasets)} of {total} datasets shown; --limit {total} lists them all")
    return 0


def cmd_usage(args: argparse.Namespace) -> int:
    with _connect(args) as c:
        usage = c.usage()
    if args.json:
        print(json.dumps(usage, indent=2))
        return 0
    q, b = usage["queries"], usage["bytes_today"]
    limit = f"{b['limit']:,}" if b["limit"] is not None else "no daily quota"
    resets = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(b["resets_at_unix"]))
    print(f"{usage['principal']}: {q['running']} running, {q['waiting']} waiting (at most {q['limit']} at once); "
          f"{b['used']:,} bytes today of {limit} (resets {resets})")
    return 0


def cmd_describe(args: argparse.Namespace) -> int:
    with _connect(args) as c:
        d = c.describe(args.id)
    if args.json:
        print(json.dumps(asdict(d), indent=2))
        return 0
    from rich.console import Console

    from dstp.listings import describe_lines

    console = Console()
    for part in describe_lines(d):
        console.print(part)
    return 0


def _interrupt(signum: int, frame: Any) -> None:
    """Ctrl-C: unwind once. Later SIGINTs are ignored, so the cleanup that removes partial files (and
    a SIGINT a C++ library re-raises after handling it itself) cannot cut it short or kill the process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def cmd_query(args: argparse.Namespace) -> int:
    agent = None if args.no_agent else os.environ.get("DSTP_AGENT_SOCK")
    if agent:
        previous = signal.signal(signal.SIGTERM, terminate)
        try:
            status = _query_via_agent(args, agent)
        finally:
            signal.signal(signal.SIGTERM, previous)
        if status is not None:
            return status
    with _connect(args) as c:
        return query_on(args, c)


def _query_via_agent(args: argparse.Namespace, socket_path: str) -> int | None:
    """Have the agent at ``socket_path`` run the query, writing to this command's stdout and stderr; return the
    exit status, or None if no agent answers there (then the caller runs it here, having said so)."""
    from dstp.agent import AgentError, AgentUnavailable, query_via_agent

    options = {name: getattr(args, name) for name in AGENT_QUERY_OPTIONS}
    if args.output is not None:
        options["output"] = str(Path(args.output).absolute())  # the agent runs in its own working directory
    try:
        return query_via_agent(socket_path, {**_agent_caller(args), "query": options})
    except AgentUnavailable as exc:
        _passed_over(socket_path, exc, "query", "querying")
        return None
    except AgentError as exc:
        error(str(exc))
        return 1
    except (KeyboardInterrupt, Terminated) as exc:
        return stopped(exc, lambda: None, f"the agent at {socket_path} did not confirm it stopped within its wait"
                        + (f": {args.output} may not have been written" if args.output else ""))


def _agent_caller(args: argparse.Namespace) -> dict[str, Any]:
    """Return who asks the agent: the server and the credentials this command resolved from its flags and
    environment (the agent keeps a client per server and credentials)."""
    from dstp.credentials import client_credentials

    token, tls, ca_file = client_credentials(args.token, args.tls, args.ca_file)
    return {"server": args.server, "token": token or "", "tls": tls,
            "ca_file": str(Path(ca_file).resolve()) if ca_file else ""}


def _passed_over(socket_path: str, exc: Exception, what: str, doing: str) -> None:
    """Say why the agent at ``socket_path`` does not run this command (then it runs here)."""
    from dstp.agent import AgentRefused

    if isinstance(exc, AgentRefused):  # it read the request and ran nothing: most likely an older agent
        print(f"dstp: the agent at {socket_path} refused the {what} ({exc}); {doing} without it (restart the "
              "agent if it is older than this dstp)", file=sys.stderr)
    else:
        print(f"dstp: no agent answers at {socket_path} ({exc}); {doing} without it", file=sys.stderr)


def _kept(out: Path, partial: str, state: str) -> str:
    """Return what an unfinished download left behind, and how to go on."""
    return (f"{out} was not written; what arrived is kept in {Path(partial).name} (progress in "
            f"{Path(state).name}): run the same command again to resume")


def cmd_get(args: argparse.Namespace) -> int:
    out = Path(args.output or Path(args.file).name)
    show = args.progress if args.progress is not None else sys.stderr.isatty()
    agent = None if args.no_agent else os.environ.get("DSTP_AGENT_SOCK")
    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        got = _get_via_agent(args, agent, out, show) if agent else None
        if got is None:
            got = _get_directly(args, out, show)
    finally:
        signal.signal(signal.SIGTERM, previous)
    if isinstance(got, int):  # interrupted, or the agent said why it failed
        return got
    summary = got
    resumed = f", resumed after {summary['resumed_from']:,} bytes" if summary["resumed_from"] else ""
    print(f"{summary['size']:,} bytes → {out} in {summary['seconds']:.2f} s "
          f"({summary['bytes_per_s'] / 2**20:.1f} MiB/s over {summary['transport']} × {summary['streams']}{resumed}); "
          f"CRC-32C {summary['crc32c']} verified", file=sys.stderr)
    if summary.get("shares"):
        by_worker: dict[str, int] = {}
        for share in summary["shares"]:
            where = share["endpoint"] if share["worker"] else f"{share['endpoint']} (coordinator)"
            by_worker[where] = by_worker.get(where, 0) + share["bytes"]
        print(f"in shares from {len(by_worker)} cluster sources: "
              + ", ".join(f"{where} {n:,} bytes" for where, n in by_worker.items()), file=sys.stderr)
    if summary.get("retried"):
        print(f"done again {summary['retried']}", file=sys.stderr)
    if args.verbose:
        print(f"choice: {summary['choice']}", file=sys.stderr)
        print(f"data path: {summary.get('data_path', '')}", file=sys.stderr)
        if agent and summary.get("agent"):
            print(f"agent: {summary['agent']}", file=sys.stderr)
    return 0


def _get_directly(args: argparse.Namespace, out: Path, show: bool) -> dict[str, Any] | int:
    """Download in this process; return the summary, or the exit status of an interrupted download."""
    from dstp.transport.client.files import STATE_SUFFIX, partial_path

    progress, finish = progress_display(show)
    kept = _kept(out, str(partial_path(out)), f"{out}{STATE_SUFFIX}")
    with _connect(args) as c:
        try:
            return dict(c.get(args.dataset, args.file, out, offset=args.offset, length=args.length,
                              transport=args.transport, streams=args.streams,
                              congestion_control=args.congestion_control, progress=progress))
        except (KeyboardInterrupt, Terminated) as exc:
            return stopped(exc, finish, kept)
        finally:
            finish()


def _get_via_agent(args: argparse.Namespace, socket_path: str, out: Path, show: bool) -> dict[str, Any] | int | None:
    """Hand the download to the agent at ``socket_path``; return its summary, an exit status, or None if
    no agent answers there (then the caller downloads directly, having said so)."""
    from types import SimpleNamespace

    from dstp.agent import AgentError, AgentUnavailable, get_via_agent

    request = {**_agent_caller(args), "dataset": args.dataset, "file": args.file, "out": str(out.resolve()),
               "offset": args.offset, "length": args.length, "transport": args.transport, "streams": args.streams,
               "congestion_control": args.congestion_control}
    draw, finish = progress_display(show)

    def progress(p: dict[str, Any]) -> None:
        if draw is not None:
            draw(SimpleNamespace(rows=0, estimated_rows=-1, bytes=p["bytes"], transport=p["transport"],
                                 streams=p["streams"],
                                 rate_bytes_per_s=p["bytes"] / p["seconds"] if p["seconds"] > 0 else 0.0))

    try:
        return get_via_agent(socket_path, request, progress if draw is not None else None)
    except AgentUnavailable as exc:
        finish()
        _passed_over(socket_path, exc, "download", "downloading")
        return None
    except AgentError as exc:
        finish()
        error(f"{exc}\n{unreachable_hint(args)}" if exc.code == ServerUnreachableError.code else str(exc))
        return 1
    except (KeyboardInterrupt, Terminated) as exc:
        saved = getattr(exc, "agent_answer", {}).get("stopped")
        return stopped(exc, finish, _kept(out, saved["partial"], saved["state"]) if saved else
                       f"the agent at {socket_path} did not confirm it stopped within its wait: {out} was not "
                       "written; run the same command again to resume once it has")
    finally:
        finish()


# ---------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dstp",
        description="dstp: serve gridded netCDF datasets by attribute; query them and get Arrow back.",
    )
    parser.add_argument("--version", action="version", version=f"dstp {__import__('dstp').__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("serve", help="run a dstp server on a catalog folder")
    p.add_argument("root", nargs="?", help="catalog root with *.dstp.xml descriptors (default: the small samples, "
                                           "generated into the user cache on first use)")
    p.add_argument("--host", default=None, help="listen address (default 127.0.0.1; DSTP_HOST)")
    p.add_argument("--port", type=int, default=None, help="gRPC control port (default 50051; DSTP_PORT)")
    p.add_argument("--http-port", type=int, default=None,
                   help="HTTP port for the browser catalog and HTTP API (default 8080; -1 disables)")
    p.add_argument("--data-port", type=int, default=None, help="striped TCP data port (default: any free; -1 disables)")
    p.add_argument("--udt-port", type=int, default=None, help="UDT data port (default: any free; -1 disables)")
    p.add_argument("--flight-port", type=int, default=None,
                   help="Arrow Flight / Flight SQL port (default -1: off; 0 picks a free port; DSTP_FLIGHT_PORT)")
    p.add_argument("--tls-cert", default=None, metavar="PEM",
                   help="TLS certificate (chain) for gRPC and HTTP; data channels are then sealed (DSTP_TLS_CERT)")
    p.add_argument("--tls-key", default=None, metavar="PEM", help="private key of --tls-cert (DSTP_TLS_KEY)")
    p.add_argument("--tls-self-signed", action="store_true", default=None,
                   help="development TLS: a self-signed certificate kept in the cache folder; prints its fingerprint")
    p.add_argument("--allow-anonymous", choices=["auto", "true", "false"], default=None,
                   help="serve requests without a token (default auto: only if every dataset is public; "
                        "DSTP_ALLOW_ANONYMOUS)")
    p.add_argument("--token-store", default=None, metavar="FILE",
                   help="API tokens file (default: tokens.json in the user data folder; DSTP_TOKEN_STORE)")
    p.add_argument("--cluster", default="", metavar="tcp://HOST:8786",
                   help="scale out: run select-where queries as partitions on this Dask scheduler's workers "
                        "(docs/scale-out.md; needs the cluster extra)")
    p.add_argument("--local-cluster", type=int, default=0, metavar="N",
                   help="scale out on a LocalCluster of N worker processes started here (development)")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("samples", help="write the sample datasets (ccm3, ocean) into a folder")
    p.add_argument("dir", help="output folder (one subfolder per dataset)")
    p.add_argument("--size", choices=["small", "medium", "large"], default="small",
                   help="small: seconds; medium: ≥1M records for the seed query; large: ≥2 GB")
    p.set_defaults(func=cmd_samples)

    p = sub.add_parser("publish", help="draft a descriptor from CF/ACDD metadata and write it beside the files")
    p.add_argument("files", nargs="+", help="netCDF files of one dataset (one folder), or the folder with --glob, "
                                            "or a URL in a configured store (s3://bucket/prefix/ --glob PATTERN)")
    p.add_argument("--id", required=True, help="dataset id used in queries (letters, digits, _)")
    p.add_argument("--rename", action="append", metavar="VAR=COLUMN",
                   help="expose a variable under another column name (repeatable), e.g. T=temperature")
    p.add_argument("--title", help="title (default: the files' ACDD title)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing descriptor")
    p.add_argument("--group", help="publish only this netCDF-4/HDF5 group and those below it, e.g. Grid")
    p.add_argument("--glob", metavar="PATTERN",
                   help="publish the files of the folder given that match PATTERN (publish DIR --glob 'era5_*.nc'); "
                        "it becomes the descriptor's files glob")
    p.add_argument("--catalog", metavar="DIR",
                   help="with a store URL: the catalog folder the descriptor goes to, as DIR/ID/ID.dstp.xml "
                        "(default: DSTP_CATALOG_ROOT, else the current folder)")
    p.add_argument("--processes", type=int, default=0, metavar="N",
                   help="processes reading file headers in parallel (default: one per core)")
    p.set_defaults(func=cmd_publish)

    p = sub.add_parser("catalog", help="catalog maintenance")
    csub = p.add_subparsers(dest="catalog_command", required=True, metavar="ACTION")
    v = csub.add_parser("validate", help="check every descriptor and its files under ROOT")
    v.add_argument("root")
    v.set_defaults(func=cmd_validate)
    r = csub.add_parser("reload", help="make the server serving ROOT look at it again now (as kill -HUP), and say "
                                       "what changed")
    r.add_argument("root", nargs="?", help="catalog root (default: DSTP_CATALOG_ROOT, else the small samples)")
    r.add_argument("--timeout", type=float, default=120.0, metavar="S",
                   help="seconds to wait for the server's rescan (default 120)")
    r.set_defaults(func=cmd_reload)
    add_reference_command(csub)

    p = sub.add_parser("ls", help="list the datasets of a server")
    _server_arg(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--limit", type=int, default=0, metavar="N", help="list at most N datasets (default: all)")
    p.add_argument("--search", default="", metavar="WORDS",
                   help="only datasets whose id, title, summary or keywords contain every word")
    p.set_defaults(func=cmd_ls)

    from dstp.cli_feed import add_changes_parser

    add_changes_parser(sub, _server_arg, _connect)

    p = sub.add_parser("usage", help="show what you run now and fetched today, against your quotas")
    _server_arg(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_usage)

    p = sub.add_parser("describe", help="show dimensions, attributes and files of a dataset")
    p.add_argument("id")
    _server_arg(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_describe)

    p = sub.add_parser("query", help="run a query and print or save the records",
                       description="Run a query. Syntax: select <columns|*> from <dataset | stride(dataset, dim = k)> "
                                   "[tablesample P% | N rows [repeatable (seed)]] [where …] [order by …] [limit n]",
                       epilog=QUERY_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sql", help='e.g. "select temperature, time from ccm3 where humidity > 50"')
    _server_arg(p)
    p.add_argument("-o", "--output", metavar="FILE",
                   help="save to FILE (.arrow, .parquet, .csv, .nc), streamed into a temporary file beside it that "
                        "becomes FILE only once the result is complete")
    p.add_argument("--allow-truncated", action="store_true",
                   help="accept a result the server cut at its max_result_rows/max_result_bytes: still warn, but "
                        "save it (-o) and exit 0")
    p.add_argument("--format", choices=["table", "csv"], default="table",
                   help="stdout format without -o (csv: NULL is an empty field, NA in a one-column result)")
    p.add_argument("--max-rows", type=int, default=40, help="records printed without -o (default 40)")
    p.add_argument("--transport", default="auto", choices=["auto", "grpc", "striped", "udt"],
                   help="data channel (default auto: the gRPC stream for a result under 32 MiB, else the data "
                        "channel measured fastest on this server; -v says which and why)")
    p.add_argument("--streams", type=int, default=0, help="parallel streams for the striped channel")
    p.add_argument("--compression", default=None, choices=["none", "lz4", "zstd", "auto"],
                   help="batch compression (default: with --transport auto, chosen from the measured path — "
                        "none on this host or a LAN; with another transport, none)")
    p.add_argument("--explain", action="store_true",
                   help="print the plan without fetching: the SQL DuckDB runs, and per dataset reference its grid, "
                        "hyperslab, pushed-down conditions (or, for a remote dataset, the query sent to its server)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="say which data channel was chosen and why, and what the server read")
    prog = p.add_mutually_exclusive_group()
    prog.add_argument("--progress", dest="progress", action="store_true", default=None, help="show progress")
    prog.add_argument("--no-progress", dest="progress", action="store_false", help="hide progress")
    p.add_argument("--no-agent", action="store_true",
                   help="query in this process even when $DSTP_AGENT_SOCK names a running `dstp agent`")
    p.set_defaults(func=cmd_query)

    p = sub.add_parser("get", help="download a published file (or a byte range), resumably",
                       description="Fetch a file of a published dataset over the data channel, in parallel "
                                   "stripes, writing blocks in place into OUT.dstp-partial.data; an interrupted "
                                   "download restarts where it stopped (state in OUT.dstp-partial). The CRC-32C is "
                                   "verified at the end, and only then does the file get its name OUT. Exit status: "
                                   "0 done, 1 error, 130 interrupted (Ctrl-C).")
    p.add_argument("dataset")
    p.add_argument("file", help="file name as listed by `dstp describe DATASET`")
    _server_arg(p)
    p.add_argument("-o", "--output", help="output path (default: the file's name, here)")
    p.add_argument("--offset", type=int, default=0, help="first byte to fetch")
    p.add_argument("--length", type=int, default=-1, help="bytes to fetch (default: to the end)")
    p.add_argument("--transport", default="auto", choices=["auto", "grpc", "striped", "udt"],
                   help="data channel (default auto: striped for large files, tuned per server)")
    p.add_argument("--streams", type=int, default=0, help="parallel streams (default: auto-tuned)")
    p.add_argument("--congestion-control", default="", help="TCP congestion control, e.g. bbr or cubic")
    p.add_argument("-v", "--verbose", action="store_true", help="say why the channel and streams were chosen")
    p.add_argument("--no-agent", action="store_true",
                   help="download in this process even when $DSTP_AGENT_SOCK names a running `dstp agent`")
    prog = p.add_mutually_exclusive_group()
    prog.add_argument("--progress", dest="progress", action="store_true", default=None, help="show progress")
    prog.add_argument("--no-progress", dest="progress", action="store_false", help="hide progress")
    p.set_defaults(func=cmd_get)

    p = sub.add_parser("agent", help="keep connections warm for `dstp get` and `dstp query`: eval \"$(dstp agent)\"",
                       description="Start an agent in the background, as ssh-agent, listening on a Unix socket of its "
                                   "own that only your user can use, and print the shell lines that name it "
                                   "(DSTP_AGENT_SOCK) and its process (DSTP_AGENT_PID); it runs until killed "
                                   "(--foreground: until Ctrl-C). Each agent has its own socket: two terminals "
                                   "that start one get two, and a shell uses the one it was told of. With "
                                   "DSTP_AGENT_SOCK naming that socket (the agent prints the line to export), "
                                   "`dstp get` hands its download to the agent, and `dstp query` its query (with its "
                                   "stdout and stderr, which the agent writes to), and the agent keeps a client per "
                                   "server: the control channel, the data stripes (and their TCP windows) and the "
                                   "auto-tuner's measurements carry over from one command to the next, and a "
                                   "command starts without loading gRPC. Ctrl-C on a `dstp get` stops its "
                                   "download in the agent and keeps what arrived, on a `dstp query` stops the "
                                   "query, as without the agent.")
    p.add_argument("--socket", default=None, metavar="PATH",
                   help="where to listen (default: agent.sock in a new private folder per agent, "
                        "$XDG_RUNTIME_DIR/dstp-agent-XXXXXXXX or /tmp/dstp-agent-XXXXXXXX, removed when it stops)")
    p.add_argument("--client-idle", type=float, default=600.0, metavar="S",
                   help="close a server's connections after S seconds unused (default 600)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--foreground", action="store_true",
                      help="stay attached and log to stderr until Ctrl-C (default: fork, print the shell lines that "
                           "set DSTP_AGENT_SOCK and DSTP_AGENT_PID and return, as ssh-agent: eval \"$(dstp agent)\"; "
                           "its output goes to SOCKET.log)")
    mode.add_argument("--background", action="store_true", help="fork and return (the default; kept for scripts)")
    mode.add_argument("-k", "--kill", action="store_true",
                      help="stop the agent $DSTP_AGENT_PID names and print the lines that unset both variables: "
                           "eval \"$(dstp agent -k)\"")
    p.add_argument("-v", "--verbose", action="store_true", help="log every request")
    p.set_defaults(func=cmd_agent)

    add_token_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the dstp command line; return the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if hasattr(args, "server"):  # where the address came from, for "cannot reach" (dstp.commands.unreachable_hint)
        from_env = os.environ.get("DSTP_SERVER")
        args.server_origin = "--server" if args.server != (from_env or DEFAULT_SERVER) else \
            "DSTP_SERVER" if from_env else "default"
    if threading.current_thread() is threading.main_thread() and args.func is not cmd_serve:
        signal.signal(signal.SIGINT, _interrupt)
    return run_command(args.func, args)


def entry() -> None:
    """The ``dstp`` program: run :func:`main`, then end the process at once with its status.

    When :func:`main` returns, the command's work is done — outputs renamed into place, the
    server stopped, messages written — so the process ends with ``os._exit`` once stdout, stderr
    and the log handlers are flushed. Interpreter shutdown would only tear down the native
    thread pools of gRPC, Arrow and DuckDB, and there it has turned finished commands into deaths
    by signal: a ``dstp query`` stopped by Ctrl-C once ended by SIGINT (-2) instead of 130 after
    its message, and a ``dstp get`` that had printed "CRC-32C … verified" aborted with ``terminate
    called without an active exception`` — that one was a daemon receiver thread inside our C++
    CRC at finalization, fixed for every program in transport/_cxx/release_gil.h.

    A crash inside a native library (netCDF-C, HDF5, DuckDB, Arrow, our C++ channels) kills the
    process without a Python exception; faulthandler prints every thread's Python stack to stderr
    (the server's log) first, so a report says which query, file or channel was in that library.
    """
    try:
        faulthandler.enable(file=sys.stderr, all_threads=True)
    except (RuntimeError, ValueError, OSError):  # no usable stderr (closed, or not a file): run without it
        pass
    code = main()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can be said there
            pass
    logging.shutdown()
    os._exit(code)


if __name__ == "__main__":
    entry()

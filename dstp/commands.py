"""What the ``dstp`` commands run and say, shared by the command line and ``dstp agent``.

``dstp query``'s work (:func:`query_on`), how a command's failure becomes a message and an exit status
(:func:`run_command`), the progress bar, and how Ctrl-C and SIGTERM stop a command (:class:`Terminated`,
:func:`stopped`). The command line (``dstp.cli``) runs them in its own process; ``dstp agent`` runs
:func:`query_on` for a ``dstp query`` that handed it its stdout and stderr. This module imports neither.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path
from typing import Any, Callable

from dstp.errors import DstpError, DstpTruncationWarning, ServerUnreachableError

__all__ = ["AGENT_QUERY_OPTIONS", "EXIT_INTERRUPTED", "EXIT_TERMINATED", "EXIT_TRUNCATED", "Terminated", "error",
           "progress_display", "query_on", "run_command", "stopped", "terminate", "unreachable_hint"]


def error(message: str) -> None:
    """Say ``dstp: error: message`` on stderr."""
    print(f"dstp: error: {message}", file=sys.stderr)


def stderr_now() -> Any:
    """Return the stream ``sys.stderr`` writes to now. In ``dstp agent`` it resolves per thread to the stderr
    of the command being served (``thread_stream``); the progress bar's refresh thread must write there too."""
    return getattr(sys.stderr, "thread_stream", lambda: sys.stderr)()


def progress_display(enabled: bool) -> tuple[Callable[[Any], None] | None, Callable[..., None]]:
    """Return (progress callback, finish) drawing rows, bytes and rate on stderr.

    The bar has a total when the plan gives one: the exact record count, else the most records the result can
    have (the plan's row bound, shown as "≤ N"), with the percentage of it. ``finish(complete=True)`` after the
    last record fills a bound the result stayed under; ``finish()`` stops the bar where it is.
    """
    if not enabled:
        return None, lambda complete=False: None
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

    from dstp.transport.wire.values import UNBOUNDED_ROWS

    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TextColumn("{task.fields[rows]} rows · {task.fields[size]} · {task.fields[rate]} · {task.fields[link]}"),
        TimeElapsedColumn(),
        transient=False,
        console=__import__("rich.console").console.Console(file=stderr_now()),
    )
    task = bar.add_task("fetching", total=None, rows="0", size="0 B", rate="", link="")
    bar.start()
    seen = {"rows": 0}

    def human(n: float) -> str:
        for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
            if n < 1024 or unit == "TiB":
                return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
            n /= 1024
        return f"{n:.1f}"

    def update(p: Any) -> None:
        bound = getattr(p, "max_rows", -1)
        if p.estimated_rows > 0:
            total, of = p.estimated_rows, f" of {p.estimated_rows:,}"
        elif 0 < bound < UNBOUNDED_ROWS:
            total, of = bound, f" of ≤ {bound:,}"
        else:
            total, of = None, ""
        seen["rows"] = p.rows
        bar.update(task, completed=p.rows, total=total, rows=f"{p.rows:,}{of}", size=human(p.bytes),
                   rate=f"{human(p.rate_bytes_per_s)}/s", link=f"{p.transport}×{p.streams}")

    def finish(complete: bool = False) -> None:
        if complete:  # every record is in: the result's own count is the total, 100 %
            bar.update(task, completed=seen["rows"], total=max(1, seen["rows"]), rows=f"{seen['rows']:,}")
        bar.stop()

    return update, finish


#: Exit status of `dstp query` when the server cut the result at max_result_rows/max_result_bytes.
EXIT_TRUNCATED = 3
#: Exit status after Ctrl-C (128 + SIGINT) and SIGTERM (128 + SIGTERM), as a shell reports them.
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143


class Terminated(BaseException):
    """SIGTERM arrived: unwind like Ctrl-C, so partial files are removed."""


def terminate(signum: int, frame: Any) -> None:
    raise Terminated()


def stopped(cause: BaseException, finish: Callable[..., None], what_is_left: str) -> int:
    """Say that Ctrl-C (KeyboardInterrupt) or SIGTERM stopped the command and what it left; return the exit status."""
    finish()
    interrupted = isinstance(cause, KeyboardInterrupt)
    print(f"dstp: {'interrupted' if interrupted else 'terminated'}; {what_is_left}", file=sys.stderr)
    return EXIT_INTERRUPTED if interrupted else EXIT_TERMINATED


def time_units(client: Any, schema: Any) -> dict[str, str]:
    """Return the dataset's units of the result's time coordinates (netCDF keeps them)."""
    dataset = (schema.metadata or {}).get(b"dstp:dataset", b"").decode()
    if not dataset:
        return {}
    details = client.describe(dataset)
    return {c.name: c.units for c in details.coordinates if " since " in c.units}


def save(args: argparse.Namespace, client: Any, stream: Any, out: Path, finish: Callable[..., None]) -> int:
    """Save the stream to ``out`` whole or not at all (see dstp.client._output.save_result); return the exit status."""
    from dstp.client._output import check_file_format, save_result
    from dstp.errors import TruncatedResultError

    kind = check_file_format(out, stream.schema)
    existed = out.exists()
    kept = f"{out} was left as it was" if existed else f"nothing was written to {out}"
    try:
        # Inside the try: the server may break off while this rpc waits behind the records.
        units = time_units(client, stream.schema) if kind == "nc" else {}
        rows = save_result(stream, out, allow_truncated=args.allow_truncated, time_units=units,
                           accept="pass --allow-truncated")
    except TruncatedResultError as exc:
        finish()
        error(str(exc))
        return EXIT_TRUNCATED
    except (KeyboardInterrupt, Terminated) as exc:
        return stopped(exc, finish, f"the partial result was discarded and {kept}")
    except (DstpError, OSError, ValueError) as exc:
        finish()
        error(str(exc))
        print(f"dstp: the partial result was discarded and {kept}", file=sys.stderr)
        return 1
    finish(complete=stream.truncated_reason is None)
    seconds, nbytes = (stream.summary.seconds, stream.summary.bytes) if stream.summary else (0.0, 0)
    rate = nbytes / max(seconds, 1e-9) / 2**20
    print(f"{rows:,} records → {out} ({seconds:.2f} s, {rate:.1f} MiB/s over "
          f"{stream.transport})", file=sys.stderr)
    return truncation_status(args, stream)


def truncation_status(args: argparse.Namespace, stream: Any) -> int:
    """Warn on stderr if the server cut the result; return the exit status that says so."""
    from dstp.client._stream import truncation_message

    if stream.truncated_reason is None:
        return 0
    print(f"dstp: warning: {truncation_message(stream.summary)}", file=sys.stderr)
    return 0 if args.allow_truncated else EXIT_TRUNCATED


def query_on(args: argparse.Namespace, c: Any, stop: Callable[[], None] | None = None) -> int:
    """Run ``dstp query``'s work on the client ``c``, printing to sys.stdout/sys.stderr; return the exit status.

    ``stop`` (``dstp agent``) is called at every batch and raises KeyboardInterrupt or Terminated when the
    command that asked has been stopped; in the main thread SIGTERM does that.
    """
    import warnings

    from dstp.client._output import FILE_FORMATS

    out = Path(args.output) if args.output is not None else None
    if out is not None and out.suffix.lower() not in FILE_FORMATS:
        raise ValueError(f"cannot tell the format of {out.name} from its extension; use .arrow, .parquet, .csv "
                         "or .nc")
    warnings.simplefilter("ignore", DstpTruncationWarning)  # this command says it itself, with its exit status
    show_progress = args.progress if args.progress is not None else (sys.stderr.isatty() and out is not None)
    draw, finish = progress_display(show_progress)
    progress = draw
    if stop is not None:
        def progress(p: Any) -> None:
            stop()
            if draw is not None:
                draw(p)
    main_thread = threading.current_thread() is threading.main_thread()
    if args.explain:
        info = c.plan(args.sql, transport=args.transport if args.transport != "auto" else "grpc")
        # The plan per dataset reference (grid, hyperslab, pushdown, remote query) travels in the schema.
        plan = json.loads((info.schema.metadata or {}).get(b"dstp:plan", b"{}"))
        print(json.dumps({
            "query_id": info.query_id, "grid": info.grid, "hyperslab": info.hyperslab,
            "scan_rows": info.scan_rows, "estimated_rows": info.estimated_rows, "max_rows": info.max_rows,
            "estimate": info.size_estimate(),
            "columns": [f"{f.name}: {f.type}" for f in info.schema],
            "sample_seed": info.sample_seed,
            "sql": plan.get("sql", ""), "scans": plan.get("scans", []),
            **({"matchups": plan["matchups"]} if "matchups" in plan else {}),
        }, indent=2))
        return 0
    previous = signal.signal(signal.SIGTERM, terminate) if main_thread else None
    stream = None
    try:
        stream = c.query_batches(args.sql, transport=args.transport, compression=args.compression,
                                 progress=progress, streams=args.streams, allow_truncated=True)
        if args.verbose:
            print(f"data channel: {stream.transport} — {stream.choice}", file=sys.stderr)
        if out is not None:
            status = save(args, c, stream, out, finish)
        elif args.format == "csv":
            from dstp.result_files import csv_header, csv_rows, csv_truncation_line

            sink = sys.stdout.buffer
            sink.write(csv_header(stream.schema))
            rows = 0
            for b in stream:
                sink.write(csv_rows(b))
                rows += b.num_rows
            if stream.truncated_reason is not None:  # the same last line as a saved CSV and the HTTP API's
                sink.write(csv_truncation_line(stream.truncated_reason, rows))
            sink.flush()
            finish(complete=stream.truncated_reason is None)
            status = truncation_status(args, stream)
        else:
            # A preview: stop the transfer once one record more than fits has arrived (closing the
            # stream cancels the query, so the server stops reading files), rather than streaming
            # millions of records to print forty.
            shown: list[Any] = []
            seen = 0
            more = False
            for b in stream:
                shown.append(b)
                seen += b.num_rows
                if seen > args.max_rows:
                    more = True
                    break
            finish()
            import pyarrow as pa

            from dstp.client._output import preview_text

            table = pa.Table.from_batches(shown, schema=stream.schema).slice(0, args.max_rows)
            print(preview_text(table) if table.num_rows else "(no records)")
            if more:
                stream.close()
                print(f"… more records than the {args.max_rows:,} shown (the preview stopped the query there); "
                      "save them all with -o FILE, or show more with --max-rows N", file=sys.stderr)
                status = 0
            else:
                status = truncation_status(args, stream)
    except Terminated:
        print("dstp: terminated", file=sys.stderr)
        return EXIT_TERMINATED
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
        finish()
        if stream is not None:
            stream.close()
    if args.verbose and stream.summary:
        s = stream.summary
        print(f"server read {s.hyperslabs_read} hyperslabs, {s.elements_read:,} values "
              f"({s.bytes_read / 2**20:.1f} MiB) for {s.rows:,} records in {s.seconds:.2f} s", file=sys.stderr)
    return status


#: What ``dstp query`` hands to ``dstp agent``: its options, by name (see dstp/agent.py).
AGENT_QUERY_OPTIONS = ("sql", "output", "allow_truncated", "format", "max_rows", "transport", "streams", "compression",
                       "explain", "verbose", "progress", "server", "server_origin")


def unreachable_hint(args: argparse.Namespace) -> str:
    """Return how to reach a server, after "cannot reach the dstp server at …": start one, or name the running one
    (and where the address tried came from: ``--server``, ``$DSTP_SERVER`` or the default)."""
    server = getattr(args, "server", None)
    origin = {"--server": "given with --server", "DSTP_SERVER": "from $DSTP_SERVER",
              "default": "the default"}.get(str(getattr(args, "server_origin", "")), "")
    tried = f" (tried {server}{', ' + origin if origin else ''})" if server else ""
    return ("  no server running? start one: `dstp serve` (the sample datasets) or `dstp serve DIR` (your catalog);\n"
            f"  another server? name it: --server HOST:PORT, or export DSTP_SERVER=HOST:PORT{tried}")


def run_command(func: Callable[[argparse.Namespace], int | None], args: argparse.Namespace) -> int:
    """Run one command's function; return its exit status, saying on stderr why it failed (as ``dstp`` does)."""
    try:
        return int(func(args) or 0)
    except ServerUnreachableError as exc:
        error(f"{exc}\n{unreachable_hint(args)}")
        return 1
    except DstpError as exc:
        error(str(exc))
        return 1
    except (OSError, ValueError) as exc:
        error(str(exc))
        return 1
    except KeyboardInterrupt:
        print("dstp: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED

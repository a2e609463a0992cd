"""``auto`` compression: the codec constants of the client's cost model, and auto before/after on the WAN.

``python -m bench.compression`` measures what :data:`dstp.client._policy.CODECS` holds: the Table 4
seed query's 1 M record result from the medium samples (``select temperature, time from ccm3 where
humidity > 50 limit 1000000``, fetched once from an in-process server) written and read back as an
Arrow IPC stream with each codec on one core (``use_threads=False``), best of 5: size ratio and
speeds in uncompressed bytes/s.

``python -m bench.compression --wan`` runs ``dstp serve`` across the emulated transatlantic path
(:func:`bench.table4.wan_path`: 110 ms, 1 Gb/s, MTU 1500) and times the same query in fresh client
processes with ``transport="auto"`` and ``compression="none"`` (before: auto never compressed), LZ4 and
zstd named, and the compression left to auto (after), interleaved, ``--repeats`` rounds; medians
printed as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SIZE = 1_000_000
#: The WAN variants: ``compression=`` of each (None: auto's cost model chooses).
VARIANTS: dict[str, str | None] = {"auto-before": "none", "auto-lz4": "lz4", "auto-zstd": "zstd", "auto-after": None}


def _medium() -> Path:
    from bench.__main__ import samples

    return samples(False)["medium"]


def codecs(root: Path) -> dict[str, Any]:
    """Return ratio and one-core speeds of each IPC codec on the seed query's result."""
    import pyarrow as pa

    import dstp
    from bench.peers.sql import table4_sql
    from dstp.server import DstpServer
    from dstp.settings import Settings
    from dstp.transport.client.tuning import AutoTuner

    settings = Settings(catalog_root=root, port=0, http_port=-1, data_port=0, udt_port=-1)
    with tempfile.TemporaryDirectory() as tmp, DstpServer(settings) as srv:
        assert srv.endpoints is not None
        with dstp.Client(srv.endpoints.grpc, tuner=AutoTuner(Path(tmp) / "t.json")) as c:
            table = c.query(table4_sql(SIZE))
    batches = table.to_batches()

    def once(codec: str | None, level: int | None) -> tuple[int, float, float]:
        opts = pa.ipc.IpcWriteOptions(compression=None if codec is None else pa.Codec(codec, level),
                                      use_threads=False)
        write = read = float("inf")
        for _ in range(5):
            sink = pa.BufferOutputStream()
            started = time.perf_counter()
            with pa.ipc.new_stream(sink, table.schema, options=opts) as writer:
                for batch in batches:
                    writer.write_batch(batch)
            buf = sink.getvalue()
            write = min(write, time.perf_counter() - started)
            started = time.perf_counter()
            back = pa.ipc.open_stream(buf, options=pa.ipc.IpcReadOptions(use_threads=False)).read_all()
            read = min(read, time.perf_counter() - started)
            assert back.equals(table)
        return buf.size, write, read

    raw_size, _, _ = once(None, None)
    out: dict[str, Any] = {"rows": table.num_rows, "ipc_bytes": raw_size, "pyarrow": pa.__version__}
    for name, codec, level in (("lz4", "lz4", None), ("zstd1", "zstd", 1), ("zstd3", "zstd", 3)):
        size, write, read = once(codec, level)
        out[name] = {"ratio": round(raw_size / size, 2), "compress_GBps": round(raw_size / write / 1e9, 2),
                     "decompress_GBps": round(raw_size / read / 1e9, 2)}
    return out


def client_main(url: str, variant: str, size: int) -> dict[str, Any]:
    """Return one fresh client's timed query (``python -m bench.compression --client``)."""
    import dstp
    from bench.peers.sql import table4_sql
    from dstp.transport.client.tuning import AutoTuner

    with tempfile.TemporaryDirectory() as tmp:
        client = dstp.Client(url, timeout=600, tuner=AutoTuner(Path(tmp) / "t.json"))
        try:
            client.rtt()  # three Pings, untimed (as in Table 4's drivers)
            compression = VARIANTS[variant]
            started = time.perf_counter()
            table = client.query(table4_sql(size), transport="auto", compression=compression)
            seconds = time.perf_counter() - started
            summary = client.last_summary
            return {"variant": variant, "seconds": seconds, "rows": table.num_rows,
                    "wire_bytes": summary.wire_bytes if summary else -1, "choice": summary.choice if summary else ""}
        finally:
            client.close()


def wan(root: Path, repeats: int, size: int) -> dict[str, Any]:
    """Return auto before/after across the emulated 110 ms / 1 Gb/s path, interleaved runs."""
    from bench.dstp_process import serve
    from bench.table4 import wan_path

    runs: list[dict[str, Any]] = []
    with wan_path() as (path, info):
        server_prefix = path.exec_argv(path.server_ns, [])
        client_prefix = path.exec_argv(path.client_ns, [])
        with serve(root, "--host", path.server_addr, "--udt-port", "-1", prefix=server_prefix) as srv:
            url = srv.endpoints["grpc"]
            order = list(VARIANTS)
            for rep in range(repeats + 1):  # round 0 untimed: page cache, server code paths
                shift = rep % len(order)
                for variant in order[shift:] + order[:shift]:
                    cmd = [*client_prefix, sys.executable, "-m", "bench.compression", "--client", url,
                           "--variant", variant, "--size", str(size)]
                    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
                    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
                    if not lines:
                        raise RuntimeError(done.stderr[-2000:])
                    if rep:
                        runs.append({"rep": rep, **json.loads(lines[-1])})
    medians = {v: statistics.median(r["seconds"] for r in runs if r["variant"] == v) for v in order}
    return {"path": info, "size": size, "runs": runs, "median_s": medians}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.compression", description=__doc__)
    parser.add_argument("--wan", action="store_true", help="auto before/after across the 110 ms path")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--size", type=int, default=SIZE)
    parser.add_argument("--client")
    parser.add_argument("--variant", default="auto-after")
    args = parser.parse_args(argv)
    if args.client:
        print(json.dumps(client_main(args.client, args.variant, args.size), default=str))
        return 0
    result = wan(_medium(), args.repeats, args.size) if args.wan else codecs(_medium())
    print(json.dumps(result, default=str))
    _save("compression_wan" if args.wan else "compression_codecs", result)
    return 0


def _save(name: str, result: dict[str, Any]) -> None:
    """Write the result to bench/results/NAME.json and a table to NAME.md."""
    from bench.report import markdown_table, write_json, write_markdown

    write_json(name, result)
    if name == "compression_wan":
        rows = [{"variant": v, "runs": ", ".join(f"{r['seconds']:.2f}" for r in result["runs"] if r["variant"] == v),
                 "median": m} for v, m in result["median_s"].items()]
        text = ("Table 4's question, 1 M records, `transport=\"auto\"`, a fresh client process per query in the "
                "emulator's client namespace (110 ms, 1 Gb/s), interleaved after an untimed round. Before: "
                "`compression=\"none\"` (auto never compressed); lz4, zstd: named; after: the codec left to "
                "auto's cost model.\n\n"
                + markdown_table(rows, [("variant", "variant"), ("runs", "runs s"), ("median", "median s")]))
        write_markdown(name, "auto compression across 110 ms / 1 Gb/s", text)
    else:
        rows = [{"codec": k, **v} for k, v in result.items() if isinstance(v, dict)]
        text = (f"The seed query's {result['rows']:,}-record result ({result['ipc_bytes']:,} bytes of Arrow IPC), "
                "written and read back on one core, best of 5; speeds in uncompressed bytes.\n\n"
                + markdown_table(rows, [("codec", "codec"), ("ratio", "ratio"), ("compress_GBps", "compress GB/s"),
                                        ("decompress_GBps", "decompress GB/s")]))
        write_markdown(name, "IPC codecs on the seed query's result", text)


if __name__ == "__main__":
    sys.exit(main())

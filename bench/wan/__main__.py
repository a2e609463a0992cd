"""Command line of the WAN path emulator: ``python -m bench.wan up|down|check|stats|iperf3``.

Every command prints exactly one JSON line on stdout; errors go to stderr with exit status 1.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from typing import Any

from bench.wan import checks, netns
from bench.wan.path import WanPath, default_cpu, teardown
from bench.wan.units import parse_rate, parse_sysctl_triple, parse_time


def _loss(text: str) -> float:
    """Return ``text`` as a loss probability in [0, 1) (argparse type)."""
    value = float(text)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"loss must be a probability in [0, 1): {text}")
    return value


def _typed(fn: Any) -> Any:
    """Return ``fn`` wrapped so that its ValueError becomes an argparse error message."""
    def parse(text: str) -> Any:
        """Return ``fn(text)``."""
        try:
            return fn(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = fn.__name__
    return parse


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of ``python -m bench.wan``."""
    p = argparse.ArgumentParser(prog="python -m bench.wan", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    def add_name(sp: argparse.ArgumentParser) -> None:
        """Return after adding --name to ``sp``."""
        sp.add_argument("--name", type=_typed(netns.check_name), default=netns.PREFIX,
                        help="path name; namespaces are NAME-srv and NAME-cli (default: %(default)s)")

    def add_check_opts(sp: argparse.ArgumentParser) -> None:
        """Return after adding the self-check options to ``sp``."""
        sp.add_argument("--check-seconds", type=float, default=12,
                        help="iperf3 duration of the rate check, 0 = skip iperf3 (default: %(default)s)")
        sp.add_argument("--streams", type=int, default=8, help="iperf3 parallel streams (default: %(default)s)")
        sp.add_argument("--ping-count", type=int, default=20, help="pings for the RTT check (default: %(default)s)")

    up = sub.add_parser("up", help="create (or re-create) the path and start the relay")
    add_name(up)
    up.add_argument("--rtt", type=_typed(parse_time), default=0.1, help="round-trip time, e.g. 100ms, 0.1s")
    up.add_argument("--rate", type=_typed(parse_rate), default=1e9,
                    help="bottleneck rate of each direction, e.g. 1gbit, 100mbit, 500kbit; 0 = unlimited")
    up.add_argument("--loss", type=_loss, default=0.0, help="per-packet loss probability, each direction")
    up.add_argument("--burst-loss", type=float, default=0.0, metavar="MEAN_BURST_LEN",
                    help="Gilbert-Elliott loss: mean loss rate --loss in bursts of this mean length (packets)")
    up.add_argument("--mtu", type=int, default=1500, help="MTU of both TUN devices (default: %(default)s)")
    up.add_argument("--queue", default="1bdp",
                    help="drop-tail queue limit: 1bdp, 0.5bdp, 200p (packets of MTU), 4MB, 65536 (bytes)")
    up.add_argument("--cpu", default=default_cpu(),
                    help="taskset CPU list for the relay, or 'none' (default: %(default)s)")
    up.add_argument("--rt-prio", type=int, default=10,
                    help="SCHED_FIFO priority of the relay, 0 = normal scheduling (default: %(default)s)")
    up.add_argument("--tcp-rmem", type=_typed(parse_sysctl_triple), default=netns.STOCK_TCP_RMEM,
                    help="net.ipv4.tcp_rmem in both namespaces (default: stock '%(default)s')")
    up.add_argument("--tcp-wmem", type=_typed(parse_sysctl_triple), default=netns.STOCK_TCP_WMEM,
                    help="net.ipv4.tcp_wmem in both namespaces (default: stock '%(default)s')")
    up.add_argument("--cc", default=None, help="default congestion control in the namespaces (must be allowed)")
    up.add_argument("--relay", choices=("auto", "c", "python"), default="auto",
                    help="relay implementation; auto = C if gcc works, else Python")
    up.add_argument("--seed", type=lambda s: int(s, 0), default=0, help="loss RNG seed (0 = random)")
    up.add_argument("--no-check", action="store_true", help="skip the self-checks")
    up.add_argument("--strict", action="store_true", help="exit 3 if a self-check fails (the path stays up)")
    add_check_opts(up)

    down = sub.add_parser("down", help="remove the path: relay, namespaces, TUNs, /etc/netns, state")
    add_name(down)

    check = sub.add_parser("check", help="run the self-checks on a running path")
    add_name(check)
    add_check_opts(check)
    check.add_argument("--strict", action="store_true", help="exit 3 if a check fails")

    stats = sub.add_parser("stats", help="print the relay counters and TUN kernel counters")
    add_name(stats)

    ip = sub.add_parser("iperf3", help="run iperf3 client (client ns) -> server (server ns)")
    add_name(ip)
    ip.add_argument("-P", "--streams", type=int, default=8)
    ip.add_argument("-t", "--seconds", type=float, default=10)
    ip.add_argument("-C", "--congestion", default=None, help="per-socket congestion control, e.g. cubic, bbr")
    ip.add_argument("-R", "--reverse", action="store_true", help="data server -> client")
    ip.add_argument("-O", "--omit", type=float, default=None, help="seconds to omit (default: 2 if -t >= 8)")
    return p


def _emit(doc: dict[str, Any]) -> None:
    """Return after printing ``doc`` as one JSON line on stdout."""
    sys.stdout.write(json.dumps(doc, sort_keys=False) + "\n")
    sys.stdout.flush()


def run(args: argparse.Namespace) -> int:
    """Return the exit status of one command."""
    if args.command == "down":
        removed = teardown(args.name)
        _emit({"name": args.name, "removed": removed, "leftovers": netns.leftovers(args.name)})
        return 0
    if args.command == "up":
        path = WanPath.up(
            rtt_ms=args.rtt * 1000, rate_bps=args.rate, loss=args.loss, mtu=args.mtu, burst_len=args.burst_loss,
            queue=args.queue, cpu=None if args.cpu == "none" else args.cpu, name=args.name,
            tcp_rmem=args.tcp_rmem, tcp_wmem=args.tcp_wmem, congestion=args.cc, relay_kind=args.relay,
            seed=args.seed, rt_prio=args.rt_prio,
        )
        doc = path.describe()
        doc["checks"] = None if args.no_check else path.check(args.check_seconds, args.streams, args.ping_count)
        _emit(doc)
        return 3 if args.strict and doc["checks"] and not doc["checks"]["ok"] else 0
    path = WanPath.attach(args.name)
    if args.command == "check":
        doc = {"name": path.name, **path.check(args.check_seconds, args.streams, args.ping_count)}
        _emit(doc)
        return 3 if args.strict and not doc["ok"] else 0
    if args.command == "stats":
        _emit({**path.stats(), "kernel_tun": path.kernel_counters(), "config": path.describe()})
        return 0
    if args.command == "iperf3":
        _emit(checks.iperf3(path, args.streams, args.seconds, args.congestion, args.reverse, args.omit))
        return 0
    raise AssertionError(args.command)


def main(argv: list[str] | None = None) -> int:
    """Return the process exit status of ``python -m bench.wan`` with ``argv``."""
    args = build_parser().parse_args(argv)
    # SIGTERM unwinds like Ctrl-C, so a killed `up` still removes what it created.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(SystemExit(143)))
    try:
        return run(args)
    except (RuntimeError, ValueError, OSError) as exc:
        print(f"bench.wan {args.command}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

"""Network namespaces, TUN devices, per-namespace sysctls and /etc/netns files of a WAN path.

Every command here only touches the two namespaces it creates (``<name>-srv``, ``<name>-cli``)
and ``/etc/netns/<ns>/``; nothing is configured in the root namespace.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

PREFIX = "dstpwan"
TUN_DEV = "dstpwan0"  # the same name inside both namespaces (never in the root namespace)
SERVER_ADDR = "10.77.0.1"  # point-to-point /32 pair, only ever assigned inside the namespaces
CLIENT_ADDR = "10.77.0.2"
NETNS_RUN = Path("/run/netns")
NETNS_ETC = Path("/etc/netns")
TXQUEUELEN = 10000  # TUN tx ring (packets the kernel holds for the relay to read)

STOCK_TCP_RMEM = "4096 131072 6291456"
STOCK_TCP_WMEM = "4096 16384 4194304"


def check_name(name: str) -> str:
    """Return ``name`` if it is a valid path name (starts with ``dstpwan``; letters, digits, ``-``/``_``)."""
    ok = name.startswith(PREFIX) and len(name) <= 40 and all(c.isalnum() or c in "-_" for c in name)
    if not ok:
        raise ValueError(f"path name must start with {PREFIX!r} and use only [A-Za-z0-9_-] (<= 40 chars): {name!r}")
    return name


def ns_names(name: str) -> tuple[str, str]:
    """Return the (server, client) namespace names of path ``name``."""
    return f"{name}-srv", f"{name}-cli"


def sh(argv: list[str], check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """Return the finished process of ``argv`` (text output captured); raise with its stderr if it fails."""
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if check and proc.returncode != 0:
        raise RuntimeError(f"command failed ({proc.returncode}): {' '.join(argv)}: {proc.stderr.strip()}")
    return proc


def ns_exec(ns: str, argv: list[str]) -> list[str]:
    """Return ``argv`` wrapped to run inside namespace ``ns`` (``ip netns exec``)."""
    return ["ip", "netns", "exec", ns, *argv]


def list_namespaces() -> list[str]:
    """Return the names of all named network namespaces."""
    out = sh(["ip", "-j", "netns", "list"], check=False).stdout.strip()
    return [entry["name"] for entry in json.loads(out)] if out else []


def set_sysctl(ns: str, key: str, value: str) -> None:
    """Return after writing sysctl ``key`` inside ``ns`` (raises if the kernel refuses)."""
    sh(ns_exec(ns, ["sysctl", "-q", "-w", f"{key}={value}"]))


def get_sysctl(ns: str, key: str) -> str:
    """Return the value of sysctl ``key`` inside ``ns`` with whitespace normalised."""
    return " ".join(sh(ns_exec(ns, ["sysctl", "-n", key])).stdout.split())


def hosts_text(own_addr: str, server_addr: str, client_addr: str) -> str:
    """Return an /etc/hosts for a namespace: the machine's hostname resolves to ``own_addr``."""
    host = socket.gethostname()
    names = " ".join(dict.fromkeys([host, host.split(".")[0]]))
    return (
        "# written by `python -m bench.wan up`; removed by `down`\n"
        "127.0.0.1\tlocalhost\n"
        f"{own_addr}\t{names}\n"
        f"{server_addr}\twan-server\n"
        f"{client_addr}\twan-client\n"
    )


def create(
    name: str, mtu: int, tcp_rmem: str, tcp_wmem: str, congestion: str | None = None
) -> None:
    """Return after creating both namespaces with a configured (not yet attached) TUN device each.

    The TUN devices are persistent (``ip tuntap add``) so addresses and routes exist before the
    relay attaches; the relay opens them by name from inside each namespace (setns).
    """
    srv, cli = ns_names(name)
    for ns, own, peer in ((srv, SERVER_ADDR, CLIENT_ADDR), (cli, CLIENT_ADDR, SERVER_ADDR)):
        sh(["ip", "netns", "add", ns])
        etc = NETNS_ETC / ns
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "hosts").write_text(hosts_text(own, SERVER_ADDR, CLIENT_ADDR))
        sh(["ip", "-n", ns, "link", "set", "lo", "up"])
        sh(["ip", "-n", ns, "tuntap", "add", "dev", TUN_DEV, "mode", "tun"])
        sh(["ip", "-n", ns, "link", "set", "dev", TUN_DEV, "mtu", str(mtu), "txqueuelen", str(TXQUEUELEN)])
        sh(["ip", "-n", ns, "addr", "add", f"{own}/32", "peer", f"{peer}/32", "dev", TUN_DEV])
        sh(["ip", "-n", ns, "link", "set", "dev", TUN_DEV, "up"])
        for key, value in (
            ("net.ipv6.conf.all.disable_ipv6", "1"),  # keep IPv6 chatter out of the relay counters
            ("net.ipv6.conf.default.disable_ipv6", "1"),
            ("net.ipv4.tcp_no_metrics_save", "1"),  # no ssthresh carried over between runs
            ("net.ipv4.tcp_rmem", tcp_rmem),
            ("net.ipv4.tcp_wmem", tcp_wmem),
        ):
            set_sysctl(ns, key, value)
        if congestion:
            proc = sh(ns_exec(ns, ["sysctl", "-q", "-w", f"net.ipv4.tcp_congestion_control={congestion}"]), False)
            if proc.returncode != 0:
                allowed = get_sysctl(ns, "net.ipv4.tcp_allowed_congestion_control")
                raise RuntimeError(
                    f"cannot make {congestion!r} the default congestion control inside a namespace "
                    f"(allowed: {allowed}); use per-socket TCP_CONGESTION, e.g. iperf3 -C {congestion}"
                )


def tcp_settings(ns: str) -> dict[str, str]:
    """Return the TCP buffer and congestion-control sysctls in effect inside ``ns``."""
    keys = ("tcp_rmem", "tcp_wmem", "tcp_congestion_control", "tcp_allowed_congestion_control",
            "tcp_available_congestion_control")
    out = {k: get_sysctl(ns, f"net.ipv4.{k}") for k in keys}
    out["core_rmem_max"] = get_sysctl(ns, "net.core.rmem_max")
    out["core_wmem_max"] = get_sysctl(ns, "net.core.wmem_max")
    return out


def tun_counters(ns: str) -> dict[str, int]:
    """Return the kernel's counters of the TUN device in ``ns`` (tx_dropped = relay too slow to read)."""
    proc = sh(["ip", "-n", ns, "-s", "-j", "link", "show", "dev", TUN_DEV], check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        return {}
    st = json.loads(proc.stdout)[0].get("stats64", {})
    rx, tx = st.get("rx", {}), st.get("tx", {})
    return {"rx_packets": rx.get("packets", 0), "rx_dropped": rx.get("dropped", 0),
            "tx_packets": tx.get("packets", 0), "tx_dropped": tx.get("dropped", 0)}


def carrier_up(ns: str) -> bool:
    """Return True when the TUN device in ``ns`` has a reader attached (no NO-CARRIER flag)."""
    proc = sh(["ip", "-n", ns, "-j", "link", "show", "dev", TUN_DEV], check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        return False
    return "NO-CARRIER" not in json.loads(proc.stdout)[0].get("flags", [])


def _kill_pids(pids: list[int], grace_s: float) -> None:
    """Return once ``pids`` are gone: SIGTERM, up to ``grace_s`` s, then SIGKILL (bounded waits)."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 2.0)):
        alive = []
        for pid in pids:
            try:
                os.kill(pid, sig)
                alive.append(pid)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while alive and time.monotonic() < deadline:
            alive = [p for p in alive if pid_alive(p)]
            time.sleep(0.02)
        if not alive:
            return
        pids = alive


def pid_alive(pid: int) -> bool:
    """Return True if ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def delete(ns: str) -> list[str]:
    """Return what was removed for namespace ``ns``: its processes, TUN device, mount and /etc/netns dir."""
    removed: list[str] = []
    if ns in list_namespaces():
        pids = [int(p) for p in sh(["ip", "netns", "pids", ns], check=False).stdout.split() if p.isdigit()]
        if pids:
            _kill_pids(pids, grace_s=2.0)
            removed.append(f"processes {pids} in {ns}")
        if sh(["ip", "-n", ns, "link", "del", TUN_DEV], check=False).returncode == 0:
            removed.append(f"link {TUN_DEV} in {ns}")
        sh(["ip", "netns", "del", ns], check=False)
        removed.append(f"netns {ns}")
    elif (NETNS_RUN / ns).exists():  # stale mount point left by a crashed `ip netns add`
        sh(["ip", "netns", "del", ns], check=False)
        removed.append(f"stale {NETNS_RUN / ns}")
    etc = NETNS_ETC / ns
    if etc.exists():
        shutil.rmtree(etc, ignore_errors=True)
        removed.append(str(etc))
    return removed


def leftovers(prefix: str = PREFIX) -> dict[str, list[str]]:
    """Return anything still named ``prefix*``: namespaces, root-namespace links, /etc/netns dirs."""
    links = sh(["ip", "-o", "link", "show"], check=False).stdout.splitlines()
    return {
        "namespaces": [n for n in list_namespaces() if n.startswith(prefix)],
        "links": [ln.split(":")[1].strip() for ln in links if ln.split(":")[1].strip().startswith(prefix)],
        "etc_netns": sorted(p.name for p in NETNS_ETC.glob(prefix + "*")) if NETNS_ETC.exists() else [],
    }

"""ICMP echo RTT probe used when iputils ``ping`` is not installed.

``python -m bench.wan.pingprobe ADDR COUNT INTERVAL_S`` (run inside a namespace, as root) prints one
JSON line: ``{"sent": N, "rtts_ms": [...]}``.
"""

from __future__ import annotations

import json
import os
import select
import socket
import struct
import sys
import time


def checksum(data: bytes) -> int:
    """Return the Internet checksum of ``data``."""
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return ~total & 0xFFFF


def probe(addr: str, count: int, interval: float, timeout: float = 3.0) -> list[float]:
    """Return the RTTs in ms of ``count`` echo requests sent every ``interval`` s (lost ones omitted)."""
    ident = os.getpid() & 0xFFFF
    sent: dict[int, float] = {}
    rtts: list[float] = []
    with socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP) as s:
        next_send = time.monotonic()
        seq = 0
        deadline = None
        while len(rtts) < count:
            now = time.monotonic()
            if seq < count and now >= next_send:
                body = struct.pack("!d", now) + b"dstpwan-probe" * 3
                hdr = struct.pack("!BBHHH", 8, 0, 0, ident, seq)
                s.sendto(struct.pack("!BBHHH", 8, 0, checksum(hdr + body), ident, seq) + body, (addr, 0))
                sent[seq] = now
                seq += 1
                next_send += interval
                if seq == count:
                    deadline = now + timeout
            if deadline is not None and now > deadline:
                break
            wait = max(0.0, min(next_send if seq < count else deadline or now, now + 0.5) - now)
            if select.select([s], [], [], wait)[0]:
                pkt = s.recv(2048)
                ihl = (pkt[0] & 0x0F) * 4
                typ, _, _, rid, rseq = struct.unpack("!BBHHH", pkt[ihl:ihl + 8])
                if typ == 0 and rid == ident and rseq in sent:
                    rtts.append((time.monotonic() - sent.pop(rseq)) * 1000)
    return rtts


def main() -> int:
    """Return 0 after printing the probe result as JSON."""
    addr, count, interval = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    print(json.dumps({"sent": count, "rtts_ms": probe(addr, count, interval)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

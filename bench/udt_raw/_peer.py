"""One side of the Python transfer, mirroring udt_raw.cpp (same arguments, same JSON line).

    python -m bench.udt_raw._peer recv PORT MSS BUF FC BYTES CHUNK MAXSEC [recv_into|recvall_into]
    python -m bench.udt_raw._peer send HOST PORT MSS BUF FC BYTES CHUNK

The sender loops ``sendall`` over a memoryview of one preallocated chunk, the
receiver ``recv_into`` (or ``recvall_into``) one preallocated bytearray:
nothing is copied or allocated per call on the Python side.
"""

from __future__ import annotations

import json
import resource
import sys
import time

from dstp.transport import _udt


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _configure(sock: _udt.UdtSocket, mss: int, buf: int, fc: int) -> None:
    sock.setsockopt("UDT_MSS", mss)  # same order as udt_raw.cpp
    if fc > 0:
        sock.setsockopt("UDT_FC", fc)
    if buf > 0:
        for name in ("UDT_SNDBUF", "UDT_RCVBUF", "UDP_SNDBUF", "UDP_RCVBUF"):
            sock.setsockopt(name, buf)


def _report(role: str, trace: dict, mss: int, nbytes: int, secs: float, close_secs: float, cpu: float) -> None:
    keys = ("msRTT", "pktSentTotal", "pktRecvTotal", "pktRetransTotal", "pktSndLossTotal", "pktRcvLossTotal",
            "pktFlowWindow", "mbpsBandwidth")
    out = {"role": role, "bytes": nbytes, "seconds": secs, "close_seconds": close_secs, "mss": mss,
           "transfer_cpu_seconds": cpu, **{k: trace.get(k) for k in keys}}
    print(json.dumps(out), flush=True)


def _recv(port: int, mss: int, buf: int, fc: int, total: int, chunk: int, maxsec: float, how: str) -> None:
    lst = _udt.UdtSocket()
    _configure(lst, mss, buf, fc)
    lst.bind("127.0.0.1", port)
    lst.listen(1)
    print(f"READY {lst.getsockname()[1]}", flush=True)
    conn, _ = lst.accept()
    mss_eff = conn.getsockopt("UDT_MSS")  # negotiated; read now, the sender may close first
    view = memoryview(bytearray(chunk))
    receive = conn.recvall_into if how == "recvall_into" else conn.recv_into
    got = 0
    cpu0 = _cpu()
    t0 = time.perf_counter()
    try:
        while got < total and time.perf_counter() - t0 < maxsec:
            got += receive(view, min(chunk, total - got))
    except _udt.UdtConnectionLost:
        pass
    secs = time.perf_counter() - t0
    cpu = _cpu() - cpu0
    try:
        trace = conn.perfmon(False)
    except _udt.UdtError:  # the sender already closed: counters are gone with it
        trace = {}
    _report("recv", trace, mss_eff, got, secs, 0.0, cpu)
    conn.close()
    lst.close()


def _send(host: str, port: int, mss: int, buf: int, fc: int, total: int, chunk: int) -> None:
    sock = _udt.UdtSocket()
    _configure(sock, mss, buf, fc)
    sock.connect(host, port)
    mss_eff = sock.getsockopt("UDT_MSS")
    view = memoryview(bytearray(b"x" * chunk))
    sent = 0
    cpu0 = _cpu()
    t0 = time.perf_counter()
    try:
        while sent < total:
            n = min(chunk, total - sent)
            sock.sendall(view[:n] if n < chunk else view)
            sent += n
    except _udt.UdtConnectionLost:
        pass  # the receiver hit its time cap
    queued = time.perf_counter() - t0
    try:
        trace = sock.perfmon(False)
    except _udt.UdtError:  # the receiver stopped early and closed
        trace = {}
    sock.close()  # lingers until everything was acknowledged
    _report("send", trace, mss_eff, sent, queued, time.perf_counter() - t0, _cpu() - cpu0)


def main(argv: list[str]) -> int:
    if len(argv) >= 8 and argv[0] == "recv":
        how = argv[8] if len(argv) > 8 else "recv_into"
        port, mss, buf, fc, total, chunk = (int(a) for a in argv[1:7])
        _recv(port, mss, buf, fc, total, chunk, float(argv[7]), how)
        return 0
    if len(argv) == 8 and argv[0] == "send":
        port, mss, buf, fc, total, chunk = (int(a) for a in argv[2:8])
        _send(argv[1], port, mss, buf, fc, total, chunk)
        return 0
    print(__doc__, file=sys.stderr)
    return 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

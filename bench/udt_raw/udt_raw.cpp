// Raw libudt sender/receiver: the baseline the Python extension is compared to.
// Built at run time by bench/udt_raw/__main__.py (never committed as a binary).
//
//   udt_raw recv PORT MSS BUF FC BYTES CHUNK MAXSEC   -> prints "READY <port>", then one JSON line
//   udt_raw send HOST PORT MSS BUF FC BYTES CHUNK      -> prints one JSON line
//
// BUF = UDT_SNDBUF/UDT_RCVBUF and UDP_SNDBUF/UDP_RCVBUF in bytes (0: library defaults),
// FC = UDT_FC in packets (0: library default). Options are set in the order libudt
// needs: MSS first (buffers are converted to packets of MSS-28 bytes), then FC
// (UDT_RCVBUF is capped at FC packets), then the buffers.
#if __has_include(<udt/udt.h>)
#include <udt/udt.h>
#else
#include <udt.h>
#endif
#include <arpa/inet.h>
#include <sys/resource.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

static double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static double cpu() {  // this process, all threads (libudt's included)
    rusage r{};
    getrusage(RUSAGE_SELF, &r);
    return r.ru_utime.tv_sec + r.ru_stime.tv_sec + (r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
}

static void die(const char* what) {
    std::fprintf(stderr, "udt_raw: %s: %s\n", what, UDT::getlasterror().getErrorMessage());
    std::exit(2);
}

static void configure(UDTSOCKET u, int mss, int buf, int fc) {
    if (UDT::setsockopt(u, 0, UDT_MSS, &mss, sizeof mss) == UDT::ERROR) die("UDT_MSS");
    if (fc > 0 && UDT::setsockopt(u, 0, UDT_FC, &fc, sizeof fc) == UDT::ERROR) die("UDT_FC");
    if (buf > 0) {
        const UDTOpt opts[] = {UDT_SNDBUF, UDT_RCVBUF, UDP_SNDBUF, UDP_RCVBUF};
        for (UDTOpt o : opts)
            if (UDT::setsockopt(u, 0, o, &buf, sizeof buf) == UDT::ERROR) die("buffer option");
    }
}

struct Trace {
    UDT::TRACEINFO t;
    int mss = 0;
};

static Trace trace(UDTSOCKET u) {
    Trace r;
    std::memset(&r.t, 0, sizeof r.t);
    if (UDT::perfmon(u, &r.t, false) == UDT::ERROR) return r;  // mss stays 0: "no trace"
    int len = sizeof r.mss;
    UDT::getsockopt(u, 0, UDT_MSS, &r.mss, &len);
    return r;
}

static void report(const char* role, const Trace& tr, long long bytes, double secs, double extra, double cpus) {
    const UDT::TRACEINFO& t = tr.t;
    int mss = tr.mss;
    std::printf("{\"role\": \"%s\", \"bytes\": %lld, \"seconds\": %.6f, \"close_seconds\": %.6f, \"mss\": %d, \"transfer_cpu_seconds\": %.3f, "
                "\"msRTT\": %.3f, \"pktSentTotal\": %lld, \"pktRecvTotal\": %lld, \"pktRetransTotal\": %d, "
                "\"pktSndLossTotal\": %d, \"pktRcvLossTotal\": %d, \"pktFlowWindow\": %d, \"mbpsBandwidth\": %.1f}\n",
                role, bytes, secs, extra, mss, cpus, t.msRTT, (long long)t.pktSentTotal, (long long)t.pktRecvTotal,
                t.pktRetransTotal, t.pktSndLossTotal, t.pktRcvLossTotal, t.pktFlowWindow, t.mbpsBandwidth);
    std::fflush(stdout);
}

int main(int argc, char** argv) {
    if (argc < 2) return 1;
    std::string mode = argv[1];
    UDT::startup();
    UDTSOCKET u = UDT::socket(AF_INET, SOCK_STREAM, 0);
    if (mode == "recv" && argc == 9) {
        int port = std::atoi(argv[2]), mss = std::atoi(argv[3]), buf = std::atoi(argv[4]), fc = std::atoi(argv[5]);
        long long total = std::atoll(argv[6]);
        int chunk = std::atoi(argv[7]);
        double maxsec = std::atof(argv[8]);
        configure(u, mss, buf, fc);  // accepted sockets inherit the listener's options
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(port);
        inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
        if (UDT::bind(u, (sockaddr*)&a, sizeof a) == UDT::ERROR) die("bind");
        if (UDT::listen(u, 1) == UDT::ERROR) die("listen");
        int alen = sizeof a;
        UDT::getsockname(u, (sockaddr*)&a, &alen);
        std::printf("READY %d\n", ntohs(a.sin_port));
        std::fflush(stdout);
        UDTSOCKET c = UDT::accept(u, nullptr, nullptr);
        if (c == UDT::INVALID_SOCK) die("accept");
        Trace at_start = trace(c);  // negotiated MSS; the sender may close before we report
        std::vector<char> data(chunk);
        long long got = 0;
        double c0 = cpu(), t0 = now();
        while (got < total && now() - t0 < maxsec) {
            long long want = total - got < chunk ? total - got : chunk;
            int n = UDT::recv(c, data.data(), (int)want, 0);
            if (n == UDT::ERROR) break;
            got += n;
        }
        double secs = now() - t0;
        double cpus = cpu() - c0;
        Trace tr = trace(c);
        if (tr.mss == 0) tr = at_start;  // perfmon failed: connection already closed by the sender
        report("recv", tr, got, secs, 0.0, cpus);
        UDT::close(c);
        UDT::close(u);
    } else if (mode == "send" && argc == 9) {
        int port = std::atoi(argv[3]), mss = std::atoi(argv[4]), buf = std::atoi(argv[5]), fc = std::atoi(argv[6]);
        long long total = std::atoll(argv[7]);
        int chunk = std::atoi(argv[8]);
        configure(u, mss, buf, fc);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(port);
        inet_pton(AF_INET, argv[2], &a.sin_addr);
        if (UDT::connect(u, (sockaddr*)&a, sizeof a) == UDT::ERROR) die("connect");
        std::vector<char> data(chunk, 'x');
        long long sent = 0;
        double c0 = cpu(), t0 = now();
        while (sent < total) {
            long long want = total - sent < chunk ? total - sent : chunk;
            long long off = 0;
            while (off < want) {  // same loop as the extension's sendall()
                int n = UDT::send(u, data.data() + off, (int)(want - off), 0);
                if (n == UDT::ERROR) break;
                off += n;
            }
            sent += off;
            if (off < want) break;  // receiver hit its time cap and closed
        }
        double queued = now() - t0;
        Trace tr = trace(u);
        UDT::close(u);  // lingers until the receiver acknowledged everything
        report("send", tr, sent, queued, now() - t0, cpu() - c0);
    } else {
        std::fprintf(stderr, "usage: udt_raw recv PORT MSS BUF FC BYTES CHUNK MAXSEC | send HOST PORT MSS BUF FC BYTES CHUNK\n");
        return 1;
    }
    UDT::cleanup();
    return 0;
}

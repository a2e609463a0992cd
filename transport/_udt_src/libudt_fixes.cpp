// A repair to libudt 4.11, made at link time.
//
// The fault. Each UDP port libudt uses (a "multiplexer") has a send queue whose
// worker thread sleeps on a timer until the next packet of the first socket on
// its list is due. Removing the last socket from that list does not wake the
// worker (CSndUList::remove_ interrupts the timer only when one entry is left,
// not none), and the send queue's destructor joins the worker without waking it
// either. libudt's garbage collector runs that destructor while it holds the
// socket table's lock, so when a paced socket is closed mid-send, every
// UDT::socket(), accept() or close() in the process waits until the closed
// socket's next packet would have been due: 12.8 s for a socket paced at
// 100 B/s, minutes for a congestion window that had shrunk far enough (CI saw
// 90 s and 10 min). Later forks (SRT among them) interrupt the timer first.
//
// The repair. setup.py links libudt's static archive into the extension with
// `ld --wrap` on CSndQueue::init and CSndQueue::~CSndQueue: init remembers each
// send queue's timer and port; the destructor wakes that timer every
// millisecond until libudt's own destructor has joined the worker. Nothing else
// in libudt changes, and no field of libudt's classes is read: only two of its
// exported member functions are called.
//
// A second repair: libudt's load-time clock probe. libudt times its packets
// with the CPU's time-stamp counter, and learns the counter's rate in a static
// initializer, CTimer::readCPUFrequency(): it reads the counter, sleeps 100 ms
// with nanosleep, reads it again. Every process that loads libudt waited those
// 100 ms (strace on `import dstp.transport._udt`: clock_nanosleep 100,000,000 ns
// before anything else), which is 8 % of a 256 MiB `dstp get` over UDT on
// loopback. The link wraps nanosleep: before the module has finished loading,
// a request of exactly 100 ms returns at once, so libudt's probe sees no ticks
// and takes its own fallback (CTimer::m_bUseMicroSecond, a gettimeofday
// clock); then calibrate_clock() measures the counter against CLOCK_MONOTONIC
// over 10 ms and sets the rate and libudt's counter clock back, as libudt
// would have had them. Every other nanosleep passes through.

#include "libudt_fixes.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <mutex>
#include <system_error>
#include <thread>
#include <unordered_map>

// libudt's classes, only as far as the calls below need them (udt.h does not
// declare them; the member functions are resolved by their mangled names).
class CChannel {
   public:
    void getSockAddr(sockaddr* addr) const;
};
class CTimer {
   public:
    void interrupt();
};
class CSndQueue;

// CTimer's private statics and its probe, by their mangled names (common.h keeps them private).
extern std::uint64_t g_udt_cpu_frequency __asm__("_ZN6CTimer17s_ullCPUFrequencyE");
extern bool g_udt_microsecond_clock __asm__("_ZN6CTimer17m_bUseMicroSecondE");
std::uint64_t udt_read_cpu_frequency() __asm__("_ZN6CTimer16readCPUFrequencyEv");

extern "C" {
int __real_nanosleep(const timespec* request, timespec* remaining);
int __wrap_nanosleep(const timespec* request, timespec* remaining);
// Provided by `ld --wrap`: the original definitions in libudt.a.
void __real__ZN9CSndQueue4initEP8CChannelP6CTimer(CSndQueue* self, CChannel* channel, CTimer* timer);
void __real__ZN9CSndQueueD1Ev(CSndQueue* self);
// Our replacements, which the linker puts in front of the originals.
void __wrap__ZN9CSndQueue4initEP8CChannelP6CTimer(CSndQueue* self, CChannel* channel, CTimer* timer);
void __wrap__ZN9CSndQueueD1Ev(CSndQueue* self);
}

namespace {

struct QueueInfo {
    CTimer* timer;
    int port;
};

constexpr std::size_t kRecent = 64;

// Leaked on purpose: libudt's garbage collector may tear queues down during
// interpreter exit, after static destructors would have run.
std::mutex& registry_mutex() {
    static auto* m = new std::mutex;
    return *m;
}
std::unordered_map<const CSndQueue*, QueueInfo>& registry() {
    static auto* r = new std::unordered_map<const CSndQueue*, QueueInfo>;
    return *r;
}
std::deque<dstp_udt_fixes::Teardown>& recent() {
    static auto* d = new std::deque<dstp_udt_fixes::Teardown>;
    return *d;
}
std::atomic<std::uint64_t> g_count{0};
std::atomic<bool> g_enabled{true};

// Constant-initialized, so they hold before any static initializer (libudt's probe among them) runs.
std::atomic<bool> g_loaded{false};
std::atomic<bool> g_probe_skipped{false};
constexpr long kProbeNs = 100000000;  // libudt's readCPUFrequency() sleeps exactly this long

#if defined(__x86_64__) || defined(__i386__)
std::uint64_t tsc() {
    std::uint32_t lo, hi;
    __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));  // what CTimer::rdtsc reads
    return (static_cast<std::uint64_t>(hi) << 32) | lo;
}

double monotonic_us() {
    timespec t{};
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}
#endif

int local_port(const CChannel* channel) {
    sockaddr_storage addr{};
    channel->getSockAddr(reinterpret_cast<sockaddr*>(&addr));
    if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);
    if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port);
    return 0;
}

}  // namespace

extern "C" int __wrap_nanosleep(const timespec* request, timespec* remaining) {
    if (!g_loaded.load() && request != nullptr && request->tv_sec == 0 && request->tv_nsec == kProbeNs) {
        g_probe_skipped.store(true);  // libudt's clock probe, during loading: see the top of this file
        return 0;
    }
    return __real_nanosleep(request, remaining);
}

extern "C" void __wrap__ZN9CSndQueue4initEP8CChannelP6CTimer(CSndQueue* self, CChannel* channel, CTimer* timer) {
    // The channel is open by now (updateMux opens it first), so it has its port.
    QueueInfo info{timer, channel != nullptr ? local_port(channel) : 0};
    {
        std::lock_guard<std::mutex> lock(registry_mutex());
        registry()[self] = info;
    }
    __real__ZN9CSndQueue4initEP8CChannelP6CTimer(self, channel, timer);
}

extern "C" void __wrap__ZN9CSndQueueD1Ev(CSndQueue* self) {
    QueueInfo info{nullptr, 0};
    {
        std::lock_guard<std::mutex> lock(registry_mutex());
        auto it = registry().find(self);
        if (it != registry().end()) {
            info = it->second;
            registry().erase(it);
        }
    }
    const auto start = std::chrono::steady_clock::now();
    std::atomic<bool> joined{false};
    std::thread waker;
    if (info.timer != nullptr && g_enabled.load()) {
        // The destructor sets its "closing" flag, then joins. The worker may be
        // sleeping toward a far send time, or about to: wake it until it is gone.
        try {
            waker = std::thread([&joined, timer = info.timer] {
                while (!joined.load()) {
                    timer->interrupt();
                    std::this_thread::sleep_for(std::chrono::milliseconds(1));
                }
            });
        } catch (const std::system_error&) {
            // No thread to spare: tear down as libudt would have.
        }
    }
    __real__ZN9CSndQueueD1Ev(self);
    joined.store(true);
    if (waker.joinable()) waker.join();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    g_count.fetch_add(1);
    std::lock_guard<std::mutex> lock(registry_mutex());
    recent().push_back({info.port, seconds});
    if (recent().size() > kRecent) recent().pop_front();
}

namespace dstp_udt_fixes {

std::uint64_t teardown_count() { return g_count.load(); }

std::vector<Teardown> recent_teardowns() {
    std::lock_guard<std::mutex> lock(registry_mutex());
    return {recent().begin(), recent().end()};
}

Reading counter_reading() {
#if defined(__x86_64__) || defined(__i386__)
    // The counter is read between two readings of CLOCK_MONOTONIC no more than 20 us apart, so a thread
    // preempted between the reads cannot skew a rate (a 10 ms calibration is then within 0.4 %).
    for (int attempt = 0; attempt < 1000; ++attempt) {
        const double before = monotonic_us();
        const std::uint64_t ticks = tsc();
        const double after = monotonic_us();
        if (after - before <= 20.0) return {(before + after) / 2, ticks};
    }
#endif
    return {-1.0, 0};
}

void calibrate_clock() {
    if (g_loaded.exchange(true) || !g_probe_skipped.load()) return;
#if defined(__x86_64__) || defined(__i386__)
    const Reading first = counter_reading();
    timespec wait{0, 10000000};
    __real_nanosleep(&wait, nullptr);
    const Reading last = counter_reading();
    if (first.us < 0 || last.us <= first.us) return;  // no tight reading: libudt keeps its microsecond clock
    const double per_us = (last.ticks - first.ticks) / (last.us - first.us);
    // libudt's own rule: fewer than 10 ticks per microsecond keeps its microsecond clock.
    if (per_us >= 10.0) {
        g_udt_cpu_frequency = static_cast<std::uint64_t>(per_us);
        g_udt_microsecond_clock = false;
    }
#endif
}

Clock clock_state() {
    return {g_probe_skipped.load(), g_udt_cpu_frequency, g_udt_microsecond_clock};
}

std::uint64_t libudt_probe() { return udt_read_cpu_frequency(); }

void set_enabled(bool enabled) { g_enabled.store(enabled); }
bool enabled() { return g_enabled.load(); }

}  // namespace dstp_udt_fixes

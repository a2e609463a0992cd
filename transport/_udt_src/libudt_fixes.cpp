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

#include "libudt_fixes.h"

#include <netinet/in.h>
#include <sys/socket.h>

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

extern "C" {
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

int local_port(const CChannel* channel) {
    sockaddr_storage addr{};
    channel->getSockAddr(reinterpret_cast<sockaddr*>(&addr));
    if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);
    if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port);
    return 0;
}

}  // namespace

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

void set_enabled(bool enabled) { g_enabled.store(enabled); }
bool enabled() { return g_enabled.load(); }

}  // namespace dstp_udt_fixes

// Repairs to libudt 4.11 made at link time (see libudt_fixes.cpp and docs/udt.md,
// "A stalled socket table"). Built only when setup.py links libudt statically
// (DSTP_UDT_STATIC); the module reports which way it was linked.
#pragma once

#include <cstdint>
#include <vector>

namespace dstp_udt_fixes {

// One send queue libudt tore down: the UDP port its multiplexer had and how
// long the teardown took (it runs in libudt's garbage collector, holding the
// socket table's lock).
struct Teardown {
    int port;
    double seconds;
};

// Send queues torn down since start-up, and the most recent ones (oldest first).
std::uint64_t teardown_count();
std::vector<Teardown> recent_teardowns();

// libudt's clock: whether its 100 ms load-time probe was skipped, the time-stamp
// counter's ticks per microsecond it uses, and whether it fell back to gettimeofday.
struct Clock {
    bool probe_skipped;
    std::uint64_t ticks_per_us;
    bool microsecond_clock;
};

// CLOCK_MONOTONIC (microseconds) and the time-stamp counter read together, within 20 us of each other;
// us < 0 when no such reading could be taken (or there is no counter).
struct Reading {
    double us;
    std::uint64_t ticks;
};
Reading counter_reading();

// Called once as the module loads: measure the counter's rate (10 ms) in place of
// libudt's skipped probe and hand it to libudt. A no-op if the probe ran.
void calibrate_clock();
Clock clock_state();

// Tests only: run libudt's own probe now (it sleeps 100 ms) and return the rate it measures.
std::uint64_t libudt_probe();

// Tests only: false stands the repair down, so a test can show what it prevents.
void set_enabled(bool enabled);
bool enabled();

}  // namespace dstp_udt_fixes

// dstp.transport._udt -- a thin pybind11 binding of libudt (UDT4).
//
// Design rules (see docs/udt.md):
//   * every call that can block (accept, connect, send, recv, close with
//     linger, name resolution) runs with the GIL released;
//   * send/recv work on the caller's memory through the buffer protocol:
//     nothing is copied on the Python side (UDT itself copies once into its
//     own send/receive buffers, exactly as in a C++ program);
//   * a UDT error becomes an instance of a module-level exception class
//     (UdtError(OSError) and subclasses) carrying the UDT code in `.code`,
//     a POSIX errno in `.errno` and UDT's message in `.strerror`;
//   * a socket object is safe to misuse: close() twice is fine, any other
//     call after close() raises UdtClosedError, the destructor closes.
//
// The error tables, option types and semantic notes come from the UDT4
// reference (doc/ecode.htm, doc/opt.htm) and libudt 4.11's core.cpp.

#include <pybind11/eval.h>
#include <pybind11/pybind11.h>

#include "release_gil.h"
#ifdef DSTP_UDT_STATIC
#include "libudt_fixes.h"
#endif

#if __has_include(<udt/udt.h>)
#include <udt/udt.h>  // Debian/Ubuntu: headers live in /usr/include/udt/
#elif __has_include(<udt.h>)
#include <udt.h>  // upstream `make install` layout
#else
#error "udt.h not found: install libudt-dev or set DSTP_UDT_INCLUDE"
#endif

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace {

// ---------------------------------------------------------------------------
// Library life cycle
// ---------------------------------------------------------------------------

std::atomic<bool> g_started{false};
std::atomic<bool> g_cleaned{false};
// Number of threads currently inside a UDT call with the GIL released.
// UDT::cleanup() frees every socket, so it must not run under their feet.
std::atomic<int> g_inflight{0};

struct InFlight {
    InFlight() { g_inflight.fetch_add(1); }
    ~InFlight() { g_inflight.fetch_sub(1); }
    InFlight(const InFlight&) = delete;
    InFlight& operator=(const InFlight&) = delete;
};

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

// Filled in at module initialisation (the classes are defined in Python).
PyObject* g_UdtError = nullptr;
PyObject* g_UdtConnectError = nullptr;
PyObject* g_UdtConnectionLost = nullptr;
PyObject* g_UdtTimeout = nullptr;
PyObject* g_UdtWouldBlock = nullptr;
PyObject* g_UdtClosedError = nullptr;

// UDT error codes (CUDTException::getErrorCode() == major * 1000 + minor).
enum : int {
    kECONNSETUP = 1000, kENOSERVER = 1001, kECONNREJ = 1002, kESOCKFAIL = 1003, kESECFAIL = 1004,
    kECONNFAIL = 2000, kECONNLOST = 2001, kENOCONN = 2002,
    kERESOURCE = 3000, kETHREAD = 3001, kENOBUF = 3002,
    kEINVOP = 5000, kEBOUNDSOCK = 5001, kECONNSOCK = 5002, kEINVPARAM = 5003, kEINVSOCK = 5004,
    kEUNBOUNDSOCK = 5005, kENOLISTEN = 5006, kERDVNOSERV = 5007, kERDVUNBOUND = 5008,
    kESTREAMILL = 5009, kEDGRAMILL = 5010, kEDUPLISTEN = 5011, kELARGEMSG = 5012, kEINVPOLLID = 5013,
    kEASYNCFAIL = 6000, kEASYNCSND = 6001, kEASYNCRCV = 6002, kETIMEOUT = 6003,
    kEPEERERR = 7000,
};

// An error captured while the GIL was released; raised after reacquiring it.
struct Err {
    int code = 0;
    std::string message;
    bool set() const { return code != 0 || !message.empty(); }
};

// Read (and clear) this thread's UDT error. libudt keeps it thread-local, so
// this must run on the thread that made the failing call -- it always does:
// releasing the GIL does not change threads.
Err last_error() {
    UDT::ERRORINFO& info = UDT::getlasterror();
    Err e;
    e.code = info.getErrorCode();
    const char* msg = info.getErrorMessage();
    e.message = msg ? msg : "unknown UDT error";
    info.clear();
    if (e.code == 0) e.code = -1;  // an error without a code: still an error
    return e;
}

int posix_errno_for(int code) {
    switch (code) {
        case kECONNSETUP: return ECONNABORTED;
        case kENOSERVER: return ECONNREFUSED;
        case kECONNREJ: return ECONNREFUSED;
        case kESOCKFAIL: return EIO;
        case kESECFAIL: return EACCES;
        case kECONNFAIL: return ECONNABORTED;
        case kECONNLOST: return ECONNRESET;
        case kENOCONN: return ENOTCONN;
        case kERESOURCE: return ENOMEM;
        case kETHREAD: return EAGAIN;
        case kENOBUF: return ENOBUFS;
        case kEINVOP: return EOPNOTSUPP;
        case kEBOUNDSOCK: return EINVAL;
        case kECONNSOCK: return EISCONN;
        case kEINVPARAM: return EINVAL;
        case kEINVSOCK: return EBADF;
        case kEUNBOUNDSOCK: return EINVAL;
        case kENOLISTEN: return EINVAL;
        case kEDUPLISTEN: return EADDRINUSE;
        case kELARGEMSG: return EMSGSIZE;
        case kEASYNCFAIL:
        case kEASYNCSND:
        case kEASYNCRCV: return EAGAIN;
        case kETIMEOUT: return ETIMEDOUT;
        case kEPEERERR: return EPROTO;
        default: return EIO;
    }
}

PyObject* class_for(int code) {
    if (code >= 1000 && code < 2000) return g_UdtConnectError;
    if (code >= 2000 && code < 3000) return g_UdtConnectionLost;
    if (code == kETIMEOUT) return g_UdtTimeout;
    if (code >= 6000 && code < 6003) return g_UdtWouldBlock;
    return g_UdtError;
}

// Raise `cls(errno, "<what>: <message>")` with `.code` set. GIL must be held.
[[noreturn]] void raise_as(PyObject* cls, int code, const std::string& what, const std::string& message) {
    std::string text = what.empty() ? message : what + ": " + message;
    if (code > 0) text += " [UDT " + std::to_string(code) + "]";
    py::object type = py::reinterpret_borrow<py::object>(cls);
    py::object exc = type(posix_errno_for(code), text);
    exc.attr("code") = code;
    exc.attr("operation") = what;      // e.g. "connect to 10.0.0.1:9000"
    exc.attr("udt_message") = message; // libudt's own text
    PyErr_SetObject(cls, exc.ptr());
    throw py::error_already_set();
}

[[noreturn]] void raise_err(const Err& e, const std::string& what) {
    raise_as(class_for(e.code), e.code, what, e.message);
}

[[noreturn]] void raise_closed(const std::string& what) {
    raise_as(g_UdtClosedError, kEINVSOCK, what, "operation on a closed UDT socket");
}

// ---------------------------------------------------------------------------
// Buffers (zero-copy, via the buffer protocol)
// ---------------------------------------------------------------------------

// Owns a Py_buffer; acquired with the GIL held, usable with it released (the
// exporter cannot resize or free memory while a view is exported).
class Buffer {
  public:
    Buffer(py::handle obj, bool writable) {
        int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(obj.ptr(), &view_, flags) != 0) throw py::error_already_set();
        ok_ = true;
    }
    ~Buffer() {
        if (ok_) PyBuffer_Release(&view_);
    }
    Buffer(Buffer&& other) noexcept : view_(other.view_), ok_(other.ok_) { other.ok_ = false; }
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    Buffer& operator=(Buffer&&) = delete;

    char* data() const { return static_cast<char*>(view_.buf); }
    int64_t size() const { return static_cast<int64_t>(view_.len); }

  private:
    Py_buffer view_{};
    bool ok_ = false;
};

// ---------------------------------------------------------------------------
// Addresses
// ---------------------------------------------------------------------------

struct SockAddr {
    sockaddr_storage ss{};
    int len = 0;
};

// Resolve host/port for `family`; runs without the GIL. Empty host = any address.
bool resolve(const std::string& host, int port, int family, bool passive, SockAddr* out, std::string* error) {
    if (port < 0 || port > 65535) {
        *error = "port must be 0..65535";
        return false;
    }
    addrinfo hints{};
    hints.ai_family = family;
    hints.ai_socktype = SOCK_DGRAM;  // UDT runs over UDP
    hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
    addrinfo* res = nullptr;
    std::string service = std::to_string(port);
    int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res);
    if (rc != 0 || res == nullptr) {
        *error = std::string("cannot resolve ") + (host.empty() ? "<any>" : host) + ": " + gai_strerror(rc);
        return false;
    }
    std::memcpy(&out->ss, res->ai_addr, res->ai_addrlen);
    out->len = static_cast<int>(res->ai_addrlen);
    ::freeaddrinfo(res);
    return true;
}

py::tuple to_python(const sockaddr_storage& ss) {
    char text[INET6_ADDRSTRLEN] = {0};
    if (ss.ss_family == AF_INET6) {
        const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
        ::inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof text);
        return py::make_tuple(std::string(text), ntohs(a->sin6_port));
    }
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &a->sin_addr, text, sizeof text);
    return py::make_tuple(std::string(text), ntohs(a->sin_port));
}

int64_t now_ms() {
    using namespace std::chrono;
    return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

// Timeout in seconds (None = wait forever) -> milliseconds (-1 = forever).
int64_t timeout_ms(const py::object& timeout) {
    if (timeout.is_none()) return -1;
    double t = timeout.cast<double>();
    if (t < 0) throw py::value_error("timeout must be >= 0 or None");
    return static_cast<int64_t>(t * 1000.0 + 0.5);
}

// ---------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------

enum class OptKind { Int, Bool, Linger, Int64, ReadOnlyInt };

struct OptInfo {
    const char* name;
    UDTOpt opt;
    OptKind kind;
    const char* doc;
};

// UDT_CC (custom congestion control) is deliberately not exposed.
const OptInfo kOptions[] = {
    {"UDT_MSS", UDT_MSS, OptKind::Int, "maximum packet size in bytes, IP+UDP+UDT headers included (default 1500); set before bind/connect"},
    {"UDT_SNDSYN", UDT_SNDSYN, OptKind::Bool, "blocking send (default True)"},
    {"UDT_RCVSYN", UDT_RCVSYN, OptKind::Bool, "blocking recv/accept (default True)"},
    {"UDT_FC", UDT_FC, OptKind::Int, "flow (flight) window in packets (default 25600, min 32); set before UDT_RCVBUF, which it caps"},
    {"UDT_SNDBUF", UDT_SNDBUF, OptKind::Int, "UDT send buffer in bytes (kept in packets of MSS-28 bytes; default 10 MB)"},
    {"UDT_RCVBUF", UDT_RCVBUF, OptKind::Int, "UDT receive buffer in bytes (in packets of MSS-28 bytes, capped at UDT_FC packets)"},
    {"UDT_LINGER", UDT_LINGER, OptKind::Linger, "seconds close() waits for unsent data (0 = off; default 180)"},
    {"UDP_SNDBUF", UDP_SNDBUF, OptKind::Int, "kernel SO_SNDBUF of the UDP socket in bytes (capped by net.core.wmem_max)"},
    {"UDP_RCVBUF", UDP_RCVBUF, OptKind::Int, "kernel SO_RCVBUF of the UDP socket in bytes (capped by net.core.rmem_max)"},
    {"UDT_MAXMSG", UDT_MAXMSG, OptKind::Int, "maximum datagram message size (SOCK_DGRAM)"},
    {"UDT_MSGTTL", UDT_MSGTTL, OptKind::Int, "time-to-live of a datagram message in ms (SOCK_DGRAM)"},
    {"UDT_RENDEZVOUS", UDT_RENDEZVOUS, OptKind::Bool, "rendezvous connection setup (default False)"},
    {"UDT_SNDTIMEO", UDT_SNDTIMEO, OptKind::Int, "send() timeout in ms (-1 = infinite)"},
    {"UDT_RCVTIMEO", UDT_RCVTIMEO, OptKind::Int, "recv() timeout in ms (-1 = infinite)"},
    {"UDT_REUSEADDR", UDT_REUSEADDR, OptKind::Bool, "share the UDP port with other UDT sockets (default True)"},
    {"UDT_MAXBW", UDT_MAXBW, OptKind::Int64, "maximum bandwidth in bytes/s (-1 = unlimited)"},
    {"UDT_STATE", UDT_STATE, OptKind::ReadOnlyInt, "socket state (see STATES), read only"},
    {"UDT_EVENT", UDT_EVENT, OptKind::ReadOnlyInt, "pending epoll events, read only"},
    {"UDT_SNDDATA", UDT_SNDDATA, OptKind::ReadOnlyInt, "packets (not bytes, in libudt 4.11) waiting in the send buffer, read only"},
    {"UDT_RCVDATA", UDT_RCVDATA, OptKind::ReadOnlyInt, "packets (not bytes, in libudt 4.11) ready to read, read only"},
};

const OptInfo& find_option(const py::handle& key) {
    if (py::isinstance<py::str>(key)) {
        std::string name = key.cast<std::string>();
        for (const auto& o : kOptions)
            if (name == o.name) return o;
        throw py::value_error("unknown UDT option name " + name);
    }
    int value = key.cast<int>();
    for (const auto& o : kOptions)
        if (static_cast<int>(o.opt) == value) return o;
    throw py::value_error("unknown or unsupported UDT option " + std::to_string(value));
}

const char* state_name(int st) {
    switch (st) {
        case INIT: return "INIT";
        case OPENED: return "OPENED";
        case LISTENING: return "LISTENING";
        case CONNECTING: return "CONNECTING";
        case CONNECTED: return "CONNECTED";
        case BROKEN: return "BROKEN";
        case CLOSING: return "CLOSING";
        case CLOSED: return "CLOSED";
        case NONEXIST: return "NONEXIST";
        default: return "UNKNOWN";
    }
}

// How long libudt 4.x keeps retrying a handshake before ENOSERVER (fixed in
// CUDT::connect: ttl = 3 s, 30 s in rendezvous mode) plus a margin.
constexpr int64_t kUdtConnectWindowMs = 3000 + 500;

// ---------------------------------------------------------------------------
// The socket
// ---------------------------------------------------------------------------

// Closes a socket nobody will use, without waiting for unsent data.
void discard_socket(UDTSOCKET u) {
    if (u == UDT::INVALID_SOCK || g_cleaned.load()) return;
    bool sync = false;
    UDT::setsockopt(u, 0, UDT_SNDSYN, &sync, sizeof sync);
    UDT::close(u);
    UDT::getlasterror().clear();
}

// A test seam standing in for libudt's socket-table lock: while the test holds
// it, socket creation waits exactly as it does when libudt's garbage collector
// holds that lock (seen in CI: UDT::socket() blocked for minutes).
// Heap-allocated and never destroyed, like the creator's queue below: a
// static condition_variable's destructor at exit would wait for the creator
// thread, which never returns.
std::mutex& g_gate_mutex = *new std::mutex;
std::condition_variable& g_gate_cv = *new std::condition_variable;
bool g_gate_closed = false;
int g_gate_waiters = 0;  // threads waiting at the closed gate (under g_gate_mutex)
// Sockets created after their creator gave up (closed at once): a count for tests.
std::atomic<int> g_abandoned{0};

void set_creation_gate(bool closed) {
    {
        dstp_gil::ReleaseGil nogil;
        std::lock_guard<std::mutex> lk(g_gate_mutex);
        g_gate_closed = closed;
    }
    g_gate_cv.notify_all();
}

// UDT::socket() on the calling thread. No GIL.
UDTSOCKET create_now(int family, int type, Err* err) {
    InFlight busy;
    {
        std::unique_lock<std::mutex> lk(g_gate_mutex);
        ++g_gate_waiters;
        g_gate_cv.wait(lk, [] { return !g_gate_closed; });
        --g_gate_waiters;
    }
    UDTSOCKET u = UDT::socket(family, type, 0);
    if (u == UDT::INVALID_SOCK) *err = last_error();
    return u;
}

// UDT::socket() waits for libudt's global socket-table lock, which libudt's
// garbage collector holds while it tears down a closed connection's queues
// (joining their threads). With a deadline, creation is handed to one
// long-lived creator thread (a hand-off costs far less than a thread per
// socket) and abandoned when the deadline passes; the creator closes a socket
// whose requester gave up.
struct Creation {
    std::mutex m;
    std::condition_variable cv;
    int family = AF_INET;
    int type = SOCK_STREAM;
    bool done = false;
    bool abandoned = false;
    UDTSOCKET u = UDT::INVALID_SOCK;
    Err err;
};

std::mutex& g_requests_mutex = *new std::mutex;
std::condition_variable& g_requests_cv = *new std::condition_variable;
std::deque<std::shared_ptr<Creation>>& g_requests = *new std::deque<std::shared_ptr<Creation>>;
bool g_creator_started = false;

[[noreturn]] void creator_loop() {
    for (;;) {
        std::shared_ptr<Creation> c;
        {
            std::unique_lock<std::mutex> lk(g_requests_mutex);
            g_requests_cv.wait(lk, [] { return !g_requests.empty(); });
            c = g_requests.front();
            g_requests.pop_front();
        }
        Err e;
        UDTSOCKET u = create_now(c->family, c->type, &e);
        std::lock_guard<std::mutex> lk(c->m);
        if (c->abandoned) {
            g_abandoned.fetch_add(1);
            discard_socket(u);
            continue;
        }
        c->u = u;
        c->err = e;
        c->done = true;
        c->cv.notify_one();
    }
}

// No GIL.
UDTSOCKET create_within(int family, int type, double timeout_s, Err* err, bool* timed_out) {
    auto c = std::make_shared<Creation>();
    c->family = family;
    c->type = type;
    {
        std::lock_guard<std::mutex> lk(g_requests_mutex);
        if (!g_creator_started) {
            try {
                std::thread(creator_loop).detach();
            } catch (const std::system_error&) {
                return create_now(family, type, err);  // no thread to spare: wait without a deadline
            }
            g_creator_started = true;
        }
        g_requests.push_back(c);
    }
    g_requests_cv.notify_one();
    std::unique_lock<std::mutex> lk(c->m);
    auto limit = std::chrono::duration<double>(std::max(0.0, timeout_s));
    if (!c->cv.wait_for(lk, limit, [&] { return c->done; })) {
        c->abandoned = true;
        *timed_out = true;
        return UDT::INVALID_SOCK;
    }
    *err = c->err;
    return c->u;
}

class UdtSocket {
  public:
    UdtSocket(int family, int type, const py::object& timeout) : family_(family), type_(type) {
        if (family != AF_INET && family != AF_INET6) throw py::value_error("family must be AF_INET or AF_INET6");
        if (type != SOCK_STREAM && type != SOCK_DGRAM) throw py::value_error("type must be SOCK_STREAM or SOCK_DGRAM");
        if (g_cleaned.load()) raise_as(g_UdtError, kEINVOP, "socket", "libudt was cleaned up (interpreter exiting)");
        double limit = timeout.is_none() ? -1.0 : timeout.cast<double>();
        Err err;
        bool timed_out = false;
        UDTSOCKET u;
        {
            dstp_gil::ReleaseGil nogil;
            u = limit < 0 ? create_now(family, type, &err) : create_within(family, type, limit, &err, &timed_out);
        }
        if (timed_out) {
            char secs[32];
            std::snprintf(secs, sizeof secs, "%.1f", limit);
            raise_as(g_UdtTimeout, kETIMEOUT, "socket",
                     std::string("libudt did not create a socket within ") + secs +
                         " s: its socket table stayed locked (libudt's garbage collector holds that lock while it "
                         "tears down a closed connection); the attempt was abandoned");
        }
        if (u == UDT::INVALID_SOCK) raise_err(err, "socket");
        u_.store(u);
    }

    UdtSocket(UDTSOCKET accepted, int family, int type) : family_(family), type_(type) { u_.store(accepted); }

    ~UdtSocket() {
        UDTSOCKET u = u_.exchange(UDT::INVALID_SOCK);
        if (u == UDT::INVALID_SOCK || g_cleaned.load()) return;
        // Garbage-collected while open: close without blocking the collector.
        // With UDT_SNDSYN off, libudt's close() returns at once and keeps
        // sending unsent data in its own threads until UDT_LINGER expires,
        // which is what the kernel does for an abandoned TCP socket. libudt's
        // locks may be held for long: never wait for them with the GIL held.
        InFlight busy;
        if (PyGILState_Check()) {
            dstp_gil::ReleaseGil nogil;
            discard_socket(u);
        } else {
            discard_socket(u);
        }
    }

    UdtSocket(const UdtSocket&) = delete;
    UdtSocket& operator=(const UdtSocket&) = delete;

    // -- helpers -----------------------------------------------------------

    UDTSOCKET live(const char* what) const {
        UDTSOCKET u = u_.load();
        if (u == UDT::INVALID_SOCK) raise_closed(what);
        return u;
    }

    // A failure seen by a call while another thread closed the socket is
    // reported as "closed", not as whatever libudt happened to say.
    [[noreturn]] void fail(const Err& e, const std::string& what) const {
        if (u_.load() == UDT::INVALID_SOCK) raise_closed(what);
        raise_err(e, what);
    }

    int id() const { return static_cast<int>(u_.load()); }
    bool closed() const { return u_.load() == UDT::INVALID_SOCK; }
    int family() const { return family_; }
    int type() const { return type_; }

    // -- connection set-up -------------------------------------------------

    void bind(const std::string& host, int port) {
        UDTSOCKET u = live("bind");
        SockAddr addr;
        std::string rerr;
        Err err;
        bool resolved;
        {
            dstp_gil::ReleaseGil nogil;
            resolved = resolve(host, port, family_, true, &addr, &rerr);
            if (resolved && UDT::bind(u, reinterpret_cast<sockaddr*>(&addr.ss), addr.len) == UDT::ERROR)
                err = last_error();
        }
        if (!resolved) raise_as(g_UdtError, kEINVPARAM, "bind", rerr);
        if (err.set()) fail(err, "bind " + host + ":" + std::to_string(port));
    }

    void listen(int backlog) {
        UDTSOCKET u = live("listen");
        Err err;
        {
            dstp_gil::ReleaseGil nogil;
            InFlight busy;
            if (UDT::listen(u, backlog) == UDT::ERROR) err = last_error();
        }
        if (err.set()) fail(err, "listen");
    }

    py::tuple accept(const py::object& timeout) {
        UDTSOCKET u = live("accept");
        int64_t ms = timeout_ms(timeout);
        bool rcvsyn = rcvsyn_;
        sockaddr_storage peer{};
        int peerlen = sizeof peer;
        UDTSOCKET a = UDT::INVALID_SOCK;
        Err err;
        bool timed_out = false;
        {
            dstp_gil::ReleaseGil nogil;
            InFlight busy;
            if (ms < 0) {
                a = UDT::accept(u, reinterpret_cast<sockaddr*>(&peer), &peerlen);
                if (a == UDT::INVALID_SOCK) err = last_error();
            } else {
                a = accept_with_deadline(u, ms, &peer, &peerlen, &err, &timed_out, rcvsyn);
            }
            // Accepted sockets copy the listener's options when the handshake
            // arrives -- possibly while accept_with_deadline() had switched the
            // listener to non-blocking. Give them the mode the user asked for.
            if (a != UDT::INVALID_SOCK) UDT::setsockopt(a, 0, UDT_RCVSYN, &rcvsyn, sizeof rcvsyn);
        }
        if (timed_out) raise_as(g_UdtTimeout, kETIMEOUT, "accept", "no connection within the timeout");
        if (err.set()) fail(err, "accept");
        auto sock = std::make_unique<UdtSocket>(a, family_, type_);
        sock->rcvsyn_ = rcvsyn;
        return py::make_tuple(py::cast(std::move(sock)), to_python(peer));
    }

    void connect(const std::string& host, int port, const py::object& timeout) {
        UDTSOCKET u = live("connect");
        int64_t ms = timeout_ms(timeout);
        bool rcvsyn = rcvsyn_;
        std::string what = "connect to " + host + ":" + std::to_string(port);
        SockAddr addr;
        std::string rerr;
        Err err;
        bool resolved;
        bool timed_out = false;
        int final_state = 0;
        {
            dstp_gil::ReleaseGil nogil;
            InFlight busy;
            resolved = resolve(host, port, family_, false, &addr, &rerr);
            if (resolved && ms < 0) {
                // Blocking connect: libudt retries the handshake every 250 ms
                // and gives up with ENOSERVER after its fixed 3 s.
                if (UDT::connect(u, reinterpret_cast<sockaddr*>(&addr.ss), addr.len) == UDT::ERROR) err = last_error();
            } else if (resolved) {
                connect_with_deadline(u, addr, ms, &err, &timed_out, &final_state, rcvsyn);
            }
        }
        if (!resolved) raise_as(g_UdtConnectError, kECONNSETUP, what, rerr);
        if (timed_out) raise_as(g_UdtTimeout, kETIMEOUT, what, "no UDT handshake answer within the timeout");
        if (err.set()) fail(err, what);
    }

    // -- data --------------------------------------------------------------

    int64_t send(const py::object& data) {
        UDTSOCKET u = live("send");
        Buffer buf(data, false);
        int64_t n = 0;
        Err err;
        {
            dstp_gil::ReleaseGil nogil;
            InFlight busy;
            int len = static_cast<int>(std::min<int64_t>(buf.size(), kMaxCall));
            if (len > 0) {
                int rc = UDT::send(u, buf.data(), len, 0);
                if (rc == UDT::ERROR) err = last_error();
                else n = rc;
            }
        }
        if (err.set()) fail(err, "send");
        return n;
    }

    void sendall(const py::object& data) {
        UDTSOCKET u = live("sendall");
        Buffer buf(data, false);
        Err err;
        {
            dstp_gil::ReleaseGil nogil;
            InFlight busy;
            send_all(u, buf.data(), buf.size(), &err);
        }
        if (err.set()) fail(err, "sendall");
    }

    // Send every buffer of an iterable, in order, releasing the GIL once.
    int64_t sendall_buffers(const py::iterable& items) {
        UDTSOCKET u = live("sendall_buffers");
        std::vector<Buffer> bufs;
        for (py::handle item : items) bufs.emplace_back(item, false);
        int64_t total = 0;
        Err err;
        {
            dstp_gil::ReleaseGil nogil;
            InFlight busy;
            for (const auto& b : bufs) {
                int64_t done = send_all(u, b.data(), b.size(), &err);
                total += done;
                if (err.set()) break;
            }
        }
        if (err.set()) fail(err, "sendall_buffers");
        return total;
    }

    py::bytes recv(int64_t n) {
        UDTSOCKET u = live("recv");
        if (n < 0) throw py::value_error("negative buffer size in recv");
        n = std::min<int64_t>(n, kMaxCall);
        PyObject* raw = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(n));
        if (raw == nullptr) throw py::error_already_set();
        py::object holder = py::reinterpret_steal<py::object>(raw);
        char* p = PyBytes_AS_STRING(raw);
        int got = 0;
        Err err;
        if (n > 0) {
            dstp_gil::ReleaseGil nogil;
            InFlight busy;
            got = recv_some(u, p, static_cast<int>(n), &err);
        }
        if (err.set()) fail(err, "recv");
        if (got != n) {
            PyObject* tmp = holder.release().ptr();
            if (_PyBytes_Resize(&tmp, got) != 0) throw py::error_already_set();
            holder = py::reinterpret_steal<py::object>(tmp);
        }
        return py::reinterpret_steal<py::bytes>(holder.release());
    }

    int64_t recv_into(const py::object& target, int64_t nbytes) {
        UDTSOCKET u = live("recv_into");
        Buffer buf(target, true);
        int64_t want = checked_len(buf, nbytes, "recv_into");
        int got = 0;
        Err err;
        if (want > 0) {
            dstp_gil::ReleaseGil nogil;
            InFlight busy;
            got = recv_some(u, buf.data(), static_cast<int>(std::min<int64_t>(want, kMaxCall)), &err);
        }
        if (err.set()) fail(err, "recv_into");
        return got;
    }

    // Fill `nbytes` (default: the whole buffer), looping in C++. Raises
    // UdtConnectionLost if the connection ends first, with the count of
    // bytes already stored in `.bytes_received`.
    int64_t recvall_into(const py::object& target, int64_t nbytes) {
        UDTSOCKET u = live("recvall_into");
        Buffer buf(target, true);
        int64_t want = checked_len(buf, nbytes, "recvall_into");
        int64_t got = 0;
        Err err;
        {
            dstp_gil::ReleaseGil nogil;
            InFlight busy;
            while (got < want) {
                int chunk = static_cast<int>(std::min<int64_t>(want - got, kMaxCall));
                int rc = recv_some(u, buf.data() + got, chunk, &err);
                if (err.set()) break;
                got += rc;
            }
        }
        if (err.set()) {
            try {
                fail(err, "recvall_into");
            } catch (py::error_already_set& e) {
                e.value().attr("bytes_received") = got;
                throw;
            }
        }
        return got;
    }

    void close() {
        UDTSOCKET u = u_.exchange(UDT::INVALID_SOCK);
        if (u == UDT::INVALID_SOCK || g_cleaned.load()) return;
        Err err;
        {
            // May wait up to UDT_LINGER seconds for unsent data to be acked.
            dstp_gil::ReleaseGil nogil;
            InFlight busy;
            if (UDT::close(u) == UDT::ERROR) err = last_error();
        }
        // EINVSOCK here means libudt already dropped a broken socket: closed anyway.
        if (err.set() && err.code != kEINVSOCK) raise_err(err, "close");
    }

    // -- introspection -----------------------------------------------------

    py::tuple getsockname() const {
        UDTSOCKET u = live("getsockname");
        sockaddr_storage ss{};
        int len = sizeof ss;
        Err err;
        {
            dstp_gil::ReleaseGil nogil;
            InFlight busy;
            if (UDT::getsockname(u, reinterpret_cast<sockaddr*>(&ss), &len) == UDT::ERROR) err = last_error();
        }
        if (err.set()) fail(err, "getsockname");
        return to_python(ss);
    }

    py::tuple getpeername() const {
        UDTSOCKET u = live("getpeername");
        sockaddr_storage ss{};
        int len = sizeof ss;
        Err err;
        {
            dstp_gil::ReleaseGil nogil;
            InFlight busy;
            if (UDT::getpeername(u, reinterpret_cast<sockaddr*>(&ss), &len) == UDT::ERROR) err = last_error();
        }
        if (err.set()) fail(err, "getpeername");
        return to_python(ss);
    }

    py::object getsockopt(const py::object& key) const {
        UDTSOCKET u = live("getsockopt");
        const OptInfo& o = find_option(key);
        union {
            int i;
            bool b;
            linger l;
            int64_t ll;
            char raw[32];
        } v;
        std::memset(&v, 0, sizeof v);
        int len = sizeof v;
        int rc;
        {
            dstp_gil::ReleaseGil nogil;
            InFlight busy;
            rc = UDT::getsockopt(u, 0, o.opt, &v, &len);
        }
        if (rc == UDT::ERROR) fail(last_error(), std::string("getsockopt ") + o.name);
        switch (o.kind) {
            case OptKind::Bool: return py::bool_(v.b);
            case OptKind::Linger: return py::int_(v.l.l_onoff ? v.l.l_linger : 0);
            case OptKind::Int64: return py::int_(v.ll);
            default: return py::int_(v.i);
        }
    }

    void setsockopt(const py::object& key, const py::object& value) {
        UDTSOCKET u = live("setsockopt");
        const OptInfo& o = find_option(key);
        int rc = UDT::ERROR;
        // libudt takes the socket's locks here, which a thread blocked in recv/send
        // may hold: never wait for them with the GIL held.
        auto set = [&](const void* p, int n) {
            dstp_gil::ReleaseGil nogil;
            InFlight busy;
            return UDT::setsockopt(u, 0, o.opt, p, n);
        };
        switch (o.kind) {
            case OptKind::ReadOnlyInt: throw py::value_error(std::string(o.name) + " is read only");
            case OptKind::Bool: {
                bool b = value.cast<bool>();
                rc = set(&b, sizeof b);
                if (rc != UDT::ERROR && o.opt == UDT_RCVSYN) rcvsyn_ = b;
                break;
            }
            case OptKind::Linger: {
                int secs = value.is_none() ? 0 : value.cast<int>();
                linger l{};
                l.l_onoff = secs > 0 ? 1 : 0;
                l.l_linger = secs > 0 ? secs : 0;
                rc = set(&l, sizeof l);
                break;
            }
            case OptKind::Int64: {
                int64_t ll = value.cast<int64_t>();
                rc = set(&ll, sizeof ll);
                break;
            }
            case OptKind::Int: {
                int64_t wide = value.cast<int64_t>();
                if (wide > INT_MAX || wide < INT_MIN) throw py::value_error(std::string(o.name) + " does not fit a C int");
                int i = static_cast<int>(wide);
                rc = set(&i, sizeof i);
                break;
            }
        }
        if (rc == UDT::ERROR) fail(last_error(), std::string("setsockopt ") + o.name);
    }

    py::dict perfmon(bool clear) {
        UDTSOCKET u = live("perfmon");
        UDT::TRACEINFO t;
        std::memset(&t, 0, sizeof t);
        int rc;
        {
            dstp_gil::ReleaseGil nogil;
            InFlight busy;
            rc = UDT::perfmon(u, &t, clear);
        }
        if (rc == UDT::ERROR) fail(last_error(), "perfmon");
        py::dict d;
#define DSTP_FIELD(name) d[#name] = t.name
        // instant values
        DSTP_FIELD(msTimeStamp);
        DSTP_FIELD(usPktSndPeriod);
        DSTP_FIELD(pktFlowWindow);
        DSTP_FIELD(pktCongestionWindow);
        DSTP_FIELD(pktFlightSize);
        DSTP_FIELD(msRTT);
        DSTP_FIELD(mbpsBandwidth);
        DSTP_FIELD(byteAvailSndBuf);
        DSTP_FIELD(byteAvailRcvBuf);
        // totals since the connection started
        DSTP_FIELD(pktSentTotal);
        DSTP_FIELD(pktRecvTotal);
        DSTP_FIELD(pktSndLossTotal);
        DSTP_FIELD(pktRcvLossTotal);
        DSTP_FIELD(pktRetransTotal);
        DSTP_FIELD(pktSentACKTotal);
        DSTP_FIELD(pktRecvACKTotal);
        DSTP_FIELD(pktSentNAKTotal);
        DSTP_FIELD(pktRecvNAKTotal);
        DSTP_FIELD(usSndDurationTotal);
        // local values since the last perfmon(clear=True)
        DSTP_FIELD(pktSent);
        DSTP_FIELD(pktRecv);
        DSTP_FIELD(pktSndLoss);
        DSTP_FIELD(pktRcvLoss);
        DSTP_FIELD(pktRetrans);
        DSTP_FIELD(pktSentACK);
        DSTP_FIELD(pktRecvACK);
        DSTP_FIELD(pktSentNAK);
        DSTP_FIELD(pktRecvNAK);
        DSTP_FIELD(mbpsSendRate);
        DSTP_FIELD(mbpsRecvRate);
        DSTP_FIELD(usSndDuration);
#undef DSTP_FIELD
        return d;
    }

    std::string state() const {
        UDTSOCKET u = u_.load();
        if (u == UDT::INVALID_SOCK) return "CLOSED";
        UDTSTATUS st;
        {
            dstp_gil::ReleaseGil nogil;
            InFlight busy;
            st = UDT::getsockstate(u);
        }
        return state_name(st);
    }

    std::string repr() const {
        return "<dstp.transport._udt.UdtSocket id=" + std::to_string(id()) + " state=" + state() + ">";
    }

  private:
    // One UDT::send/recv moves at most this much (the API takes an int).
    static constexpr int64_t kMaxCall = 1LL << 30;

    static int64_t checked_len(const Buffer& buf, int64_t nbytes, const char* what) {
        if (nbytes < 0) throw py::value_error(std::string("negative nbytes in ") + what);
        if (nbytes == 0) return buf.size();
        if (nbytes > buf.size()) throw py::value_error(std::string("nbytes is greater than the buffer in ") + what);
        return nbytes;
    }

    // No GIL. Loops until everything is queued in UDT's send buffer.
    static int64_t send_all(UDTSOCKET u, const char* p, int64_t len, Err* err) {
        int64_t sent = 0;
        while (sent < len) {
            int chunk = static_cast<int>(std::min<int64_t>(len - sent, kMaxCall));
            int rc = UDT::send(u, p + sent, chunk, 0);
            if (rc == UDT::ERROR) {
                *err = last_error();
                break;
            }
            if (rc == 0) {  // UDT_SNDTIMEO expired with no room (libudt returns 0)
                *err = Err{kETIMEOUT, "send timed out (UDT_SNDTIMEO)"};
                break;
            }
            sent += rc;
        }
        return sent;
    }

    // No GIL. One UDT::recv; a UDT_RCVTIMEO expiry (0 or ETIMEOUT) is an error.
    static int recv_some(UDTSOCKET u, char* p, int len, Err* err) {
        int rc = UDT::recv(u, p, len, 0);
        if (rc == UDT::ERROR) {
            *err = last_error();
            return 0;
        }
        if (rc == 0) {
            *err = Err{kETIMEOUT, "recv timed out (UDT_RCVTIMEO)"};
            return 0;
        }
        return rc;
    }

    // No GIL. Poll a non-blocking accept every millisecond until a connection
    // is queued or `ms` passes. (libudt 4.11's epoll only reports events that
    // happen after a socket was added, so it would miss a connection already
    // waiting in the queue.) Returns INVALID_SOCK with `timed_out` or `err`.
    static UDTSOCKET accept_with_deadline(UDTSOCKET u, int64_t ms, sockaddr_storage* peer, int* peerlen, Err* err,
                                          bool* timed_out, bool was_sync) {
        bool async = false;
        UDT::setsockopt(u, 0, UDT_RCVSYN, &async, sizeof async);
        int64_t start = now_ms();
        UDTSOCKET a = UDT::INVALID_SOCK;
        for (;;) {
            int plen = *peerlen;
            a = UDT::accept(u, reinterpret_cast<sockaddr*>(peer), &plen);
            if (a != UDT::INVALID_SOCK) {
                *peerlen = plen;
                break;
            }
            Err e = last_error();
            if (e.code != kEASYNCRCV) {
                *err = e;
                break;
            }
            if (now_ms() - start >= ms) {
                *timed_out = true;
                break;
            }
            timespec ts{0, 1000000};  // 1 ms
            ::nanosleep(&ts, nullptr);
        }
        UDT::setsockopt(u, 0, UDT_RCVSYN, &was_sync, sizeof was_sync);
        UDT::getlasterror().clear();
        return a;
    }

    // No GIL. Non-blocking connect, then poll the state until connected,
    // failed, the deadline passes, or libudt's own handshake window closes.
    static void connect_with_deadline(UDTSOCKET u, const SockAddr& addr, int64_t ms, Err* err, bool* timed_out,
                                      int* final_state, bool was_sync) {
        bool async = false;
        UDT::setsockopt(u, 0, UDT_RCVSYN, &async, sizeof async);
        int64_t start = now_ms();
        if (UDT::connect(u, reinterpret_cast<const sockaddr*>(&addr.ss), addr.len) == UDT::ERROR) {
            *err = last_error();
        } else {
            for (;;) {
                int st = UDT::getsockstate(u);
                *final_state = st;
                if (st == CONNECTED) break;
                if (st != CONNECTING) {
                    *err = Err{kECONNSETUP, std::string("connection setup failed (socket ") + state_name(st) + ")"};
                    break;
                }
                int64_t elapsed = now_ms() - start;
                if (elapsed >= ms) {
                    *timed_out = true;
                    break;
                }
                if (elapsed >= kUdtConnectWindowMs) {
                    *err = Err{kENOSERVER, "Connection setup failure: connection time out."};
                    break;
                }
                timespec ts{0, 1000000};  // 1 ms
                ::nanosleep(&ts, nullptr);
            }
        }
        UDT::setsockopt(u, 0, UDT_RCVSYN, &was_sync, sizeof was_sync);
        UDT::getlasterror().clear();
    }

    std::atomic<UDTSOCKET> u_{UDT::INVALID_SOCK};
    bool rcvsyn_ = true;  // UDT_RCVSYN as last set by the user (accept() may toggle it)
    int family_;
    int type_;
};

void cleanup_at_exit() {
    if (!g_started.load() || g_cleaned.exchange(true)) return;
    // A thread still blocked inside libudt (say a daemon thread in recv)
    // would touch freed sockets if cleanup() ran now; leaving the library
    // up is harmless at exit, so skip it in that case.
    if (g_inflight.load() != 0) return;
    dstp_gil::ReleaseGil nogil;
    UDT::cleanup();
}

const char* kExceptions = R"PY(
class UdtError(OSError):
    """A libudt call failed. ``code`` is UDT's error code (major*1000+minor),
    ``errno`` the nearest POSIX errno, ``strerror`` the full text,
    ``operation`` the call and ``udt_message`` libudt's own message."""
    code = 0
    operation = ""
    udt_message = ""

class UdtConnectError(UdtError, ConnectionError):
    """Connection set-up failed (UDT 1xxx: no server, rejected, ...)."""

class UdtConnectionLost(UdtError, ConnectionError):
    """The connection is broken or gone (UDT 2xxx). UDT has no half-close:
    once the peer closed and buffered data was read, recv raises this."""

class UdtTimeout(UdtError, TimeoutError):
    """A timeout (accept/connect deadline, UDT_SNDTIMEO/UDT_RCVTIMEO) expired."""

class UdtWouldBlock(UdtError, BlockingIOError):
    """Non-blocking mode and nothing could be done (UDT 6000-6002)."""

class UdtClosedError(UdtError):
    """The socket was closed by this process (use after close)."""
)PY";

}  // namespace

PYBIND11_MODULE(_udt, m) {
    dstp_gil::init_main_thread();
    m.doc() = "Thin binding of libudt (UDT4): zero-copy send/recv with the GIL released. See docs/udt.md.";

    py::dict ns;
    ns["__name__"] = "dstp.transport._udt";
    ns["__builtins__"] = py::module_::import("builtins");
    py::exec(kExceptions, ns);
    const char* names[] = {"UdtError", "UdtConnectError", "UdtConnectionLost", "UdtTimeout", "UdtWouldBlock",
                           "UdtClosedError"};
    PyObject** slots[] = {&g_UdtError, &g_UdtConnectError, &g_UdtConnectionLost, &g_UdtTimeout, &g_UdtWouldBlock,
                          &g_UdtClosedError};
    for (size_t i = 0; i < 6; ++i) {
        py::object cls = ns[names[i]];
        m.attr(names[i]) = cls;
        *slots[i] = cls.inc_ref().ptr();  // module-lifetime references
    }

#ifdef DSTP_UDT_STATIC
    dstp_udt_fixes::calibrate_clock();  // before any socket: libudt's 100 ms probe was skipped (libudt_fixes.cpp)
#endif
    // UDT::startup() spawns libudt's garbage-collector thread; idempotent.
    if (UDT::startup() == UDT::ERROR) raise_err(last_error(), "UDT::startup");
    g_started.store(true);
    py::module_::import("atexit").attr("register")(py::cpp_function(&cleanup_at_exit));

    py::dict options;
    for (const auto& o : kOptions) {
        m.attr(o.name) = static_cast<int>(o.opt);
        options[o.name] = static_cast<int>(o.opt);
    }
    m.attr("OPTIONS") = options;
    m.attr("AF_INET") = static_cast<int>(AF_INET);
    m.attr("AF_INET6") = static_cast<int>(AF_INET6);
    m.attr("SOCK_STREAM") = static_cast<int>(SOCK_STREAM);
    m.attr("SOCK_DGRAM") = static_cast<int>(SOCK_DGRAM);
    m.attr("UDT_CONNECT_WINDOW") = kUdtConnectWindowMs / 1000.0;

    py::dict codes;
    codes["ECONNSETUP"] = int(kECONNSETUP); codes["ENOSERVER"] = int(kENOSERVER); codes["ECONNREJ"] = int(kECONNREJ);
    codes["ESOCKFAIL"] = int(kESOCKFAIL); codes["ESECFAIL"] = int(kESECFAIL); codes["ECONNFAIL"] = int(kECONNFAIL);
    codes["ECONNLOST"] = int(kECONNLOST); codes["ENOCONN"] = int(kENOCONN); codes["ERESOURCE"] = int(kERESOURCE);
    codes["ETHREAD"] = int(kETHREAD); codes["ENOBUF"] = int(kENOBUF); codes["EINVOP"] = int(kEINVOP);
    codes["EBOUNDSOCK"] = int(kEBOUNDSOCK); codes["ECONNSOCK"] = int(kECONNSOCK); codes["EINVPARAM"] = int(kEINVPARAM);
    codes["EINVSOCK"] = int(kEINVSOCK); codes["EUNBOUNDSOCK"] = int(kEUNBOUNDSOCK); codes["ENOLISTEN"] = int(kENOLISTEN);
    codes["EDUPLISTEN"] = int(kEDUPLISTEN); codes["EASYNCSND"] = int(kEASYNCSND); codes["EASYNCRCV"] = int(kEASYNCRCV);
    codes["ETIMEOUT"] = int(kETIMEOUT); codes["EPEERERR"] = int(kEPEERERR);
    m.attr("ERROR_CODES") = codes;

    m.def("library_version", []() { return std::string("UDT4"); }, "libudt API generation (the library has no runtime version call).");
    m.def("inflight_calls", []() { return g_inflight.load(); }, "Threads currently blocked inside libudt (diagnostics).");

    m.def("_set_creation_gate", &set_creation_gate, py::arg("closed"),
          "Tests only: closed=True makes socket creation wait, as when libudt's socket table is locked.");
    m.def("_creation_waiters", [] {
              dstp_gil::ReleaseGil nogil;
              std::lock_guard<std::mutex> lk(g_gate_mutex);
              return g_gate_waiters;
          }, "Tests only: threads whose socket creation waits at the closed gate.");
    m.def("_abandoned_sockets", [] { return g_abandoned.load(); },
          "Tests only: sockets created after their creator's deadline passed (each closed at once).");

#ifdef DSTP_UDT_STATIC
    // libudt linked from its static archive, with the send-queue teardown repaired
    // (libudt_fixes.cpp); "shared" means the system libudt.so as it is.
    m.attr("LIBUDT_LINK") = "static";
    m.def("_teardowns", [] {
              std::vector<dstp_udt_fixes::Teardown> recent;
              std::uint64_t count = 0;
              {
                  dstp_gil::ReleaseGil nogil;
                  recent = dstp_udt_fixes::recent_teardowns();
                  count = dstp_udt_fixes::teardown_count();
              }
              py::list items;
              for (const auto& t : recent) items.append(py::make_tuple(t.port, t.seconds));
              return py::make_tuple(count, items);
          },
          "Diagnostics: (send queues torn down since start-up, [(udp_port, seconds), ...] for the latest 64).");
    m.def("_clock", [] {
              auto c = dstp_udt_fixes::clock_state();
              py::dict d;
              d["probe_skipped"] = c.probe_skipped;
              d["ticks_per_us"] = c.ticks_per_us;
              d["microsecond_clock"] = c.microsecond_clock;
              return d;
          },
          "Diagnostics: libudt's clock (its 100 ms load-time probe skipped?, counter ticks per microsecond, "
          "gettimeofday fallback?).");
    m.def("_counter_reading", [] {
              auto r = dstp_udt_fixes::counter_reading();
              return py::make_tuple(r.us, r.ticks);
          },
          "Tests only: (CLOCK_MONOTONIC microseconds, time-stamp counter) read within 20 us of each other "
          "(microseconds < 0: no such reading).");
    m.def("_libudt_clock_probe", [] {
              dstp_gil::ReleaseGil nogil;
              return dstp_udt_fixes::libudt_probe();
          },
          "Tests only: run libudt's own clock probe now (100 ms) and return the ticks per microsecond it measures.");
    m.def("_set_teardown_repair", &dstp_udt_fixes::set_enabled, py::arg("enabled"),
          "Tests only: enabled=False tears send queues down as libudt 4.11 does (the worker is not woken).");
#else
    m.attr("LIBUDT_LINK") = "shared";
#endif

    py::class_<UdtSocket>(m, "UdtSocket", "A UDT socket (libudt). Not an OS file descriptor.")
        .def(py::init<int, int, const py::object&>(), py::arg("family") = static_cast<int>(AF_INET),
             py::arg("type") = static_cast<int>(SOCK_STREAM), py::kw_only(), py::arg("timeout") = py::none(),
             "timeout=t: give up creating the socket after t s with UdtTimeout (libudt's socket table can "
             "stay locked while its garbage collector works); None = wait.")
        .def("bind", &UdtSocket::bind, py::arg("host"), py::arg("port"), "Bind to host:port ('' = any address).")
        .def("listen", &UdtSocket::listen, py::arg("backlog") = 16)
        .def("accept", &UdtSocket::accept, py::arg("timeout") = py::none(),
             "Return (UdtSocket, (host, port)); waits `timeout` s (None = forever), then raises UdtTimeout.")
        .def("connect", &UdtSocket::connect, py::arg("host"), py::arg("port"), py::arg("timeout") = py::none(),
             "Connect. timeout=None: libudt's own handshake limit (3 s). timeout=t: give up after "
             "min(t, ~3.5 s) with UdtTimeout / UdtConnectError.")
        .def("send", &UdtSocket::send, py::arg("data"), "Queue part of a buffer; returns the byte count.")
        .def("sendall", &UdtSocket::sendall, py::arg("data"), "Queue the whole buffer (loops in C++, no copy).")
        .def("sendall_buffers", &UdtSocket::sendall_buffers, py::arg("buffers"),
             "sendall() each buffer of an iterable in order, releasing the GIL once; returns the byte count.")
        .def("recv", &UdtSocket::recv, py::arg("n"), "Receive up to n bytes (blocks until at least one).")
        .def("recv_into", &UdtSocket::recv_into, py::arg("buffer"), py::arg("nbytes") = 0,
             "Receive up to nbytes (0 = len(buffer)) straight into a writable buffer.")
        .def("recvall_into", &UdtSocket::recvall_into, py::arg("buffer"), py::arg("nbytes") = 0,
             "Fill exactly nbytes (0 = len(buffer)), looping in C++.")
        .def("close", &UdtSocket::close, "Close; waits up to UDT_LINGER s for unsent data. Idempotent.")
        .def("fileno", &UdtSocket::id, "The UDT socket id (NOT an OS descriptor); -1 once closed.")
        .def_property_readonly("id", &UdtSocket::id)
        .def_property_readonly("closed", &UdtSocket::closed)
        .def_property_readonly("family", &UdtSocket::family)
        .def_property_readonly("type", &UdtSocket::type)
        .def("getsockname", &UdtSocket::getsockname)
        .def("getpeername", &UdtSocket::getpeername)
        .def("getsockopt", &UdtSocket::getsockopt, py::arg("option"), "Read an option (constant or name).")
        .def("setsockopt", &UdtSocket::setsockopt, py::arg("option"), py::arg("value"),
             "Set an option (constant or name). Most must be set before bind/connect.")
        .def("perfmon", &UdtSocket::perfmon, py::arg("clear") = true, "UDT::TRACEINFO as a dict.")
        .def("state", &UdtSocket::state, "libudt's socket state name (CONNECTED, BROKEN, ...).")
        .def("__enter__", [](py::object self) { return self; })
        .def("__exit__", [](UdtSocket& s, py::args) { s.close(); })
        .def("__repr__", &UdtSocket::repr);
}

// dstp.transport._native -- the data channel's per-block byte loop in C++.
//
// What moves here (transport/native.py wraps it; docs/transport.md, "The native data path"):
//   * crc32c(buffer, value): CRC-32C (Castagnoli), SSE4.2 `crc32` instructions on three
//     interleaved streams where the CPU has them, slicing-by-8 tables otherwise; the same
//     values as the `crc32c` package (continuing from `value`, pre/post inverted);
//   * send_frame(...): one frame -- the 32-byte header (transport/wire/frames.py) with its checksum
//     over payload then blank header, then the payload -- written to a socket with sendmsg,
//     or, for a file block, the header then sendfile() from the file (no copy in user space);
//   * recv_payload(...): a frame's payload received into caller memory, its CRC-32C computed
//     chunk by chunk as the bytes arrive (still in cache), the frame checksum checked.
//
// Every call that touches a socket, a file or a payload runs with the GIL released. Socket
// errors are raised as OSError (errno kept); an end of stream inside a frame as EOFError.
// The Python side turns both into dstp's TransportError, exactly as its own path does.

#include <pybind11/pybind11.h>

#include "release_gil.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <nmmintrin.h>
#define DSTP_X86 1
#endif

namespace py = pybind11;

namespace {

// ---------------------------------------------------------------------------
// CRC-32C
// ---------------------------------------------------------------------------

constexpr uint32_t kPoly = 0x82F63B78u;  // reflected Castagnoli
constexpr size_t kLong = 8192;
constexpr size_t kShort = 256;

uint32_t g_table[8][256];      // slicing-by-8
uint32_t g_long[4][256];       // append kLong zero bytes to a register
uint32_t g_short[4][256];      // append kShort zero bytes
bool g_hw = false;

uint32_t gf2_times(const uint32_t* mat, uint32_t vec) {
    uint32_t sum = 0;
    while (vec) {
        if (vec & 1) sum ^= *mat;
        vec >>= 1;
        ++mat;
    }
    return sum;
}

void gf2_square(uint32_t* square, const uint32_t* mat) {
    for (int n = 0; n < 32; ++n) square[n] = gf2_times(mat, mat[n]);
}

// The operator appending `len` zero bytes (len a power of two) to a CRC register.
void zeros_operator(uint32_t* even, size_t len) {
    uint32_t odd[32];
    odd[0] = kPoly;
    uint32_t row = 1;
    for (int n = 1; n < 32; ++n) {
        odd[n] = row;
        row <<= 1;
    }
    gf2_square(even, odd);  // two zero bits
    gf2_square(odd, even);  // four zero bits
    do {
        gf2_square(even, odd);  // one zero byte, then doubling
        len >>= 1;
        if (len == 0) return;
        gf2_square(odd, even);
        len >>= 1;
    } while (len);
    std::memcpy(even, odd, sizeof(odd));
}

void zeros_table(uint32_t zeros[][256], size_t len) {
    uint32_t op[32];
    zeros_operator(op, len);
    for (uint32_t n = 0; n < 256; ++n) {
        zeros[0][n] = gf2_times(op, n);
        zeros[1][n] = gf2_times(op, n << 8);
        zeros[2][n] = gf2_times(op, n << 16);
        zeros[3][n] = gf2_times(op, n << 24);
    }
}

inline uint32_t shift(const uint32_t zeros[][256], uint32_t crc) {
    return zeros[0][crc & 0xff] ^ zeros[1][(crc >> 8) & 0xff] ^ zeros[2][(crc >> 16) & 0xff] ^ zeros[3][crc >> 24];
}

void init_tables() {
    for (uint32_t n = 0; n < 256; ++n) {
        uint32_t crc = n;
        for (int k = 0; k < 8; ++k) crc = crc & 1 ? (crc >> 1) ^ kPoly : crc >> 1;
        g_table[0][n] = crc;
    }
    for (uint32_t n = 0; n < 256; ++n) {
        uint32_t crc = g_table[0][n];
        for (int k = 1; k < 8; ++k) {
            crc = g_table[0][crc & 0xff] ^ (crc >> 8);
            g_table[k][n] = crc;
        }
    }
    zeros_table(g_long, kLong);
    zeros_table(g_short, kShort);
#ifdef DSTP_X86
    __builtin_cpu_init();
    g_hw = __builtin_cpu_supports("sse4.2");
#endif
}

// Software CRC-32C on the raw (already inverted) register.
uint32_t crc_sw(uint32_t crc, const unsigned char* p, size_t len) {
    while (len && (reinterpret_cast<uintptr_t>(p) & 7)) {
        crc = g_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
        --len;
    }
    while (len >= 8) {
        uint64_t word;
        std::memcpy(&word, p, 8);
        word ^= crc;  // little-endian: the register meets the first four bytes
        crc = g_table[7][word & 0xff] ^ g_table[6][(word >> 8) & 0xff] ^ g_table[5][(word >> 16) & 0xff] ^
              g_table[4][(word >> 24) & 0xff] ^ g_table[3][(word >> 32) & 0xff] ^
              g_table[2][(word >> 40) & 0xff] ^ g_table[1][(word >> 48) & 0xff] ^ g_table[0][word >> 56];
        p += 8;
        len -= 8;
    }
    while (len--) crc = g_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc;
}

#ifdef DSTP_X86
// Three independent crc32 instruction streams (latency 3, throughput 1), combined with the
// zero-append operators: Mark Adler's layout for the crc32 instruction.
__attribute__((target("sse4.2"))) uint32_t crc_hw(uint32_t crc32, const unsigned char* next, size_t len) {
    uint64_t crc0 = crc32, crc1, crc2;
    while (len && (reinterpret_cast<uintptr_t>(next) & 7)) {
        crc0 = _mm_crc32_u8(static_cast<uint32_t>(crc0), *next++);
        --len;
    }
    auto word = [](const unsigned char* q) {
        uint64_t w;
        std::memcpy(&w, q, 8);
        return w;
    };
    while (len >= kLong * 3) {
        crc1 = crc2 = 0;
        const unsigned char* end = next + kLong;
        do {
            crc0 = _mm_crc32_u64(crc0, word(next));
            crc1 = _mm_crc32_u64(crc1, word(next + kLong));
            crc2 = _mm_crc32_u64(crc2, word(next + 2 * kLong));
            next += 8;
        } while (next < end);
        crc0 = shift(g_long, static_cast<uint32_t>(crc0)) ^ crc1;
        crc0 = shift(g_long, static_cast<uint32_t>(crc0)) ^ crc2;
        next += 2 * kLong;
        len -= 3 * kLong;
    }
    while (len >= kShort * 3) {
        crc1 = crc2 = 0;
        const unsigned char* end = next + kShort;
        do {
            crc0 = _mm_crc32_u64(crc0, word(next));
            crc1 = _mm_crc32_u64(crc1, word(next + kShort));
            crc2 = _mm_crc32_u64(crc2, word(next + 2 * kShort));
            next += 8;
        } while (next < end);
        crc0 = shift(g_short, static_cast<uint32_t>(crc0)) ^ crc1;
        crc0 = shift(g_short, static_cast<uint32_t>(crc0)) ^ crc2;
        next += 2 * kShort;
        len -= 3 * kShort;
    }
    const unsigned char* end = next + (len - (len & 7));
    while (next < end) {
        crc0 = _mm_crc32_u64(crc0, word(next));
        next += 8;
    }
    len &= 7;
    while (len--) crc0 = _mm_crc32_u8(static_cast<uint32_t>(crc0), *next++);
    return static_cast<uint32_t>(crc0);
}
#endif

// CRC-32C of `len` bytes continuing from the finished CRC `value` (as crc32c.crc32c(data, value)).
uint32_t crc32c(uint32_t value, const void* data, size_t len, bool allow_hw = true) {
    auto p = static_cast<const unsigned char*>(data);
    uint32_t reg = ~value;
#ifdef DSTP_X86
    if (g_hw && allow_hw) return ~crc_hw(reg, p, len);
#endif
    (void)allow_hw;
    return ~crc_sw(reg, p, len);
}

// ---------------------------------------------------------------------------
// Buffers and errors
// ---------------------------------------------------------------------------

// A Py_buffer taken with the GIL held, usable with it released, given back with it held.
class Buffer {
public:
    Buffer(py::handle obj, bool writable) {
        if (PyObject_GetBuffer(obj.ptr(), &view_, (writable ? PyBUF_WRITABLE : 0) | PyBUF_C_CONTIGUOUS) != 0)
            throw py::error_already_set();
    }
    ~Buffer() { PyBuffer_Release(&view_); }
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    unsigned char* data() const { return static_cast<unsigned char*>(view_.buf); }
    size_t size() const { return static_cast<size_t>(view_.len); }

private:
    Py_buffer view_{};
};

struct SysError {
    int code;
    const char* what;
};
struct EndOfStream {};

[[noreturn]] void raise_os(const SysError& e) {
    errno = e.code;
    PyErr_SetFromErrno(PyExc_OSError);
    throw py::error_already_set();
}

// Wait until `fd` is ready (a socket left non-blocking by a timeout, e.g. by Python's settimeout).
void wait_ready(int fd, short events) {
    pollfd p{fd, events, 0};
    while (poll(&p, 1, -1) < 0) {
        if (errno != EINTR) throw SysError{errno, "poll"};
    }
}

constexpr size_t kHeader = 32;
constexpr char kMagic[4] = {'D', 'S', 'T', 'P'};
constexpr uint8_t kVersion = 1;

void put_be(unsigned char* at, uint64_t value, int bytes) {
    for (int i = bytes - 1; i >= 0; --i) {
        at[i] = static_cast<unsigned char>(value & 0xff);
        value >>= 8;
    }
}

void pack_header(unsigned char* h, int kind, int stripe, uint64_t sequence, uint64_t offset, uint32_t length,
                 uint32_t checksum) {
    std::memcpy(h, kMagic, 4);
    h[4] = kVersion;
    h[5] = static_cast<unsigned char>(kind);
    put_be(h + 6, static_cast<uint64_t>(stripe), 2);
    put_be(h + 8, sequence, 8);
    put_be(h + 16, offset, 8);
    put_be(h + 24, length, 4);
    put_be(h + 28, checksum, 4);
}

// sendmsg every byte of `iov` (advanced in place as it goes).
void send_all(int fd, std::vector<iovec>& iov, int more_flag) {
    size_t first = 0;
    const size_t iov_max = static_cast<size_t>(IOV_MAX);
    while (first < iov.size()) {
        msghdr msg{};
        msg.msg_iov = iov.data() + first;
        msg.msg_iovlen = std::min(iov.size() - first, iov_max);
        ssize_t sent = sendmsg(fd, &msg, MSG_NOSIGNAL | more_flag);
        if (sent < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                wait_ready(fd, POLLOUT);
                continue;
            }
            throw SysError{errno, "sendmsg"};
        }
        size_t left = static_cast<size_t>(sent);
        while (left && first < iov.size()) {
            if (left >= iov[first].iov_len) {
                left -= iov[first].iov_len;
                ++first;
            } else {
                iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + left;
                iov[first].iov_len -= left;
                left = 0;
            }
        }
        while (first < iov.size() && iov[first].iov_len == 0) ++first;
    }
}

void sendfile_all(int sock, int file, uint64_t position, size_t length) {
    off_t pos = static_cast<off_t>(position);
    while (length) {
        ssize_t sent = sendfile(sock, file, &pos, length);
        if (sent < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                wait_ready(sock, POLLOUT);
                continue;
            }
            throw SysError{errno, "sendfile"};
        }
        if (sent == 0) throw SysError{EIO, "sendfile"};  // the file shrank under us
        length -= static_cast<size_t>(sent);
    }
}

// Receive exactly `len` bytes into `into`, folding each arrival into `crc` while it is in cache.
uint32_t recv_crc(int fd, unsigned char* into, size_t len, uint32_t crc) {
    size_t got = 0;
    while (got < len) {
        ssize_t n = recv(fd, into + got, len - got, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                wait_ready(fd, POLLIN);
                continue;
            }
            throw SysError{errno, "recv"};
        }
        if (n == 0) throw EndOfStream{};
        crc = crc32c(crc, into + got, static_cast<size_t>(n));
        got += static_cast<size_t>(n);
    }
    return crc;
}

// Runs `body` with the GIL released, translating the native failures into Python exceptions.
template <typename F>
auto nogil(F&& body) -> decltype(body()) {
    try {
        dstp_gil::ReleaseGil release;
        return body();
    } catch (const SysError& e) {
        raise_os(e);
    } catch (const EndOfStream&) {
        PyErr_SetString(PyExc_EOFError, "the connection closed in the middle of a frame");
        throw py::error_already_set();
    }
}

// ---------------------------------------------------------------------------
// Frames
// ---------------------------------------------------------------------------

// A file to sendfile() from: a descriptor of its own (dup), closed when the last Python reference
// goes -- so a sender still inside a frame never finds it closed, or reused for another file.
class FileHandle {
public:
    explicit FileHandle(int fd) : fd_(fcntl(fd, F_DUPFD_CLOEXEC, 0)) {
        if (fd_ < 0) raise_os(SysError{errno, "dup"});
    }
    ~FileHandle() { ::close(fd_); }
    FileHandle(const FileHandle&) = delete;
    FileHandle& operator=(const FileHandle&) = delete;
    int fd() const { return fd_; }

private:
    int fd_;
};

// Send one plaintext frame; return the bytes sent. With `file` the payload (one part, the bytes of
// that file at `file_position`) goes out with sendfile, the part only feeds the CRC -- unless `body_crc`
// (>= 0) already is the payload's CRC-32C: then the payload is not read at all.
size_t send_frame(int fd, int kind, int stripe, uint64_t sequence, uint64_t offset, py::sequence parts,
                  uint32_t max_payload, py::object file, uint64_t file_position, int64_t body_crc) {
    // `file` (an argument: referenced until we return) keeps its descriptor open meanwhile.
    int file_fd = file.is_none() ? -1 : file.cast<FileHandle&>().fd();
    std::vector<std::unique_ptr<Buffer>> buffers;
    buffers.reserve(py::len(parts));
    size_t length = 0;
    for (py::handle part : parts) {
        buffers.push_back(std::make_unique<Buffer>(part, false));
        length += buffers.back()->size();
    }
    if (length > max_payload) {
        throw py::value_error("frame payload of " + std::to_string(length) + " bytes exceeds " +
                              std::to_string(max_payload));
    }
    if (file_fd >= 0 && buffers.size() > 1) throw py::value_error("a file block is one part");
    return nogil([&]() -> size_t {
        unsigned char header[kHeader];
        uint32_t body = 0;
        if (body_crc >= 0)  // known already (the payload is then not read at all)
            body = static_cast<uint32_t>(body_crc);
        else
            for (auto& b : buffers) body = crc32c(body, b->data(), b->size());
        pack_header(header, kind, stripe, sequence, offset, static_cast<uint32_t>(length), 0);
        uint32_t checksum = crc32c(body, header, kHeader);
        put_be(header + 28, checksum, 4);
        std::vector<iovec> iov;
        iov.reserve(buffers.size() + 1);
        iov.push_back({header, kHeader});
        if (file_fd >= 0 && length) {
            send_all(fd, iov, MSG_MORE);
            sendfile_all(fd, file_fd, file_position, length);
        } else {
            for (auto& b : buffers)
                if (b->size()) iov.push_back({b->data(), b->size()});
            send_all(fd, iov, 0);
        }
        return kHeader + length;
    });
}

// Receive a payload into `into` (exactly its size); return (frame checksum as computed, payload CRC).
py::tuple recv_payload(int fd, py::object into, py::bytes blank) {
    Buffer target(into, true);
    std::string header = blank;
    if (header.size() != kHeader) throw py::value_error("a blank header is 32 bytes");
    auto [frame, body] = nogil([&]() {
        uint32_t b = recv_crc(fd, target.data(), target.size(), 0);
        return std::make_pair(crc32c(b, header.data(), kHeader), b);
    });
    return py::make_tuple(frame, body);
}

}  // namespace

PYBIND11_MODULE(_native, m) {
    dstp_gil::init_main_thread();
    m.doc() = "dstp's native data path: CRC-32C, frames to and from sockets, blocks into place (GIL released)";
    init_tables();
    m.attr("HEADER_BYTES") = kHeader;
    m.attr("CRC_HARDWARE") = g_hw;
    m.def(
        "crc32c",
        [](py::object data, uint32_t value, bool hardware) {
            Buffer b(data, false);
            return nogil([&] { return crc32c(value, b.data(), b.size(), hardware); });
        },
        py::arg("data"), py::arg("value") = 0, py::arg("hardware") = true,
        "Return the CRC-32C of `data` continuing from `value` (hardware=False: the table fallback).");
    m.def("send_frame", &send_frame, py::arg("fd"), py::arg("kind"), py::arg("stripe"), py::arg("sequence"),
          py::arg("offset"), py::arg("parts"), py::arg("max_payload"), py::arg("file") = py::none(),
          py::arg("file_position") = 0, py::arg("body_crc") = -1,
          "Send one plaintext frame carrying `parts` (file: a FileHandle, its bytes by sendfile; body_crc: the "
          "payload's CRC-32C when known, -1 to compute it); return bytes sent.");
    py::class_<FileHandle>(m, "FileHandle")
        .def(py::init<int>(), py::arg("fd"), "Keep a descriptor of its own of the open file `fd` (closed when collected).")
        .def_property_readonly("fd", &FileHandle::fd);
    m.def("recv_payload", &recv_payload, py::arg("fd"), py::arg("into"), py::arg("blank"),
          "Receive a payload into `into`; return (frame checksum, payload CRC-32C).");
}

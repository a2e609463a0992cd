// The kernel's floor for a file moved on TCP into tmpfs: no protocol, no checksum, no copy in user space.
//
//   splice_floor send ADDR PORT STREAMS FILE        one-shot sender: each accepted connection names its
//                                                  share (4 bytes, big-endian), which leaves by sendfile()
//   splice_floor recv ADDR PORT STREAMS SIZE OUT   the receiver: OUT pre-sized as dstp does, one thread a
//                                                  stream moving socket -> pipe -> OUT at the share's offset
//                                                  with splice(); prints {"bytes": N, "seconds": S}
//
// Share i of STREAMS is the i-th contiguous slice of the file (the last takes the remainder). On
// loopback the sender's pages travel by reference and the receiver's one copy is the pipe's pages
// into the output's page cache: the least any download to tmpfs can pay here. bench/bulk_native
// builds this with cc into a cache folder and times the receiver as a whole process.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_STREAMS 64
#define STEP (1 << 20)

static int g_streams;
static int64_t g_size;
static int g_file = -1;
static int g_conn[MAX_STREAMS];

static void die(const char *what) {
    fprintf(stderr, "splice_floor: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void share(int i, int64_t *start, int64_t *length) {
    int64_t each = g_size / g_streams;
    *start = each * i;
    *length = i == g_streams - 1 ? g_size - *start : each;
}

static struct sockaddr_in address(const char *host, const char *port) {
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(port))};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        errno = EINVAL;
        die(host);
    }
    return sa;
}

static void *send_share(void *arg) {
    int conn = g_conn[(intptr_t)arg];
    uint32_t wire;
    if (recv(conn, &wire, sizeof wire, MSG_WAITALL) != sizeof wire) die("share index");
    uint32_t index = ntohl(wire);
    if (index >= (uint32_t)g_streams) die("share index out of range");
    int64_t start, length;
    share((int)index, &start, &length);
    off_t position = (off_t)start;
    while (length > 0) {
        ssize_t sent = sendfile(conn, g_file, &position, length > STEP ? STEP : (size_t)length);
        if (sent < 0 && errno == EINTR) continue;
        if (sent <= 0) die("sendfile");
        length -= sent;
    }
    close(conn);
    return NULL;
}

static void *receive_share(void *arg) {
    int index = (int)(intptr_t)arg, conn = g_conn[index], pipe_fds[2];
    uint32_t wire = htonl((uint32_t)index);
    if (send(conn, &wire, sizeof wire, 0) != sizeof wire) die("send share index");
    if (pipe(pipe_fds) != 0) die("pipe");
    fcntl(pipe_fds[1], F_SETPIPE_SZ, STEP);  // best effort: a smaller pipe only means more calls
    int64_t start, length;
    share(index, &start, &length);
    loff_t position = start;
    while (length > 0) {
        ssize_t got = splice(conn, NULL, pipe_fds[1], NULL, length > STEP ? STEP : (size_t)length, SPLICE_F_MOVE);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) die(got == 0 ? "connection closed early" : "splice from socket");
        for (ssize_t left = got; left > 0;) {
            ssize_t put = splice(pipe_fds[0], NULL, g_file, &position, (size_t)left, SPLICE_F_MOVE);
            if (put < 0 && errno == EINTR) continue;
            if (put <= 0) die("splice into file");
            left -= put;
        }
        length -= got;
    }
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    close(conn);
    return NULL;
}

static void run_threads(void *(*body)(void *)) {
    pthread_t threads[MAX_STREAMS];
    for (intptr_t i = 0; i < g_streams; ++i)
        if (pthread_create(&threads[i], NULL, body, (void *)i) != 0) die("pthread_create");
    for (int i = 0; i < g_streams; ++i) pthread_join(threads[i], NULL);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
    int sending = argc == 6 && strcmp(argv[1], "send") == 0;
    int receiving = argc == 7 && strcmp(argv[1], "recv") == 0;
    if (!sending && !receiving) {
        fprintf(stderr, "usage: splice_floor send ADDR PORT STREAMS FILE | recv ADDR PORT STREAMS SIZE OUT\n");
        return 2;
    }
    g_streams = atoi(argv[4]);
    if (g_streams < 1 || g_streams > MAX_STREAMS) {
        fprintf(stderr, "splice_floor: STREAMS must be 1..%d\n", MAX_STREAMS);
        return 2;
    }
    struct sockaddr_in sa = address(argv[2], argv[3]);
    if (sending) {
        g_file = open(argv[5], O_RDONLY);
        struct stat st;
        if (g_file < 0 || fstat(g_file, &st) != 0) die(argv[5]);
        g_size = st.st_size;
        int listener = socket(AF_INET, SOCK_STREAM, 0), one = 1;
        setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(listener, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(listener, MAX_STREAMS) != 0)
            die("listen");
        for (int i = 0; i < g_streams; ++i)
            if ((g_conn[i] = accept(listener, NULL, NULL)) < 0) die("accept");
        close(listener);
        run_threads(send_share);
        return 0;
    }
    double started = now();
    g_size = strtoll(argv[5], NULL, 10);
    g_file = open(argv[6], O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (g_file < 0 || ftruncate(g_file, g_size) != 0) die(argv[6]);
    for (int i = 0; i < g_streams; ++i) {
        g_conn[i] = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(g_conn[i], (struct sockaddr *)&sa, sizeof sa) != 0) die("connect");
    }
    run_threads(receive_share);
    if (close(g_file) != 0) die("close");
    printf("{\"bytes\": %lld, \"seconds\": %.6f}\n", (long long)g_size, now() - started);
    return 0;
}

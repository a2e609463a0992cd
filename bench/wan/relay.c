/*
 * dstp WAN path emulator relay (C implementation).
 *
 * Moves IP packets between two TUN devices that live in two network
 * namespaces, applying per direction: random or Gilbert-Elliott loss, a rate
 * limit with a drop-tail byte queue, and a fixed one-way delay.
 *
 * Model (per direction, per packet of L IP bytes arriving at time t):
 *   1. loss:  drop with the configured probability (counted as drop_loss);
 *   2. queue: backlog = bytes still waiting for the bottleneck at t; if
 *             backlog + L > queue_bytes the packet is dropped (drop_queue);
 *   3. rate:  it leaves the bottleneck at free = max(t, free) + L*8/rate;
 *   4. delay: it is written to the other TUN at free + delay.
 * Packets wait in one FIFO ring per direction (deliver times are monotonic).
 *
 * Built by bench/wan/relay.py at `up` time:  gcc -O2 -o relay relay.c
 * Same command line and stats file format as bench/wan/pyrelay.py.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_PKT 65536
#define READ_BATCH 128
#define STATS_PERIOD_NS 250000000ULL
#define WRAP_MARK 0xFFFFFFFFu

typedef struct {
    uint64_t deliver_ns;
    uint32_t len;
    uint32_t pad;
} rec_t;

typedef struct {
    const char *name;
    int in_fd, out_fd;
    /* ring buffer of records */
    uint8_t *ring;
    size_t cap, head, tail, used; /* head: oldest record, tail: next write */
    uint64_t link_free_ns;        /* when the bottleneck finishes its backlog */
    uint64_t rng;
    int ge_bad;                   /* Gilbert-Elliott state */
    /* counters */
    uint64_t rx_packets, rx_bytes, tx_packets, tx_bytes;
    uint64_t drop_loss, drop_queue, drop_ring, drop_oversize, write_errors;
    uint64_t queued_packets, max_backlog_bytes;
    int64_t late_sum_ns, late_max_ns; /* delivery time error (write time - deliver time) */
    uint64_t late_hist[5];            /* late by <0.1, <1, <10, <100, >=100 ms */
} dir_t;

static struct {
    char *srv_ns, *cli_ns, *dev, *stats_path, *pid_path;
    double delay_s, loss, burst_len;
    double rate_bps;
    long queue_bytes, mtu;
    uint64_t seed;
} cfg = {.dev = "dstpwan0", .burst_len = 0, .queue_bytes = -1, .mtu = 1500};

static volatile sig_atomic_t g_stop, g_dump;
static uint64_t g_start_ns, g_seq;
static double g_ge_p, g_ge_r; /* Gilbert-Elliott transition probabilities */
/* Wake-up lead: ppoll oversleeps by tens of microseconds (more in a VM). We ask to wake this much
 * early (an EWMA of the measured oversleep) and deliver every packet due within the lead, so the
 * mean delivery error is ~0 and no packet is ever more than the lead early. (Delivering only exact
 * due packets would make the loop spin whenever the next one is less than the lead away.) */
static int64_t g_lead_ns;
#define MAX_LEAD_NS 200000

static void on_signal(int sig) {
    if (sig == SIGUSR1)
        g_dump = 1;
    else
        g_stop = 1;
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static double uniform(dir_t *d) { return (splitmix64(&d->rng) >> 11) * (1.0 / 9007199254740992.0); }

/* Returns 1 when the emulated link loses this packet. */
static int lose(dir_t *d) {
    if (cfg.loss <= 0) return 0;
    if (cfg.burst_len <= 0) return uniform(d) < cfg.loss;
    if (d->ge_bad) {
        if (uniform(d) < g_ge_r) d->ge_bad = 0;
    } else if (uniform(d) < g_ge_p) {
        d->ge_bad = 1;
    }
    return d->ge_bad;
}

static void die(const char *what) {
    fprintf(stderr, "relay: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void usage_fail(const char *msg) {
    fprintf(stderr, "relay: invalid configuration: %s\n", msg);
    exit(2);
}

/* Returns a TUN fd attached to device `dev` inside the namespace at `ns_path`. */
static int open_tun_in(const char *ns_path, const char *dev) {
    int nsfd = open(ns_path, O_RDONLY | O_CLOEXEC);
    if (nsfd < 0) die(ns_path);
    if (setns(nsfd, CLONE_NEWNET) < 0) die("setns");
    close(nsfd);
    int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) die("/dev/net/tun");
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
    snprintf(ifr.ifr_name, IFNAMSIZ, "%s", dev);
    if (ioctl(fd, TUNSETIFF, &ifr) < 0) die("TUNSETIFF");
    return fd;
}

static size_t rec_size(uint32_t len) { return sizeof(rec_t) + (((size_t)len + 7) & ~(size_t)7); }

/* Returns 1 if the packet was stored in the ring, 0 if the ring is full. */
static int ring_push(dir_t *d, const uint8_t *pkt, uint32_t len, uint64_t deliver) {
    size_t need = rec_size(len);
    size_t pos = d->tail;
    size_t extra = 0;
    if (pos + need > d->cap) { /* does not fit before the end: wrap */
        extra = d->cap - pos;
        pos = 0;
    }
    if (d->used + extra + need > d->cap) return 0;
    if (extra) {
        if (extra >= sizeof(uint64_t) + sizeof(uint32_t)) {
            rec_t *w = (rec_t *)(d->ring + d->tail);
            w->len = WRAP_MARK;
        }
        d->used += extra;
    }
    rec_t *r = (rec_t *)(d->ring + pos);
    r->deliver_ns = deliver;
    r->len = len;
    memcpy(d->ring + pos + sizeof(rec_t), pkt, len);
    d->tail = pos + need;
    if (d->tail == d->cap) d->tail = 0;
    d->used += need;
    d->queued_packets++;
    return 1;
}

/* Returns the oldest record (skipping a wrap gap), or NULL when empty. */
static rec_t *ring_head(dir_t *d) {
    if (d->queued_packets == 0) return NULL;
    size_t room = d->cap - d->head;
    if (room < sizeof(rec_t) || ((rec_t *)(d->ring + d->head))->len == WRAP_MARK) {
        d->used -= room;
        d->head = 0;
    }
    return (rec_t *)(d->ring + d->head);
}

static void ring_pop(dir_t *d, rec_t *r) {
    size_t sz = rec_size(r->len);
    d->head += sz;
    if (d->head == d->cap) d->head = 0;
    d->used -= sz;
    d->queued_packets--;
    if (d->queued_packets == 0) { d->head = d->tail = 0; d->used = 0; }
}

static void ingest(dir_t *d, const uint8_t *pkt, uint32_t len, uint64_t now) {
    d->rx_packets++;
    d->rx_bytes += len;
    if (len > (uint32_t)cfg.mtu) { d->drop_oversize++; return; }
    if (lose(d)) { d->drop_loss++; return; }
    uint64_t start = d->link_free_ns > now ? d->link_free_ns : now;
    uint64_t backlog = 0;
    if (cfg.rate_bps > 0) {
        backlog = (uint64_t)((double)(start - now) * cfg.rate_bps / 8e9);
        if (backlog + len > (uint64_t)cfg.queue_bytes) { d->drop_queue++; return; }
    }
    uint64_t done = start;
    if (cfg.rate_bps > 0) done += (uint64_t)((double)len * 8e9 / cfg.rate_bps);
    uint64_t deliver = done + (uint64_t)(cfg.delay_s * 1e9);
    if (!ring_push(d, pkt, len, deliver)) { d->drop_ring++; return; }
    d->link_free_ns = done;
    if (backlog + len > d->max_backlog_bytes) d->max_backlog_bytes = backlog + len;
}

/* Returns the deliver time of the next queued packet, or UINT64_MAX, after writing the packets
 * due by now + lead (see g_lead_ns). */
static uint64_t deliver_due(dir_t *d, uint64_t now, uint64_t lead) {
    for (;;) {
        rec_t *r = ring_head(d);
        if (!r) return UINT64_MAX;
        if (r->deliver_ns > now + lead) return r->deliver_ns;
        ssize_t n = write(d->out_fd, (uint8_t *)r + sizeof(rec_t), r->len);
        if (n < 0) d->write_errors++;
        else {
            int64_t late = (int64_t)(now - r->deliver_ns);
            d->tx_packets++;
            d->tx_bytes += r->len;
            d->late_sum_ns += late;
            if (late > d->late_max_ns) d->late_max_ns = late;
            d->late_hist[late < 100000 ? 0 : late < 1000000 ? 1 : late < 10000000 ? 2 : late < 100000000 ? 3 : 4]++;
        }
        ring_pop(d, r);
    }
}

static void read_batch(dir_t *d, uint8_t *buf) {
    for (int i = 0; i < READ_BATCH; i++) {
        ssize_t n = read(d->in_fd, buf, MAX_PKT);
        if (n <= 0) {
            if (n < 0 && errno != EAGAIN && errno != EINTR) die("read tun");
            return;
        }
        ingest(d, buf, (uint32_t)n, now_ns());
    }
}

static void dir_json(FILE *f, dir_t *d) {
    fprintf(f,
            "\"%s\": {\"rx_packets\": %llu, \"rx_bytes\": %llu, \"tx_packets\": %llu, "
            "\"tx_bytes\": %llu, \"drop_loss\": %llu, \"drop_queue\": %llu, \"drop_ring\": %llu, "
            "\"drop_oversize\": %llu, \"write_errors\": %llu, \"queued_packets\": %llu, "
            "\"max_backlog_bytes\": %llu, \"late_mean_us\": %.1f, \"late_max_us\": %.1f, "
            "\"late_hist_ms\": {\"<0.1\": %llu, \"<1\": %llu, \"<10\": %llu, \"<100\": %llu, \">=100\": %llu}}",
            d->name, (unsigned long long)d->rx_packets, (unsigned long long)d->rx_bytes,
            (unsigned long long)d->tx_packets, (unsigned long long)d->tx_bytes,
            (unsigned long long)d->drop_loss, (unsigned long long)d->drop_queue,
            (unsigned long long)d->drop_ring, (unsigned long long)d->drop_oversize,
            (unsigned long long)d->write_errors, (unsigned long long)d->queued_packets,
            (unsigned long long)d->max_backlog_bytes,
            d->tx_packets ? d->late_sum_ns / 1e3 / (double)d->tx_packets : 0.0, d->late_max_ns / 1e3,
            (unsigned long long)d->late_hist[0], (unsigned long long)d->late_hist[1],
            (unsigned long long)d->late_hist[2], (unsigned long long)d->late_hist[3],
            (unsigned long long)d->late_hist[4]);
}

static void write_stats(dir_t *a, dir_t *b, const char *state) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", cfg.stats_path);
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    uint64_t now = now_ns();
    fprintf(f,
            "{\"kind\": \"c\", \"pid\": %d, \"state\": \"%s\", \"seq\": %llu, \"uptime_s\": %.6f, "
            "\"cpu_user_s\": %.6f, \"cpu_sys_s\": %.6f, \"ring_bytes\": %zu, \"queue_bytes\": %ld, "
            "\"wake_lead_us\": %.1f, \"dirs\": {",
            (int)getpid(), state, (unsigned long long)++g_seq, (now - g_start_ns) / 1e9,
            ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6, ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6,
            a->cap, cfg.queue_bytes, g_lead_ns / 1e3);
    dir_json(f, a);
    fputs(", ", f);
    dir_json(f, b);
    fputs("}}\n", f);
    if (fclose(f) == 0) rename(tmp, cfg.stats_path);
}

static void parse_args(int argc, char **argv) {
    static struct option opts[] = {
        {"srv-ns", 1, 0, 'S'}, {"cli-ns", 1, 0, 'C'}, {"dev", 1, 0, 'd'},   {"delay", 1, 0, 'D'},
        {"rate", 1, 0, 'r'},   {"queue", 1, 0, 'q'},  {"loss", 1, 0, 'l'},  {"burst-len", 1, 0, 'b'},
        {"mtu", 1, 0, 'm'},    {"seed", 1, 0, 's'},   {"stats", 1, 0, 'o'}, {"pid-file", 1, 0, 'p'},
        {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'S': cfg.srv_ns = optarg; break;
        case 'C': cfg.cli_ns = optarg; break;
        case 'd': cfg.dev = optarg; break;
        case 'D': cfg.delay_s = atof(optarg); break;
        case 'r': cfg.rate_bps = atof(optarg); break;
        case 'q': cfg.queue_bytes = atol(optarg); break;
        case 'l': cfg.loss = atof(optarg); break;
        case 'b': cfg.burst_len = atof(optarg); break;
        case 'm': cfg.mtu = atol(optarg); break;
        case 's': cfg.seed = strtoull(optarg, NULL, 0); break;
        case 'o': cfg.stats_path = optarg; break;
        case 'p': cfg.pid_path = optarg; break;
        default: usage_fail("unknown option");
        }
    }
    if (!cfg.srv_ns || !cfg.cli_ns || !cfg.stats_path) usage_fail("--srv-ns, --cli-ns and --stats are required");
    if (cfg.mtu < 68 || cfg.mtu > MAX_PKT) usage_fail("--mtu must be in [68, 65536]");
    if (cfg.delay_s < 0 || cfg.delay_s > 10) usage_fail("--delay must be in [0, 10] seconds");
    if (cfg.loss < 0 || cfg.loss >= 1) usage_fail("--loss must be in [0, 1)");
    if (cfg.burst_len != 0 && cfg.burst_len < 1) usage_fail("--burst-len must be >= 1 (or 0: Bernoulli)");
    if (cfg.rate_bps < 0) usage_fail("--rate must be >= 0 (0: unlimited)");
    if (cfg.rate_bps > 0 && cfg.queue_bytes < cfg.mtu) usage_fail("--queue must hold at least one MTU-sized packet");
}

int main(int argc, char **argv) {
    parse_args(argc, argv);
    if (cfg.pid_path) {
        FILE *pf = fopen(cfg.pid_path, "w");
        if (!pf) die(cfg.pid_path);
        fprintf(pf, "%d\n", (int)getpid());
        fclose(pf);
    }
    if (cfg.burst_len > 0) { /* mean loss rate cfg.loss in bursts of mean length burst_len */
        g_ge_r = 1.0 / cfg.burst_len;
        g_ge_p = cfg.loss * g_ge_r / (1.0 - cfg.loss);
    }
    prctl(PR_SET_TIMERSLACK, 1UL);
    /* Packets waiting in one direction never exceed delay*rate + queue bytes
     * (plus record headers); size the ring for twice that, within bounds. */
    double inflight = cfg.rate_bps > 0 ? cfg.delay_s * cfg.rate_bps / 8 + cfg.queue_bytes : 64e6;
    double capd = 2 * inflight + 4e6;
    if (capd > 1e9) capd = 1e9;
    size_t cap = ((size_t)capd + 7) & ~(size_t)7;

    dir_t dirs[2];
    memset(dirs, 0, sizeof dirs);
    dirs[0].name = "srv_to_cli";
    dirs[1].name = "cli_to_srv";
    int srv_fd = open_tun_in(cfg.srv_ns, cfg.dev);
    int cli_fd = open_tun_in(cfg.cli_ns, cfg.dev);
    uint64_t seed = cfg.seed ? cfg.seed : (now_ns() ^ ((uint64_t)getpid() << 32));
    for (int i = 0; i < 2; i++) {
        dirs[i].ring = malloc(cap);
        if (!dirs[i].ring) die("malloc ring");
        dirs[i].cap = cap;
        dirs[i].rng = seed + 0x1234567ULL * (uint64_t)(i + 1);
    }
    dirs[0].in_fd = srv_fd; dirs[0].out_fd = cli_fd;
    dirs[1].in_fd = cli_fd; dirs[1].out_fd = srv_fd;

    sigset_t block, empty;
    sigemptyset(&block);
    sigaddset(&block, SIGTERM); sigaddset(&block, SIGINT); sigaddset(&block, SIGUSR1); sigaddset(&block, SIGHUP);
    sigprocmask(SIG_BLOCK, &block, NULL);
    sigemptyset(&empty);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL); sigaction(SIGINT, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL); sigaction(SIGHUP, &sa, NULL);

    static uint8_t buf[MAX_PKT];
    g_start_ns = now_ns();
    write_stats(&dirs[0], &dirs[1], "running");
    uint64_t next_stats = g_start_ns + STATS_PERIOD_NS;
    struct pollfd pfd[2] = {{srv_fd, POLLIN, 0}, {cli_fd, POLLIN, 0}};
    while (!g_stop) {
        uint64_t now = now_ns();
        uint64_t next = deliver_due(&dirs[0], now, (uint64_t)g_lead_ns);
        uint64_t n1 = deliver_due(&dirs[1], now, (uint64_t)g_lead_ns);
        if (n1 < next) next = n1;
        if (g_dump || now >= next_stats) {
            write_stats(&dirs[0], &dirs[1], "running");
            g_dump = 0;
            next_stats = now + STATS_PERIOD_NS;
        }
        int timed = next != UINT64_MAX; /* a delivery is pending: learn the oversleep */
        if (timed) next = next > (uint64_t)g_lead_ns ? next - (uint64_t)g_lead_ns : 0;
        if (next_stats < next) { next = next_stats; timed = 0; }
        struct timespec ts = {0, 0};
        if (next > now) {
            uint64_t wait = next - now;
            ts.tv_sec = (time_t)(wait / 1000000000ULL);
            ts.tv_nsec = (long)(wait % 1000000000ULL);
        } else {
            timed = 0;
        }
        int rc = ppoll(pfd, 2, &ts, &empty);
        if (rc == 0 && timed) {
            int64_t over = (int64_t)(now_ns() - next);
            if (over < 0) over = 0;
            g_lead_ns += (over - g_lead_ns) / 8;
            if (g_lead_ns > MAX_LEAD_NS) g_lead_ns = MAX_LEAD_NS;
        }
        if (rc < 0) {
            if (errno == EINTR) continue;
            die("ppoll");
        }
        if (pfd[0].revents & (POLLERR | POLLHUP | POLLNVAL)) { fprintf(stderr, "relay: server TUN gone\n"); break; }
        if (pfd[1].revents & (POLLERR | POLLHUP | POLLNVAL)) { fprintf(stderr, "relay: client TUN gone\n"); break; }
        if (pfd[0].revents & POLLIN) read_batch(&dirs[0], buf);
        if (pfd[1].revents & POLLIN) read_batch(&dirs[1], buf);
    }
    write_stats(&dirs[0], &dirs[1], "stopped");
    return 0;
}

/* A fast HTTP/1.1 load pair for bench/agent_capacity.py: a keep-alive server and an
 * open-loop (fixed-rate) client, both single-threaded epoll loops, 127.0.0.1 only.
 *
 *   httpload server PORT MAX_SECONDS
 *       Serves "200 ok" (2-byte body) to every request head on every connection until
 *       SIGTERM/SIGINT or MAX_SECONDS; prints {"event":"ready"} once listening and a JSON
 *       summary at exit.
 *   httpload load PORT RATE SECONDS CONNS
 *       Opens CONNS keep-alive connections, then for SECONDS issues requests at RATE per
 *       second (the n-th is due at t0 + n/RATE): each due request goes to an idle
 *       connection, one request in flight per connection (no pipelining); a request that
 *       finds no idle connection waits, so a slow peer lowers the achieved rate instead of
 *       piling up. After SECONDS it stops issuing and waits (at most 5 s) for the answers in
 *       flight. Prints one JSON line: issued, completed, elapsed, latency percentiles.
 *   httpload idle PORT CONNS MAX_SECONDS RATE
 *       Opens CONNS connections at RATE per second (100 at a time), one request and its
 *       response on each,
 *       prints {"event":"ready",...}, then holds them idle until a line or EOF on stdin
 *       (or MAX_SECONDS), closes them all and prints {"event":"done",...}.
 *
 * Every loop is bounded in time. Build: cc -O2 -o httpload httpload.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

#define BUF 4096
#define MAX_EVENTS 512

static volatile sig_atomic_t stop_flag = 0;
static void on_signal(int sig) { (void)sig; stop_flag = 1; }

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec * 1e-6;
}

static void raise_nofile(void) {
    struct rlimit rl = {1 << 20, 1 << 20};
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
        getrlimit(RLIMIT_NOFILE, &rl);
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

static void set_nonblock(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

static struct sockaddr_in loopback(int port) {
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

/* ---------------------------------------------------------------- server */

struct sconn { int fd; int len; char buf[BUF]; };

static const char RESPONSE[] =
    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok";

static int server(int port, double max_s) {
    raise_nofile();
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = loopback(port);
    if (bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 65535)) {
        perror("bind/listen");
        return 1;
    }
    set_nonblock(ls);
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev);
    printf("{\"event\":\"ready\",\"port\":%d}\n", port);
    fflush(stdout);
    double t0 = now_s(), c0 = cpu_s();
    long served = 0, accepted = 0, open_now = 0, max_open = 0;
    struct epoll_event evs[MAX_EVENTS];
    while (!stop_flag && now_s() - t0 < max_s) {
        int n = epoll_wait(ep, evs, MAX_EVENTS, 200);
        for (int i = 0; i < n; i++) {
            struct sconn *c = evs[i].data.ptr;
            if (c == NULL) { /* listener */
                for (int k = 0; k < 4096; k++) {
                    int fd = accept4(ls, NULL, NULL, SOCK_NONBLOCK);
                    if (fd < 0) break;
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    struct sconn *nc = calloc(1, sizeof *nc);
                    nc->fd = fd;
                    struct epoll_event e = {.events = EPOLLIN, .data.ptr = nc};
                    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e);
                    accepted++;
                    if (++open_now > max_open) max_open = open_now;
                }
                continue;
            }
            ssize_t r = read(c->fd, c->buf + c->len, BUF - 1 - c->len);
            if (r <= 0) {
                if (r < 0 && errno == EAGAIN) continue;
                close(c->fd);
                free(c);
                open_now--;
                continue;
            }
            c->len += r;
            c->buf[c->len] = 0;
            /* answer every complete request head (no bodies in this bench) */
            char *p = c->buf, *end;
            int answers = 0;
            while ((end = strstr(p, "\r\n\r\n")) != NULL) {
                answers++;
                p = end + 4;
            }
            int rest = c->len - (int)(p - c->buf);
            memmove(c->buf, p, rest);
            c->len = rest;
            if (c->len >= BUF - 1) c->len = 0; /* oversized head: drop it */
            for (int k = 0; k < answers; k++) {
                if (write(c->fd, RESPONSE, sizeof RESPONSE - 1) < 0) break;
                served++;
            }
        }
    }
    double el = now_s() - t0;
    printf("{\"event\":\"done\",\"served\":%ld,\"accepted\":%ld,\"max_open\":%ld,"
           "\"elapsed_s\":%.3f,\"cpu_s\":%.3f}\n", served, accepted, max_open, el, cpu_s() - c0);
    fflush(stdout);
    return 0;
}

/* ---------------------------------------------------------------- client */

struct cconn { int fd; int busy; int len; double sent_at; char buf[BUF]; };

/* latency histogram: 1 us buckets up to 100 ms, then one overflow bucket */
#define LAT_BUCKETS 100001
static uint32_t *lat;

static double lat_pct(long total, double q) {
    if (total == 0) return 0;
    long want = (long)(q * total), seen = 0;
    for (int i = 0; i < LAT_BUCKETS; i++) {
        seen += lat[i];
        if (seen > want) return i * 1e-3; /* ms */
    }
    return LAT_BUCKETS * 1e-3;
}

static int connect_one(int port) {
    struct sockaddr_in a = loopback(port);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    set_nonblock(fd);
    return fd;
}

static int request_len;
static char request[256];

/* Read what is there; returns 1 when a whole response (head + Content-Length body) is in. */
static int read_response(struct cconn *c) {
    ssize_t r = read(c->fd, c->buf + c->len, BUF - 1 - c->len);
    if (r <= 0) return r == 0 || errno != EAGAIN ? -1 : 0;
    c->len += r;
    c->buf[c->len] = 0;
    char *end = strstr(c->buf, "\r\n\r\n");
    if (!end) return 0;
    long body = 0;
    char *cl = strcasestr(c->buf, "content-length:");
    if (cl && cl < end) body = strtol(cl + 15, NULL, 10);
    int total = (int)(end + 4 - c->buf) + (int)body;
    if (c->len < total) return 0;
    memmove(c->buf, c->buf + total, c->len - total);
    c->len -= total;
    return 1;
}

static int load(int port, double rate, double seconds, int nconns) {
    raise_nofile();
    request_len = snprintf(request, sizeof request,
                           "GET /capacity HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                           "User-Agent: httpload/1\r\nAccept: */*\r\n\r\n", port);
    lat = calloc(LAT_BUCKETS + 1, sizeof *lat);
    struct cconn *conns = calloc(nconns, sizeof *conns);
    int *idle = malloc(nconns * sizeof *idle), nidle = 0;
    int ep = epoll_create1(0);
    for (int i = 0; i < nconns; i++) {
        conns[i].fd = connect_one(port);
        if (conns[i].fd < 0) { perror("connect"); return 1; }
        struct epoll_event e = {.events = EPOLLIN, .data.u32 = i};
        epoll_ctl(ep, EPOLL_CTL_ADD, conns[i].fd, &e);
        idle[nidle++] = i;
    }
    long total = (long)(rate * seconds), issued = 0, completed = 0, errors = 0, late = 0;
    struct epoll_event evs[MAX_EVENTS];
    double c0 = cpu_s(), t0 = now_s(), t_end = t0 + seconds, t_last = t0;
    int inflight = 0;
    while (!stop_flag) {
        double t = now_s();
        if (t >= t_end + 5.0) break; /* the drain of answers in flight is bounded too */
        if (t < t_end) {
            long due = (long)((t - t0) * rate);
            if (due > total) due = total;
            if (due - issued > nidle) late++;
            while (issued < due && nidle > 0) {
                struct cconn *c = &conns[idle[--nidle]];
                if (write(c->fd, request, request_len) != request_len) { errors++; continue; }
                c->busy = 1;
                c->sent_at = t;
                issued++;
                inflight++;
            }
        } else if (inflight == 0) {
            break;
        }
        int n = epoll_wait(ep, evs, MAX_EVENTS, 1);
        double tr = now_s();
        for (int i = 0; i < n; i++) {
            int k = evs[i].data.u32;
            struct cconn *c = &conns[k];
            int got = read_response(c);
            if (got < 0) {
                errors++;
                epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
                close(c->fd);
                if (c->busy) inflight--;
                c->busy = 0;
                c->fd = connect_one(port); /* replace it, so the rate can still be offered */
                if (c->fd >= 0) {
                    struct epoll_event e = {.events = EPOLLIN, .data.u32 = k};
                    epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &e);
                    c->len = 0;
                    idle[nidle++] = k;
                }
                continue;
            }
            if (got == 1 && c->busy) {
                long us = (long)((tr - c->sent_at) * 1e6);
                lat[us < LAT_BUCKETS ? us : LAT_BUCKETS]++;
                c->busy = 0;
                completed++;
                inflight--;
                t_last = tr;
                idle[nidle++] = k;
            }
        }
    }
    double window = (t_last > t0 ? t_last : now_s()) - t0;
    printf("{\"event\":\"done\",\"offered_rate\":%.1f,\"planned\":%ld,\"issued\":%ld,"
           "\"completed\":%ld,\"errors\":%ld,\"late_ticks\":%ld,\"window_s\":%.3f,"
           "\"rate\":%.1f,\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"cpu_s\":%.3f}\n",
           rate, total, issued, completed, errors, late, window,
           window > 0 ? completed / window : 0.0, lat_pct(completed, 0.50),
           lat_pct(completed, 0.99), cpu_s() - c0);
    fflush(stdout);
    for (int i = 0; i < nconns; i++)
        if (conns[i].fd >= 0) close(conns[i].fd);
    return 0;
}

/* ---------------------------------------------------------------- idle connections */

static int idle_conns(int port, int nconns, double max_s, double rate) {
    raise_nofile();
    request_len = snprintf(request, sizeof request,
                           "GET /idle HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                           "User-Agent: httpload/1\r\nAccept: */*\r\n\r\n", port);
    struct cconn *conns = calloc(nconns, sizeof *conns);
    int ep = epoll_create1(0);
    double t0 = now_s();
    long opened = 0, answered = 0, failed = 0;
    struct epoll_event evs[MAX_EVENTS];
    for (int base = 0; base < nconns && now_s() - t0 < max_s && !stop_flag; base += 100) {
        double due = t0 + base / rate, wait = due - now_s();
        if (wait > 0) usleep((useconds_t)(wait * 1e6));
        int batch = nconns - base < 100 ? nconns - base : 100, waiting = 0;
        for (int i = base; i < base + batch; i++) {
            conns[i].fd = connect_one(port);
            if (conns[i].fd < 0) { failed++; continue; }
            opened++;
            struct epoll_event e = {.events = EPOLLIN, .data.u32 = i};
            epoll_ctl(ep, EPOLL_CTL_ADD, conns[i].fd, &e);
            if (write(conns[i].fd, request, request_len) == request_len) {
                conns[i].busy = 1;
                waiting++;
            }
        }
        double deadline = now_s() + 10.0;
        while (waiting > 0 && now_s() < deadline && !stop_flag) {
            int n = epoll_wait(ep, evs, MAX_EVENTS, 100);
            for (int i = 0; i < n; i++) {
                struct cconn *c = &conns[evs[i].data.u32];
                int got = read_response(c);
                if (got != 0 && c->busy) {
                    c->busy = 0;
                    waiting--;
                    if (got == 1) answered++; else failed++;
                }
            }
        }
    }
    printf("{\"event\":\"ready\",\"opened\":%ld,\"answered\":%ld,\"failed\":%ld,"
           "\"open_s\":%.3f}\n", opened, answered, failed, now_s() - t0);
    fflush(stdout);
    /* hold until stdin says so (a line or EOF), bounded by max_s */
    fd_set rd;
    while (!stop_flag && now_s() - t0 < max_s) {
        FD_ZERO(&rd);
        FD_SET(0, &rd);
        struct timeval tv = {0, 200000};
        if (select(1, &rd, NULL, NULL, &tv) > 0) break;
    }
    for (int i = 0; i < nconns; i++)
        if (conns[i].fd > 0) close(conns[i].fd);
    printf("{\"event\":\"done\",\"closed\":%ld}\n", opened);
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv) {
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    if (argc == 4 && !strcmp(argv[1], "server"))
        return server(atoi(argv[2]), atof(argv[3]));
    if (argc == 6 && !strcmp(argv[1], "load"))
        return load(atoi(argv[2]), atof(argv[3]), atof(argv[4]), atoi(argv[5]));
    if (argc == 6 && !strcmp(argv[1], "idle") && atof(argv[5]) > 0)
        return idle_conns(atoi(argv[2]), atoi(argv[3]), atof(argv[4]), atof(argv[5]));
    fprintf(stderr, "usage: httpload server PORT MAX_S | load PORT RATE SECONDS CONNS | "
                    "idle PORT CONNS MAX_S RATE\n");
    return 2;
}

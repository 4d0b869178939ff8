/* tent_tcp_stream: the raw TCP ceiling of a set of paths, measured with
 * plain sockets, for scripts/rails_bench.sh to print the engine's figures
 * against.
 *
 *   tent_tcp_stream serve <host> <port>
 *   tent_tcp_stream run [--prio P] <seconds> <write|read> <paths>
 *   tent_tcp_stream run [--prio P] [--bytes B] [--gap-us U] <seconds> ping
 *       <paths>
 * A path is <src>=<dst>:<port>[/<rate>].  write/read runs one stream per
 * path at once; ping is the latency reference of the engine's HIGH stream.
 * Every case measures after one second of warm-up (slow start, tbf's
 * burst).  Options and output: docs/tebench.md (tent_tcp_stream).
 *
 * The first byte a client sends says what it wants ('w': it writes, the
 * server reads; 'r': the server writes; 'p': the server answers each 4-byte
 * request, the answer's length in network order, with that many bytes). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BUF       (1u << 20)
#define MAX_PINGS (1u << 20)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int resolve(const char *host, const char *port, int passive,
                   struct addrinfo **out)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
                             .ai_flags = passive ? AI_PASSIVE : 0};
    int rc = getaddrinfo(host, port, &hints, out);
    if (rc)
        fprintf(stderr, "tent_tcp_stream: %s:%s: %s\n", host, port ? port : "",
                gai_strerror(rc));
    return rc ? -1 : 0;
}

static void *serve_one(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char *buf = malloc(BUF);
    char mode;
    if (buf && recv(fd, &mode, 1, MSG_WAITALL) == 1) {
        memset(buf, 0x5a, BUF);
        while (mode == 'p') {
            uint32_t want;
            if (recv(fd, &want, sizeof(want), MSG_WAITALL) != sizeof(want))
                break;
            want = ntohl(want);
            if (want > BUF ||
                send(fd, buf, want, MSG_NOSIGNAL) != (ssize_t)want)
                break;
        }
        while (mode != 'p') {
            ssize_t r = mode == 'r' ? send(fd, buf, BUF, MSG_NOSIGNAL)
                                    : recv(fd, buf, BUF, 0);
            if (r <= 0)
                break;
        }
    }
    free(buf);
    close(fd);
    return NULL;
}

static int serve(const char *host, const char *port)
{
    struct addrinfo *ai;
    if (resolve(host, port, 1, &ai))
        return 1;
    int ls = socket(ai->ai_family, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (ls < 0 || bind(ls, ai->ai_addr, ai->ai_addrlen) || listen(ls, 64)) {
        fprintf(stderr, "tent_tcp_stream: listen on %s:%s: %s\n", host, port,
                strerror(errno));
        return 1;
    }
    freeaddrinfo(ai);
    printf("serving %s:%s\n", host, port);
    fflush(stdout);
    for (;;) {
        int fd = accept(ls, NULL, NULL);
        if (fd < 0) {
            if (errno == EINTR)
                continue;
            return 1;
        }
        pthread_t th;
        if (pthread_create(&th, NULL, serve_one, (void *)(intptr_t)fd) == 0)
            pthread_detach(th);
        else
            close(fd);
    }
}

struct stream {
    char spec[160];
    char src[64], dst[64], port[8];
    char mode;
    int prio;
    unsigned long pace; /* SO_MAX_PACING_RATE, 0: none */
    double seconds;
    double gbps;
    int fd;
    int err;
};

/* Connects s->fd along the path and says what it wants; 0 or -1. */
static int stream_open(struct stream *s)
{
    struct addrinfo *ai;
    s->fd = -1;
    if (resolve(s->dst, s->port, 0, &ai))
        return -1;
    int fd = socket(ai->ai_family, SOCK_STREAM, 0);
    if (fd >= 0 && strcmp(s->src, "-") != 0) {
        struct addrinfo *la;
        if (resolve(s->src, NULL, 1, &la) == 0) {
            if (bind(fd, la->ai_addr, la->ai_addrlen))
                fprintf(stderr, "tent_tcp_stream: bind %s: %s\n", s->src,
                        strerror(errno));
            freeaddrinfo(la);
        }
    }
    /* --prio is the client's only: the server's answers keep 0, as the
     * engine's target's do.  A /<rate> paces the path as the engine paces
     * LOW under HIGH. */
    if (fd >= 0 && s->prio &&
        setsockopt(fd, SOL_SOCKET, SO_PRIORITY, &s->prio, sizeof(s->prio)))
        fprintf(stderr, "tent_tcp_stream: SO_PRIORITY %d: %s\n", s->prio,
                strerror(errno));
    if (fd >= 0 && s->pace &&
        setsockopt(fd, SOL_SOCKET, SO_MAX_PACING_RATE, &s->pace,
                   sizeof(s->pace)))
        fprintf(stderr, "tent_tcp_stream: SO_MAX_PACING_RATE %lu: %s\n",
                s->pace, strerror(errno));
    int one = 1;
    if (fd >= 0 && s->mode == 'p')
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) ||
        send(fd, &s->mode, 1, MSG_NOSIGNAL) != 1) {
        fprintf(stderr, "tent_tcp_stream: connect %s: %s\n", s->spec,
                strerror(errno));
        freeaddrinfo(ai);
        if (fd >= 0)
            close(fd);
        return -1;
    }
    freeaddrinfo(ai);
    s->fd = fd;
    return 0;
}

static void *run_one(void *arg)
{
    struct stream *s = arg;
    char *buf = calloc(1, BUF);
    if (!buf || stream_open(s)) {
        s->err = 1;
        free(buf);
        return NULL;
    }
    double t0 = now_s(), start = 0, end = t0 + 1.0 + s->seconds;
    unsigned long long bytes = 0;
    for (;;) {
        double t = now_s();
        if (!start && t >= t0 + 1.0) {
            start = t;
            bytes = 0;
        }
        if (t >= end)
            break;
        ssize_t r = s->mode == 'w' ? send(s->fd, buf, BUF, MSG_NOSIGNAL)
                                   : recv(s->fd, buf, BUF, 0);
        if (r <= 0) {
            s->err = 1;
            break;
        }
        bytes += (unsigned long long)r;
    }
    double el = now_s() - start;
    s->gbps = start && el > 0 ? (double)bytes / el / 1e9 : 0;
    free(buf);
    close(s->fd);
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One request at a time, gap_us apart, to each of the n paths in turn. */
static int run_ping(struct stream *ss, int n, uint32_t bytes, long gap_us)
{
    for (int i = 0; i < n; i++)
        if (stream_open(&ss[i]))
            return 1;
    double *lat = malloc(MAX_PINGS * sizeof(*lat));
    char *buf = malloc(BUF);
    if (!lat || !buf)
        return 1;
    size_t nlat = 0;
    int err = 0;
    double t0 = now_s(), end = t0 + 1.0 + ss[0].seconds;
    for (unsigned k = 0; !err; k++) {
        struct stream *s = &ss[k % (unsigned)n];
        struct timespec gap = {gap_us / 1000000, gap_us % 1000000 * 1000};
        nanosleep(&gap, NULL);
        double t = now_s();
        if (t >= end)
            break;
        uint32_t want = htonl(bytes);
        if (send(s->fd, &want, sizeof(want), MSG_NOSIGNAL) != sizeof(want)) {
            err = 1;
            break;
        }
        for (uint32_t got = 0; got < bytes;) {
            ssize_t r = recv(s->fd, buf + got, bytes - got, MSG_DONTWAIT);
            if (r > 0)
                got += (uint32_t)r;
            else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
                err = 1;
                break;
            } else
                sched_yield(); /* as tent_rails_tool's latency stream waits */
        }
        if (t >= t0 + 1.0 && nlat < MAX_PINGS)
            lat[nlat++] = (now_s() - t) * 1e6;
    }
    for (int i = 0; i < n; i++)
        close(ss[i].fd);
    if (err)
        fprintf(stderr, "tent_tcp_stream: ping: the connection failed\n");
    qsort(lat, nlat, sizeof(*lat), cmp_double);
    printf("latency n=%zu p50_us=%.0f p99_us=%.0f\n", nlat,
           nlat ? lat[nlat / 2] : 0, nlat ? lat[nlat * 99 / 100] : 0);
    free(lat);
    free(buf);
    return err;
}

static int usage(void)
{
    fprintf(stderr,
            "usage: tent_tcp_stream serve <host> <port>\n"
            "       tent_tcp_stream run [--prio P] <seconds> <write|read> "
            "<src>=<dst>:<port>[/<rate>] ...\n"
            "       tent_tcp_stream run [--prio P] [--bytes B] [--gap-us U] "
            "<seconds> ping <src>=<dst>:<port> ...\n");
    return 2;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    if (argc == 4 && strcmp(argv[1], "serve") == 0)
        return serve(argv[2], argv[3]);
    if (argc < 2 || strcmp(argv[1], "run") != 0)
        return usage();
    int prio = 0, a = 2;
    long bytes = 4096, gap_us = 1000;
    for (; a + 1 < argc && strncmp(argv[a], "--", 2) == 0; a += 2) {
        long v = atol(argv[a + 1]);
        if (strcmp(argv[a], "--prio") == 0 && v >= 0 && v <= 6)
            prio = (int)v;
        else if (strcmp(argv[a], "--bytes") == 0 && v > 0 && v <= (long)BUF)
            bytes = v;
        else if (strcmp(argv[a], "--gap-us") == 0 && v >= 0)
            gap_us = v;
        else
            return usage();
    }
    if (argc - a < 3 ||
        (strcmp(argv[a + 1], "write") && strcmp(argv[a + 1], "read") &&
         strcmp(argv[a + 1], "ping")))
        return usage();
    int n = argc - a - 2;
    struct stream *ss = calloc((size_t)n, sizeof(*ss));
    pthread_t *th = calloc((size_t)n, sizeof(*th));
    if (!ss || !th)
        return 1;
    for (int i = 0; i < n; i++) {
        struct stream *s = &ss[i];
        snprintf(s->spec, sizeof(s->spec), "%s", argv[a + 2 + i]);
        char *slash = strchr(s->spec, '/');
        if (slash) {
            s->pace = strtoul(slash + 1, NULL, 10);
            *slash = 0;
        }
        char *eq = strchr(s->spec, '='), *colon = strrchr(s->spec, ':');
        if (!eq || !colon || colon < eq) {
            fprintf(stderr, "tent_tcp_stream: '%s' is not src=dst:port\n",
                    s->spec);
            return 2;
        }
        snprintf(s->src, sizeof(s->src), "%.*s", (int)(eq - s->spec), s->spec);
        snprintf(s->dst, sizeof(s->dst), "%.*s", (int)(colon - eq - 1), eq + 1);
        snprintf(s->port, sizeof(s->port), "%s", colon + 1);
        s->mode = argv[a + 1][0];
        s->prio = prio;
        s->seconds = atof(argv[a]);
    }
    int err = 0;
    if (ss[0].mode == 'p') {
        err = run_ping(ss, n, (uint32_t)bytes, gap_us);
    } else {
        for (int i = 0; i < n; i++)
            pthread_create(&th[i], NULL, run_one, &ss[i]);
        double total = 0;
        for (int i = 0; i < n; i++) {
            pthread_join(th[i], NULL);
            printf("%s %.4f\n", ss[i].spec, ss[i].gbps);
            total += ss[i].gbps;
            err |= ss[i].err;
        }
        printf("total %.4f\n", total);
    }
    free(ss);
    free(th);
    return err;
}

/* tent_tcp_stream: the raw TCP ceiling of a set of paths, measured with
 * plain sockets, for the rail benchmark (scripts/rails_bench.sh) to print
 * the engine's figures against.
 *
 *   tent_tcp_stream serve <host> <port>
 *       accepts connections and discards (or, for "read" clients, sends)
 *       bytes until killed;
 *   tent_tcp_stream run <seconds> <write|read> <src>=<dst>:<port> ...
 *       one stream per path at once (src: the local address to bind,
 *       "-" for the kernel's choice), 1 MiB send/recv calls; prints
 *       "<path> <GB/s>" per path and "total <GB/s>" (GB = 1e9 bytes).
 *
 * The first byte a client sends says what it wants ('w': it writes, the
 * server reads; 'r': the server writes). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BUF (1u << 20)

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
        for (;;) {
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
    double seconds;
    double gbps;
    int err;
};

static void *run_one(void *arg)
{
    struct stream *s = arg;
    struct addrinfo *ai;
    if (resolve(s->dst, s->port, 0, &ai)) {
        s->err = 1;
        return NULL;
    }
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
    if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen)) {
        fprintf(stderr, "tent_tcp_stream: connect %s: %s\n", s->spec,
                strerror(errno));
        freeaddrinfo(ai);
        s->err = 1;
        return NULL;
    }
    freeaddrinfo(ai);
    char *buf = calloc(1, BUF);
    if (!buf || send(fd, &s->mode, 1, MSG_NOSIGNAL) != 1) {
        s->err = 1;
        free(buf);
        close(fd);
        return NULL;
    }
    /* a second of warm-up (slow start, tbf's burst), then the measurement */
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
        ssize_t r = s->mode == 'w' ? send(fd, buf, BUF, MSG_NOSIGNAL)
                                   : recv(fd, buf, BUF, 0);
        if (r <= 0) {
            s->err = 1;
            break;
        }
        bytes += (unsigned long long)r;
    }
    double el = now_s() - start;
    s->gbps = start && el > 0 ? (double)bytes / el / 1e9 : 0;
    free(buf);
    close(fd);
    return NULL;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    if (argc == 4 && strcmp(argv[1], "serve") == 0)
        return serve(argv[2], argv[3]);
    if (argc < 5 || strcmp(argv[1], "run") != 0 ||
        (strcmp(argv[3], "write") && strcmp(argv[3], "read"))) {
        fprintf(stderr, "usage: tent_tcp_stream serve <host> <port>\n"
                        "       tent_tcp_stream run <seconds> <write|read> "
                        "<src>=<dst>:<port> ...\n");
        return 2;
    }
    int n = argc - 4;
    struct stream *ss = calloc((size_t)n, sizeof(*ss));
    pthread_t *th = calloc((size_t)n, sizeof(*th));
    if (!ss || !th)
        return 1;
    for (int i = 0; i < n; i++) {
        struct stream *s = &ss[i];
        snprintf(s->spec, sizeof(s->spec), "%s", argv[4 + i]);
        char *eq = strchr(s->spec, '='), *colon = strrchr(s->spec, ':');
        if (!eq || !colon || colon < eq) {
            fprintf(stderr, "tent_tcp_stream: '%s' is not src=dst:port\n",
                    s->spec);
            return 2;
        }
        snprintf(s->src, sizeof(s->src), "%.*s", (int)(eq - s->spec), s->spec);
        snprintf(s->dst, sizeof(s->dst), "%.*s", (int)(colon - eq - 1), eq + 1);
        snprintf(s->port, sizeof(s->port), "%s", colon + 1);
        s->mode = argv[3][0];
        s->seconds = atof(argv[2]);
        pthread_create(&th[i], NULL, run_one, s);
    }
    double total = 0;
    int err = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        printf("%s %.4f\n", ss[i].spec, ss[i].gbps);
        total += ss[i].gbps;
        err |= ss[i].err;
    }
    printf("total %.4f\n", total);
    free(ss);
    free(th);
    return err;
}

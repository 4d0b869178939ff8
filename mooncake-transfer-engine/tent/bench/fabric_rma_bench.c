/* fabric_rma_bench: the raw libfabric RMA ceiling.
 *
 * Two processes: a target that registers a buffer and drives its CQ (so a
 * provider with manual progress serves the peer's RMA), and an initiator
 * that posts fi_write / fi_read against it.  The endpoint addresses, the MR
 * key and the remote base go over a plain TCP socket (out of band).  With
 * --role both (the default) the program forks the target itself on
 * 127.0.0.1.
 *
 *   bandwidth: --mode bw --op write|read --size B --window W --seconds S
 *   latency:   --mode lat --op read --size B --iters N  (batch 1: avg, p99)
 *
 * One line per run (and --json for one JSON object).  Exit 77 when the
 * provider has no RMA-capable RDM endpoint here. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define EXIT_SKIP 77
#define MAX_ADDR  256
#define CQ_BATCH  64

struct opts {
    const char *provider;
    const char *role; /* both, target, initiator */
    const char *host;
    int port;
    bool lat;
    bool read;
    size_t size;
    int window;
    double seconds;
    long iters;
    bool json;
    bool spin;      /* the target polls its CQ instead of sleeping */
    bool busy_poll; /* the initiator polls with a full window, too */
};

struct fab {
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_cq *cq;
    struct fid_av *av;
    struct fid_ep *ep;
    struct fid_mr *mr;
    void *desc;
    char *buf;
    size_t len;
    uint64_t key;
    uint64_t base; /* what a peer names offset 0 of buf with */
    fi_addr_t peer;
    bool waits; /* the CQ has a wait object (fi_cq_sread) */
};

/* What the target tells the initiator, and the initiator the target. */
struct oob_msg {
    uint64_t key;
    uint64_t base;
    uint64_t len;
    uint32_t addrlen;
    uint8_t addr[MAX_ADDR];
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void die_fi(const char *what, int rc)
{
    fprintf(stderr, "fabric_rma_bench: %s: %s (%d)\n", what, fi_strerror(-rc),
            rc);
    exit(1);
}

/* ---- out-of-band socket -------------------------------------------------- */

static int full_io(int fd, void *p, size_t n, bool wr)
{
    char *c = p;
    while (n) {
        ssize_t r = wr ? send(fd, c, n, MSG_NOSIGNAL) : recv(fd, c, n, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        c += r;
        n -= (size_t)r;
    }
    return 0;
}

static int listen_on(const char *host, int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1 ||
        bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fd, 1)) {
        perror("fabric_rma_bench: listen");
        exit(1);
    }
    return fd;
}

static int connect_to(const char *host, int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        fprintf(stderr, "fabric_rma_bench: bad host %s\n", host);
        exit(1);
    }
    for (int tries = 0; tries < 100; tries++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
            return fd;
        close(fd);
        usleep(50000);
    }
    perror("fabric_rma_bench: connect");
    exit(1);
}

/* ---- libfabric setup ------------------------------------------------------
 */

/* 0, or EXIT_SKIP when the provider offers no RMA RDM endpoint. */
static int fab_open(struct fab *f, const char *provider, size_t len)
{
    struct fi_info *hints = fi_allocinfo();
    hints->caps =
        FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
    hints->ep_attr->type = FI_EP_RDM;
    hints->mode = FI_CONTEXT;
    /* Every mode we know how to honour; the provider keeps the ones it
     * needs in info->domain_attr->mr_mode. */
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR |
                                  FI_MR_ALLOCATED | FI_MR_PROV_KEY |
                                  FI_MR_ENDPOINT;
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    hints->fabric_attr->prov_name = strdup(provider);
    int rc = fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, hints, &f->info);
    fi_freeinfo(hints);
    if (rc) {
        fprintf(stderr, "fabric_rma_bench: provider %s: fi_getinfo: %s\n",
                provider, fi_strerror(-rc));
        return EXIT_SKIP;
    }
    struct fi_info *i = f->info;
    if ((rc = fi_fabric(i->fabric_attr, &f->fabric, NULL)))
        die_fi("fi_fabric", rc);
    if ((rc = fi_domain(f->fabric, i, &f->domain, NULL)))
        die_fi("fi_domain", rc);
    /* The target sleeps in the CQ's wait object where the provider's wait
     * sees a peer's RMA (not shm's): a spinning target would take a core
     * from the initiator on a small machine. */
    struct fi_cq_attr cqa = {.format = FI_CQ_FORMAT_CONTEXT,
                             .wait_obj = FI_WAIT_UNSPEC};
    f->waits = strcmp(i->fabric_attr->prov_name, "shm") != 0;
    if (!f->waits || fi_cq_open(f->domain, &cqa, &f->cq, NULL)) {
        f->waits = false;
        cqa.wait_obj = FI_WAIT_NONE;
        if ((rc = fi_cq_open(f->domain, &cqa, &f->cq, NULL)))
            die_fi("fi_cq_open", rc);
    }
    struct fi_av_attr ava = {.type = FI_AV_TABLE};
    if ((rc = fi_av_open(f->domain, &ava, &f->av, NULL)))
        die_fi("fi_av_open", rc);
    if ((rc = fi_endpoint(f->domain, i, &f->ep, NULL)))
        die_fi("fi_endpoint", rc);
    if ((rc = fi_ep_bind(f->ep, &f->cq->fid, FI_TRANSMIT | FI_RECV)))
        die_fi("fi_ep_bind(cq)", rc);
    if ((rc = fi_ep_bind(f->ep, &f->av->fid, 0)))
        die_fi("fi_ep_bind(av)", rc);
    if ((rc = fi_enable(f->ep)))
        die_fi("fi_enable", rc);

    /* Page-aligned memory of our own: FI_MR_ALLOCATED holds. */
    f->len = len;
    if (posix_memalign((void **)&f->buf, 4096, len)) {
        fprintf(stderr, "fabric_rma_bench: out of memory (%zu)\n", len);
        exit(1);
    }
    memset(f->buf, 0x5a, len);
    uint64_t mm = i->domain_attr->mr_mode;
    uint64_t access = FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
    /* Without FI_MR_PROV_KEY the key is ours to choose. */
    if ((rc = fi_mr_reg(f->domain, f->buf, len, access, 0, 1, 0, &f->mr, NULL)))
        die_fi("fi_mr_reg", rc);
    if (mm & FI_MR_ENDPOINT) {
        if ((rc = fi_mr_bind(f->mr, &f->ep->fid, 0)))
            die_fi("fi_mr_bind", rc);
        if ((rc = fi_mr_enable(f->mr)))
            die_fi("fi_mr_enable", rc);
    }
    f->desc = fi_mr_desc(f->mr);
    f->key = fi_mr_key(f->mr);
    f->base = (mm & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)f->buf : 0;
    return 0;
}

static void fab_close(struct fab *f)
{
    fi_close(&f->mr->fid);
    fi_close(&f->ep->fid);
    fi_close(&f->av->fid);
    fi_close(&f->cq->fid);
    fi_close(&f->domain->fid);
    fi_close(&f->fabric->fid);
    fi_freeinfo(f->info);
    free(f->buf);
}

static void fab_msg(struct fab *f, struct oob_msg *m)
{
    memset(m, 0, sizeof(*m));
    size_t alen = MAX_ADDR;
    int rc = fi_getname(&f->ep->fid, m->addr, &alen);
    if (rc)
        die_fi("fi_getname", rc);
    m->addrlen = (uint32_t)alen;
    m->key = f->key;
    m->base = f->base;
    m->len = f->len;
}

static void fab_insert(struct fab *f, const struct oob_msg *m)
{
    int rc = fi_av_insert(f->av, m->addr, 1, &f->peer, 0, NULL);
    if (rc != 1)
        die_fi("fi_av_insert", rc < 0 ? rc : -FI_EINVAL);
}

/* Reads completions (waiting up to 1 ms if wait); returns how many, exits
 * on a CQ error. */
static int cq_poll(struct fab *f, bool wait)
{
    struct fi_cq_entry ent[CQ_BATCH];
    ssize_t n = wait && f->waits ? fi_cq_sread(f->cq, ent, CQ_BATCH, NULL, 1)
                                 : fi_cq_read(f->cq, ent, CQ_BATCH);
    if (n > 0)
        return (int)n;
    if (n == -FI_EAGAIN || n == -FI_ETIMEDOUT)
        return 0;
    if (n == -FI_EAVAIL) {
        struct fi_cq_err_entry e = {0};
        fi_cq_readerr(f->cq, &e, 0);
        fprintf(stderr, "fabric_rma_bench: CQ error %d (%s), provider %d: %s\n",
                e.err, fi_strerror(e.err), e.prov_errno,
                fi_cq_strerror(f->cq, e.prov_errno, e.err_data, NULL, 0));
        exit(1);
    }
    die_fi("fi_cq_read", (int)n);
    return 0;
}

static int cq_drain(struct fab *f)
{
    return cq_poll(f, false);
}

/* ---- the two roles --------------------------------------------------------
 */

/* Serves until the initiator says it is done (or goes away). */
static int run_target(const struct opts *o, int lfd)
{
    struct fab f = {0};
    int rc = fab_open(&f, o->provider, o->size * (size_t)o->window);
    int fd = accept(lfd, NULL, NULL);
    close(lfd);
    if (fd < 0) {
        perror("fabric_rma_bench: accept");
        return 1;
    }
    uint8_t ok = rc == 0;
    if (full_io(fd, &ok, 1, true) || !ok) {
        close(fd);
        return rc;
    }
    struct oob_msg mine, theirs;
    fab_msg(&f, &mine);
    if (full_io(fd, &mine, sizeof(mine), true) ||
        full_io(fd, &theirs, sizeof(theirs), false))
        return 1;
    fab_insert(&f, &theirs);
    /* Drive progress until the initiator closes or writes its byte. */
    for (unsigned k = 0;; k++) {
        cq_poll(&f, !o->spin);
        if (!f.waits && !o->spin) {
            /* as the engine's transport does on an idle target */
            struct timespec ts = {0, 50000};
            nanosleep(&ts, NULL);
        }
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 0) > 0)
            break;
    }
    close(fd);
    fab_close(&f);
    return 0;
}

/* Posts one op, progressing through FI_EAGAIN; returns completions seen. */
static int post(struct fab *f, const struct oob_msg *t, bool rd, size_t off,
                size_t size, struct fi_context *ctx)
{
    int seen = 0;
    for (;;) {
        ssize_t rc = rd ? fi_read(f->ep, f->buf + off, size, f->desc, f->peer,
                                  t->base + off, t->key, ctx)
                        : fi_write(f->ep, f->buf + off, size, f->desc, f->peer,
                                   t->base + off, t->key, ctx);
        if (rc == 0)
            return seen;
        if (rc != -FI_EAGAIN)
            die_fi(rd ? "fi_read" : "fi_write", (int)rc);
        seen += cq_drain(f);
    }
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int run_initiator(const struct opts *o, int fd)
{
    uint8_t ok = 0;
    if (full_io(fd, &ok, 1, false)) {
        fprintf(stderr, "fabric_rma_bench: target went away\n");
        return 1;
    }
    if (!ok) {
        fprintf(stderr, "fabric_rma_bench: provider %s unavailable\n",
                o->provider);
        return EXIT_SKIP;
    }
    struct fab f = {0};
    if (fab_open(&f, o->provider, o->size * (size_t)o->window))
        return EXIT_SKIP;
    struct oob_msg mine, t;
    fab_msg(&f, &mine);
    if (full_io(fd, &t, sizeof(t), false) ||
        full_io(fd, &mine, sizeof(mine), true))
        return 1;
    fab_insert(&f, &t);
    if (t.len < o->size * (size_t)o->window) {
        fprintf(stderr, "fabric_rma_bench: target buffer too small\n");
        return 1;
    }
    struct fi_context *ctx = calloc((size_t)o->window, sizeof(*ctx));
    const char *opname = o->read ? "read" : "write";
    double gbps = 0, avg_us = 0, p50_us = 0, p99_us = 0, secs = 0;
    uint64_t ops = 0;

    if (!o->lat) {
        /* Warm-up: one round so connection setup is not measured. */
        for (int w = 0; w < o->window; w++)
            post(&f, &t, o->read, (size_t)w * o->size, o->size, &ctx[w]);
        for (int done = 0; done < o->window;)
            done += cq_drain(&f);
        uint64_t t0 = now_ns(), end = t0 + (uint64_t)(o->seconds * 1e9);
        int inflight = 0;
        uint64_t posted = 0;
        for (;;) {
            uint64_t now = now_ns();
            bool more = now < end;
            while (more && inflight < o->window) {
                size_t off = (size_t)(posted % (uint64_t)o->window) * o->size;
                int got = post(&f, &t, o->read, off, o->size,
                               &ctx[posted % (uint64_t)o->window]);
                inflight += 1 - got;
                ops += (uint64_t)got;
                posted++;
            }
            if (!more && inflight == 0)
                break;
            /* a full window waits in the CQ rather than spinning */
            int got = cq_poll(&f, inflight == o->window && !o->busy_poll);
            inflight -= got;
            ops += (uint64_t)got;
        }
        secs = (double)(now_ns() - t0) / 1e9;
        gbps = (double)ops * (double)o->size / secs / 1e9;
    } else {
        uint64_t *lat = calloc((size_t)o->iters, sizeof(*lat));
        for (long w = 0; w < 100; w++) { /* warm-up */
            post(&f, &t, o->read, 0, o->size, &ctx[0]);
            while (!cq_drain(&f))
                ;
        }
        uint64_t sum = 0, t0 = now_ns();
        for (long k = 0; k < o->iters; k++) {
            uint64_t s = now_ns();
            int got = post(&f, &t, o->read, 0, o->size, &ctx[0]);
            while (!got)
                got = cq_drain(&f);
            lat[k] = now_ns() - s;
            sum += lat[k];
        }
        secs = (double)(now_ns() - t0) / 1e9;
        ops = (uint64_t)o->iters;
        qsort(lat, (size_t)o->iters, sizeof(*lat), cmp_u64);
        avg_us = (double)sum / (double)o->iters / 1e3;
        p50_us = (double)lat[(size_t)(o->iters - 1) / 2] / 1e3;
        p99_us = (double)lat[(size_t)((double)(o->iters - 1) * 0.99)] / 1e3;
        gbps = (double)ops * (double)o->size / secs / 1e9;
        free(lat);
    }
    uint8_t bye = 1;
    full_io(fd, &bye, 1, true);
    close(fd);

    uint64_t bytes = ops * (uint64_t)o->size;
    const char *prov = f.info->fabric_attr->prov_name;
    if (o->json)
        printf("{\"provider\":\"%s\",\"mode\":\"%s\",\"op\":\"%s\","
               "\"size\":%zu,\"window\":%d,\"seconds\":%.3f,\"ops\":%llu,"
               "\"bytes\":%llu,\"gb_per_s\":%.3f,\"avg_us\":%.2f,"
               "\"p50_us\":%.2f,\"p99_us\":%.2f,\"mr_mode\":\"0x%llx\"}\n",
               prov, o->lat ? "lat" : "bw", opname, o->size,
               o->lat ? 1 : o->window, secs, (unsigned long long)ops,
               (unsigned long long)bytes, gbps, avg_us, p50_us, p99_us,
               (unsigned long long)f.info->domain_attr->mr_mode);
    else if (o->lat)
        printf("fabric %s %s %zu B batch 1: avg %.2f us p50 %.2f us p99 %.2f "
               "us (%llu ops, %llu bytes)\n",
               prov, opname, o->size, avg_us, p50_us, p99_us,
               (unsigned long long)ops, (unsigned long long)bytes);
    else
        printf("fabric %s %s %zu B x %d: %.3f GB/s (%llu ops, %llu bytes in "
               "%.2f s)\n",
               prov, opname, o->size, o->window, gbps, (unsigned long long)ops,
               (unsigned long long)bytes, secs);
    free(ctx);
    fab_close(&f);
    return bytes > 0 ? 0 : 1;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: fabric_rma_bench [--provider P] [--role both|target|"
            "initiator]\n"
            "         [--host H] [--port N] [--mode bw|lat] [--op write|read]\n"
            "         [--size B] [--window W] [--seconds S] [--iters N] "
            "[--json]\n"
            "         [--spin]   (the target polls its CQ; default: it sleeps\n"
            "                     in the CQ's wait object)\n"
            "         [--busy-poll] (the initiator polls its CQ with a full\n"
            "                     window too, as a caller spinning on status\n"
            "                     does; default: it waits in the CQ then)\n");
    exit(2);
}

static size_t parse_size(const char *s)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end == 'k' || *end == 'K')
        v <<= 10, end++;
    else if (*end == 'm' || *end == 'M')
        v <<= 20, end++;
    if (*end || v == 0)
        usage();
    return (size_t)v;
}

int main(int argc, char **argv)
{
    struct opts o = {.provider = "tcp;ofi_rxm",
                     .role = "both",
                     .host = "127.0.0.1",
                     .size = 1 << 20,
                     .window = 32,
                     .seconds = 2,
                     .iters = 10000};
    static const struct option lo[] = {
        {"provider", 1, 0, 'p'},  {"role", 1, 0, 'r'},   {"host", 1, 0, 'H'},
        {"port", 1, 0, 'P'},      {"mode", 1, 0, 'm'},   {"op", 1, 0, 'o'},
        {"size", 1, 0, 's'},      {"window", 1, 0, 'w'}, {"seconds", 1, 0, 'd'},
        {"iters", 1, 0, 'n'},     {"json", 0, 0, 'j'},   {"spin", 0, 0, 'S'},
        {"busy-poll", 0, 0, 'B'}, {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (c) {
        case 'p':
            o.provider = optarg;
            break;
        case 'r':
            o.role = optarg;
            break;
        case 'H':
            o.host = optarg;
            break;
        case 'P':
            o.port = atoi(optarg);
            break;
        case 'm':
            if (strcmp(optarg, "lat") && strcmp(optarg, "bw"))
                usage();
            o.lat = strcmp(optarg, "lat") == 0;
            break;
        case 'o':
            if (strcmp(optarg, "read") && strcmp(optarg, "write"))
                usage();
            o.read = strcmp(optarg, "read") == 0;
            break;
        case 's':
            o.size = parse_size(optarg);
            break;
        case 'w':
            o.window = atoi(optarg);
            break;
        case 'd':
            o.seconds = atof(optarg);
            break;
        case 'n':
            o.iters = atol(optarg);
            break;
        case 'j':
            o.json = true;
            break;
        case 'S':
            o.spin = true;
            break;
        case 'B':
            o.busy_poll = true;
            break;
        default:
            usage();
        }
    }
    if (o.window < 1 || o.seconds <= 0 || o.iters < 1)
        usage();
    if (o.lat)
        o.window = 1;

    if (strcmp(o.role, "target") == 0)
        return run_target(&o, listen_on(o.host, o.port));
    if (strcmp(o.role, "initiator") == 0)
        return run_initiator(&o, connect_to(o.host, o.port));
    if (strcmp(o.role, "both"))
        usage();
    int lfd = listen_on(o.host, 0);
    struct sockaddr_in sa;
    socklen_t sl = sizeof(sa);
    getsockname(lfd, (struct sockaddr *)&sa, &sl);
    pid_t pid = fork();
    if (pid == 0)
        _exit(run_target(&o, lfd));
    close(lfd);
    int rc = run_initiator(&o, connect_to(o.host, ntohs(sa.sin_port)));
    int st = 0;
    waitpid(pid, &st, 0);
    if (rc == 0 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
        fprintf(stderr, "fabric_rma_bench: target failed (status 0x%x)\n", st);
        rc = 1;
    }
    return rc;
}

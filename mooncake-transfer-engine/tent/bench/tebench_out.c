/* tebench output (table, JSON rows) and the --baseline ceilings. */
#include "tebench.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---- --metrics ------------------------------------------------------------
 */

enum {
    MX_RB,
    MX_WB,
    MX_RR,
    MX_WR,
    MX_RF,
    MX_WF,
    MX_ATT,
    MX_AF,
    MX_FO,
    MX_INFL,
    MX_N
};
static const char *const mx_names[MX_N] = {
    "tent_read_bytes_total",         "tent_write_bytes_total",
    "tent_read_requests_total",      "tent_write_requests_total",
    "tent_read_failures_total",      "tent_write_failures_total",
    "tent_transport_attempts_total", "tent_transport_attempt_failures_total",
    "tent_transport_failover_total", "tent_tasks_in_flight"};

struct mx_row {
    char xport[32];
    double v[MX_N];
};

void tb_print_metrics(FILE *f, tent_engine_t e, size_t case_no)
{
    size_t len = 1 << 16;
    char *text = malloc(len);
    int rc = text ? tent_metrics_prometheus(e, text, &len) : TENT_ENOMEM;
    if (rc == TENT_EOVERFLOW) {
        char *t2 = realloc(text, len);
        rc = t2 ? tent_metrics_prometheus(e, (text = t2), &len) : TENT_ENOMEM;
    }
    if (rc != TENT_OK) {
        fprintf(f, "# metrics: unavailable: %s\n", tent_last_error());
        free(text);
        return;
    }
    struct mx_row rows[16];
    int nrows = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#')
            continue;
        int which = -1;
        for (int k = 0; k < MX_N; k++) {
            size_t n = strlen(mx_names[k]);
            if (strncmp(line, mx_names[k], n) == 0 && line[n] == '{')
                which = k;
        }
        /* transport="x" (or from="x" for failovers: counted at the source) */
        const char *key = which == MX_FO ? "from=\"" : "transport=\"";
        char *l = which >= 0 ? strstr(line, key) : NULL;
        char *sp = strrchr(line, ' ');
        if (!l || !sp)
            continue;
        l += strlen(key);
        char *q = strchr(l, '"');
        if (!q || q - l >= 32)
            continue;
        int r = 0;
        while (r < nrows && (strncmp(rows[r].xport, l, (size_t)(q - l)) ||
                             rows[r].xport[q - l]))
            r++;
        if (r == nrows) {
            if (nrows == 16)
                continue;
            memset(&rows[r], 0, sizeof(rows[r]));
            memcpy(rows[r].xport, l, (size_t)(q - l));
            nrows++;
        }
        rows[r].v[which] += strtod(sp + 1, NULL);
    }
    for (int r = 0; r < nrows; r++) {
        const double *v = rows[r].v;
        if (v[MX_ATT] == 0 && v[MX_RR] == 0 && v[MX_WR] == 0)
            continue;
        fprintf(f,
                "# metrics after case %zu: transport=%s read_bytes=%.0f "
                "write_bytes=%.0f read_requests=%.0f write_requests=%.0f "
                "read_failures=%.0f write_failures=%.0f attempts=%.0f "
                "attempt_failures=%.0f failovers_from=%.0f in_flight=%.0f\n",
                case_no, rows[r].xport, v[MX_RB], v[MX_WB], v[MX_RR], v[MX_WR],
                v[MX_RF], v[MX_WF], v[MX_ATT], v[MX_AF], v[MX_FO], v[MX_INFL]);
    }
    free(text);
}

/* ---- table -------------------------------------------------------------- */

void tb_print_header(FILE *f, const struct tb_opts *o)
{
    if (o->json)
        return;
    int n = fprintf(f, "%12s %6s %10s %14s %13s %12s %12s %13s %8s %-10s",
                    "BlkSize (B)", "Batch", "BW (GB/S)", "Avg Inst GB/s",
                    "Avg Lat (us)", "Avg Tx (us)", "P99 Tx (us)",
                    "P999 Tx (us)", "Threads", "Transport");
    if (o->baseline && o->file_target)
        n += fprintf(f, " %10s %8s", "Fio (GB/S)", "BW/Fio");
    else if (o->fabric_baseline)
        n += fprintf(f, " %13s %10s %12s %10s", "Fabric (GB/S)", "BW/Fabric",
                     "Fabric (us)", "Lat/Fabric");
    else if (o->baseline)
        n += fprintf(f, " %13s %13s %10s %10s %14s %9s", "Memcpy (GB/S)",
                     "Socket (GB/S)", "BW/Memcpy", "BW/Socket", "PingPong (us)",
                     "PP/AvgTx");
    n += fprintf(f, " %13s %13s", "CPU-I (s/GiB)", "CPU-T (s/GiB)");
    fputc('\n', f);
    for (int i = 0; i < n; i++)
        fputc('-', f);
    fputc('\n', f);
    fflush(f);
}

static double ratio(double a, double b)
{
    return b > 0 ? a / b : 0;
}

/* CPU seconds per GiB moved, or < 0 when not known. */
static double cpu_per_gib(double cpu_s, uint64_t bytes)
{
    return cpu_s >= 0 && bytes ? cpu_s / ((double)bytes / (1u << 30)) : -1;
}

/* A CPU-per-GiB cell: the figure, or "-" when not known. */
static void cpu_cell(FILE *f, double v)
{
    if (v >= 0)
        fprintf(f, " %13.3f", v);
    else
        fprintf(f, " %13s", "-");
}

void tb_print_row(FILE *f, const struct tb_opts *o, const struct tb_result *r)
{
    if (o->json) {
        fprintf(f,
                "{\"threads\": %llu, \"block_size\": %llu, \"batch_size\": "
                "%llu, \"op_type\": \"%s\", \"transport\": \"%s\", "
                "\"bw_gbps\": %.6f, \"avg_inst_gbps\": %.6f, \"avg_lat_us\": "
                "%.3f, \"avg_tx_us\": %.3f, \"p99_tx_us\": %.3f, "
                "\"p999_tx_us\": %.3f, \"ops\": %llu, \"bytes\": %llu, "
                "\"seconds\": %.6f, \"consistency_checked\": %s",
                (unsigned long long)r->threads, (unsigned long long)r->block,
                (unsigned long long)r->batch, tb_op_name(o->op), r->transport,
                r->bw_gbs, r->inst_gbs, r->avg_lat_us, r->avg_tx_us,
                r->p99_tx_us, r->p999_tx_us, (unsigned long long)r->ops,
                (unsigned long long)r->bytes, r->seconds,
                o->check_consistency || o->op == TB_OP_READ_VERIFY ? "true"
                                                                   : "false");
        if (o->baseline && o->file_target)
            fprintf(f, ", \"fio_gbps\": %.6f, \"ratio_fio\": %.6f", r->fio_gbs,
                    ratio(r->bw_gbs, r->fio_gbs));
        else if (o->fabric_baseline)
            fprintf(f,
                    ", \"fabric_gbps\": %.6f, \"ratio_fabric\": %.6f, "
                    "\"fabric_lat_us\": %.3f, \"ratio_fabric_lat\": %.6f",
                    r->fabric_gbs, ratio(r->bw_gbs, r->fabric_gbs),
                    r->fabric_lat_us, ratio(r->avg_tx_us, r->fabric_lat_us));
        else if (o->baseline)
            fprintf(f,
                    ", \"memcpy_gbps\": %.6f, \"socket_gbps\": %.6f, "
                    "\"ratio_memcpy\": %.6f, \"ratio_socket\": %.6f, "
                    "\"pingpong_us\": %.3f, \"ratio_pingpong\": %.6f",
                    r->memcpy_gbs, r->socket_gbs,
                    ratio(r->bw_gbs, r->memcpy_gbs),
                    ratio(r->bw_gbs, r->socket_gbs), r->pingpong_us,
                    ratio(r->pingpong_us, r->avg_tx_us));
        double ci = cpu_per_gib(r->cpu_init_s, r->bytes);
        double ct = cpu_per_gib(r->cpu_tgt_s, r->bytes);
        if (ci >= 0)
            fprintf(f, ", \"cpu_s_per_gib_initiator\": %.6f", ci);
        if (ct >= 0)
            fprintf(f, ", \"cpu_s_per_gib_target\": %.6f", ct);
        fprintf(f, "}\n");
        fflush(f);
        return;
    }
    fprintf(f,
            "%12llu %6llu %10.3f %14.3f %13.2f %12.2f %12.2f %13.2f %8llu "
            "%-10s",
            (unsigned long long)r->block, (unsigned long long)r->batch,
            r->bw_gbs, r->inst_gbs, r->avg_lat_us, r->avg_tx_us, r->p99_tx_us,
            r->p999_tx_us, (unsigned long long)r->threads, r->transport);
    if (o->baseline && o->file_target)
        fprintf(f, " %10.3f %8.3f", r->fio_gbs, ratio(r->bw_gbs, r->fio_gbs));
    else if (o->fabric_baseline)
        fprintf(f, " %13.3f %10.3f %12.2f %10.3f", r->fabric_gbs,
                ratio(r->bw_gbs, r->fabric_gbs), r->fabric_lat_us,
                ratio(r->avg_tx_us, r->fabric_lat_us));
    else if (o->baseline)
        fprintf(f, " %13.3f %13.3f %10.3f %10.3f %14.2f %9.3f", r->memcpy_gbs,
                r->socket_gbs, ratio(r->bw_gbs, r->memcpy_gbs),
                ratio(r->bw_gbs, r->socket_gbs), r->pingpong_us,
                ratio(r->pingpong_us, r->avg_tx_us));
    cpu_cell(f, cpu_per_gib(r->cpu_init_s, r->bytes));
    cpu_cell(f, cpu_per_gib(r->cpu_tgt_s, r->bytes));
    fputc('\n', f);
    fflush(f);
}

/* ---- memcpy ceiling ----------------------------------------------------- */

struct copy_worker {
    pthread_t tid;
    char *src, *dst;
    uint64_t len, block, bytes;
    atomic_bool *stop;
};

static void *copy_main(void *arg)
{
    struct copy_worker *w = arg;
    uint64_t slots = w->len / w->block, i = 0;
    while (!atomic_load_explicit(w->stop, memory_order_relaxed)) {
        uint64_t off = (i++ % slots) * w->block;
        memcpy(w->dst + off, w->src + off, w->block);
        w->bytes += w->block;
    }
    return NULL;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) && errno == EINTR)
        ;
}

/* Bytes each ceiling thread walks through: the case's buffer shared by its
 * threads (at least one block, at most 256 MiB), whole blocks.  Both the
 * memcpy and the socket ceiling move this footprint, as the engine does:
 * a ceiling that reused one cache-resident block would measure the cache,
 * not the copy the engine has to make. */
static uint64_t per_thread_footprint(uint64_t threads, uint64_t block,
                                     uint64_t bytes)
{
    uint64_t per = bytes / threads;
    if (per < block)
        per = block;
    if (per > (256ull << 20))
        per = 256ull << 20;
    return per - per % block;
}

double tb_memcpy_ceiling(uint64_t threads, uint64_t block, uint64_t bytes,
                         double seconds)
{
    uint64_t per = per_thread_footprint(threads, block, bytes);
    struct copy_worker *ws = calloc(threads, sizeof(*ws));
    char *src = malloc(per * threads), *dst = malloc(per * threads);
    double gbs = 0;
    atomic_bool stop;
    atomic_init(&stop, false);
    if (!ws || !src || !dst)
        goto out;
    memset(src, 0x5a, per * threads);
    memset(dst, 0, per * threads);
    uint64_t started = 0;
    for (; started < threads; started++) {
        struct copy_worker *w = &ws[started];
        w->src = src + started * per;
        w->dst = dst + started * per;
        w->len = per;
        w->block = block;
        w->stop = &stop;
        if (pthread_create(&w->tid, NULL, copy_main, w))
            break;
    }
    double t0 = tb_now();
    sleep_s(seconds);
    atomic_store(&stop, true);
    double t1 = tb_now();
    uint64_t total = 0;
    for (uint64_t t = 0; t < started; t++) {
        pthread_join(ws[t].tid, NULL);
        total += ws[t].bytes;
    }
    if (started == threads && t1 > t0)
        gbs = (double)total / (t1 - t0) / 1e9;
out:
    free(ws);
    free(src);
    free(dst);
    return gbs;
}

/* ---- loopback socket stream ceiling ------------------------------------- */

/* The ceiling's sockets run the congestion control the engine gives its
 * loopback connections by default (tcp_loopback_congestion, reno): a
 * ceiling on the kernel's default (BBR on some hosts, whose pacing halved
 * loopback throughput on this project's VM) would not be the engine's.  Where
 * the kernel refuses it, both keep the default. */
#define TB_LOOPBACK_CC "reno"

static void loopback_cc(int fd)
{
    (void)setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, TB_LOOPBACK_CC,
                     sizeof(TB_LOOPBACK_CC) - 1);
}

struct sock_worker {
    pthread_t wtid, rtid;
    int wfd, rfd;
    uint64_t block;
    uint64_t len; /* of each of wbuf and rbuf: the footprint it walks */
    char *wbuf, *rbuf;
    atomic_ullong received;
    atomic_bool *stop;
    bool wstarted, rstarted;
};

/* Sends block after block from successive places of its source buffer. */
static void *sock_writer(void *arg)
{
    struct sock_worker *w = arg;
    uint64_t off = 0;
    while (!atomic_load_explicit(w->stop, memory_order_relaxed)) {
        uint64_t done = 0;
        while (done < w->block) {
            ssize_t n = send(w->wfd, w->wbuf + off + done, w->block - done,
                             MSG_NOSIGNAL);
            if (n <= 0) {
                if (n < 0 && errno == EINTR)
                    continue;
                return NULL;
            }
            done += (uint64_t)n;
        }
        off = off + 2 * w->block <= w->len ? off + w->block : 0;
    }
    return NULL;
}

/* Receives into successive places of its destination buffer, at most one
 * block per call (what the engine's server does for a write). */
static void *sock_reader(void *arg)
{
    struct sock_worker *w = arg;
    uint64_t off = 0;
    for (;;) {
        uint64_t room = w->len - off;
        ssize_t n =
            recv(w->rfd, w->rbuf + off, room < w->block ? room : w->block, 0);
        if (n <= 0) {
            if (n < 0 && errno == EINTR)
                continue;
            return NULL;
        }
        atomic_fetch_add_explicit(&w->received, (unsigned long long)n,
                                  memory_order_relaxed);
        off += (uint64_t)n;
        if (off == w->len)
            off = 0;
    }
}

/* A connected TCP pair over 127.0.0.1. */
static int tcp_pair(int *wfd, int *rfd)
{
    int lfd = socket(AF_INET, SOCK_STREAM, 0), cfd = -1, afd = -1;
    if (lfd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof(a);
    if (bind(lfd, (struct sockaddr *)&a, sizeof(a)) || listen(lfd, 1) ||
        getsockname(lfd, (struct sockaddr *)&a, &al))
        goto fail;
    cfd = socket(AF_INET, SOCK_STREAM, 0);
    if (cfd < 0 || connect(cfd, (struct sockaddr *)&a, sizeof(a)))
        goto fail;
    afd = accept(lfd, NULL, NULL);
    if (afd < 0)
        goto fail;
    int one = 1;
    setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    loopback_cc(cfd);
    loopback_cc(afd);
    close(lfd);
    *wfd = cfd;
    *rfd = afd;
    return 0;
fail:
    if (cfd >= 0)
        close(cfd);
    close(lfd);
    return -1;
}

double tb_socket_ceiling(uint64_t threads, uint64_t block, uint64_t bytes,
                         double seconds)
{
    uint64_t per = per_thread_footprint(threads, block, bytes);
    struct sock_worker *ws = calloc(threads, sizeof(*ws));
    atomic_bool stop;
    atomic_init(&stop, false);
    double gbs = 0;
    bool ok = ws != NULL;
    for (uint64_t t = 0; ok && t < threads; t++)
        ws[t].wfd = ws[t].rfd = -1;
    for (uint64_t t = 0; ok && t < threads; t++) {
        struct sock_worker *w = &ws[t];
        w->block = block;
        w->stop = &stop;
        w->len = per;
        w->wbuf = malloc(per);
        w->rbuf = malloc(per);
        atomic_init(&w->received, 0);
        if (!w->wbuf || !w->rbuf || tcp_pair(&w->wfd, &w->rfd)) {
            ok = false;
            break;
        }
        memset(w->wbuf, 0xa5, per);
        memset(w->rbuf, 0, per); /* touched, as the engine's buffers are */
        w->rstarted = !pthread_create(&w->rtid, NULL, sock_reader, w);
        w->wstarted = !pthread_create(&w->wtid, NULL, sock_writer, w);
        ok = w->rstarted && w->wstarted;
    }
    if (ok) {
        sleep_s(seconds / 5); /* let the streams reach steady state */
        unsigned long long b0 = 0, b1 = 0;
        for (uint64_t t = 0; t < threads; t++)
            b0 += atomic_load(&ws[t].received);
        double t0 = tb_now();
        sleep_s(seconds);
        for (uint64_t t = 0; t < threads; t++)
            b1 += atomic_load(&ws[t].received);
        double t1 = tb_now();
        gbs = (double)(b1 - b0) / (t1 - t0) / 1e9;
    }
    atomic_store(&stop, true);
    for (uint64_t t = 0; ws && t < threads; t++) {
        struct sock_worker *w = &ws[t];
        if (w->wfd >= 0)
            shutdown(w->wfd, SHUT_RDWR);
        if (w->rfd >= 0)
            shutdown(w->rfd, SHUT_RDWR);
        if (w->wstarted)
            pthread_join(w->wtid, NULL);
        if (w->rstarted)
            pthread_join(w->rtid, NULL);
        if (w->wfd >= 0)
            close(w->wfd);
        if (w->rfd >= 0)
            close(w->rfd);
        free(w->wbuf);
        free(w->rbuf);
    }
    free(ws);
    return gbs;
}

/* ---- request/response ceiling ------------------------------------------- */

/* One exchange as the tcp transport makes it: a request header (plus the
 * block for a write) one way, an answer header (plus the block for a read)
 * back, each side a plain blocking C loop on its own connection. */
#define PP_HDR 32

struct pp_worker {
    pthread_t ctid, stid;
    bool cstarted, sstarted;
    int cfd, sfd;
    uint64_t block;
    bool read;
    char *cbuf, *sbuf;
    double seconds;
    double us; /* mean round trip, 0 on failure */
};

static int pp_send(int fd, const char *b, size_t n)
{
    while (n) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

static int pp_recv(int fd, char *b, size_t n)
{
    while (n) {
        ssize_t r = recv(fd, b, n, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        b += r;
        n -= (size_t)r;
    }
    return 0;
}

static void *pp_server(void *arg)
{
    struct pp_worker *w = arg;
    size_t in = PP_HDR + (w->read ? 0 : w->block);
    size_t out = PP_HDR + (w->read ? w->block : 0);
    while (pp_recv(w->sfd, w->sbuf, in) == 0 &&
           pp_send(w->sfd, w->sbuf, out) == 0)
        ;
    return NULL;
}

static void *pp_client(void *arg)
{
    struct pp_worker *w = arg;
    size_t out = PP_HDR + (w->read ? 0 : w->block);
    size_t in = PP_HDR + (w->read ? w->block : 0);
    uint64_t n = 0;
    double t0 = tb_now(), t1 = t0;
    while (t1 - t0 < w->seconds) {
        if (pp_send(w->cfd, w->cbuf, out) || pp_recv(w->cfd, w->cbuf, in))
            return NULL;
        n++;
        if ((n & 15) == 0 || w->block >= 65536)
            t1 = tb_now();
    }
    t1 = tb_now();
    w->us = n ? (t1 - t0) * 1e6 / (double)n : 0;
    return NULL;
}

double tb_pingpong_ceiling(uint64_t threads, uint64_t block, bool read,
                           double seconds)
{
    struct pp_worker *ws = calloc(threads, sizeof(*ws));
    bool ok = ws != NULL;
    for (uint64_t t = 0; ok && t < threads; t++)
        ws[t].cfd = ws[t].sfd = -1;
    for (uint64_t t = 0; ok && t < threads; t++) {
        struct pp_worker *w = &ws[t];
        w->block = block;
        w->read = read;
        w->seconds = seconds;
        w->cbuf = calloc(1, PP_HDR + block);
        w->sbuf = calloc(1, PP_HDR + block);
        if (!w->cbuf || !w->sbuf || tcp_pair(&w->cfd, &w->sfd)) {
            ok = false;
            break;
        }
        int one = 1;
        setsockopt(w->sfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        w->sstarted = !pthread_create(&w->stid, NULL, pp_server, w);
        ok = w->sstarted;
    }
    for (uint64_t t = 0; ok && t < threads; t++) {
        ws[t].cstarted = !pthread_create(&ws[t].ctid, NULL, pp_client, &ws[t]);
        ok = ws[t].cstarted;
    }
    double sum = 0;
    for (uint64_t t = 0; ws && t < threads; t++) {
        struct pp_worker *w = &ws[t];
        if (w->cstarted)
            pthread_join(w->ctid, NULL);
        sum += w->us;
        if (w->cfd >= 0)
            shutdown(w->cfd, SHUT_RDWR);
        if (w->sfd >= 0)
            shutdown(w->sfd, SHUT_RDWR);
        if (w->sstarted)
            pthread_join(w->stid, NULL);
        if (w->cfd >= 0)
            close(w->cfd);
        if (w->sfd >= 0)
            close(w->sfd);
        free(w->cbuf);
        free(w->sbuf);
        ok = ok && w->us > 0;
    }
    free(ws);
    return ok ? sum / (double)threads : 0;
}

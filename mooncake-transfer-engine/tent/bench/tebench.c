/* tebench: roles.  Target (--target_seg_name empty): allocate and register
 * the buffer, print the initiator command, serve until SIGINT/SIGTERM.
 * Initiator: open the target segment(s) and run every case.  Loopback (both,
 * as two processes of one command) is in tebench_loopback.c. */
#include "tebench.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define TB_OPEN_DEADLINE_S 5

static const char *g_prog = "tebench";

/* The transports this engine implements (transports.def). */
static const char *xport_names[] = {
#define TENT_XPORT(name, suffix) #name,
#include "transport/transports.def"
};

/* Applies the flags that map to TENT configuration keys, enables only
 * xport when it names a transport, and creates the engine. */
tent_engine_t tb_make_engine(const struct tb_opts *o, const char *xport)
{
    char port[16];
    if (o->config[0])
        tent_load_config_from_file(o->config);
    tent_set_config("log_level", o->log_level);
    if (o->set_metadata_type)
        tent_set_config("metadata_type", o->metadata_type);
    if (o->metadata_url_list[0])
        tent_set_config("metadata_servers", o->metadata_url_list);
    if (o->rpc_server_port >= 0) {
        snprintf(port, sizeof(port), "%lld", (long long)o->rpc_server_port);
        tent_set_config("rpc_server_port", port);
    }
    if (o->seg_name[0])
        tent_set_config("local_segment_name", o->seg_name);
    if (o->libfabric_provider[0])
        tent_set_config("transports/libfabric/provider", o->libfabric_provider);
    if (tb_transport_from_name(xport) > 0) {
        char key[64];
        for (size_t i = 0; i < sizeof(xport_names) / sizeof(*xport_names);
             i++) {
            snprintf(key, sizeof(key), "transports/%s/enable", xport_names[i]);
            tent_set_config(key,
                            strcmp(xport, xport_names[i]) ? "false" : "true");
        }
    }
    tent_engine_t e = tent_create_engine();
    if (!e) {
        fprintf(stderr, "tebench: tent_create_engine failed: %s\n",
                tent_last_error());
        return NULL;
    }
    /* (a file transport alone is not "available": a missing one shows at
     * the first request, naming the file segment) */
    int xt = tb_transport_from_name(xport);
    if (xt != TRANSPORT_IOURING && xt != TRANSPORT_BUFIO &&
        !tent_available(e)) {
        fprintf(stderr,
                "tebench: no transport could be installed (xport_type=%s); "
                "see the log above for why\n",
                *xport ? xport : "auto");
        tent_destroy_engine(e);
        return NULL;
    }
    return e;
}

/* ---- target ------------------------------------------------------------- */

static void print_initiator_command(const struct tb_opts *o, const char *name,
                                    const char *xport)
{
    printf("tebench target: segment '%s', %llu bytes of %s registered\n", name,
           (unsigned long long)o->buffer_size, o->seg_type);
    printf("Start the initiator with:\n  %s --target_seg_name=%s", g_prog,
           name);
    if (*xport)
        printf(" --xport_type=%s", xport);
    if (o->set_metadata_type)
        printf(" --metadata_type=%s", o->metadata_type);
    if (o->metadata_url_list[0])
        printf(" --metadata_url_list=%s", o->metadata_url_list);
    if (o->config[0])
        printf(" --config=%s", o->config);
    printf("\nServing until Ctrl-C (SIGINT) or SIGTERM.\n");
    fflush(stdout);
}

static void report(int fd, const char *tag, const char *arg)
{
    if (fd < 0)
        return;
    char line[600];
    int n = snprintf(line, sizeof(line), "%s %s\n", tag, arg);
    if (n > 0 && write(fd, line, (size_t)n) < 0)
        perror("tebench target: write to parent");
}

/* Serves until SIGINT/SIGTERM.  In loopback, ready_fd receives
 * "OK <segment name>\n" or "ERR <reason>\n". */
int tb_run_target(const struct tb_opts *o, const char *xport, int ready_fd)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    /* blocked before the engine starts threads, so they inherit the mask */
    pthread_sigmask(SIG_BLOCK, &set, NULL);

    int ret = TB_EXIT_ERROR;
    tent_engine_t e = tb_make_engine(o, xport);
    if (!e) {
        report(ready_fd, "ERR", "engine creation failed");
        return ret;
    }
    /* TENT's sequence: allocate, then register. */
    void *buf = NULL;
    int rc = tent_allocate_memory(e, &buf, o->buffer_size, "cpu");
    if (rc != TENT_OK) {
        fprintf(stderr,
                "tebench target: tent_allocate_memory(%llu bytes) failed: %s\n",
                (unsigned long long)o->buffer_size, tent_last_error());
        report(ready_fd, "ERR", "tent_allocate_memory failed");
        goto destroy;
    }
    rc = tent_register_memory(e, buf, o->buffer_size);
    if (rc != TENT_OK) {
        fprintf(stderr,
                "tebench target: tent_register_memory(%llu bytes) failed: %s\n",
                (unsigned long long)o->buffer_size, tent_last_error());
        report(ready_fd, "ERR %s\n", "tent_register_memory failed");
        tent_free_memory(e, buf);
        goto destroy;
    }
    char name[512];
    rc = tent_segment_name(e, name, sizeof(name));
    if (rc != TENT_OK) {
        fprintf(stderr, "tebench target: tent_segment_name failed: %s\n",
                tent_last_error());
        report(ready_fd, "ERR", "tent_segment_name failed");
        goto free_mem;
    }
    struct tb_corrupter k = {0};
    tb_corrupter_init(&k, buf, o->buffer_size);
    if (ready_fd >= 0) {
        report(ready_fd, "OK", name);
        close(ready_fd);
    } else {
        print_initiator_command(o, name, xport);
    }
    for (;;) {
        struct timespec ts = {0, k.armed ? 1000000 : 200000000};
        int sig = sigtimedwait(&set, NULL, &ts);
        if (sig == SIGINT || sig == SIGTERM) {
            fprintf(stderr, "tebench target: %s received, shutting down\n",
                    sig == SIGINT ? "SIGINT" : "SIGTERM");
            break;
        }
        tb_corrupter_poll(&k, buf);
    }
    ret = TB_EXIT_OK;
free_mem:
    tent_unregister_memory(e, buf, o->buffer_size);
    tent_free_memory(e, buf);
destroy:
    tent_destroy_engine(e);
    return ret;
}

/* ---- initiator ---------------------------------------------------------- */

struct opener {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    tent_engine_t e;
    char name[256];
    tent_segment_id_t handle;
    int rc;
    bool done, abandoned;
    char msg[512];
};

static void *opener_main(void *arg)
{
    struct opener *op = arg;
    tent_segment_id_t h = 0;
    int rc = tent_open_segment(op->e, &h, op->name);
    pthread_mutex_lock(&op->lock);
    op->rc = rc;
    op->handle = h;
    snprintf(op->msg, sizeof(op->msg), "%s", rc ? tent_last_error() : "");
    op->done = true;
    bool abandoned = op->abandoned;
    pthread_cond_signal(&op->cond);
    pthread_mutex_unlock(&op->lock);
    if (abandoned)
        free(op);
    return NULL;
}

/* tent_open_segment with a deadline, so an unreachable target is a clear
 * error within TB_OPEN_DEADLINE_S whatever the metadata backend does.
 * Returns 1 when the call is still running (the engine must then be left
 * alone), 0 on success, -1 on failure. */
static int open_with_deadline(tent_engine_t e, const char *name,
                              tent_segment_id_t *out)
{
    struct opener *op = calloc(1, sizeof(*op));
    if (!op)
        return -1;
    pthread_mutex_init(&op->lock, NULL);
    pthread_cond_init(&op->cond, NULL);
    op->e = e;
    snprintf(op->name, sizeof(op->name), "%s", name);
    pthread_t tid;
    if (pthread_create(&tid, NULL, opener_main, op)) {
        fprintf(stderr, "tebench: pthread_create failed\n");
        free(op);
        return -1;
    }
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += TB_OPEN_DEADLINE_S;
    pthread_mutex_lock(&op->lock);
    while (!op->done)
        if (pthread_cond_timedwait(&op->cond, &op->lock, &dl) == ETIMEDOUT)
            break;
    if (!op->done) {
        op->abandoned = true;
        pthread_mutex_unlock(&op->lock);
        pthread_detach(tid);
        fprintf(stderr,
                "tebench: cannot reach target segment '%s': no answer within "
                "%d s (is the target running, and is the name the one it "
                "printed?)\n",
                name, TB_OPEN_DEADLINE_S);
        return 1;
    }
    pthread_mutex_unlock(&op->lock);
    pthread_join(tid, NULL);
    int ret = 0;
    if (op->rc != TENT_OK) {
        fprintf(stderr, "tebench: cannot open target segment '%s': %s (%s)\n",
                name, op->msg, tent_strerror(op->rc));
        ret = -1;
    } else {
        *out = op->handle;
    }
    free(op);
    return ret;
}

/* Picks the target's largest buffer and applies target_offset/range. */
static int locate_target(const struct tb_opts *o, tent_engine_t e,
                         struct tb_target *t)
{
    tent_segment_info_t info = {0};
    int rc = tent_get_segment_info(e, t->handle, &info);
    if (rc != TENT_OK) {
        fprintf(stderr, "tebench: tent_get_segment_info('%s') failed: %s\n",
                t->name, tent_last_error());
        return -1;
    }
    int best = -1;
    for (int i = 0; i < info.num_buffers; i++)
        if (best < 0 || info.buffers[i].length > info.buffers[best].length)
            best = i;
    if (best < 0) {
        fprintf(stderr, "tebench: target '%s' has no registered buffer\n",
                t->name);
        tent_free_segment_info(&info);
        return -1;
    }
    uint64_t base = info.buffers[best].base, len = info.buffers[best].length;
    tent_free_segment_info(&info);
    uint64_t range = o->target_range_size;
    if (o->target_offset >= len || (range && range > len - o->target_offset)) {
        fprintf(stderr,
                "tebench: --target_offset=%llu --target_range_size=%llu lie "
                "outside target '%s' buffer of %llu bytes\n",
                (unsigned long long)o->target_offset, (unsigned long long)range,
                t->name, (unsigned long long)len);
        return -1;
    }
    t->buf_base = base;
    t->base = base + o->target_offset;
    t->len = range ? range : len - o->target_offset;
    return 0;
}

/* --baseline on a file target: fio on the first target's file. */
static double file_ceiling(const struct tb_ctx *c, uint64_t threads,
                           uint64_t block, uint64_t batch)
{
    char why[512] = "";
    const struct tb_target *t = &c->targets[0];
    double g = tb_fio_ceiling(t->name, c->o->op, threads, block, batch,
                              t->base - t->buf_base, t->len, c->o->duration,
                              why, sizeof(why));
    if (g <= 0)
        fprintf(stderr, "tebench: baseline: fio: %s\n", why);
    return g;
}

/* --baseline: what the engines cost with nothing to move, CPU % over half
 * a second (the target's only when --loopback started it): before the
 * cases, and after them (what polling after traffic leaves behind). */
static void print_idle_cpu(const struct tb_opts *o, const char *when)
{
    double i0 = tb_cpu_seconds(0);
    double t0 = o->target_pid > 0 ? tb_cpu_seconds(o->target_pid) : -1;
    double w0 = tb_now();
    struct timespec ts = {0, 500000000};
    nanosleep(&ts, NULL);
    double w = tb_now() - w0;
    double i1 = tb_cpu_seconds(0);
    double t1 = o->target_pid > 0 ? tb_cpu_seconds(o->target_pid) : -1;
    FILE *f = o->json ? stderr : stdout;
    fprintf(f, "# idle engines%s, %.1f s: initiator %.1f%% CPU", when, w,
            i0 >= 0 && i1 >= 0 ? (i1 - i0) * 100 / w : -1.0);
    if (t0 >= 0 && t1 >= 0)
        fprintf(f, ", target %.1f%% CPU", (t1 - t0) * 100 / w);
    fputc('\n', f);
}

int tb_run_initiator(struct tb_opts *o, const char *xport)
{
    tent_engine_t e = tb_make_engine(o, xport);
    if (!e)
        return TB_EXIT_ERROR;
    struct tb_ctx c = {.o = o, .engine = e};
    int ret = TB_EXIT_ERROR;

    char names[sizeof(o->target_seg_name)];
    snprintf(names, sizeof(names), "%s", o->target_seg_name);
    char *save = NULL;
    int nfile = 0, nmem = 0;
    for (char *n = strtok_r(names, ",", &save); n;
         n = strtok_r(NULL, ",", &save)) {
        if (tb_is_file_target(n)) {
            nfile++;
            if (tb_prepare_file(n, o->buffer_size))
                goto close_segs;
        } else {
            nmem++;
        }
    }
    if (nfile && nmem) {
        fprintf(stderr, "tebench: --target_seg_name mixes file segments and "
                        "memory segments; give one kind\n");
        goto close_segs;
    }
    o->file_target = nfile > 0;
    snprintf(names, sizeof(names), "%s", o->target_seg_name);
    save = NULL;
    for (char *n = strtok_r(names, ",", &save); n;
         n = strtok_r(NULL, ",", &save)) {
        if (c.ntargets == TB_MAX_TARGETS) {
            fprintf(stderr,
                    "tebench: more than %d targets in "
                    "--target_seg_name\n",
                    TB_MAX_TARGETS);
            goto close_segs;
        }
        struct tb_target *t = &c.targets[c.ntargets];
        snprintf(t->name, sizeof(t->name), "%s", n);
        int orc = open_with_deadline(e, n, &t->handle);
        if (orc > 0)
            return TB_EXIT_ERROR; /* an open is still running: keep e */
        if (orc < 0)
            goto close_segs;
        c.ntargets++;
        if (locate_target(o, e, t))
            goto close_segs;
    }
    if (c.ntargets == 0) {
        fprintf(stderr, "tebench: --target_seg_name names no segment\n");
        goto close_segs;
    }

    c.local_len = o->buffer_size;
    void *p = NULL;
    if (tent_allocate_memory(e, &p, c.local_len, "cpu") != TENT_OK) {
        fprintf(stderr,
                "tebench: tent_allocate_memory(%llu bytes) failed: %s\n",
                (unsigned long long)c.local_len, tent_last_error());
        goto close_segs;
    }
    c.local = p;
    if (tent_register_memory(e, p, c.local_len) != TENT_OK) {
        fprintf(stderr,
                "tebench: tent_register_memory(%llu bytes) failed: %s\n",
                (unsigned long long)c.local_len, tent_last_error());
        goto free_local;
    }
    if (o->check_consistency) {
        if (tent_allocate_memory(e, &p, c.local_len, "cpu") != TENT_OK ||
            tent_register_memory(e, p, c.local_len) != TENT_OK) {
            fprintf(stderr,
                    "tebench: allocating and registering %llu bytes for the "
                    "read-back buffer failed: %s\n",
                    (unsigned long long)c.local_len, tent_last_error());
            if (p != c.local)
                tent_free_memory(e, p);
            goto unreg_local;
        }
        c.verify = p;
    }
    int hint = tb_transport_from_name(o->transport_hint);
    c.hint = hint > 0 ? hint : tb_transport_from_name(xport);
    if (tb_transport_from_name(xport) > 0)
        c.transport = xport; /* the only transport this engine installed */
    else if (hint > 0) {
        static char hname[48];
        snprintf(hname, sizeof(hname), "hint:%s", o->transport_hint);
        c.transport = hname;
    } else
        c.transport = "auto";
    c.verify_reads = o->check_consistency || o->op == TB_OP_READ_VERIFY;
    c.readback_writes = o->check_consistency;

    o->fabric_baseline =
        o->baseline && !o->file_target && strcmp(xport, "libfabric") == 0;
    ret = TB_EXIT_OK;
    /* write_seed leaves the whole range seeded for a later read_verify */
    if (o->op == TB_OP_WRITE_SEED || o->op == TB_OP_READ_VERIFY)
        ret = tb_full_pass(&c, o->op == TB_OP_WRITE_SEED);

    size_t ncases = o->threads.n * o->blocks.n * o->batches.n, idx = 0;
    size_t nskipped = 0;
    if (ret == TB_EXIT_OK && o->baseline)
        print_idle_cpu(o, "");
    if (ret == TB_EXIT_OK)
        tb_print_header(stdout, o);
    for (size_t ti = 0; ti < o->threads.n && ret == TB_EXIT_OK; ti++)
        for (size_t bi = 0; bi < o->blocks.n && ret == TB_EXIT_OK; bi++) {
            uint64_t threads = o->threads.v[ti], block = o->blocks.v[bi];
            double mem = 0, sock = 0, pp = 0;
            if (o->baseline && !o->file_target && !o->fabric_baseline) {
                double s = o->duration / 2 > 1 ? 1 : o->duration / 2;
                if (s < 0.2)
                    s = 0.2;
                fprintf(
                    stderr,
                    "tebench: baseline threads=%llu block=%llu: memcpy, "
                    "loopback socket and ping-pong ceilings (%.1f s each)\n",
                    (unsigned long long)threads, (unsigned long long)block, s);
                mem = tb_memcpy_ceiling(threads, block, o->buffer_size, s);
                sock = tb_socket_ceiling(threads, block, o->buffer_size, s);
                pp = tb_pingpong_ceiling(
                    threads, block,
                    o->op == TB_OP_READ || o->op == TB_OP_READ_VERIFY, s / 2);
            }
            for (size_t ci = 0; ci < o->batches.n && ret == TB_EXIT_OK;
                 ci++, idx++) {
                uint64_t batch = o->batches.v[ci];
                fprintf(stderr,
                        "tebench: case %zu/%zu: threads=%llu block=%llu "
                        "batch=%llu op=%s transport=%s%s (%.1f s)\n",
                        idx + 1, ncases, (unsigned long long)threads,
                        (unsigned long long)block, (unsigned long long)batch,
                        tb_op_name(o->op), c.transport,
                        c.verify_reads || c.readback_writes
                            ? " check_consistency"
                            : "",
                        o->duration);
                /* fio just before and just after the case, averaged: a
                 * device that is still writing back one run's bytes slows
                 * the next, whichever it is */
                double fio = 0, fab = 0, fab_lat = 0;
                if (o->fabric_baseline) {
                    /* the same provider, block and bytes in flight; one
                     * initiator thread (the program's) */
                    double s = o->duration / 2 > 2 ? 2 : o->duration / 2;
                    if (s < 0.5)
                        s = 0.5;
                    char why[600];
                    if (tb_fabric_ceiling(o->libfabric_provider,
                                          o->op == TB_OP_READ ||
                                              o->op == TB_OP_READ_VERIFY,
                                          block, threads * batch, s, &fab,
                                          &fab_lat, why, sizeof(why)) == 0)
                        fprintf(stderr,
                                "tebench: baseline: raw libfabric %s: %.3f "
                                "GB/s with %llu in flight, %.2f us per "
                                "block alone\n",
                                why, fab, (unsigned long long)(threads * batch),
                                fab_lat);
                    else
                        fprintf(stderr, "tebench: baseline: %s\n", why);
                }
                if (o->baseline && o->file_target) {
                    if (c.ntargets > 1)
                        fprintf(stderr, "tebench: baseline: fio runs on the "
                                        "first target's file only\n");
                    fio = file_ceiling(&c, threads, block, batch);
                }
                struct tb_result r;
                ret = tb_run_case(&c, (int)idx, threads, block, batch, &r);
                nskipped += r.skipped;
                if (ret != TB_EXIT_OK || r.skipped)
                    continue;
                if (fio > 0) {
                    double after = file_ceiling(&c, threads, block, batch);
                    fprintf(stderr,
                            "tebench: baseline: fio %.3f GB/s before the "
                            "case, %.3f after\n",
                            fio, after);
                    fio = after > 0 ? (fio + after) / 2 : fio;
                }
                r.memcpy_gbs = mem;
                r.socket_gbs = sock;
                r.pingpong_us = pp;
                r.fio_gbs = fio;
                r.fabric_gbs = fab;
                r.fabric_lat_us = fab_lat;
                tb_print_row(stdout, o, &r);
                if (o->metrics)
                    tb_print_metrics(o->json ? stderr : stdout, e, idx + 1);
            }
        }
    if (ret == TB_EXIT_OK && o->baseline && nskipped < ncases)
        print_idle_cpu(o, " after traffic");
    if (ret == TB_EXIT_OK && nskipped == ncases) {
        fprintf(stderr, "tebench: no case fits the buffers; nothing was "
                        "measured\n");
        ret = TB_EXIT_ERROR;
    }
    if (ret == TB_EXIT_MISMATCH)
        fprintf(stderr, "tebench: FAILED: consistency check found a "
                        "mismatch\n");
    else if (ret == TB_EXIT_OK)
        fprintf(stderr, "tebench: %zu case(s) done%s%s\n", ncases - nskipped,
                c.verify_reads ? ", every byte read back verified" : "",
                nskipped ? " (some skipped, see above)" : "");

    if (c.verify) {
        tent_unregister_memory(e, c.verify, c.local_len);
        tent_free_memory(e, c.verify);
    }
unreg_local:
    tent_unregister_memory(e, c.local, c.local_len);
free_local:
    tent_free_memory(e, c.local);
close_segs:
    for (int i = 0; i < c.ntargets; i++)
        tent_close_segment(e, c.targets[i].handle);
    tent_destroy_engine(e);
    return ret;
}

int main(int argc, char **argv)
{
    struct tb_opts o;
    char err[512];
    g_prog = argc > 0 && argv[0] ? argv[0] : "tebench";
    tb_opts_default(&o);
    if (tb_parse_flags(argc, argv, &o, err, sizeof(err))) {
        fprintf(stderr, "tebench: %s\n", err);
        tb_usage(stderr, g_prog);
        fprintf(stderr, "tebench: %s\n", err);
        return TB_EXIT_USAGE;
    }
    if (o.help) {
        tb_usage(stdout, g_prog);
        return TB_EXIT_OK;
    }
    const char *use_tent = getenv("MC_USE_TENT");
    if (use_tent && *use_tent && strcmp(use_tent, "1") != 0 &&
        strcasecmp(use_tent, "true") != 0)
        fprintf(stderr,
                "tebench: MC_USE_TENT=%s ignored: this tebench has "
                "only the tent backend\n",
                use_tent);
    if (o.loopback)
        return tb_run_loopback(&o);
    if (strcasecmp(o.xport_type, "memfabric") == 0) {
        /* the vendor's library first; mf_host where there is none */
        char why[600];
        if (tb_find_mf_library(true, why, sizeof(why)))
            fprintf(stderr, "tebench: memfabric uses %s\n", why);
    }
    if (!o.target_seg_name[0])
        return tb_run_target(&o, o.xport_type, -1);
    return tb_run_initiator(&o, o.xport_type);
}

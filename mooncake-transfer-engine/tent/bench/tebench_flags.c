/* tebench flags: gflags syntax (--name=value, --name value, -name=value;
 * booleans as --flag, --flag=true|false, --noflag). */
#include "classic/protocols.h"
#include "tebench.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

enum flag_kind {
    F_STR,
    F_BOOL,
    F_SIZE,   /* unsigned integer, K/M/G/T suffix allowed */
    F_DOUBLE, /* seconds */
    F_PORT,
};

struct flag {
    const char *name;
    enum flag_kind kind;
    size_t off;  /* offset of the field in struct tb_opts */
    size_t size; /* F_STR: buffer size */
    const char *help;
};

#define OPT(field) offsetof(struct tb_opts, field)
#define STRF(name, field, help)                                                \
    {                                                                          \
        name, F_STR, OPT(field), sizeof(((struct tb_opts *)0)->field), help    \
    }

/* Filled in tb_parse_flags: pointers into the options being parsed. */
static struct tb_opts *g_o;

static const struct flag g_flags[] = {
    STRF("target_seg_name", target_seg_name,
         "empty: target mode; else the target segment name(s), comma list"),
    STRF("seg_name", seg_name, "local segment name (default host:port)"),
    STRF("local_server_name", seg_name, "alias of --seg_name"),
    STRF("seg_type", seg_type, "target memory type: DRAM"),
    STRF("op_type", op_name, "read, write, mix, write_seed, read_verify"),
    {"check_consistency", F_BOOL, OPT(check_consistency), 0,
     "write a seeded pattern and verify every byte read back"},
    {"total_buffer_size", F_SIZE, OPT(buffer_size), 0,
     "buffer allocated and registered on each side (1G)"},
    {"buffer_size", F_SIZE, OPT(buffer_size), 0,
     "alias of --total_buffer_size"},
    STRF("block_size", block_list,
         "block sizes: comma list and/or start:end[:factor] ranges"),
    STRF("batch_size", batch_list, "batch sizes: list/ranges as above"),
    STRF("threads", thread_list, "thread counts: list/ranges as above"),
    STRF("num_threads", thread_list, "alias of --threads"),
    {"start_block_size", F_SIZE, OPT(start_block_size), 0,
     "first block size when --block_size is not given (4096)"},
    {"max_block_size", F_SIZE, OPT(max_block_size), 0,
     "last block size, doubling (64M)"},
    {"start_batch_size", F_SIZE, OPT(start_batch_size), 0,
     "first batch size (1)"},
    {"max_batch_size", F_SIZE, OPT(max_batch_size), 0,
     "last batch size, doubling (1)"},
    {"start_num_threads", F_SIZE, OPT(start_num_threads), 0,
     "first thread count (1)"},
    {"max_num_threads", F_SIZE, OPT(max_num_threads), 0,
     "last thread count, doubling (1)"},
    {"duration", F_DOUBLE, OPT(duration), 0,
     "seconds per case, after the warm-up (5)"},
    {"warmup", F_DOUBLE, OPT(warmup), 0,
     "warm-up seconds per case (default min(1, duration/5))"},
    {"target_offset", F_SIZE, OPT(target_offset), 0,
     "offset added to target addresses (0)"},
    {"target_range_size", F_SIZE, OPT(target_range_size), 0,
     "bytes of the target buffer used from target_offset (0 = rest)"},
    {"request_interval_us", F_SIZE, OPT(request_interval_us), 0,
     "per-thread pause before each batch (0)"},
    {"seed", F_SIZE, OPT(seed), 0,
     "seed of the consistency pattern (20240901)"},
    STRF("metadata_type", metadata_type, "p2p, etcd, redis, http"),
    STRF("metadata_url_list", metadata_url_list, "metadata service URLs"),
    {"rpc_server_port", F_PORT, OPT(rpc_server_port), 0,
     "p2p RPC port (0 = pick one)"},
    STRF("xport_type", xport_type,
         "auto, tcp, shm, memfabric, io_uring (or iouring), bufio, "
         "libfabric, or a Mooncake protocol name (ascend = memfabric; rdma, "
         "efa, cxi = libfabric with their provider): enables only that "
         "transport"),
    STRF("libfabric_provider", libfabric_provider,
         "libfabric provider of --xport_type=libfabric (tcp;ofi_rxm, shm, "
         "verbs;ofi_rxm, efa, cxi; default: the configuration's, or the "
         "protocol's for rdma, efa, cxi)"),
    STRF("tent_transport_hint", transport_hint,
         "per-request transport hint: unspec, tcp, shm, memfabric, io_uring, "
         "bufio"),
    STRF("backend", backend, "tent"),
    STRF("config", config, "TENT JSON config file (else MC_TENT_CONF)"),
    STRF("log_level", log_level,
         "engine log level: trace, debug, info, warning, error, off "
         "(warning; overrides the config's log_level)"),
    {"json", F_BOOL, OPT(json), 0, "print one JSON object per case"},
    {"loopback", F_BOOL, OPT(loopback), 0,
     "run target and initiator as two processes of this command"},
    {"baseline", F_BOOL, OPT(baseline), 0,
     "also measure memcpy and socket ceilings (a file target: fio) and print "
     "ratios"},
    {"metrics", F_BOOL, OPT(metrics), 0,
     "print the engine's per-transport metric counters after each case"},
    {"help", F_BOOL, OPT(help), 0, "print this help"},
};
#define NFLAGS (sizeof(g_flags) / sizeof(g_flags[0]))

void tb_opts_default(struct tb_opts *o)
{
    memset(o, 0, sizeof(*o));
    snprintf(o->seg_type, sizeof(o->seg_type), "DRAM");
    snprintf(o->op_name, sizeof(o->op_name), "read");
    o->op = TB_OP_READ;
    o->buffer_size = 1ull << 30;
    o->start_block_size = 4096;
    o->max_block_size = 64ull << 20;
    o->start_batch_size = o->max_batch_size = 1;
    o->start_num_threads = o->max_num_threads = 1;
    o->duration = 5;
    o->warmup = -1;
    o->seed = 20240901;
    snprintf(o->metadata_type, sizeof(o->metadata_type), "p2p");
    o->rpc_server_port = -1;
    snprintf(o->backend, sizeof(o->backend), "tent");
    /* A table interleaved with the engine's INFO lines is hard to read. */
    snprintf(o->log_level, sizeof(o->log_level), "warning");
}

void tb_usage(FILE *f, const char *prog)
{
    fprintf(f,
            "Usage: %s [flags]\n"
            "  target:    %s [--seg_type=DRAM] [--xport_type=tcp]\n"
            "  initiator: %s --target_seg_name=<name printed by the target> "
            "[flags]\n"
            "  loopback:  %s --loopback [--baseline] [flags]\n"
            "Flags (gflags style: --name=value, --name value, --flag, "
            "--noflag):\n",
            prog, prog, prog, prog);
    for (size_t i = 0; i < NFLAGS; i++)
        fprintf(f, "  --%-22s %s\n", g_flags[i].name, g_flags[i].help);
    fprintf(f,
            "Cases: every --threads x --block_size x --batch_size, each run "
            "for --duration s after\n"
            "  the warm-up; each thread submits batches of batch_size "
            "requests of block_size\n"
            "  bytes and polls them to completion.\n"
            "Columns: BW (GB/S) = bytes / measured time (10^9 B/s); Avg Inst "
            "GB/s = mean of\n"
            "  per-batch bytes / Tx; Avg Lat (us) = wall time per batch "
            "including gaps (x threads);\n"
            "  Avg/P99/P999 Tx (us) = submit to completion of a batch; "
            "Transport = --xport_type\n"
            "  (the only transport enabled), else hint:<name> for "
            "--tent_transport_hint (its\n"
            "  first choice), else 'auto' (the engine's policy).  "
            "--baseline adds\n"
            "  memcpy and loopback TCP stream ceilings of the same block "
            "size and threads, and\n"
            "  BW as a ratio of each.  A target file://<path> (a file "
            "segment; created with\n"
            "  --total_buffer_size bytes of data when it does not exist) "
            "needs no target\n"
            "  process; --baseline then runs fio on the same file (io_uring, "
            "direct=1, the\n"
            "  case's block size, iodepth = batch, one job per thread) and "
            "prints BW/Fio.\n"
            "Environment: MC_TENT_CONF (TENT JSON config, unless --config), "
            "MC_USE_TENT=1 (accepted),\n"
            "  MF_SMEM_LIBRARY, MF_PROTOCOL (memfabric; --loopback uses "
            "mf_host with host_tcp),\n"
            "  FIO (the fio to run, default fio on PATH),\n"
            "  TEBENCH_TEST_CORRUPT=1 [TEBENCH_TEST_CORRUPT_OFFSET=100, "
            "TEBENCH_TEST_CORRUPT_DELAY_MS=0]\n"
            "  (test only: the target flips one byte once it was written).\n"
            "Exit status: 0 ok, 1 error, 2 bad flag, 3 consistency "
            "mismatch.\n");
}

__attribute__((format(printf, 3, 4))) static int fail(char *err, size_t errlen,
                                                      const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

/* Unsigned integer with an optional K/M/G/T (KB, KiB...) binary suffix. */
static int parse_size(const char *s, uint64_t *out)
{
    if (!s || !*s || *s == '-' || *s == '+')
        return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s)
        return -1;
    unsigned shift = 0;
    if (*end) {
        switch (*end) {
        case 'k':
        case 'K':
            shift = 10;
            break;
        case 'm':
        case 'M':
            shift = 20;
            break;
        case 'g':
        case 'G':
            shift = 30;
            break;
        case 't':
        case 'T':
            shift = 40;
            break;
        default:
            return -1;
        }
        end++;
        if (strcasecmp(end, "") != 0 && strcasecmp(end, "b") != 0 &&
            strcasecmp(end, "ib") != 0)
            return -1;
    }
    if (shift && v > (UINT64_MAX >> shift))
        return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

static int parse_bool(const char *s, bool *out)
{
    if (!strcasecmp(s, "true") || !strcmp(s, "1") || !strcasecmp(s, "yes") ||
        !strcasecmp(s, "y")) {
        *out = true;
        return 0;
    }
    if (!strcasecmp(s, "false") || !strcmp(s, "0") || !strcasecmp(s, "no") ||
        !strcasecmp(s, "n")) {
        *out = false;
        return 0;
    }
    return -1;
}

static const struct flag *find_flag(const char *name, size_t len)
{
    for (size_t i = 0; i < NFLAGS; i++)
        if (strlen(g_flags[i].name) == len &&
            strncmp(g_flags[i].name, name, len) == 0)
            return &g_flags[i];
    return NULL;
}

static int set_flag(const struct flag *f, const char *val, const char *arg,
                    char *err, size_t errlen)
{
    char *field = (char *)g_o + f->off;
    switch (f->kind) {
    case F_STR:
        if (strlen(val) >= f->size)
            return fail(err, errlen, "value of %s is too long (max %zu)", arg,
                        f->size - 1);
        memcpy(field, val, strlen(val) + 1);
        return 0;
    case F_BOOL:
        if (parse_bool(val, (bool *)field))
            return fail(err, errlen, "bad boolean in %s (use true or false)",
                        arg);
        return 0;
    case F_SIZE:
        if (parse_size(val, (uint64_t *)field))
            return fail(err, errlen,
                        "bad number in %s (an unsigned integer, K/M/G "
                        "suffix allowed)",
                        arg);
        return 0;
    case F_DOUBLE: {
        char *end;
        errno = 0;
        double d = strtod(val, &end);
        if (errno || end == val || *end || !(d >= 0) || d > 1e6)
            return fail(err, errlen, "bad number of seconds in %s", arg);
        *(double *)field = d;
        return 0;
    }
    case F_PORT: {
        uint64_t v;
        if (parse_size(val, &v) || v > 65535)
            return fail(err, errlen, "bad port in %s (0..65535)", arg);
        *(int64_t *)field = (int64_t)v;
        return 0;
    }
    }
    return fail(err, errlen, "internal: flag kind of %s", arg);
}

/* The transports.def name of a --xport_type / --tent_transport_hint
 * value, "" for auto, NULL if none; case does not matter.  A transport
 * this build has, by its own name; else one of Mooncake's protocol names
 * through the classic API's table (ascend -> memfabric, as installTransport
 * and initialize take it; efa -> rdma); else any other transports.def
 * name (refused later as not built); Mooncake's spelling "iouring". */
const char *tb_transport_canonical(const char *name)
{
    char low[64];
    size_t n = strlen(name);
    if (n >= sizeof(low))
        return NULL;
    for (size_t i = 0; i <= n; i++)
        low[i] = (char)tolower((unsigned char)name[i]);
    if (!*low || strcmp(low, "auto") == 0 || strcmp(low, "unspec") == 0)
        return "";
    if (strcmp(low, "iouring") == 0)
        return "io_uring";
#define TENT_XPORT(xname, suffix)                                              \
    if (strcmp(low, #xname) == 0)                                              \
        return #xname;
#include "transport/transports.def"
    const char *x = classic_protocol_xport(low);
    if (x && strcmp(x, "unspec") != 0)
        return x;
#define TENT_XPORT_TYPE(suffix, value, tname, py)                              \
    if (strcmp(low, tname) == 0)                                               \
        return tname;
#include "transport/transports.def"
    return NULL;
}

bool tb_transport_built(const char *tname)
{
#define TENT_XPORT(xname, suffix)                                              \
    if (strcmp(tname, #xname) == 0)                                            \
        return true;
#include "transport/transports.def"
    return false;
}

void tb_transport_built_list(char *buf, size_t len)
{
    size_t l = 0;
    buf[0] = '\0';
#define TENT_XPORT(xname, suffix)                                              \
    if (l < len)                                                               \
        l += (size_t)snprintf(buf + l, len - l, "%s" #xname, l ? ", " : "");
#include "transport/transports.def"
}

int tb_transport_from_name(const char *name)
{
    const char *c = tb_transport_canonical(name);
    if (!c)
        return -1;
    if (!*c)
        return TRANSPORT_UNSPEC;
#define TENT_XPORT_TYPE(suffix, value, tname, py)                              \
    if (strcmp(c, tname) == 0)                                                 \
        return value;
#include "transport/transports.def"
    return -1;
}

const char *tb_op_name(int op)
{
    static const char *names[] = {"read", "write", "mix", "write_seed",
                                  "read_verify"};
    return op >= 0 && op <= TB_OP_READ_VERIFY ? names[op] : "?";
}

/* Expands "a,b,c:d:f" into list.  Empty spec = start..max doubling. */
static int expand_list(const char *flag, const char *spec, uint64_t start,
                       uint64_t max, uint64_t lo, uint64_t hi,
                       struct tb_list *l, char *err, size_t errlen)
{
    char buf[256];
    l->n = 0;
    if (!*spec) {
        if (start < lo || start > hi || max < start || max > hi)
            return fail(err, errlen,
                        "bad range for --%s: start %llu, max %llu (allowed "
                        "%llu..%llu, start <= max)",
                        flag, (unsigned long long)start,
                        (unsigned long long)max, (unsigned long long)lo,
                        (unsigned long long)hi);
        snprintf(buf, sizeof(buf), "%llu:%llu:2", (unsigned long long)start,
                 (unsigned long long)max);
        spec = buf;
    } else {
        snprintf(buf, sizeof(buf), "%s", spec);
        spec = buf;
    }
    char *save = NULL;
    for (char *item = strtok_r(buf, ",", &save); item;
         item = strtok_r(NULL, ",", &save)) {
        uint64_t a, b = 0, factor = 2;
        char *c1 = strchr(item, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (c1)
            *c1 = 0;
        if (c2)
            *c2 = 0;
        if (parse_size(item, &a) || (c1 && parse_size(c1 + 1, &b)) ||
            (c2 && parse_size(c2 + 1, &factor)))
            return fail(err, errlen,
                        "bad value in --%s=%s (numbers, comma lists and "
                        "start:end[:factor] ranges)",
                        flag, *spec ? spec : "");
        if (!c1)
            b = a;
        if (a < lo || b > hi || b < a || factor < 2)
            return fail(err, errlen,
                        "bad range in --%s: %llu..%llu factor %llu "
                        "(allowed %llu..%llu, factor >= 2)",
                        flag, (unsigned long long)a, (unsigned long long)b,
                        (unsigned long long)factor, (unsigned long long)lo,
                        (unsigned long long)hi);
        for (uint64_t v = a; v <= b; v *= factor) {
            if (l->n == TB_MAX_LIST)
                return fail(err, errlen, "--%s expands to more than %d values",
                            flag, TB_MAX_LIST);
            l->v[l->n++] = v;
            if (v > UINT64_MAX / factor)
                break;
        }
    }
    if (l->n == 0)
        return fail(err, errlen, "--%s is empty", flag);
    return 0;
}

static int validate(struct tb_opts *o, char *err, size_t errlen)
{
    static const char *ops[] = {"read", "write", "mix", "write_seed",
                                "read_verify"};
    o->op = -1;
    for (int i = 0; i < 5; i++)
        if (strcasecmp(o->op_name, ops[i]) == 0)
            o->op = i;
    if (o->op < 0)
        return fail(err, errlen,
                    "bad value in --op_type=%s (read, write, mix, write_seed, "
                    "read_verify)",
                    o->op_name);
    if (strcasecmp(o->seg_type, "DRAM") != 0)
        return fail(err, errlen,
                    "bad value in --seg_type=%s (this build supports DRAM "
                    "only)",
                    o->seg_type);
    if (strcasecmp(o->backend, "tent") != 0)
        return fail(err, errlen,
                    "bad value in --backend=%s (this is the tent backend)",
                    o->backend);
    static const char *metas[] = {"p2p", "etcd", "redis", "http"};
    bool meta_ok = false;
    for (int i = 0; i < 4; i++)
        meta_ok |= strcasecmp(o->metadata_type, metas[i]) == 0;
    if (!meta_ok)
        return fail(err, errlen,
                    "bad value in --metadata_type=%s (p2p, etcd, redis, http)",
                    o->metadata_type);
    char built[256];
    tb_transport_built_list(built, sizeof(built));
    const char *xc = tb_transport_canonical(o->xport_type);
    if (!xc)
        return fail(err, errlen,
                    "bad value in --xport_type=%s (auto, %s, or one of "
                    "Mooncake's protocol names)",
                    o->xport_type, built);
    /* rdma, efa, cxi: libfabric with the protocol's provider */
    char low[32];
    for (size_t i = 0; i < sizeof(low); i++)
        if (!(low[i] = (char)tolower((unsigned char)o->xport_type[i])))
            break;
    low[sizeof(low) - 1] = '\0';
    const char *fab = classic_protocol_fabric(low);
    if (strcmp(xc, "rdma") == 0 && fab && tb_transport_built("libfabric")) {
        if (!o->libfabric_provider[0])
            snprintf(o->libfabric_provider, sizeof(o->libfabric_provider), "%s",
                     fab);
        snprintf(o->xport_type, sizeof(o->xport_type), "libfabric");
        xc = "libfabric";
    }
    if (*xc && !tb_transport_built(xc))
        return fail(err, errlen,
                    "bad value in --xport_type=%s: this engine has no %s "
                    "transport (it has %s)",
                    o->xport_type, xc, built);
    const char *hc = tb_transport_canonical(o->transport_hint);
    if (!hc)
        return fail(err, errlen,
                    "bad value in --tent_transport_hint=%s (unspec, %s, or "
                    "one of Mooncake's protocol names)",
                    o->transport_hint, built);
    if (*hc && !tb_transport_built(hc))
        return fail(err, errlen,
                    "bad value in --tent_transport_hint=%s: this engine has "
                    "no %s transport (it has %s)",
                    o->transport_hint, hc, built);
    static const char *const levels[] = {"trace", "debug", "info", "warning",
                                         "warn",  "error", "off"};
    bool level_ok = false;
    for (size_t i = 0; i < sizeof(levels) / sizeof(*levels); i++)
        level_ok |= strcasecmp(o->log_level, levels[i]) == 0;
    if (!level_ok)
        return fail(err, errlen,
                    "bad value in --log_level=%s (trace, debug, info, "
                    "warning, error, off)",
                    o->log_level);
    /* From here on the transports.def names ("iouring" -> io_uring, ascend
     * -> memfabric); "auto" stays as given */
    if (*xc)
        snprintf(o->xport_type, sizeof(o->xport_type), "%s", xc);
    if (*hc)
        snprintf(o->transport_hint, sizeof(o->transport_hint), "%s", hc);
    if (o->config[0] && access(o->config, R_OK) != 0)
        return fail(err, errlen, "bad value in --config=%s: %s", o->config,
                    strerror(errno));
    if (o->buffer_size == 0)
        return fail(err, errlen, "bad value in --total_buffer_size=0 (> 0)");
    if (!(o->duration > 0))
        return fail(err, errlen, "bad value in --duration=%g (> 0 seconds)",
                    o->duration);
    if (o->loopback && o->target_seg_name[0])
        return fail(err, errlen,
                    "--loopback and --target_seg_name=%s exclude each other",
                    o->target_seg_name);
    if (expand_list("block_size", o->block_list, o->start_block_size,
                    o->max_block_size, 1, 1ull << 40, &o->blocks, err,
                    errlen) ||
        expand_list("batch_size", o->batch_list, o->start_batch_size,
                    o->max_batch_size, 1, 1ull << 16, &o->batches, err,
                    errlen) ||
        expand_list("threads", o->thread_list, o->start_num_threads,
                    o->max_num_threads, 1, TB_MAX_THREADS, &o->threads, err,
                    errlen))
        return -1;
    return 0;
}

int tb_parse_flags(int argc, char **argv, struct tb_opts *o, char *err,
                   size_t errlen)
{
    g_o = o;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (arg[0] != '-' || arg[1] == 0)
            return fail(err, errlen, "unexpected argument '%s'", arg);
        const char *name = arg + 1;
        if (*name == '-')
            name++;
        if (*name == 0)
            return fail(err, errlen, "unexpected argument '%s'", arg);
        const char *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const struct flag *f = find_flag(name, len);
        if (!f && !eq && len > 2 && strncmp(name, "no", 2) == 0) {
            const struct flag *nf = find_flag(name + 2, len - 2);
            if (nf && nf->kind == F_BOOL) {
                *(bool *)((char *)o + nf->off) = false;
                continue;
            }
        }
        if (!f)
            return fail(err, errlen, "unknown flag '%s'", arg);
        const char *val;
        if (eq)
            val = eq + 1;
        else if (f->kind == F_BOOL)
            val = "true";
        else if (i + 1 < argc)
            val = argv[++i];
        else
            return fail(err, errlen, "flag '%s' needs a value", arg);
        if (set_flag(f, val, arg, err, errlen))
            return -1;
        if (strcmp(f->name, "metadata_type") == 0)
            o->set_metadata_type = true;
        if (strcmp(f->name, "xport_type") == 0)
            o->set_xport_type = true;
    }
    if (o->help)
        return 0;
    return validate(o, err, errlen);
}

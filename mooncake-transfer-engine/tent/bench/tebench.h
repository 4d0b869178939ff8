/* tebench: benchmark and consistency tool for TENT in C.
 *
 * It accepts Mooncake tebench's command lines (gflags style) and prints the
 * same columns.  It uses only the public C API (tent/transfer_engine.h).
 *
 * Files: tebench.c (roles: target, initiator), tebench_loopback.c (both
 * roles as two processes of one command, finding libmf_smem.so),
 * tebench_flags.c (flag parsing, usage), tebench_run.c (cases, workers,
 * statistics, consistency checks; batches through bench_batch.h's shared
 * loop), tebench_pattern.c (the expected byte pattern and the target's
 * corruption test switch), tebench_out.c (table, JSON rows, baselines). */
#ifndef TEBENCH_H
#define TEBENCH_H

#include "tent/transfer_engine.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Exit statuses. */
#define TB_EXIT_OK       0
#define TB_EXIT_ERROR    1 /* engine, network or transfer failure */
#define TB_EXIT_USAGE    2 /* bad flag or flag value */
#define TB_EXIT_MISMATCH 3 /* --check_consistency found a wrong byte */

#define TB_MAX_LIST    64
#define TB_MAX_TARGETS 16
#define TB_MAX_THREADS 256

enum tb_op {
    TB_OP_READ,
    TB_OP_WRITE,
    TB_OP_MIX,
    TB_OP_WRITE_SEED,
    TB_OP_READ_VERIFY,
};

struct tb_list {
    uint64_t v[TB_MAX_LIST];
    size_t n;
};

struct tb_opts {
    char target_seg_name[1024];
    char seg_name[256];
    char seg_type[16];
    char op_name[16];
    int op; /* enum tb_op */
    bool check_consistency;
    uint64_t buffer_size;

    /* Lists given as --block_size/--batch_size/--threads; empty = derived
     * from the start/max pairs (doubling). */
    char block_list[256], batch_list[256], thread_list[256];
    uint64_t start_block_size, max_block_size;
    uint64_t start_batch_size, max_batch_size;
    uint64_t start_num_threads, max_num_threads;
    struct tb_list blocks, batches, threads; /* expanded */

    double duration; /* seconds per case */
    double warmup;   /* seconds; < 0 = automatic */
    uint64_t target_offset, target_range_size;
    uint64_t request_interval_us;
    uint64_t seed;

    char metadata_type[32];
    char metadata_url_list[512];
    int64_t rpc_server_port; /* -1 = not given */
    char xport_type[32];     /* "", auto, tcp, shm, memfabric */
    /* --libfabric_provider: transports/libfabric/provider ("" = the
     * configuration's, else rdma/efa/cxi's own for those --xport_type) */
    char libfabric_provider[64];
    char transport_hint[32]; /* --tent_transport_hint */
    char backend[16];
    char config[512];
    char log_level[16]; /* --log_level: the engine's, default warning */

    bool json, loopback, baseline, metrics, help;
    bool file_target; /* the targets are file segments (file://) */
    /* --baseline with --xport_type=libfabric: the raw libfabric ceiling
     * (BW/Fabric, Lat/Fabric) instead of the memcpy and socket ones */
    bool fabric_baseline;

    /* Which flags were given on the command line. */
    bool set_metadata_type, set_xport_type;
    /* --loopback: the target process, whose CPU time is read from /proc */
    int target_pid;
};

/* tebench_flags.c */
void tb_opts_default(struct tb_opts *o);
/* Parses argv.  On a bad flag writes a one-line reason naming the offending
 * flag into err and returns -1. */
int tb_parse_flags(int argc, char **argv, struct tb_opts *o, char *err,
                   size_t errlen);
void tb_usage(FILE *f, const char *prog);
/* TRANSPORT_* for a name ("tcp"), TRANSPORT_UNSPEC for ""/"auto"/"unspec",
 * -1 for a name this build does not know. */
int tb_transport_from_name(const char *name);
/* name's transports.def name ("" = auto), NULL if unknown; whether this
 * build has that transport; the built ones, ", "-separated. */
const char *tb_transport_canonical(const char *name);
bool tb_transport_built(const char *tname);
void tb_transport_built_list(char *buf, size_t len);
const char *tb_op_name(int op);

/* ---- run: one initiator engine running every case ---------------------- */

struct tb_target {
    tent_segment_id_t handle;
    char name[256];
    uint64_t buf_base; /* base of the target buffer used */
    uint64_t base;     /* first target address used (buffer base + offset) */
    uint64_t len;      /* bytes of the target range */
};

struct tb_result {
    uint64_t threads, block, batch;
    uint64_t ops;   /* batches completed in the measured window */
    uint64_t bytes; /* bytes moved in the measured window */
    double seconds; /* measured window */
    double bw_gbs, inst_gbs, avg_lat_us, avg_tx_us, p99_tx_us, p999_tx_us;
    const char *transport;
    char transport_used[48];       /* what the engine picked, when it picked */
    double memcpy_gbs, socket_gbs; /* --baseline, else 0 */
    double pingpong_us; /* --baseline: C request/response of one block */
    double fio_gbs;     /* --baseline, file target: fio on the same file */
    /* --baseline, libfabric: fabric_rma_bench's GB/s with the case's block
     * and window (threads x batch), and its batch-1 round trip of a block */
    double fabric_gbs, fabric_lat_us;
    /* CPU seconds (user + system, every thread) spent in the measured
     * window by this process and by the target (< 0: not known, a target
     * in another process not started by --loopback) */
    double cpu_init_s, cpu_tgt_s;
    bool skipped;
};

struct tb_ctx {
    const struct tb_opts *o;
    tent_engine_t engine;
    struct tb_target targets[TB_MAX_TARGETS];
    int ntargets;
    char *local;  /* registered local buffer */
    char *verify; /* registered scratch for read-backs (check mode) */
    uint64_t local_len;
    int hint;              /* transport_hint put in every request */
    const char *transport; /* shown in the Transport column */
    bool verify_reads;     /* compare every byte read */
    bool readback_writes;  /* read every write back and compare */
};

/* CPU seconds (user + system) this process (pid 0) or process pid has
 * used so far; < 0 when it cannot be read. */
double tb_cpu_seconds(int pid);

/* Runs one case.  Returns TB_EXIT_OK, TB_EXIT_ERROR or TB_EXIT_MISMATCH
 * (after printing the reason on stderr). */
int tb_run_case(struct tb_ctx *c, int case_idx, uint64_t threads,
                uint64_t block, uint64_t batch, struct tb_result *res);
/* write_seed: writes the seeded pattern over every target range;
 * read_verify: reads every target range and checks it. */
int tb_full_pass(struct tb_ctx *c, bool write);

/* tebench.c: the two roles.  tb_make_engine applies the flags that map to
 * TENT configuration keys, enables only xport when it names a transport and
 * creates the engine (NULL, with the reason on stderr). */
tent_engine_t tb_make_engine(const struct tb_opts *o, const char *xport);
/* Serves the buffer until SIGINT/SIGTERM; ready_fd >= 0 gets "OK <segment>\n"
 * (or "ERR <reason>\n") once it is served. */
int tb_run_target(const struct tb_opts *o, const char *xport, int ready_fd);
/* Opens the target segment(s) and runs every case. */
int tb_run_initiator(struct tb_opts *o, const char *xport);

/* tebench_loopback.c */
int tb_run_loopback(struct tb_opts *o);
/* Whether a libmf_smem.so is reachable (MF_SMEM_LIBRARY, this build's
 * mf_host, the loader path; prefer_vendor puts the loader path before
 * mf_host); why says which, or why none.  Picking mf_host sets
 * MF_SMEM_LIBRARY. */
bool tb_find_mf_library(bool prefer_vendor, char *why, size_t len);

/* tebench_fio.c: file segments */
/* Whether name is a file segment's ("file://..."). */
bool tb_is_file_target(const char *name);
/* Creates the file of a "file:///abs/path" target that does not exist yet:
 * size bytes of data, on disk.  0, or -1 after saying why on stderr. */
int tb_prepare_file(const char *name, uint64_t size);
/* --baseline for a file target: fio's GB/s on the target's file (io_uring,
 * direct=1, block, iodepth batch, threads jobs each over its slice of
 * [off, off + len), op) for seconds; 0 (why says) when fio cannot run. */
double tb_fio_ceiling(const char *name, int op, uint64_t threads,
                      uint64_t block, uint64_t batch, uint64_t off,
                      uint64_t len, double seconds, char *why, size_t wlen);

/* tebench_fabric.c: --baseline for --xport_type=libfabric.  Runs
 * tent_fabric_rma_bench (beside tebench, or TEBENCH_FABRIC_BENCH) with
 * provider (NULL or "": the first of verbs;ofi_rxm, efa, cxi that is
 * here): window blocks in flight for seconds (*gbs), then one block at a
 * time (*lat_us, mean).  0 with the provider used in why, or -1 with the
 * reason in why. */
int tb_fabric_ceiling(const char *provider, bool read, uint64_t block,
                      uint64_t window, double seconds, double *gbs,
                      double *lat_us, char *why, size_t wlen);

/* tebench_pattern.c */
static inline uint64_t tb_splitmix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Expected byte pattern: byte at target range offset off under key. */
uint64_t tb_pattern_key(uint64_t seed, int case_idx, uint64_t gen, bool fixed);
void tb_pattern_fill(void *dst, uint64_t len, uint64_t key, uint64_t off);
/* Returns the index of the first wrong byte, or len when all match. */
uint64_t tb_pattern_check(const void *buf, uint64_t len, uint64_t key,
                          uint64_t off, uint8_t *expected);

/* TEBENCH_TEST_CORRUPT (test-only, target side): flips one byte of the
 * buffer once the initiator has written it, so a test can prove
 * --check_consistency notices. */
struct tb_corrupter {
    volatile uint8_t *at;
    bool armed;
    double delay;      /* seconds between seeing the bytes written and */
    double written_at; /* flipping one, 0 = not seen yet */
};
void tb_corrupter_init(struct tb_corrupter *k, char *buf, uint64_t len);
/* Called from the target's serving loop. */
void tb_corrupter_poll(struct tb_corrupter *k, char *buf);

/* tebench_out.c */
void tb_print_header(FILE *f, const struct tb_opts *o);
void tb_print_row(FILE *f, const struct tb_opts *o, const struct tb_result *r);
/* --baseline: memcpy and loopback socket stream ceilings for a case, each
 * thread walking its share of the case's bytes of buffer. */
double tb_memcpy_ceiling(uint64_t threads, uint64_t block, uint64_t bytes,
                         double seconds);
double tb_socket_ceiling(uint64_t threads, uint64_t block, uint64_t bytes,
                         double seconds);
/* --metrics: the engine's per-transport counters (cumulative), one line per
 * transport that has seen traffic, read from tent_metrics_prometheus(). */
void tb_print_metrics(FILE *f, tent_engine_t e, size_t case_no);
/* --baseline: mean round trip (us) of a blocking C request/response of one
 * block over loopback tcp, per connection, threads connections at once. */
double tb_pingpong_ceiling(uint64_t threads, uint64_t block, bool read,
                           double seconds);

double tb_now(void);

#endif

/* mf_host_bench: copy bandwidth of mf_host (libmf_smem.so) between two
 * processes on this host, over host_tcp and host_shm.
 *
 *   mf_host_bench [--protocol host_tcp|host_shm|all] [--op write|read|all]
 *                 [--block BYTES] [--batch N] [--inflight N] [--seconds S]
 *
 * A forked target registers block*batch*inflight bytes; this process keeps
 * `inflight` batches of `batch` entries of `block` bytes in flight and
 * reports the bytes completed per second. */
#include "transport/memfabric/smem_trans_abi.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct opts {
    const char *protocol;
    const char *op;
    size_t block;
    unsigned batch;
    unsigned inflight;
    double seconds;
};

struct hello {
    char uid[64];
    uint64_t base;
};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Polls without hogging a core the copy threads need. */
static int32_t wait_batch(smem_trans_t h, uint64_t id, int32_t *result)
{
    int32_t q;
    while ((q = smem_trans_batch_status_query(h, id, result, 0)) ==
           SM_NEED_RETRY) {
        struct timespec ts = {.tv_sec = 0, .tv_nsec = 20000};
        nanosleep(&ts, NULL);
    }
    return q;
}

static smem_trans_t create(uint32_t proto)
{
    smem_trans_config_t cfg;
    smem_trans_config_init(&cfg);
    cfg.dataOpType = (smem_bm_data_op_type)proto;
    snprintf(cfg.url, sizeof(cfg.url), "127.0.0.1:0");
    return smem_trans_create(&cfg, 0);
}

static void target_main(uint32_t proto, size_t size, int in_fd, int out_fd)
{
    void *buf = mmap(NULL, size, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    smem_trans_t h = NULL;
    if (buf == MAP_FAILED || smem_trans_init(0, 0) != SM_OK ||
        !(h = create(proto)) ||
        smem_trans_register_mem(h, buf, size, 0) != SM_OK)
        _exit(2);
    struct hello hello;
    memset(&hello, 0, sizeof(hello));
    uint16_t port = 0;
    smem_trans_get_rpc_port(h, &port);
    snprintf(hello.uid, sizeof(hello.uid), "127.0.0.1:%u", (unsigned)port);
    hello.base = (uint64_t)(uintptr_t)buf;
    if (write(out_fd, &hello, sizeof(hello)) != (ssize_t)sizeof(hello))
        _exit(3);
    char c;
    while (read(in_fd, &c, 1) < 0 && errno == EINTR)
        ;
    smem_trans_destroy(h, 0);
    smem_trans_uninit(0);
    _exit(0);
}

static int run(const struct opts *o, uint32_t proto, const char *pname,
               smem_trans_opcode_t op)
{
    size_t per_batch = o->block * o->batch;
    size_t size = per_batch * o->inflight;
    int to_child[2], from_child[2];
    if (pipe(to_child) || pipe(from_child)) {
        perror("pipe");
        return -1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return -1;
    }
    if (pid == 0) {
        close(to_child[1]);
        close(from_child[0]);
        target_main(proto, size, to_child[0], from_child[1]);
    }
    close(to_child[0]);
    close(from_child[1]);
    struct hello hello;
    int rc = -1;
    if (read(from_child[0], &hello, sizeof(hello)) != (ssize_t)sizeof(hello)) {
        fprintf(stderr, "target failed to start\n");
        goto out_child;
    }
    uint8_t *local = mmap(NULL, size, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (local == MAP_FAILED || smem_trans_init(0, 0) != SM_OK)
        goto out_child;
    smem_trans_t h = create(proto);
    if (!h)
        goto out_uninit;

    unsigned n = o->inflight, e = o->batch;
    void **src = calloc((size_t)n * e, sizeof(void *));
    void **dst = calloc((size_t)n * e, sizeof(void *));
    size_t *sz = calloc((size_t)n * e, sizeof(size_t));
    uint64_t *ids = calloc(n, sizeof(uint64_t));
    if (!src || !dst || !sz || !ids)
        goto out_free;
    for (size_t i = 0; i < (size_t)n * e; i++) {
        src[i] = local + i * o->block;
        dst[i] = (void *)(uintptr_t)(hello.base + i * o->block);
        sz[i] = o->block;
    }
    smem_trans_batch_params_t p = {
        .destUrl = hello.uid, .batchSize = e, .opcode = op};
    uint64_t bytes = 0, batches = 0;
    double t0 = 0;
    /* Slot k always copies the k-th region; the first round warms up. */
    for (int round = 0;; round++) {
        if (round == 1)
            t0 = now();
        for (unsigned k = 0; k < n; k++) {
            if (round > 0) {
                int32_t result = -1, q = wait_batch(h, ids[k], &result);
                if (q != SM_OK || result != 0) {
                    fprintf(stderr, "batch failed: query %d result %d\n", q,
                            result);
                    goto out_free;
                }
                if (round > 1) {
                    bytes += per_batch;
                    batches++;
                }
            }
            p.srcList = src + (size_t)k * e;
            p.destList = dst + (size_t)k * e;
            p.sizeList = sz + (size_t)k * e;
            if (smem_trans_batch_copy(h, &p, &ids[k]) != SM_OK) {
                fprintf(stderr, "batch_copy failed\n");
                goto out_free;
            }
        }
        if (round > 1 && now() - t0 >= o->seconds)
            break;
    }
    for (unsigned k = 0; k < n; k++) {
        int32_t result;
        wait_batch(h, ids[k], &result);
        bytes += per_batch;
        batches++;
    }
    double dt = now() - t0;
    printf("%-9s %-5s block %8zu B  batch %3u  inflight %2u  %8.2f MiB/s  "
           "%8.0f batches/s\n",
           pname, op == SMEM_TRANS_OP_WRITE ? "write" : "read", o->block, e, n,
           (double)bytes / dt / (1 << 20), (double)batches / dt);
    rc = 0;
out_free:
    free(src);
    free(dst);
    free(sz);
    free(ids);
    smem_trans_destroy(h, 0);
out_uninit:
    smem_trans_uninit(0);
    munmap(local, size);
out_child:
    close(to_child[1]); /* the target quits on EOF */
    close(from_child[0]);
    waitpid(pid, NULL, 0);
    return rc;
}

static void usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [--protocol host_tcp|host_shm|all] [--op "
            "write|read|all]\n"
            "          [--block BYTES] [--batch N] [--inflight N] [--seconds "
            "S]\n",
            argv0);
}

int main(int argc, char **argv)
{
    struct opts o = {.protocol = "all",
                     .op = "all",
                     .block = 1u << 20,
                     .batch = 8,
                     .inflight = 4,
                     .seconds = 2.0};
    static const struct option longopts[] = {
        {"protocol", required_argument, NULL, 'p'},
        {"op", required_argument, NULL, 'o'},
        {"block", required_argument, NULL, 'b'},
        {"batch", required_argument, NULL, 'n'},
        {"inflight", required_argument, NULL, 'i'},
        {"seconds", required_argument, NULL, 's'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "p:o:b:n:i:s:h", longopts, NULL)) !=
           -1) {
        switch (c) {
        case 'p':
            o.protocol = optarg;
            break;
        case 'o':
            o.op = optarg;
            break;
        case 'b':
            o.block = strtoull(optarg, NULL, 0);
            break;
        case 'n':
            o.batch = (unsigned)strtoul(optarg, NULL, 0);
            break;
        case 'i':
            o.inflight = (unsigned)strtoul(optarg, NULL, 0);
            break;
        case 's':
            o.seconds = strtod(optarg, NULL);
            break;
        default:
            usage(argv[0]);
            return c == 'h' ? 0 : 2;
        }
    }
    if (o.block == 0 || o.batch == 0 || o.inflight == 0 || o.inflight > 64 ||
        o.seconds <= 0) {
        usage(argv[0]);
        return 2;
    }
    bool all_p = strcmp(o.protocol, "all") == 0;
    bool all_o = strcmp(o.op, "all") == 0;
    static const struct {
        const char *name;
        uint32_t proto;
    } protos[] = {{"host_tcp", SMEMB_DATA_OP_HOST_TCP},
                  {"host_shm", SMEMB_DATA_OP_HOST_SHM}};
    int ran = 0, failed = 0;
    for (size_t i = 0; i < 2; i++) {
        if (!all_p && strcmp(o.protocol, protos[i].name) != 0)
            continue;
        if (all_o || strcmp(o.op, "write") == 0) {
            failed |= run(&o, protos[i].proto, protos[i].name,
                          SMEM_TRANS_OP_WRITE) != 0;
            ran++;
        }
        if (all_o || strcmp(o.op, "read") == 0) {
            failed |= run(&o, protos[i].proto, protos[i].name,
                          SMEM_TRANS_OP_READ) != 0;
            ran++;
        }
    }
    if (!ran) {
        usage(argv[0]);
        return 2;
    }
    return failed ? 1 : 0;
}

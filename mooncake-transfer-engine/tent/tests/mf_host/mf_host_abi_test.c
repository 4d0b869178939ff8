/* ABI-level tests of mf_host (libmf_smem.so loaded with dlopen): every
 * function and its error paths, the consume-once rule, range checks that
 * touch nothing, thread safety, destroy/uninit with batches in flight.
 * Two instances in one process talk to each other over loopback. */
/* cmocka.h needs these first. */
/* clang-format off */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
/* clang-format on */

#include "mfh_test_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>

static struct mfh_api api;
static const struct mfh_api *A = &api;

/* ---- stderr capture ----------------------------------------------------- */
static int saved_stderr = -1;
static FILE *capture_file;

static void capture_begin(void)
{
    fflush(stderr);
    capture_file = tmpfile();
    assert_non_null(capture_file);
    saved_stderr = dup(2);
    dup2(fileno(capture_file), 2);
}

/* Returns the captured text (caller frees). */
static char *capture_end(void)
{
    fflush(stderr);
    dup2(saved_stderr, 2);
    close(saved_stderr);
    long n = ftell(capture_file);
    char *s = calloc(1, (size_t)(n > 0 ? n : 0) + 1);
    rewind(capture_file);
    size_t got = fread(s, 1, (size_t)(n > 0 ? n : 0), capture_file);
    s[got] = '\0';
    fclose(capture_file);
    return s;
}

/* ---- fixtures ----------------------------------------------------------- */
struct pair {
    uint32_t proto;
    smem_trans_t a, b; /* a copies to/from b */
    char uid_b[64];
    uint8_t *buf_b; /* registered at b */
    size_t size_b;
};

static int group_setup(void **state)
{
    (void)state;
    return mfh_api_load(&api);
}

static int pair_setup(void **state, uint32_t proto)
{
    struct pair *p = calloc(1, sizeof(*p));
    if (!p || A->smem_trans_init(0, 0) != SM_OK)
        return -1;
    p->proto = proto;
    p->a = mfh_create(A, proto);
    p->b = mfh_create(A, proto);
    p->size_b = 4u << 20;
    p->buf_b = calloc(1, p->size_b);
    if (!p->a || !p->b || !p->buf_b ||
        A->smem_trans_register_mem(p->b, p->buf_b, p->size_b, 0) != SM_OK)
        return -1;
    mfh_uid(A, p->b, p->uid_b, sizeof(p->uid_b));
    *state = p;
    return 0;
}

static int tcp_setup(void **state)
{
    return pair_setup(state, SMEMB_DATA_OP_HOST_TCP);
}

static int shm_setup(void **state)
{
    return pair_setup(state, SMEMB_DATA_OP_HOST_SHM);
}

static int pair_teardown(void **state)
{
    struct pair *p = *state;
    if (p) {
        A->smem_trans_destroy(p->a, 0);
        A->smem_trans_destroy(p->b, 0);
        A->smem_trans_uninit(0);
        free(p->buf_b);
        free(p);
    }
    return 0;
}

/* ---- lifecycle ---------------------------------------------------------- */

static void test_create_needs_init(void **state)
{
    (void)state;
    smem_trans_config_t cfg;
    assert_int_equal(A->smem_trans_config_init(&cfg), SM_OK);
    assert_null(A->smem_trans_create(&cfg, 0));
}

static void test_init_refcount(void **state)
{
    (void)state;
    assert_int_equal(A->smem_trans_init(0, 0), SM_OK);
    assert_int_equal(A->smem_trans_init(3, 0), SM_OK);
    A->smem_trans_uninit(0); /* still initialized once */
    smem_trans_t h = mfh_create(A, SMEMB_DATA_OP_HOST_TCP);
    assert_non_null(h);
    uint16_t port = 0;
    assert_int_equal(A->smem_trans_get_rpc_port(h, &port), SM_OK);
    assert_int_not_equal(port, 0);
    /* The last uninit destroys what is left; the stale handle is refused. */
    A->smem_trans_uninit(0);
    assert_int_equal(A->smem_trans_get_rpc_port(h, &port), SM_INVALID_PARAM);
    A->smem_trans_destroy(h, 0); /* harmless */
    A->smem_trans_uninit(0);     /* unbalanced: warns only */
    assert_null(mfh_create(A, SMEMB_DATA_OP_HOST_TCP));
}

static void test_config_init(void **state)
{
    (void)state;
    assert_int_equal(A->smem_trans_config_init(NULL), SM_INVALID_PARAM);
    smem_trans_config_t cfg;
    memset(&cfg, 0xab, sizeof(cfg));
    assert_int_equal(A->smem_trans_config_init(&cfg), SM_OK);
    assert_int_equal(cfg.role, SMEM_TRANS_BOTH);
    assert_int_equal(cfg.dataOpType, SMEMB_DATA_OP_HOST_TCP);
    assert_string_equal(cfg.url, "127.0.0.1:0");
    assert_false(cfg.hcomTlsConfig.tlsEnable);
    assert_int_equal(cfg.nic[0], 0);
}

static void test_create_rejects_vendor_protocols(void **state)
{
    (void)state;
    static const struct {
        uint32_t op;
        const char *name;
    } ops[] = {
        {SMEMB_DATA_OP_SDMA, "device_sdma"},
        {SMEMB_DATA_OP_HOST_RDMA, "host_rdma"},
        {SMEMB_DATA_OP_DEVICE_RDMA, "device_rdma"},
        {SMEMB_DATA_OP_HOST_URMA, "host_urma"},
        {SMEMB_DATA_OP_DEVICE_URMA, "device_urma"},
        {SMEMB_DATA_OP_DEVICE_UBOE, "device_uboe"},
        {0, "unknown"},
        {SMEMB_DATA_OP_HOST_TCP | SMEMB_DATA_OP_HOST_SHM, "unknown"},
    };
    assert_int_equal(A->smem_trans_init(0, 0), SM_OK);
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        capture_begin();
        smem_trans_t h = mfh_create(A, ops[i].op);
        char *log = capture_end();
        assert_null(h);
        assert_non_null(strstr(log, "host-memory implementation"));
        assert_non_null(strstr(log, "needs the vendor"));
        assert_non_null(strstr(log, ops[i].name));
        free(log);
    }
    A->smem_trans_uninit(0);
}

static void test_create_bad_config(void **state)
{
    (void)state;
    assert_int_equal(A->smem_trans_init(0, 0), SM_OK);
    assert_null(A->smem_trans_create(NULL, 0));
    static const char *bad[] = {
        "nohost",       "127.0.0.1:",      ":0",
        "127.0.0.1:x1", "127.0.0.1:70000", "203.0.113.300:0"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        smem_trans_config_t cfg;
        A->smem_trans_config_init(&cfg);
        snprintf(cfg.url, sizeof(cfg.url), "%s", bad[i]);
        assert_null(A->smem_trans_create(&cfg, 0));
    }
    smem_trans_config_t cfg;
    A->smem_trans_config_init(&cfg);
    cfg.hcomTlsConfig.tlsEnable = true;
    assert_null(A->smem_trans_create(&cfg, 0));
    A->smem_trans_config_init(&cfg);
    cfg.role = SMEM_TRANS_BUTT;
    assert_null(A->smem_trans_create(&cfg, 0));
    /* An unterminated url is not read past its 64 bytes. */
    A->smem_trans_config_init(&cfg);
    memset(cfg.url, '1', sizeof(cfg.url));
    assert_null(A->smem_trans_create(&cfg, 0));
    A->smem_trans_uninit(0);
}

static void test_log_level(void **state)
{
    (void)state;
    assert_int_equal(A->smem_set_log_level(-1), SM_INVALID_PARAM);
    assert_int_equal(A->smem_set_log_level(4), SM_INVALID_PARAM);
    assert_int_equal(A->smem_trans_init(0, 0), SM_OK);
    assert_int_equal(A->smem_set_log_level(1), SM_OK); /* info */
    capture_begin();
    smem_trans_t h = mfh_create(A, SMEMB_DATA_OP_HOST_TCP);
    A->smem_trans_destroy(h, 0);
    char *log = capture_end();
    assert_non_null(strstr(log, "created instance 127.0.0.1:"));
    free(log);
    assert_int_equal(A->smem_set_log_level(3), SM_OK); /* errors only */
    capture_begin();
    h = mfh_create(A, SMEMB_DATA_OP_HOST_TCP);
    A->smem_trans_destroy(h, 0);
    assert_null(mfh_create(A, SMEMB_DATA_OP_SDMA));
    log = capture_end();
    assert_null(strstr(log, "created instance"));
    assert_non_null(strstr(log, "ERROR"));
    free(log);
    assert_int_equal(A->smem_set_log_level(2), SM_OK);
    A->smem_trans_uninit(0);
}

static void test_bad_handles(void **state)
{
    (void)state;
    int dummy = 0;
    smem_trans_t bogus = &dummy;
    uint16_t port;
    int32_t result;
    uint64_t id;
    void *addr = &dummy;
    size_t cap = sizeof(dummy);
    void *src[1] = {&dummy}, *dst[1] = {&dummy};
    size_t sz[1] = {1};
    smem_trans_batch_params_t p = {.destUrl = "127.0.0.1:1",
                                   .srcList = src,
                                   .destList = dst,
                                   .sizeList = sz,
                                   .batchSize = 1};
    smem_trans_t hs[] = {NULL, bogus};
    for (int i = 0; i < 2; i++) {
        smem_trans_t h = hs[i];
        assert_int_equal(A->smem_trans_get_rpc_port(h, &port),
                         SM_INVALID_PARAM);
        assert_int_equal(A->smem_trans_register_mem(h, addr, cap, 0),
                         SM_INVALID_PARAM);
        assert_int_equal(A->smem_trans_batch_register_mem(h, &addr, &cap, 1, 0),
                         SM_INVALID_PARAM);
        assert_int_equal(A->smem_trans_deregister_mem(h, addr),
                         SM_INVALID_PARAM);
        assert_int_equal(A->smem_trans_batch_copy(h, &p, &id),
                         SM_INVALID_PARAM);
        assert_int_not_equal(A->smem_trans_batch_status_query(h, 1, &result, 0),
                             SM_OK);
        assert_int_equal(A->smem_trans_set_peer_down_callback(h, NULL, NULL),
                         SM_INVALID_PARAM);
        A->smem_trans_destroy(h, 0); /* no crash */
    }
}

/* ---- registration ------------------------------------------------------- */

static void test_register_errors(void **state)
{
    struct pair *p = *state;
    uint8_t *m = calloc(1, 8192);
    assert_int_equal(A->smem_trans_register_mem(p->a, NULL, 10, 0),
                     SM_INVALID_PARAM);
    assert_int_equal(A->smem_trans_register_mem(p->a, m, 0, 0),
                     SM_INVALID_PARAM);
    assert_int_equal(
        A->smem_trans_register_mem(p->a, (void *)UINTPTR_MAX, 2, 0),
        SM_INVALID_PARAM);
    assert_int_equal(A->smem_trans_register_mem(p->a, m, 4096, 0), SM_OK);
    assert_int_equal(A->smem_trans_register_mem(p->a, m, 4096, 0),
                     SM_DUPLICATED);
    assert_int_equal(A->smem_trans_get_rpc_port(p->a, NULL), SM_INVALID_PARAM);
    assert_int_equal(A->smem_trans_deregister_mem(p->a, NULL),
                     SM_INVALID_PARAM);
    assert_int_equal(A->smem_trans_deregister_mem(p->a, m + 1),
                     SM_OBJECT_NOT_EXISTS);
    assert_int_equal(A->smem_trans_deregister_mem(p->a, m), SM_OK);
    assert_int_equal(A->smem_trans_deregister_mem(p->a, m),
                     SM_OBJECT_NOT_EXISTS);

    void *addrs[3] = {m, m + 4096, NULL};
    size_t caps[3] = {4096, 4096, 16};
    assert_int_equal(A->smem_trans_batch_register_mem(p->a, NULL, caps, 2, 0),
                     SM_INVALID_PARAM);
    assert_int_equal(A->smem_trans_batch_register_mem(p->a, addrs, NULL, 2, 0),
                     SM_INVALID_PARAM);
    assert_int_equal(A->smem_trans_batch_register_mem(p->a, addrs, caps, 0, 0),
                     SM_INVALID_PARAM);
    /* One bad entry: nothing of the batch is registered. */
    assert_int_equal(A->smem_trans_batch_register_mem(p->a, addrs, caps, 3, 0),
                     SM_INVALID_PARAM);
    assert_int_equal(A->smem_trans_deregister_mem(p->a, m),
                     SM_OBJECT_NOT_EXISTS);
    addrs[2] = m;
    assert_int_equal(A->smem_trans_batch_register_mem(p->a, addrs, caps, 3, 0),
                     SM_DUPLICATED);
    assert_int_equal(A->smem_trans_deregister_mem(p->a, m),
                     SM_OBJECT_NOT_EXISTS);
    assert_int_equal(A->smem_trans_batch_register_mem(p->a, addrs, caps, 2, 0),
                     SM_OK);
    assert_int_equal(A->smem_trans_deregister_mem(p->a, m + 4096), SM_OK);
    assert_int_equal(A->smem_trans_deregister_mem(p->a, m), SM_OK);
    free(m);
}

/* ---- batch_copy / query parameter errors -------------------------------- */

static void test_batch_copy_param_errors(void **state)
{
    struct pair *p = *state;
    uint8_t local[64] = {0};
    void *src[2] = {local, local + 8};
    void *dst[2] = {p->buf_b, p->buf_b + 8};
    size_t sz[2] = {8, 8};
    uint64_t id = 0;
    smem_trans_batch_params_t ok = {.destUrl = p->uid_b,
                                    .srcList = src,
                                    .destList = dst,
                                    .sizeList = sz,
                                    .batchSize = 2,
                                    .opcode = SMEM_TRANS_OP_WRITE};
    smem_trans_batch_params_t b;

    assert_int_equal(A->smem_trans_batch_copy(p->a, NULL, &id),
                     SM_INVALID_PARAM);
    b = ok;
    assert_int_equal(A->smem_trans_batch_copy(p->a, &b, NULL),
                     SM_INVALID_PARAM);
#define EXPECT_INVALID(field, value)                                           \
    do {                                                                       \
        b = ok;                                                                \
        b.field = value;                                                       \
        assert_int_equal(A->smem_trans_batch_copy(p->a, &b, &id),              \
                         SM_INVALID_PARAM);                                    \
    } while (0)
    EXPECT_INVALID(destUrl, NULL);
    EXPECT_INVALID(destUrl, "");
    EXPECT_INVALID(destUrl, "no-port");
    EXPECT_INVALID(destUrl, "127.0.0.1:0");
    EXPECT_INVALID(srcList, NULL);
    EXPECT_INVALID(destList, NULL);
    EXPECT_INVALID(sizeList, NULL);
    EXPECT_INVALID(batchSize, 0);
    EXPECT_INVALID(opcode, (smem_trans_opcode_t)7);
#undef EXPECT_INVALID

    /* A bad entry. */
    void *nsrc[2] = {local, NULL};
    b = ok;
    b.srcList = nsrc;
    assert_int_equal(A->smem_trans_batch_copy(p->a, &b, &id), SM_INVALID_PARAM);
    size_t zsz[2] = {8, 0};
    b = ok;
    b.sizeList = zsz;
    assert_int_equal(A->smem_trans_batch_copy(p->a, &b, &id), SM_INVALID_PARAM);
    void *wrap[2] = {p->buf_b, (void *)(UINTPTR_MAX - 3)};
    b = ok;
    b.destList = wrap;
    assert_int_equal(A->smem_trans_batch_copy(p->a, &b, &id), SM_INVALID_PARAM);

    /* Unknown peer: a port where nobody listens. */
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    assert_int_equal(bind(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(getsockname(s, (struct sockaddr *)&sa, &sl), 0);
    char url[64];
    snprintf(url, sizeof(url), "127.0.0.1:%u", (unsigned)ntohs(sa.sin_port));
    close(s);
    b = ok;
    b.destUrl = url;
    assert_int_equal(A->smem_trans_batch_copy(p->a, &b, &id), SM_INVALID_PARAM);

    /* Still usable afterwards. */
    b = ok;
    assert_int_equal(A->smem_trans_batch_copy(p->a, &b, &id), SM_OK);
    int32_t result = -1;
    assert_int_equal(mfh_wait(A, p->a, id, &result, 10), SM_OK);
    assert_int_equal(result, 0);
}

static void test_query_errors(void **state)
{
    struct pair *p = *state;
    int32_t result = 77;
    uint8_t local[16] = {1};
    void *src[1] = {local}, *dst[1] = {p->buf_b};
    size_t sz[1] = {sizeof(local)};
    smem_trans_batch_params_t b = {.destUrl = p->uid_b,
                                   .srcList = src,
                                   .destList = dst,
                                   .sizeList = sz,
                                   .batchSize = 1,
                                   .opcode = SMEM_TRANS_OP_WRITE};
    uint64_t id = 0;
    assert_int_equal(A->smem_trans_batch_copy(p->a, &b, &id), SM_OK);
    assert_int_equal(A->smem_trans_batch_status_query(p->a, id, NULL, 0),
                     SM_INVALID_PARAM);
    /* Unknown ids, and ids of the other instance, are errors. */
    assert_int_equal(A->smem_trans_batch_status_query(p->a, 0, &result, 0),
                     SM_OBJECT_NOT_EXISTS);
    assert_int_equal(
        A->smem_trans_batch_status_query(p->a, id + 1000, &result, 0),
        SM_OBJECT_NOT_EXISTS);
    assert_int_equal(A->smem_trans_batch_status_query(p->b, id, &result, 0),
                     SM_OBJECT_NOT_EXISTS);
    assert_int_equal(result, 77); /* untouched by the failed queries */
    assert_int_equal(mfh_wait(A, p->a, id, &result, 10), SM_OK);
    assert_int_equal(result, 0);
}

/* ---- data path ---------------------------------------------------------- */

static void test_write_read_consume_once(void **state)
{
    struct pair *p = *state;
    static const size_t sizes[] = {
        1,       2, 63, 4096, 4097, (1u << 20) - 1, 1u << 20, (1u << 20) + 1,
        3u << 20};
    uint8_t *local = malloc(4u << 20);
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        size_t n = sizes[k], off = k & 1 ? 5 : 0;
        memset(p->buf_b, 0, p->size_b);
        mfh_fill(local, n, (uint32_t)k);
        void *src[1] = {local}, *dst[1] = {p->buf_b + off};
        size_t sz[1] = {n};
        smem_trans_batch_params_t b = {.destUrl = p->uid_b,
                                       .srcList = src,
                                       .destList = dst,
                                       .sizeList = sz,
                                       .batchSize = 1,
                                       .opcode = SMEM_TRANS_OP_WRITE};
        uint64_t id = 0;
        assert_int_equal(A->smem_trans_batch_copy(p->a, &b, &id), SM_OK);
        assert_int_not_equal(id, 0);
        int32_t result = -1;
        assert_int_equal(mfh_wait(A, p->a, id, &result, 10), SM_OK);
        assert_int_equal(result, 0);
        /* Consumed: a second query is an error and leaves result alone. */
        result = 55;
        assert_int_equal(A->smem_trans_batch_status_query(p->a, id, &result, 0),
                         SM_OBJECT_NOT_EXISTS);
        assert_int_equal(result, 55);
        assert_int_equal(mfh_check(p->buf_b + off, n, (uint32_t)k), n);
        if (off)
            assert_int_equal(p->buf_b[off - 1], 0);
        assert_int_equal(p->buf_b[off + n], 0);

        /* Read it back into a cleared buffer. */
        memset(local, 0, n + 1);
        b.opcode = SMEM_TRANS_OP_READ;
        assert_int_equal(A->smem_trans_batch_copy(p->a, &b, &id), SM_OK);
        assert_int_equal(mfh_wait(A, p->a, id, &result, 10), SM_OK);
        assert_int_equal(result, 0);
        assert_int_equal(mfh_check(local, n, (uint32_t)k), n);
        assert_int_equal(local[n], 0);
        assert_int_equal(A->smem_trans_batch_status_query(p->a, id, &result, 0),
                         SM_OBJECT_NOT_EXISTS);
    }
    free(local);
}

static void test_multi_entry_batch(void **state)
{
    struct pair *p = *state;
    enum { N = 16 };
    uint8_t *local = malloc(p->size_b);
    mfh_fill(local, p->size_b, 9);
    memset(p->buf_b, 0, p->size_b);
    void *src[N], *dst[N];
    size_t sz[N];
    size_t off = 0;
    for (int i = 0; i < N; i++) {
        sz[i] = (size_t)(i * 37 + 1) * (i % 3 == 0 ? 1025 : 1);
        src[i] = local + off;
        dst[i] = p->buf_b + off;
        off += sz[i] + 3; /* gaps stay zero */
    }
    assert_true(off < p->size_b);
    smem_trans_batch_params_t b = {.destUrl = p->uid_b,
                                   .srcList = src,
                                   .destList = dst,
                                   .sizeList = sz,
                                   .batchSize = N,
                                   .opcode = SMEM_TRANS_OP_WRITE};
    uint64_t id;
    int32_t result = -1;
    assert_int_equal(A->smem_trans_batch_copy(p->a, &b, &id), SM_OK);
    assert_int_equal(mfh_wait(A, p->a, id, &result, 10), SM_OK);
    assert_int_equal(result, 0);
    for (int i = 0; i < N; i++) {
        size_t o = (size_t)((uint8_t *)dst[i] - p->buf_b);
        assert_memory_equal(p->buf_b + o, local + o, sz[i]);
        for (int g = 0; g < 3; g++)
            assert_int_equal(p->buf_b[o + sz[i] + (size_t)g], 0);
    }
    free(local);
}

/* Entries 0..2 are fine, entry 3 reaches past the registered range: the
 * batch fails with SM_INVALID_PARAM and nothing of it is written or read. */
static void test_range_violation_touches_nothing(void **state)
{
    struct pair *p = *state;
    uint8_t *local = malloc(2u << 20);
    mfh_fill(local, 2u << 20, 3);
    memset(p->buf_b, 0, p->size_b);
    uint8_t *end = p->buf_b + p->size_b;
    void *src[4] = {local, local + 100, local + 200, local + 300};
    void *dst[4] = {p->buf_b, p->buf_b + 4096, p->buf_b + 8192, end - 10};
    size_t sz[4] = {100, 100, 3u << 19, 11};
    smem_trans_batch_params_t b = {.destUrl = p->uid_b,
                                   .srcList = src,
                                   .destList = dst,
                                   .sizeList = sz,
                                   .batchSize = 4,
                                   .opcode = SMEM_TRANS_OP_WRITE};
    uint64_t id;
    int32_t result = 0;
    assert_int_equal(A->smem_trans_batch_copy(p->a, &b, &id), SM_OK);
    assert_int_equal(mfh_wait(A, p->a, id, &result, 10), SM_OK);
    assert_int_equal(result, SM_INVALID_PARAM);
    for (size_t i = 0; i < p->size_b; i++)
        if (p->buf_b[i] != 0)
            fail_msg("byte %zu of the target was written", i);

    /* The same as a read: the local buffer is not written. */
    uint8_t *rl = calloc(1, 2u << 20);
    void *rsrc[4] = {rl, rl + 100, rl + 200, rl + 300};
    b.srcList = rsrc;
    b.opcode = SMEM_TRANS_OP_READ;
    memset(p->buf_b, 0x5a, p->size_b);
    assert_int_equal(A->smem_trans_batch_copy(p->a, &b, &id), SM_OK);
    assert_int_equal(mfh_wait(A, p->a, id, &result, 10), SM_OK);
    assert_int_equal(result, SM_INVALID_PARAM);
    for (size_t i = 0; i < (2u << 20); i++)
        if (rl[i] != 0)
            fail_msg("byte %zu of the local buffer was written", i);

    /* One small entry entirely outside, and memory of the peer that was
     * never registered (a stack address of ours is not the peer's). */
    memset(p->buf_b, 0, p->size_b);
    assert_int_equal(
        mfh_copy1(A, p->a, p->uid_b, SMEM_TRANS_OP_WRITE, local, end, 1),
        SM_INVALID_PARAM);
    assert_int_equal(mfh_copy1(A, p->a, p->uid_b, SMEM_TRANS_OP_WRITE, local,
                               p->buf_b - 1, 2),
                     SM_INVALID_PARAM);
    assert_int_equal(p->buf_b[0], 0);
    assert_int_equal(mfh_copy1(A, p->a, p->uid_b, SMEM_TRANS_OP_WRITE, local,
                               end - 4096, (2u << 20)),
                     SM_INVALID_PARAM);
    assert_int_equal(end[-1], 0);

    /* Deregistered memory is refused; registered again, it works. */
    assert_int_equal(A->smem_trans_deregister_mem(p->b, p->buf_b), SM_OK);
    assert_int_equal(
        mfh_copy1(A, p->a, p->uid_b, SMEM_TRANS_OP_WRITE, local, p->buf_b, 8),
        SM_INVALID_PARAM);
    assert_int_equal(mfh_copy1(A, p->a, p->uid_b, SMEM_TRANS_OP_READ, rl,
                               p->buf_b, 3u << 20),
                     SM_INVALID_PARAM);
    assert_int_equal(p->buf_b[0], 0);
    /* Two adjacent registrations cover a copy across their border. */
    void *halves[2] = {p->buf_b, p->buf_b + (p->size_b / 2)};
    size_t hcap[2] = {p->size_b / 2, p->size_b / 2};
    assert_int_equal(A->smem_trans_batch_register_mem(p->b, halves, hcap, 2, 0),
                     SM_OK);
    assert_int_equal(mfh_copy1(A, p->a, p->uid_b, SMEM_TRANS_OP_WRITE, local,
                               p->buf_b + p->size_b / 2 - 10, 1u << 20),
                     0);
    assert_memory_equal(p->buf_b + p->size_b / 2 - 10, local, 1u << 20);
    free(local);
    free(rl);
}

/* A local buffer we cannot access fails that batch (no crash), but the
 * peer stays usable. */
static void test_bad_local_buffer(void **state)
{
    struct pair *p = *state;
    if (getenv("MFH_UNDER_VALGRIND"))
        skip(); /* memcheck reports the deliberate bad buffer */
    size_t n = 2u << 20;
    uint8_t *bad = mmap(NULL, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(bad != MAP_FAILED);
    assert_int_equal(
        mfh_copy1(A, p->a, p->uid_b, SMEM_TRANS_OP_WRITE, bad, p->buf_b, n),
        SM_ERROR);
    assert_int_equal(
        mfh_copy1(A, p->a, p->uid_b, SMEM_TRANS_OP_READ, bad, p->buf_b, 100),
        SM_ERROR);
    munmap(bad, n);
    uint8_t good[64];
    mfh_fill(good, sizeof(good), 77);
    assert_int_equal(mfh_copy1(A, p->a, p->uid_b, SMEM_TRANS_OP_WRITE, good,
                               p->buf_b, sizeof(good)),
                     0);
    assert_int_equal(mfh_check(p->buf_b, sizeof(good), 77), sizeof(good));
}

/* ---- thread safety ------------------------------------------------------ */

struct thr_arg {
    struct pair *p;
    int idx;
    int failures;
};

static void *copier(void *arg)
{
    struct thr_arg *t = arg;
    struct pair *p = t->p;
    size_t chunk = p->size_b / 4;
    uint8_t *local = malloc(chunk);
    uint8_t *back = malloc(chunk);
    for (int round = 0; round < 20; round++) {
        size_t n = 1 + ((size_t)round * 7919 * (size_t)(t->idx + 1)) % chunk;
        uint32_t seed = (uint32_t)(t->idx * 100 + round);
        mfh_fill(local, n, seed);
        uint8_t *remote = p->buf_b + (size_t)t->idx * chunk;
        if (mfh_copy1(A, p->a, p->uid_b, SMEM_TRANS_OP_WRITE, local, remote,
                      n) != 0 ||
            mfh_copy1(A, p->a, p->uid_b, SMEM_TRANS_OP_READ, back, remote, n) !=
                0 ||
            mfh_check(back, n, seed) != n)
            t->failures++;
    }
    free(local);
    free(back);
    return NULL;
}

static void test_concurrent_batches(void **state)
{
    struct pair *p = *state;
    pthread_t th[4];
    struct thr_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (struct thr_arg){.p = p, .idx = i};
        assert_int_equal(pthread_create(&th[i], NULL, copier, &args[i]), 0);
    }
    /* Join them all before asserting: a failed assertion leaves the test. */
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++)
        assert_int_equal(args[i].failures, 0);
}

/* ---- teardown with batches in flight; peer down ------------------------ */

static uint64_t submit_big(struct pair *p, smem_trans_t from, uint8_t *local,
                           smem_trans_opcode_t op)
{
    void *src[1] = {local}, *dst[1] = {p->buf_b};
    size_t sz[1] = {p->size_b};
    smem_trans_batch_params_t b = {.destUrl = p->uid_b,
                                   .srcList = src,
                                   .destList = dst,
                                   .sizeList = sz,
                                   .batchSize = 1,
                                   .opcode = op};
    uint64_t id = 0;
    assert_int_equal(A->smem_trans_batch_copy(from, &b, &id), SM_OK);
    return id;
}

static void test_destroy_initiator_in_flight(void **state)
{
    struct pair *p = *state;
    uint8_t *local = calloc(1, p->size_b);
    for (int i = 0; i < 16; i++)
        submit_big(p, p->a, local,
                   i & 1 ? SMEM_TRANS_OP_READ : SMEM_TRANS_OP_WRITE);
    double t0 = mfh_now();
    A->smem_trans_destroy(p->a, 0);
    assert_true(mfh_now() - t0 < 5.0);
    p->a = NULL;
    free(local); /* safe: destroy returned, nothing touches it any more */
}

/* The target instance goes away mid-batch: the initiator's callback fires
 * with its unique id and the batches finish (no hang), each completed or
 * failed with SM_NOT_CONNECTED -- over host_tcp some fail (the target's
 * sockets go).  Over host_shm a copy lands in the target's memory, which
 * this process still holds, until the initiator sees the peer go: only
 * the copies still queued then fail, and under valgrind, whose slowed
 * threads let that take about a second, all 128 were sometimes done by
 * then. */
static void test_destroy_target_in_flight(void **state)
{
    struct pair *p = *state;
    struct mfh_down_rec rec = {.lock = PTHREAD_MUTEX_INITIALIZER};
    assert_int_equal(
        A->smem_trans_set_peer_down_callback(p->a, mfh_on_down, &rec), SM_OK);
    uint8_t *local = calloc(1, p->size_b);
    enum { N = 128 };
    uint64_t ids[N];
    for (int i = 0; i < N; i++)
        ids[i] = submit_big(p, p->a, local, SMEM_TRANS_OP_WRITE);
    A->smem_trans_destroy(p->b, 0);
    p->b = NULL;
    int failed = 0;
    for (int i = 0; i < N; i++) {
        int32_t result = 0;
        assert_int_equal(mfh_wait(A, p->a, ids[i], &result, 15), SM_OK);
        if (result != 0) {
            failed++;
            assert_int_equal(result, SM_NOT_CONNECTED);
        }
    }
    print_message("%d of %d copies failed with the target gone\n", failed, N);
    if (p->proto == SMEMB_DATA_OP_HOST_TCP)
        assert_true(failed > 0);
    double end = mfh_now() + 10;
    while (mfh_now() < end) {
        pthread_mutex_lock(&rec.lock);
        int calls = rec.calls;
        pthread_mutex_unlock(&rec.lock);
        if (calls)
            break;
        mfh_sleep_ms(5);
    }
    assert_int_equal(rec.calls, 1);
    assert_string_equal(rec.uid, p->uid_b);
    /* Nobody there any more. */
    assert_int_equal(
        mfh_copy1(A, p->a, p->uid_b, SMEM_TRANS_OP_WRITE, local, local, 1),
        SM_INVALID_PARAM);
    A->smem_trans_set_peer_down_callback(p->a, NULL, NULL);
    free(local);
}

static void test_uninit_in_flight(void **state)
{
    struct pair *p = *state;
    uint8_t *local = calloc(1, p->size_b);
    for (int i = 0; i < 8; i++)
        submit_big(p, p->a, local, SMEM_TRANS_OP_WRITE);
    double t0 = mfh_now();
    A->smem_trans_uninit(0); /* last reference: destroys a and b */
    assert_true(mfh_now() - t0 < 5.0);
    uint16_t port;
    assert_int_equal(A->smem_trans_get_rpc_port(p->a, &port), SM_INVALID_PARAM);
    p->a = p->b = NULL;
    assert_int_equal(A->smem_trans_init(0, 0), SM_OK); /* for teardown */
    free(local);
}

/* dlclose with instances alive and batches in flight: the library stops
 * its threads as it unloads (no crash), and loads again cleanly. */
static void test_unload_in_flight(void **state)
{
    struct pair *p = *state;
    uint8_t *local = calloc(1, p->size_b);
    for (int i = 0; i < 8; i++)
        submit_big(p, p->a, local, SMEM_TRANS_OP_WRITE);
    assert_int_equal(dlclose(api.dl), 0);
    assert_int_equal(mfh_api_load(&api), 0);
    uint16_t port;
    assert_int_equal(A->smem_trans_get_rpc_port(p->a, &port), SM_INVALID_PARAM);
    p->a = p->b = NULL;
    assert_int_equal(A->smem_trans_init(0, 0), SM_OK); /* for teardown */
    free(local);
}

/* smem_trans_deregister_mem returns only when no server copy into the range
 * is still running: once it has returned, the owner may free or reuse the
 * memory, and no byte of an in-flight batch may land there afterwards.
 * (host_tcp: the target's server does the copy.  Cross-memory copies of
 * host_shm cannot be fenced this way; see docs/mf_host.md.) */
static void test_deregister_waits_for_server_copy(void **state)
{
    struct pair *p = *state;
    uint8_t *local = malloc(p->size_b);
    memset(local, 0xab, p->size_b);
    int landed_late = 0;
    for (int round = 0; round < 32; round++) {
        uint64_t id = submit_big(p, p->a, local, SMEM_TRANS_OP_WRITE);
        /* Let a few slices reach the server, then pull the range. */
        for (volatile int spin = 0; spin < (round % 16) * 10000; spin++)
            ;
        assert_int_equal(A->smem_trans_deregister_mem(p->b, p->buf_b), SM_OK);
        memset(p->buf_b, 0, p->size_b); /* the owner reuses its memory */
        int32_t result = 0;
        assert_int_equal(mfh_wait(A, p->a, id, &result, 10), SM_OK);
        for (size_t i = 0; i < p->size_b; i++)
            if (p->buf_b[i] != 0) {
                landed_late++;
                break;
            }
        assert_int_equal(
            A->smem_trans_register_mem(p->b, p->buf_b, p->size_b, 0), SM_OK);
    }
    free(local);
    assert_int_equal(landed_late, 0);
}

#define PAIR_TEST(fn)                                                          \
    cmocka_unit_test_setup_teardown(fn, tcp_setup, pair_teardown),             \
        cmocka_unit_test_setup_teardown(fn, shm_setup, pair_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_needs_init),
        cmocka_unit_test(test_init_refcount),
        cmocka_unit_test(test_config_init),
        cmocka_unit_test(test_create_rejects_vendor_protocols),
        cmocka_unit_test(test_create_bad_config),
        cmocka_unit_test(test_log_level),
        cmocka_unit_test(test_bad_handles),
        PAIR_TEST(test_register_errors),
        PAIR_TEST(test_batch_copy_param_errors),
        PAIR_TEST(test_query_errors),
        PAIR_TEST(test_write_read_consume_once),
        PAIR_TEST(test_multi_entry_batch),
        PAIR_TEST(test_range_violation_touches_nothing),
        PAIR_TEST(test_bad_local_buffer),
        PAIR_TEST(test_concurrent_batches),
        PAIR_TEST(test_destroy_initiator_in_flight),
        PAIR_TEST(test_destroy_target_in_flight),
        PAIR_TEST(test_uninit_in_flight),
        PAIR_TEST(test_unload_in_flight),
        cmocka_unit_test_setup_teardown(test_deregister_waits_for_server_copy,
                                        tcp_setup, pair_teardown),
    };
    if (getenv("MFH_TEST_FILTER")) /* e.g. MFH_TEST_FILTER='*concurrent*' */
        cmocka_set_test_filter(getenv("MFH_TEST_FILTER"));
    return cmocka_run_group_tests(tests, group_setup, NULL);
}

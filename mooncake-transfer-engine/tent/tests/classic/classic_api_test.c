/* The classic C API (transfer_engine_c.h), function by function: the calls
 * that succeed, and every kind of bad input (NULL, unknown ids, a second
 * free) answered with Mooncake's codes, never a crash.  Engines run in this
 * process over P2PHANDSHAKE on 127.0.0.1.  The test hook of classic.h
 * (the tent engine underneath) tells which transport carried a task.
 * MF_HOST_LIB (when built) is mf_host's libmf_smem.so, for "ascend". */
// clang-format off
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
// clang-format on

#include "../common/meta_server.h"
#include "classic/classic.h"
#include "transfer_engine_c.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MIB ((size_t)1 << 20)

static char g_conf[64];

/* ---- helpers ------------------------------------------------------------ */

static transfer_engine_t p2p(int auto_discover)
{
    transfer_engine_t e =
        createTransferEngine("P2PHANDSHAKE", "127.0.0.1", "", 0, auto_discover);
    assert_non_null(e);
    return e;
}

static void name_of(transfer_engine_t e, char *buf, size_t cap)
{
    assert_int_equal(getLocalIpAndPort(e, buf, cap), 0);
}

static long now_ms(void)
{
    return ms_now_ms();
}

/* Polls tasks [first, first + n) until each is terminal (10 s bound);
 * every state seen on the way must be Mooncake's WAITING.  Returns how
 * many completed. */
static size_t wait_tasks(transfer_engine_t e, batch_id_t b, size_t first,
                         size_t n)
{
    size_t done = 0;
    for (size_t i = first; i < first + n; i++) {
        long t0 = now_ms();
        for (;;) {
            transfer_status_t st = {.status = -1};
            assert_int_equal(getTransferStatus(e, b, i, &st), 0);
            if (st.status == STATUS_COMPLETED) {
                done++;
                break;
            }
            if (st.status == STATUS_FAILED || st.status == STATUS_CANCELED ||
                st.status == STATUS_TIMEOUT)
                break;
            assert_int_equal(st.status, STATUS_WAITING);
            assert_true(now_ms() - t0 < 10000);
        }
    }
    return done;
}

/* The transport that ran a task, through the tent engine underneath. */
static const char *transport_of(transfer_engine_t e, batch_id_t b, size_t i)
{
    static char name[32];
    assert_int_equal(
        tent_task_transport(classic_tent_engine(e), b, i, name, sizeof(name)),
        0);
    return name;
}

/* Writes len bytes from src (on a) to dst (on b), one request; returns the
 * transport that ran it. */
static const char *write_one(transfer_engine_t a, transfer_engine_t b,
                             void *src, void *dst, size_t len)
{
    char nb[64];
    name_of(b, nb, sizeof(nb));
    segment_id_t seg = openSegment(a, nb);
    assert_true(seg > 0);
    batch_id_t bid = allocateBatchID(a, 1);
    assert_true(bid != INVALID_BATCH);
    transfer_request_t r = {OPCODE_WRITE, src, seg, (uint64_t)(uintptr_t)dst,
                            len};
    assert_int_equal(submitTransfer(a, bid, &r, 1), 0);
    assert_int_equal(wait_tasks(a, bid, 0, 1), 1);
    const char *t = transport_of(a, bid, 0);
    assert_int_equal(freeBatchID(a, bid), 0);
    return t;
}

/* stderr into a temporary file, to count warnings. */
static int g_saved_fd = -1, g_cap_fd = -1;

static void capture_begin(void)
{
    char path[] = "/tmp/classic-stderr-XXXXXX";
    fflush(stderr);
    g_cap_fd = mkstemp(path);
    assert_true(g_cap_fd >= 0);
    unlink(path);
    g_saved_fd = dup(2);
    dup2(g_cap_fd, 2);
}

static char *capture_end(void)
{
    fflush(stderr);
    dup2(g_saved_fd, 2);
    close(g_saved_fd);
    off_t n = lseek(g_cap_fd, 0, SEEK_END);
    char *text = calloc(1, (size_t)n + 1);
    assert_non_null(text);
    assert_int_equal(pread(g_cap_fd, text, (size_t)n, 0), n);
    close(g_cap_fd);
    fputs(text, stderr); /* still shown */
    return text;
}

/* Lines of text that contain both a and b. */
static int lines_with(const char *text, const char *a, const char *b)
{
    int n = 0;
    for (const char *l = text; *l;) {
        const char *end = strchr(l, '\n');
        size_t len = end ? (size_t)(end - l) : strlen(l);
        char *line = strndup(l, len);
        if (strstr(line, a) && strstr(line, b))
            n++;
        free(line);
        l += len + (end ? 1 : 0);
    }
    return n;
}

/* ---- createTransferEngine ----------------------------------------------- */

static void test_create_bad_arguments(void **state)
{
    (void)state;
    assert_null(createTransferEngine(NULL, "127.0.0.1", "", 0, 1));
    assert_null(createTransferEngine("P2PHANDSHAKE", NULL, "", 0, 1));
    assert_null(createTransferEngine("", "127.0.0.1", "", 0, 1));
    assert_null(createTransferEngine("zookeeper://127.0.0.1:2181", "127.0.0.1",
                                     "", 0, 1));
    assert_null(createTransferEngine("etcd://", "127.0.0.1", "", 0, 1));
    assert_null(
        createTransferEngine("P2PHANDSHAKE", "127.0.0.1:99999", "", 0, 1));
    assert_null(
        createTransferEngine("P2PHANDSHAKE", "127.0.0.1:1:npu_x", "", 0, 1));
    /* Metadata services that do not answer: the engine does not start. */
    char conn[128];
    int port = ms_free_port();
    const char *schemes[] = {"etcd://", "redis://", "http://", ""};
    for (size_t i = 0; i < sizeof(schemes) / sizeof(schemes[0]); i++) {
        snprintf(conn, sizeof(conn), "%s127.0.0.1:%d%s", schemes[i], port,
                 strcmp(schemes[i], "http://") == 0 ? "/metadata" : "");
        assert_null(
            createTransferEngine(conn, "classic-api-test", "127.0.0.1", 0, 1));
    }
    destroyTransferEngine(NULL);
}

static void test_create_p2p_names(void **state)
{
    (void)state;
    /* As Mooncake: the port of local_server_name does not matter with
     * P2PHANDSHAKE, so two engines given the same host:port both start. */
    transfer_engine_t a =
        createTransferEngine("P2PHANDSHAKE", "127.0.0.1:15555", "", 0, 1);
    transfer_engine_t b =
        createTransferEngine("P2PHANDSHAKE", "127.0.0.1:15555", "", 15555, 1);
    assert_non_null(a);
    assert_non_null(b);
    char na[64], nb[64];
    name_of(a, na, sizeof(na));
    name_of(b, nb, sizeof(nb));
    assert_string_not_equal(na, nb);
    assert_memory_equal(na, "127.0.0.1:", 10);
    /* Mooncake's findAvailableTcpPort: a free port of 15000..17000
     * (MC_MIN_RPC_PORT..MC_MAX_RPC_PORT) */
    int pa = atoi(na + 10), pb = atoi(nb + 10);
    assert_true(pa >= 15000 && pa <= 17000);
    assert_true(pb >= 15000 && pb <= 17000);
    /* the name peers open is the address getLocalIpAndPort gives */
    char seg[64];
    assert_int_equal(
        tent_segment_name(classic_tent_engine(a), seg, sizeof(seg)), 0);
    assert_string_equal(seg, na);
    /* and each reaches the other by it */
    enum { LEN = 64 * 1024 };
    char *ba = malloc(LEN), *bb = calloc(1, LEN);
    assert_non_null(ba);
    assert_non_null(bb);
    for (int i = 0; i < LEN; i++)
        ba[i] = (char)(i * 7 + 3);
    assert_int_equal(registerLocalMemory(a, ba, LEN, "*", 1), 0);
    assert_int_equal(registerLocalMemory(b, bb, LEN, "*", 1), 0);
    write_one(a, b, ba, bb, LEN);
    assert_memory_equal(ba, bb, LEN);
    for (int i = 0; i < LEN; i++)
        bb[i] = (char)(i * 13 + 1);
    write_one(b, a, bb, ba, LEN);
    assert_memory_equal(ba, bb, LEN);
    /* Ascend's host:port:npu_<id>, and ip_or_host_name when the name has
     * no host. */
    transfer_engine_t c =
        createTransferEngine("P2PHANDSHAKE", "127.0.0.1:0:npu_2", "", 0, 1);
    transfer_engine_t d =
        createTransferEngine("P2PHANDSHAKE", "", "127.0.0.1", 0, 1);
    assert_non_null(c);
    assert_non_null(d);
    name_of(d, nb, sizeof(nb));
    assert_memory_equal(nb, "127.0.0.1:", 10);
    destroyTransferEngine(a);
    destroyTransferEngine(b);
    destroyTransferEngine(c);
    destroyTransferEngine(d);
    free(ba);
    free(bb);
}

static void test_local_ip_and_port(void **state)
{
    (void)state;
    transfer_engine_t e = p2p(1);
    char buf[64];
    assert_int_equal(getLocalIpAndPort(NULL, buf, sizeof(buf)),
                     CLASSIC_ERR_INVALID_ARGUMENT);
    assert_int_equal(getLocalIpAndPort(e, NULL, sizeof(buf)),
                     CLASSIC_ERR_INVALID_ARGUMENT);
    assert_int_equal(getLocalIpAndPort(e, buf, 0),
                     CLASSIC_ERR_INVALID_ARGUMENT);
    assert_int_equal(getLocalIpAndPort(e, buf, 8),
                     CLASSIC_ERR_INVALID_ARGUMENT);
    assert_int_equal(getLocalIpAndPort(e, buf, sizeof(buf)), 0);
    char host[64];
    uint16_t port = 0;
    assert_int_equal(tent_rpc_server_addr_port(classic_tent_engine(e), host,
                                               sizeof(host), &port),
                     0);
    char want[80];
    snprintf(want, sizeof(want), "%s:%u", host, (unsigned)port);
    assert_string_equal(buf, want);
    destroyTransferEngine(e);
}

/* A bare IPv6 address (as SGLang passes it) or one in brackets. */
static void test_ipv6(void **state)
{
    (void)state;
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    struct sockaddr_in6 sa = {.sin6_family = AF_INET6,
                              .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    bool v6 = fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    if (fd >= 0)
        close(fd);
    if (!v6)
        skip(); /* no IPv6 loopback on this machine */
    transfer_engine_t a = createTransferEngine("P2PHANDSHAKE", "::1", "", 0, 1);
    transfer_engine_t b =
        createTransferEngine("P2PHANDSHAKE", "[::1]:15001", "", 0, 1);
    assert_non_null(a);
    assert_non_null(b);
    char na[64], nb[64];
    name_of(a, na, sizeof(na));
    name_of(b, nb, sizeof(nb));
    assert_memory_equal(na, "[::1]:", 6);
    assert_true(openSegment(a, nb) > 0);
    destroyTransferEngine(a);
    destroyTransferEngine(b);
}

/* ---- destroy while another thread is inside a call ---------------------- */

struct blocked_open {
    transfer_engine_t e;
    char name[64];
    atomic_int open_done, destroy_done; /* order of return: 1 = first */
    atomic_int next;
};

static void *blocked_open_thread(void *arg)
{
    struct blocked_open *b = arg;
    (void)openSegment(b->e, b->name); /* fails once the peer hangs up */
    atomic_store(&b->open_done, atomic_fetch_add(&b->next, 1) + 1);
    return NULL;
}

static void *destroy_thread(void *arg)
{
    struct blocked_open *b = arg;
    destroyTransferEngine(b->e);
    atomic_store(&b->destroy_done, atomic_fetch_add(&b->next, 1) + 1);
    return NULL;
}

/* destroyTransferEngine from one thread while another is inside openSegment
 * (its peer accepted the connection and says nothing): destroy begins at
 * once (new calls fail) and returns only after the call inside returned;
 * nothing crashes (the classic layer serialises what tent_destroy_engine
 * leaves to its caller; issue 43, item 6). */
static void test_destroy_waits_for_a_call_inside(void **state)
{
    (void)state;
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(lfd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    socklen_t sl = sizeof(sa);
    assert_int_equal(getsockname(lfd, (struct sockaddr *)&sa, &sl), 0);
    assert_int_equal(listen(lfd, 4), 0);

    static struct blocked_open b;
    memset(&b, 0, sizeof(b));
    b.e = p2p(1);
    snprintf(b.name, sizeof(b.name), "127.0.0.1:%u", ntohs(sa.sin_port));
    pthread_t ta, tb;
    assert_int_equal(pthread_create(&ta, NULL, blocked_open_thread, &b), 0);
    /* the call is inside the engine once its connection arrives */
    int cfd = accept(lfd, NULL, NULL);
    assert_true(cfd >= 0);
    struct classic_engine *ce = b.e;
    assert_int_equal(pthread_create(&tb, NULL, destroy_thread, &b), 0);
    long until = now_ms() + 10000;
    while (!atomic_load(&ce->closing)) {
        assert_true(now_ms() < until); /* destroy never began */
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    /* destroy has begun: it waits while the call is inside */
    assert_int_equal(atomic_load(&b.open_done), 0);
    assert_int_equal(atomic_load(&b.destroy_done), 0);
    close(cfd); /* the peer hangs up: openSegment fails and returns */
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    assert_int_equal(atomic_load(&b.open_done), 1);
    assert_int_equal(atomic_load(&b.destroy_done), 2);
    close(lfd);
}

/* ---- installTransport --------------------------------------------------- */

static void test_install_transport(void **state)
{
    (void)state;
    transfer_engine_t e = p2p(0);
    assert_null(installTransport(NULL, "tcp", NULL));
    assert_null(installTransport(e, NULL, NULL));
    assert_null(installTransport(e, "carrier-pigeon", NULL));
    char before[64], after[64];
    name_of(e, before, sizeof(before));
    transport_t tcp = installTransport(e, "tcp", NULL);
    assert_non_null(tcp);
    assert_ptr_equal(installTransport(e, "tcp", NULL), tcp);
    /* No RDMA, EFA or NVLink here: tcp runs, with one warning per protocol
     * that names what was asked and what runs. */
    capture_begin();
    void *args[2] = {(void *)"{}", NULL};
    transport_t r1 = installTransport(e, "rdma", args);
    transport_t r2 = installTransport(e, "rdma", NULL);
    transport_t f = installTransport(e, "efa", NULL);
    transport_t n = installTransport(e, "nvlink", NULL);
    char *log = capture_end();
    assert_ptr_equal(r1, tcp);
    assert_ptr_equal(r2, tcp);
    assert_ptr_equal(f, tcp);
    assert_ptr_equal(n, tcp);
    assert_int_equal(lines_with(log, "'rdma'", "tcp"), 1);
    assert_int_equal(lines_with(log, "'efa'", "tcp"), 1);
    /* rdma and efa first tried libfabric with their provider */
    assert_int_equal(lines_with(log, "'efa'", "libfabric provider efa"), 1);
    assert_int_equal(lines_with(log, "'rdma'", "provider verbs;ofi_rxm"), 1);
    assert_int_equal(lines_with(log, "'nvlink'", "tcp"), 1);
    free(log);
    /* a provider name too long to keep is refused, not cut short */
    char longname[101];
    memset(longname, 'p', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    setenv("MC_FABRIC_PROVIDER_CXI", longname, 1);
    capture_begin();
    transport_t x = installTransport(e, "cxi", NULL);
    log = capture_end();
    unsetenv("MC_FABRIC_PROVIDER_CXI");
    assert_ptr_equal(x, tcp);
    assert_int_equal(lines_with(log, "'cxi'", "longer than 63 bytes"), 1);
    free(log);
    name_of(e, after, sizeof(after));
    assert_string_equal(before, after);
    assert_int_equal(uninstallTransport(e, "tcp"), 0);
    assert_int_equal(uninstallTransport(e, NULL), CLASSIC_ERR_INVALID_ARGUMENT);
    assert_int_equal(uninstallTransport(NULL, "tcp"),
                     CLASSIC_ERR_INVALID_ARGUMENT);
    destroyTransferEngine(e);
}

/* "shm" after creation restarts the engine with shm, on the same address;
 * notifications that arrived before are kept. */
static void test_install_shm_restarts(void **state)
{
    (void)state;
    transfer_engine_t a = p2p(0), b = p2p(1);
    char na[64], nb[64];
    name_of(a, na, sizeof(na));
    segment_id_t seg_a = openSegment(b, na);
    assert_true(seg_a > 0);
    notify_msg_t m = {(char *)"b", (char *)"before-restart"};
    assert_int_equal(genNotifyInEngine(b, (uint64_t)seg_a, m), 0);

    transport_t shm = installTransport(a, "shm", NULL);
    assert_non_null(shm);
    assert_ptr_not_equal(shm, installTransport(a, "tcp", NULL));
    assert_ptr_equal(installTransport(a, "shm", NULL), shm);
    name_of(a, nb, sizeof(nb));
    assert_string_equal(na, nb);
    int size = -1;
    notify_msg_t *got = getNotifsFromEngine(a, &size);
    assert_int_equal(size, 1);
    assert_string_equal(got[0].name, "b");
    assert_string_equal(got[0].msg, "before-restart");
    assert_int_equal(freeNotifsMsgBuf(got, size), 0);

    /* Two shm engines: a write goes through shm, every byte arrives. */
    transfer_engine_t c = p2p(0);
    assert_non_null(installTransport(c, "shm", NULL));
    char *src = malloc(MIB), *dst = calloc(1, MIB);
    for (size_t i = 0; i < MIB; i++)
        src[i] = (char)(i * 7 + 3);
    assert_int_equal(registerLocalMemory(a, src, MIB, "*", 1), 0);
    assert_int_equal(registerLocalMemory(c, dst, MIB, "cpu:0", 1), 0);
    assert_string_equal(write_one(a, c, src, dst, MIB), "shm");
    assert_memory_equal(src, dst, MIB);
    destroyTransferEngine(a);
    destroyTransferEngine(b);
    destroyTransferEngine(c);
    free(src);
    free(dst);
}

static void test_force_tcp(void **state)
{
    (void)state;
    setenv("MC_FORCE_TCP", "1", 1);
    transfer_engine_t e = p2p(0); /* tcp although auto_discover is 0 */
    unsetenv("MC_FORCE_TCP");
    capture_begin();
    transport_t shm = installTransport(e, "shm", NULL);
    transport_t asc = installTransport(e, "ascend", NULL);
    char *log = capture_end();
    transport_t tcp = installTransport(e, "tcp", NULL);
    assert_non_null(tcp);
    assert_ptr_equal(shm, tcp);
    assert_ptr_equal(asc, tcp);
    assert_int_equal(lines_with(log, "MC_FORCE_TCP", "'shm'"), 1);
    assert_int_equal(lines_with(log, "MC_FORCE_TCP", "'ascend'"), 1);
    free(log);
    destroyTransferEngine(e);
}

/* "ascend" on a broken Ascend setup fails installTransport (NULL) with the
 * seed's words in the log; tcp does not quietly stand in, and the engine
 * keeps running what it ran. */
static void test_ascend_without_library(void **state)
{
    (void)state;
    setenv("MF_SMEM_LIBRARY", "/nonexistent/libmf_smem.so", 1);
    setenv("MF_PROTOCOL", "host_tcp", 1);
    transfer_engine_t e = p2p(1);
    transport_t tcp = installTransport(e, "tcp", NULL);
    assert_non_null(tcp);
    capture_begin();
    transport_t asc = installTransport(e, "ascend", NULL);
    char *log = capture_end();
    assert_null(asc);
    assert_int_equal(lines_with(log, "installTransport('ascend')",
                                "DeviceNotFound: "),
                     1);
    assert_int_equal(lines_with(log, "installTransport('ascend')",
                                "libmf_smem.so unavailable"),
                     1);
    assert_int_equal(lines_with(log, "'ascend'", "installing tcp"), 0);
    free(log);

    /* MF_PROTOCOL unset (and no MF_DATA_OP_TYPE): InvalidArgument */
    unsetenv("MF_PROTOCOL");
    unsetenv("MF_DATA_OP_TYPE");
    capture_begin();
    transport_t mf = installTransport(e, "memfabric", NULL);
    log = capture_end();
    assert_null(mf);
    assert_int_equal(lines_with(log, "installTransport('memfabric')",
                                "InvalidArgument: MF_PROTOCOL must be set"),
                     1);
    free(log);
    /* still the engine it was: tcp runs */
    assert_ptr_equal(installTransport(e, "tcp", NULL), tcp);
    destroyTransferEngine(e);
    unsetenv("MF_SMEM_LIBRARY");
}

/* "ascend" with mf_host as libmf_smem.so: the memfabric transport runs. */
static void test_ascend_runs_memfabric(void **state)
{
    (void)state;
#ifdef MF_HOST_LIB
    setenv("MF_SMEM_LIBRARY", MF_HOST_LIB, 1);
    setenv("MF_PROTOCOL", "host_tcp", 1);
    transfer_engine_t a = p2p(0), b = p2p(0);
    transport_t m = installTransport(a, "ascend", NULL);
    assert_non_null(m);
    assert_ptr_not_equal(m, installTransport(a, "tcp", NULL));
    assert_ptr_equal(installTransport(a, "memfabric", NULL), m);
    assert_non_null(installTransport(b, "ascend", NULL));
    char *src = malloc(MIB), *dst = calloc(1, MIB);
    for (size_t i = 0; i < MIB; i++)
        src[i] = (char)(i * 13 + 1);
    assert_int_equal(registerLocalMemory(a, src, MIB, "*", 1), 0);
    assert_int_equal(registerLocalMemory(b, dst, MIB, "*", 1), 0);
    assert_string_equal(write_one(a, b, src, dst, MIB), "memfabric");
    assert_memory_equal(src, dst, MIB);
    destroyTransferEngine(a);
    destroyTransferEngine(b);
    free(src);
    free(dst);
    unsetenv("MF_SMEM_LIBRARY");
    unsetenv("MF_PROTOCOL");
#else
    skip();
#endif
}

/* Once memory is registered the engine cannot restart: a transport it
 * does not run yet is refused, the ones it runs are still returned. */
static void test_install_after_use(void **state)
{
    (void)state;
    transfer_engine_t e = p2p(1);
    char *buf = malloc(4096);
    assert_int_equal(registerLocalMemory(e, buf, 4096, "*", 1), 0);
    assert_null(installTransport(e, "shm", NULL));
    transport_t tcp = installTransport(e, "tcp", NULL);
    assert_non_null(tcp);
    assert_ptr_equal(installTransport(e, "rdma", NULL), tcp);
    destroyTransferEngine(e);
    free(buf);
}

/* ---- memory ------------------------------------------------------------- */

static void test_register(void **state)
{
    (void)state;
    transfer_engine_t e = p2p(1);
    char *buf = malloc(64 * 1024);
    assert_int_equal(registerLocalMemory(NULL, buf, 4096, "*", 1),
                     CLASSIC_ERR_INVALID_ARGUMENT);
    assert_int_equal(registerLocalMemory(e, NULL, 4096, "*", 1),
                     CLASSIC_ERR_INVALID_ARGUMENT);
    assert_int_equal(registerLocalMemory(e, buf, 0, "*", 1),
                     CLASSIC_ERR_INVALID_ARGUMENT);
    assert_int_equal(
        registerLocalMemory(e, (void *)(uintptr_t)-4096, 8192, "*", 1),
        CLASSIC_ERR_INVALID_ARGUMENT);
    char loc[100];
    memset(loc, 'x', sizeof(loc) - 1);
    loc[sizeof(loc) - 1] = '\0';
    assert_int_equal(registerLocalMemory(e, buf, 4096, loc, 1),
                     CLASSIC_ERR_INVALID_ARGUMENT);
    assert_int_equal(registerLocalMemory(e, buf, 16384, NULL, 1), 0);
    /* Mooncake: the same range twice, or an overlap, is refused. */
    assert_int_equal(registerLocalMemory(e, buf, 16384, "*", 1),
                     CLASSIC_ERR_ADDRESS_OVERLAPPED);
    assert_int_equal(registerLocalMemory(e, buf + 8192, 16384, "*", 1),
                     CLASSIC_ERR_ADDRESS_OVERLAPPED);
    assert_int_equal(registerLocalMemory(e, buf + 16384, 16384, "cpu:0", 0), 0);
    assert_int_equal(unregisterLocalMemory(NULL, buf),
                     CLASSIC_ERR_INVALID_ARGUMENT);
    assert_int_equal(unregisterLocalMemory(e, NULL),
                     CLASSIC_ERR_INVALID_ARGUMENT);
    assert_int_equal(unregisterLocalMemory(e, buf + 4096),
                     CLASSIC_ERR_ADDRESS_NOT_REGISTERED);
    assert_int_equal(unregisterLocalMemory(e, buf), 0);
    assert_int_equal(unregisterLocalMemory(e, buf),
                     CLASSIC_ERR_ADDRESS_NOT_REGISTERED);
    assert_int_equal(unregisterLocalMemory(e, buf + 16384), 0);
    /* gone from the engine too: registering again works */
    assert_int_equal(registerLocalMemory(e, buf, 32768, "*", 1), 0);
    destroyTransferEngine(e); /* with memory still registered */
    free(buf);
}

static void test_register_batch(void **state)
{
    (void)state;
    transfer_engine_t e = p2p(1);
    char *buf = malloc(64 * 1024);
    buffer_entry_t list[3] = {
        {buf + 32768, 4096}, {buf, 4096}, {buf + 8192, 4096}};
    assert_int_equal(registerLocalMemoryBatch(NULL, list, 3, "*"),
                     CLASSIC_ERR_INVALID_ARGUMENT);
    assert_int_equal(registerLocalMemoryBatch(e, NULL, 3, "*"),
                     CLASSIC_ERR_INVALID_ARGUMENT);
    assert_int_equal(registerLocalMemoryBatch(e, list, 0, "*"), 0);
    buffer_entry_t zero[2] = {{buf, 4096}, {buf + 4096, 0}};
    assert_int_equal(registerLocalMemoryBatch(e, zero, 2, "*"),
                     CLASSIC_ERR_INVALID_ARGUMENT);
    buffer_entry_t overlap[2] = {{buf + 4096, 8192}, {buf, 8192}};
    assert_int_equal(registerLocalMemoryBatch(e, overlap, 2, "*"),
                     CLASSIC_ERR_ADDRESS_OVERLAPPED);
    /* nothing of a refused batch stays registered */
    assert_int_equal(unregisterLocalMemory(e, buf),
                     CLASSIC_ERR_ADDRESS_NOT_REGISTERED);
    assert_int_equal(registerLocalMemoryBatch(e, list, 3, "*"), 0);
    buffer_entry_t clash[2] = {{buf + 49152, 4096}, {buf + 34816, 4096}};
    assert_int_equal(registerLocalMemoryBatch(e, clash, 2, "*"),
                     CLASSIC_ERR_ADDRESS_OVERLAPPED);
    assert_int_equal(registerLocalMemory(e, buf + 49152, 4096, "*", 1), 0);

    void *addrs[4] = {buf, buf + 12345, buf + 8192, buf + 49152};
    assert_int_equal(unregisterLocalMemoryBatch(NULL, addrs, 4),
                     CLASSIC_ERR_INVALID_ARGUMENT);
    assert_int_equal(unregisterLocalMemoryBatch(e, NULL, 4),
                     CLASSIC_ERR_INVALID_ARGUMENT);
    assert_int_equal(unregisterLocalMemoryBatch(e, addrs, 0), 0);
    /* best effort: the unknown address is the error, the others go */
    assert_int_equal(unregisterLocalMemoryBatch(e, addrs, 4),
                     CLASSIC_ERR_ADDRESS_NOT_REGISTERED);
    assert_int_equal(registerLocalMemory(e, buf, 4096, "*", 1), 0);
    assert_int_equal(registerLocalMemory(e, buf + 8192, 4096, "*", 1), 0);
    assert_int_equal(unregisterLocalMemory(e, buf + 32768), 0);
    destroyTransferEngine(e);
    free(buf);
}

/* ---- segments ----------------------------------------------------------- */

static void test_segments(void **state)
{
    (void)state;
    transfer_engine_t a = p2p(1), b = p2p(1);
    char na[64], nb[64], slashed[80];
    name_of(a, na, sizeof(na));
    name_of(b, nb, sizeof(nb));
    assert_int_equal(openSegment(NULL, nb), CLASSIC_ERR_INVALID_ARGUMENT);
    assert_int_equal(openSegment(a, NULL), CLASSIC_ERR_INVALID_ARGUMENT);
    assert_int_equal(openSegment(a, ""), CLASSIC_ERR_INVALID_ARGUMENT);
    assert_int_equal(openSegment(a, "///"), CLASSIC_ERR_INVALID_ARGUMENT);
    assert_int_equal(openSegmentNoCache(a, NULL), CLASSIC_ERR_INVALID_ARGUMENT);
    char dead[32];
    snprintf(dead, sizeof(dead), "127.0.0.1:%d", ms_free_port());
    assert_true(openSegment(a, dead) < 0);
    assert_int_equal(openSegment(a, na), LOCAL_SEGMENT);
    segment_id_t id = openSegment(a, nb);
    assert_true(id > 0);
    assert_int_equal(openSegment(a, nb), id);
    snprintf(slashed, sizeof(slashed), "//%s", nb);
    assert_int_equal(openSegment(a, slashed), id);
    /* NoCache fetches the descriptor again, under a new id */
    segment_id_t fresh = openSegmentNoCache(a, nb);
    assert_true(fresh > 0);
    assert_int_not_equal(fresh, id);
    assert_int_equal(closeSegment(a, id), CLASSIC_ERR_INVALID_ARGUMENT);
    assert_int_equal(closeSegment(NULL, fresh), CLASSIC_ERR_INVALID_ARGUMENT);
    assert_int_equal(closeSegment(a, -5), CLASSIC_ERR_INVALID_ARGUMENT);
    assert_int_equal(closeSegment(a, 12345), CLASSIC_ERR_INVALID_ARGUMENT);
    assert_int_equal(closeSegment(a, fresh), 0);
    assert_int_equal(closeSegment(a, fresh), CLASSIC_ERR_INVALID_ARGUMENT);
    assert_int_equal(closeSegment(a, LOCAL_SEGMENT), 0);
    /* and open again after the close */
    assert_true(openSegment(a, nb) > 0);
    destroyTransferEngine(a);
    destroyTransferEngine(b);
}

/* ---- batches and transfers ---------------------------------------------- */

static void test_batch_bad_input(void **state)
{
    (void)state;
    transfer_engine_t e = p2p(1);
    char *buf = malloc(8192), *other = malloc(4096);
    transfer_request_t r = {OPCODE_WRITE, buf, LOCAL_SEGMENT,
                            (uint64_t)(uintptr_t)(buf + 4096), 4096};
    transfer_status_t st = {.status = 77, .transferred_bytes = 77};
    /* no batch exists yet: every id is unknown */
    assert_int_equal(submitTransfer(e, 1, &r, 1), CLASSIC_ST_INVALID_ARGUMENT);
    assert_int_equal(getTransferStatus(e, 1, 0, &st),
                     CLASSIC_ST_INVALID_ARGUMENT);
    assert_int_equal(freeBatchID(e, 1), CLASSIC_ST_INVALID_ARGUMENT);
    assert_int_equal(allocateBatchID(NULL, 4), INVALID_BATCH);
    assert_int_equal(allocateBatchID(e, 0), INVALID_BATCH);
    assert_int_equal(registerLocalMemory(e, buf, 8192, "*", 1), 0);
    batch_id_t b = allocateBatchID(e, 2);
    assert_true(b != INVALID_BATCH);

    assert_int_equal(submitTransfer(NULL, b, &r, 1),
                     CLASSIC_ST_INVALID_ARGUMENT);
    assert_int_equal(submitTransfer(e, b, NULL, 1),
                     CLASSIC_ST_INVALID_ARGUMENT);
    assert_int_equal(submitTransfer(e, b, &r, 0), CLASSIC_ST_OK);
    assert_int_equal(submitTransfer(e, INVALID_BATCH, &r, 1),
                     CLASSIC_ST_INVALID_ARGUMENT);
    assert_int_equal(submitTransfer(e, b ^ 0x5a5a0000ull, &r, 1),
                     CLASSIC_ST_INVALID_ARGUMENT);
    transfer_request_t three[3] = {r, r, r};
    assert_int_equal(submitTransfer(e, b, three, 3),
                     CLASSIC_ST_TOO_MANY_REQUESTS);
    transfer_request_t bad = r;
    bad.target_id = -1;
    assert_int_equal(submitTransfer(e, b, &bad, 1),
                     CLASSIC_ST_INVALID_ARGUMENT);
    bad = r;
    bad.target_id = 999;
    assert_int_equal(submitTransfer(e, b, &bad, 1),
                     CLASSIC_ST_INVALID_ARGUMENT);
    bad = r;
    bad.opcode = 7;
    assert_int_equal(submitTransfer(e, b, &bad, 1),
                     CLASSIC_ST_INVALID_ARGUMENT);
    bad = r;
    bad.source = other; /* not registered */
    assert_int_equal(submitTransfer(e, b, &bad, 1),
                     CLASSIC_ST_ADDRESS_NOT_REGISTERED);
    notify_msg_t nm = {(char *)"me", (char *)"done"};
    assert_int_equal(submitTransferWithNotify(e, b, &r, 0, nm),
                     CLASSIC_ST_INVALID_ARGUMENT);
    notify_msg_t noname = {NULL, (char *)"done"};
    assert_int_equal(submitTransferWithNotify(e, b, &r, 1, noname),
                     CLASSIC_ST_INVALID_ARGUMENT);

    /* nothing above was submitted: the batch still has room for two */
    assert_int_equal(submitTransfer(e, b, three, 2), CLASSIC_ST_OK);
    assert_int_equal(getTransferStatus(e, b, 0, NULL),
                     CLASSIC_ST_INVALID_ARGUMENT);
    assert_int_equal(getTransferStatus(NULL, b, 0, &st),
                     CLASSIC_ST_INVALID_ARGUMENT);
    st.status = 77;
    assert_int_equal(getTransferStatus(e, b, 2, &st),
                     CLASSIC_ST_INVALID_ARGUMENT);
    assert_int_equal(st.status, 77); /* written only on success */
    assert_int_equal(wait_tasks(e, b, 0, 2), 2);
    assert_int_equal(freeBatchID(NULL, b), CLASSIC_ST_INVALID_ARGUMENT);
    assert_int_equal(freeBatchID(e, b), CLASSIC_ST_OK);
    assert_int_equal(freeBatchID(e, b), CLASSIC_ST_INVALID_ARGUMENT);
    assert_int_equal(freeBatchID(e, INVALID_BATCH),
                     CLASSIC_ST_INVALID_ARGUMENT);
    assert_int_equal(getTransferStatus(e, b, 0, &st),
                     CLASSIC_ST_INVALID_ARGUMENT);
    assert_int_equal(submitTransfer(e, b, &r, 1), CLASSIC_ST_INVALID_ARGUMENT);
    destroyTransferEngine(e);
    free(buf);
    free(other);
}

/* Writes and reads between two engines, several submissions into one
 * batch, every byte checked; states are Mooncake's (WAITING, then
 * COMPLETED with the bytes). */
static void test_write_read(void **state)
{
    (void)state;
    enum { N = 16, BLK = 256 * 1024 };
    transfer_engine_t a = p2p(1), b = p2p(1);
    char *src = malloc(N * BLK), *back = calloc(1, N * BLK);
    char *dst = calloc(1, N * BLK);
    for (size_t i = 0; i < N * BLK; i++)
        src[i] = (char)(i * 31 + 5);
    assert_int_equal(registerLocalMemory(a, src, N * BLK, "*", 1), 0);
    assert_int_equal(registerLocalMemory(a, back, N * BLK, "*", 1), 0);
    assert_int_equal(registerLocalMemory(b, dst, N * BLK, "*", 1), 0);
    char nb[64];
    name_of(b, nb, sizeof(nb));
    segment_id_t seg = openSegment(a, nb);
    assert_true(seg > 0);
    batch_id_t bid = allocateBatchID(a, 2 * N);
    transfer_request_t w[N], r[N];
    for (int i = 0; i < N; i++) {
        w[i] = (transfer_request_t){OPCODE_WRITE, src + i * BLK, seg,
                                    (uint64_t)(uintptr_t)(dst + i * BLK), BLK};
        r[i] = (transfer_request_t){OPCODE_READ, back + i * BLK, seg,
                                    (uint64_t)(uintptr_t)(dst + i * BLK), BLK};
    }
    assert_int_equal(submitTransfer(a, bid, w, N), 0);
    assert_int_equal(wait_tasks(a, bid, 0, N), N);
    assert_memory_equal(src, dst, N * BLK);
    transfer_status_t st;
    assert_int_equal(getTransferStatus(a, bid, N - 1, &st), 0);
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_int_equal(st.transferred_bytes, BLK);
    for (size_t i = 0; i < N * BLK; i++)
        dst[i] = (char)(i * 17 + 11);
    /* task ids continue after the first submission */
    assert_int_equal(submitTransfer(a, bid, r, N), 0);
    assert_int_equal(wait_tasks(a, bid, N, N), N);
    assert_memory_equal(back, dst, N * BLK);
    assert_int_equal(freeBatchID(a, bid), 0);
    destroyTransferEngine(a);
    destroyTransferEngine(b);
    free(src);
    free(dst);
    free(back);
}

/* Memory registered with remote_accessible = 0 is not reachable by peers. */
static void test_not_remote_accessible(void **state)
{
    (void)state;
    transfer_engine_t a = p2p(1), b = p2p(1);
    char *src = malloc(4096), *dst = calloc(1, 4096);
    memset(src, 0x5a, 4096);
    assert_int_equal(registerLocalMemory(a, src, 4096, "*", 1), 0);
    assert_int_equal(registerLocalMemory(b, dst, 4096, "*", 0), 0);
    char nb[64];
    name_of(b, nb, sizeof(nb));
    segment_id_t seg = openSegment(a, nb);
    batch_id_t bid = allocateBatchID(a, 1);
    transfer_request_t r = {OPCODE_WRITE, src, seg, (uint64_t)(uintptr_t)dst,
                            4096};
    int rc = submitTransfer(a, bid, &r, 1);
    if (rc == 0)
        assert_int_equal(wait_tasks(a, bid, 0, 1), 0);
    else
        assert_int_not_equal(rc, 0);
    char zero[4096] = {0};
    assert_memory_equal(dst, zero, 4096);
    destroyTransferEngine(a);
    destroyTransferEngine(b);
    free(src);
    free(dst);
}

/* A target that went away: the task fails (or the submit does), it does
 * not hang, and the batch can be freed. */
static void test_failed_task(void **state)
{
    (void)state;
    transfer_engine_t a = p2p(1), b = p2p(1);
    char *src = malloc(MIB), *dst = calloc(1, MIB);
    assert_int_equal(registerLocalMemory(a, src, MIB, "*", 1), 0);
    assert_int_equal(registerLocalMemory(b, dst, MIB, "*", 1), 0);
    char nb[64];
    name_of(b, nb, sizeof(nb));
    segment_id_t seg = openSegment(a, nb);
    assert_true(seg > 0);
    destroyTransferEngine(b);
    batch_id_t bid = allocateBatchID(a, 1);
    transfer_request_t r = {OPCODE_WRITE, src, seg, (uint64_t)(uintptr_t)dst,
                            MIB};
    if (submitTransfer(a, bid, &r, 1) == 0) {
        assert_int_equal(wait_tasks(a, bid, 0, 1), 0);
        transfer_status_t st;
        assert_int_equal(getTransferStatus(a, bid, 0, &st), 0);
        assert_int_equal(st.status, STATUS_FAILED);
        assert_int_equal(st.transferred_bytes, 0);
    }
    assert_int_equal(freeBatchID(a, bid), 0);
    destroyTransferEngine(a);
    free(src);
    free(dst);
}

/* ---- submitTransferEx: TENT's request fields ---------------------------- */

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* policy_name picks its rule ahead of the first matching one; an unknown
 * name is refused; a deadline the measured rate cannot meet fails the task
 * at once with STATUS_TIMEOUT as its cause and a message that says so. */
static void test_submit_ex(void **state)
{
    (void)state;
    setenv("MC_TENT_CONF",
           "{\"policy\": ["
           "{\"name\": \"bulk\", \"segment_type\": \"memory\", "
           "\"transports\": [\"tcp\"]},"
           "{\"name\": \"pinned\", \"segment_type\": \"memory\", "
           "\"transports\": [\"shm\"]}],"
           "\"enable_runtime_queue\": true,"
           "\"runtime_queue\": {\"deadline_aware\": true, "
           "\"mlu_local_threshold\": 1.0}}",
           1);
    transfer_engine_t a = p2p(0), c = p2p(0);
    assert_non_null(installTransport(a, "shm", NULL));
    assert_non_null(installTransport(c, "shm", NULL));
    unsetenv("MC_TENT_CONF");
    char *src = malloc(4 * MIB), *dst = calloc(1, 4 * MIB);
    memset(src, 0x3c, 4 * MIB);
    assert_int_equal(registerLocalMemory(a, src, 4 * MIB, "*", 1), 0);
    assert_int_equal(registerLocalMemory(c, dst, 4 * MIB, "*", 1), 0);
    char nc[64];
    name_of(c, nc, sizeof(nc));
    segment_id_t seg = openSegment(a, nc);
    assert_true(seg > 0);
    batch_id_t bid = allocateBatchID(a, 8);
    assert_true(bid != INVALID_BATCH);
    transfer_request_ex_t r = {
        .opcode = OPCODE_WRITE,
        .source = src,
        .target_id = seg,
        .target_offset = (uint64_t)(uintptr_t)dst,
        .length = MIB,
        .priority = TRANSFER_PRIO_MEDIUM,
        .intent_type = TRANSFER_INTENT_FOREGROUND_GET,
    };
    /* no policy_name: the first rule, tcp (it also measures tcp's rate) */
    assert_int_equal(submitTransferEx(a, bid, &r, 1, NULL), 0);
    assert_int_equal(wait_tasks(a, bid, 0, 1), 1);
    assert_string_equal(transport_of(a, bid, 0), "tcp");
    int cause = -1;
    char msg[512] = "x";
    assert_int_equal(getTransferError(a, bid, 0, &cause, msg, sizeof(msg)),
                     0);
    assert_int_equal(cause, 0);
    assert_string_equal(msg, "");
    /* policy_name: that rule, shm */
    r.policy_name = "pinned";
    r.target_offset += MIB;
    r.source = src + MIB;
    assert_int_equal(submitTransferEx(a, bid, &r, 1, NULL), 0);
    assert_int_equal(wait_tasks(a, bid, 1, 1), 1);
    assert_string_equal(transport_of(a, bid, 1), "shm");
    assert_memory_equal(src, dst, 2 * MIB);
    /* a name no rule has, a bad intent: refused, nothing started */
    r.policy_name = "nope";
    assert_int_equal(submitTransferEx(a, bid, &r, 1, NULL), 1);
    r.policy_name = NULL;
    r.intent_type = 7;
    assert_int_equal(submitTransferEx(a, bid, &r, 1, NULL), 1);
    /* 1 MiB in 2 us at tcp's measured rate: fails at once, never sent */
    r.intent_type = TRANSFER_INTENT_UNSPEC;
    r.source = src + 2 * MIB;
    r.target_offset = (uint64_t)(uintptr_t)(dst + 2 * MIB);
    r.deadline_ns = mono_ns() + 2000;
    assert_int_equal(submitTransferEx(a, bid, &r, 1, NULL), 0);
    transfer_status_t st;
    assert_int_equal(getTransferStatus(a, bid, 2, &st), 0);
    assert_int_equal(st.status, STATUS_FAILED);
    assert_int_equal(getTransferError(a, bid, 2, &cause, msg, sizeof(msg)),
                     0);
    assert_int_equal(cause, STATUS_TIMEOUT);
    assert_non_null(strstr(msg, "deadline infeasible"));
    assert_non_null(strstr(msg, "'tcp'"));
    assert_int_equal(dst[2 * MIB], 0);
    /* a generous deadline is met */
    r.deadline_ns = mono_ns() + 20000000000ull;
    assert_int_equal(submitTransferEx(a, bid, &r, 1, NULL), 0);
    assert_int_equal(wait_tasks(a, bid, 3, 1), 1);
    assert_int_equal(dst[2 * MIB], 0x3c);
    /* bad input */
    assert_int_equal(getTransferError(a, bid, 0, NULL, msg, sizeof(msg)), 1);
    assert_int_not_equal(getTransferError(a, bid, 99, &cause, NULL, 0), 0);
    assert_int_equal(getTransferError(NULL, bid, 0, &cause, NULL, 0), 1);
    assert_int_equal(submitTransferEx(a, bid, NULL, 1, NULL), 1);
    assert_int_equal(freeBatchID(a, bid), 0);
    destroyTransferEngine(a);
    destroyTransferEngine(c);
    free(src);
    free(dst);
}

/* ---- notifications ------------------------------------------------------ */

static notify_msg_t *wait_notifs(transfer_engine_t e, int *size)
{
    long t0 = now_ms();
    for (;;) {
        notify_msg_t *m = getNotifsFromEngine(e, size);
        if (m)
            return m;
        assert_int_equal(*size, 0);
        assert_true(now_ms() - t0 < 10000);
        usleep(1000);
    }
}

static void test_notifications(void **state)
{
    (void)state;
    transfer_engine_t a = p2p(1), b = p2p(1);
    int size = 5;
    assert_null(getNotifsFromEngine(NULL, &size));
    assert_int_equal(size, 0);
    assert_null(getNotifsFromEngine(a, NULL));
    size = 5;
    assert_null(getNotifsFromEngine(a, &size));
    assert_int_equal(size, 0);
    assert_int_equal(freeNotifsMsgBuf(NULL, 0), 0); /* as NIXL calls it */
    notify_msg_t m = {(char *)"agentA", (char *)"m1"};
    assert_int_equal(genNotifyInEngine(NULL, 1, m),
                     CLASSIC_ERR_INVALID_ARGUMENT);
    assert_int_equal(genNotifyInEngine(a, 77, m), CLASSIC_ERR_METADATA);
    notify_msg_t nomsg = {(char *)"agentA", NULL};
    assert_int_equal(genNotifyInEngine(a, 1, nomsg),
                     CLASSIC_ERR_INVALID_ARGUMENT);
    char nb[64];
    name_of(b, nb, sizeof(nb));
    segment_id_t seg = openSegment(a, nb);
    assert_true(seg > 0);
    assert_int_equal(genNotifyInEngine(a, (uint64_t)seg, m), 0);
    notify_msg_t m2 = {(char *)"agentA", (char *)"m2"};
    assert_int_equal(genNotifyInEngine(a, (uint64_t)seg, m2), 0);
    notify_msg_t *got = wait_notifs(b, &size);
    if (size == 1) { /* the second may come in a later call */
        int more = 0;
        notify_msg_t *g2 = wait_notifs(b, &more);
        assert_int_equal(more, 1);
        assert_string_equal(g2[0].msg, "m2");
        assert_int_equal(freeNotifsMsgBuf(g2, more), 0);
    } else {
        assert_int_equal(size, 2);
        assert_string_equal(got[1].msg, "m2");
    }
    assert_string_equal(got[0].name, "agentA");
    assert_string_equal(got[0].msg, "m1");
    assert_int_equal(freeNotifsMsgBuf(got, -1), CLASSIC_ERR_INVALID_ARGUMENT);
    /* the caller owns every string: plain free() is as good */
    for (int i = 0; i < size; i++) {
        free(got[i].name);
        free(got[i].msg);
    }
    free(got);
    /* TENT's record holds a 255-byte name and a 4095-byte message */
    char *big = malloc(5000);
    memset(big, 'n', 4999);
    big[4999] = '\0';
    notify_msg_t too_long = {(char *)"agentA", big};
    assert_int_equal(genNotifyInEngine(a, (uint64_t)seg, too_long),
                     CLASSIC_ERR_INVALID_ARGUMENT);
    big[300] = '\0';
    notify_msg_t long_name = {big, (char *)"m"};
    assert_int_equal(genNotifyInEngine(a, (uint64_t)seg, long_name),
                     CLASSIC_ERR_INVALID_ARGUMENT);
    free(big);
    /* to oneself */
    notify_msg_t self = {(char *)"self", (char *)"m3"};
    assert_int_equal(genNotifyInEngine(a, LOCAL_SEGMENT, self), 0);
    got = wait_notifs(a, &size);
    assert_int_equal(size, 1);
    assert_string_equal(got[0].name, "self");
    assert_int_equal(freeNotifsMsgBuf(got, size), 0);
    destroyTransferEngine(a);
    destroyTransferEngine(b);
}

/* The notification of a batch goes once every task completed; a second one
 * on a batch whose first is still due is refused, nothing submitted. */
static void test_submit_with_notify(void **state)
{
    (void)state;
    transfer_engine_t a = p2p(1), b = p2p(1);
    char *src = malloc(8192), *dst = calloc(1, 8192);
    memset(src, 0x3c, 8192);
    assert_int_equal(registerLocalMemory(a, src, 8192, "*", 1), 0);
    assert_int_equal(registerLocalMemory(b, dst, 8192, "*", 1), 0);
    char nb[64];
    name_of(b, nb, sizeof(nb));
    segment_id_t seg = openSegment(a, nb);
    batch_id_t bid = allocateBatchID(a, 4);
    transfer_request_t r[2] = {
        {OPCODE_WRITE, src, seg, (uint64_t)(uintptr_t)dst, 4096},
        {OPCODE_WRITE, src + 4096, seg, (uint64_t)(uintptr_t)(dst + 4096),
         4096}};
    notify_msg_t one = {(char *)"initiator", (char *)"one"};
    notify_msg_t two = {(char *)"initiator", (char *)"two"};
    assert_int_equal(submitTransferWithNotify(a, bid, r, 1, one), 0);
    assert_int_equal(submitTransferWithNotify(a, bid, r + 1, 1, two),
                     CLASSIC_ST_INVALID_ARGUMENT);
    assert_int_equal(submitTransfer(a, bid, r + 1, 1), 0);
    assert_int_equal(wait_tasks(a, bid, 0, 2), 2);
    int size = 0;
    notify_msg_t *got = wait_notifs(b, &size);
    assert_int_equal(size, 1);
    assert_string_equal(got[0].name, "initiator");
    assert_string_equal(got[0].msg, "one");
    assert_int_equal(freeNotifsMsgBuf(got, size), 0);
    assert_memory_equal(src, dst, 8192);
    assert_int_equal(freeBatchID(a, bid), 0);
    destroyTransferEngine(a);
    destroyTransferEngine(b);
    free(src);
    free(dst);
}

/* ---- threads ------------------------------------------------------------ */

/* NIXL posts and checks transfers from several threads on one engine:
 * four threads each run batches of writes to their own slice while a fifth
 * reads the NIC load and the notifications. */
enum { THREADS = 4, ROUNDS = 20, TBLK = 64 * 1024 };

struct thread_arg {
    transfer_engine_t e;
    segment_id_t seg;
    char *src, *dst;
    int id, failures;
    atomic_bool *stop;
};

static void *writer(void *p)
{
    struct thread_arg *t = p;
    for (int r = 0; r < ROUNDS; r++) {
        batch_id_t b = allocateBatchID(t->e, 4);
        transfer_request_t req[4];
        for (int i = 0; i < 4; i++)
            req[i] = (transfer_request_t){
                OPCODE_WRITE, t->src + (t->id * 4 + i) * TBLK, t->seg,
                (uint64_t)(uintptr_t)(t->dst + (t->id * 4 + i) * TBLK), TBLK};
        notify_msg_t m = {(char *)"writer", (char *)"round"};
        if (b == INVALID_BATCH || submitTransferWithNotify(t->e, b, req, 4, m))
            t->failures++;
        for (size_t i = 0; b != INVALID_BATCH && i < 4; i++) {
            transfer_status_t st;
            do {
                if (getTransferStatus(t->e, b, i, &st) != 0) {
                    t->failures++;
                    break;
                }
            } while (st.status == STATUS_WAITING);
            if (st.status != STATUS_COMPLETED)
                t->failures++;
        }
        if (b == INVALID_BATCH || freeBatchID(t->e, b) != 0)
            t->failures++;
    }
    return NULL;
}

static void *watcher(void *p)
{
    struct thread_arg *t = p;
    while (!atomic_load(t->stop)) {
        nic_load_stat_t s[2];
        size_t n = 2;
        if (getNicLoadStats(t->e, s, &n) != 0 || n != 1)
            t->failures++;
        int size;
        notify_msg_t *m = getNotifsFromEngine(t->e, &size);
        freeNotifsMsgBuf(m, size);
    }
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    transfer_engine_t a = p2p(1), b = p2p(1);
    size_t len = (size_t)THREADS * 4 * TBLK;
    char *src = malloc(len), *dst = calloc(1, len);
    for (size_t i = 0; i < len; i++)
        src[i] = (char)(i * 3 + 1);
    assert_int_equal(registerLocalMemory(a, src, len, "*", 1), 0);
    assert_int_equal(registerLocalMemory(b, dst, len, "*", 1), 0);
    char nb[64];
    name_of(b, nb, sizeof(nb));
    segment_id_t seg = openSegment(a, nb);
    assert_true(seg > 0);
    atomic_bool stop;
    atomic_init(&stop, false);
    struct thread_arg args[THREADS + 1];
    pthread_t thr[THREADS + 1];
    for (int i = 0; i <= THREADS; i++) {
        args[i] = (struct thread_arg){.e = i < THREADS ? a : b,
                                      .seg = seg,
                                      .src = src,
                                      .dst = dst,
                                      .id = i,
                                      .stop = &stop};
        assert_int_equal(pthread_create(&thr[i], NULL,
                                        i < THREADS ? writer : watcher,
                                        &args[i]),
                         0);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(thr[i], NULL);
    atomic_store(&stop, true);
    pthread_join(thr[THREADS], NULL);
    for (int i = 0; i <= THREADS; i++)
        assert_int_equal(args[i].failures, 0);
    assert_memory_equal(src, dst, len);
    destroyTransferEngine(a);
    destroyTransferEngine(b);
    free(src);
    free(dst);
}

/* ---- the rest ----------------------------------------------------------- */

static void test_nic_load_stats(void **state)
{
    (void)state;
    transfer_engine_t e = p2p(1);
    nic_load_stat_t s[2];
    size_t n = 2;
    assert_int_equal(getNicLoadStats(NULL, s, &n),
                     CLASSIC_ERR_INVALID_ARGUMENT);
    assert_int_equal(getNicLoadStats(e, NULL, &n),
                     CLASSIC_ERR_INVALID_ARGUMENT);
    assert_int_equal(getNicLoadStats(e, s, NULL), CLASSIC_ERR_INVALID_ARGUMENT);
    memset(s, 0x7f, sizeof(s));
    n = 0; /* asks how many, writes nothing */
    assert_int_equal(getNicLoadStats(e, s, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal((unsigned char)s[0].device_name[0], 0x7f);
    n = 2;
    assert_int_equal(getNicLoadStats(e, s, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(s[0].device_name, "lo"); /* 127.0.0.1 */
    assert_int_equal(s[0].inflight_bytes, 0);
    /* before any transfer: the scheduler's starting estimate */
    assert_true(s[0].ewma_bandwidth_bps > 0.0);
    destroyTransferEngine(e);
}

static void test_misc(void **state)
{
    (void)state;
    transfer_engine_t e = p2p(1);
    assert_int_equal(discoverTopology(e), 0);
    assert_int_equal(discoverTopology(NULL), CLASSIC_ERR_INVALID_ARGUMENT);
    assert_int_equal(warmupEfaSegment(e, "peer"), 0);
    assert_int_equal(warmupEfaSegment(NULL, "peer"),
                     CLASSIC_ERR_INVALID_ARGUMENT);
    assert_int_equal(syncSegmentCache(e), 0);
    assert_int_equal(syncSegmentCache(NULL), CLASSIC_ERR_INVALID_ARGUMENT);
    char name[64];
    name_of(e, name, sizeof(name));
    assert_int_equal(removeLocalSegment(e, name), CLASSIC_ERR_NOT_IMPLEMENTED);
    assert_int_equal(removeLocalSegment(e, "/"), CLASSIC_ERR_INVALID_ARGUMENT);
    assert_int_equal(removeLocalSegment(e, NULL), CLASSIC_ERR_INVALID_ARGUMENT);
    assert_int_equal(removeLocalSegment(NULL, name),
                     CLASSIC_ERR_INVALID_ARGUMENT);
    char buf[512];
    assert_int_equal(showLinks(NULL, buf, sizeof(buf), 1),
                     CLASSIC_ERR_INVALID_ARGUMENT);
    assert_int_equal(showLinks(e, NULL, sizeof(buf), 1),
                     CLASSIC_ERR_INVALID_ARGUMENT);
    assert_int_equal(showLinks(e, buf, 0, 1), CLASSIC_ERR_INVALID_ARGUMENT);
    assert_int_equal(showLinks(e, buf, 8, 1), CLASSIC_ERR_INVALID_ARGUMENT);
    assert_int_equal(strlen(buf), 7);
    assert_int_equal(showLinks(e, buf, sizeof(buf), 1), 0);
    assert_non_null(strstr(buf, "\"local_nics\": []"));
    assert_non_null(strstr(buf, "\"transports\": [\"tcp\"]"));
    assert_non_null(strstr(buf, name));
    assert_int_equal(showLinks(e, buf, sizeof(buf), 0), 0);
    assert_non_null(strstr(buf, "no RDMA devices"));
    assert_non_null(strstr(buf, "tcp"));
    enableGracefulShutdown(NULL);
    destroyTransferEngine(e);
}

int main(void)
{
    /* Quiet engines that notice a dead peer quickly. */
    snprintf(g_conf, sizeof(g_conf), "/tmp/classic-api-XXXXXX");
    int fd = mkstemp(g_conf);
    const char *conf = "{\"log_level\": \"warning\", \"transports\": "
                       "{\"tcp\": {\"timeout_ms\": 1500}}}";
    if (fd < 0 || write(fd, conf, strlen(conf)) != (ssize_t)strlen(conf)) {
        fprintf(stderr, "cannot write %s: %s\n", g_conf, strerror(errno));
        return 1;
    }
    close(fd);
    setenv("MC_TENT_CONF", g_conf, 1);
    unsetenv("MC_FORCE_TCP");
    unsetenv("MC_TCP_BIND_ADDRESS");
    unsetenv("MC_LEGACY_RPC_PORT_BINDING");
    unsetenv("MC_MIN_RPC_PORT"); /* Mooncake's 15000..17000 */
    unsetenv("MC_MAX_RPC_PORT");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_bad_arguments),
        cmocka_unit_test(test_create_p2p_names),
        cmocka_unit_test(test_local_ip_and_port),
        cmocka_unit_test(test_ipv6),
        cmocka_unit_test(test_destroy_waits_for_a_call_inside),
        cmocka_unit_test(test_install_transport),
        cmocka_unit_test(test_install_shm_restarts),
        cmocka_unit_test(test_force_tcp),
        cmocka_unit_test(test_ascend_without_library),
        cmocka_unit_test(test_ascend_runs_memfabric),
        cmocka_unit_test(test_install_after_use),
        cmocka_unit_test(test_register),
        cmocka_unit_test(test_register_batch),
        cmocka_unit_test(test_segments),
        cmocka_unit_test(test_batch_bad_input),
        cmocka_unit_test(test_write_read),
        cmocka_unit_test(test_not_remote_accessible),
        cmocka_unit_test(test_failed_task),
        cmocka_unit_test(test_submit_ex),
        cmocka_unit_test(test_notifications),
        cmocka_unit_test(test_submit_with_notify),
        cmocka_unit_test(test_nic_load_stats),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_misc),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    unlink(g_conf);
    return rc;
}

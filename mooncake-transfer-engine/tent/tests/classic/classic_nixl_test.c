/* NIXL's Mooncake backend in classic mode, replayed by two processes over
 * libtransfer_engine (this file uses transfer_engine_c.h only).  argv[1]:
 * "p2p" (P2PHANDSHAKE, as NIXL creates its engine), or "http", "etcd",
 * "redis": the same calls with that metadata service, which the test starts
 * itself on a loopback port (argv[2] is the http test server's script).
 *
 * The calls are those of src/plugins/mooncake/mooncake_backend.cpp, in its
 * order: createTransferEngine(conn, <ip>, "", 0, 1) in the constructor;
 * getLocalIpAndPort for getConnInfo; openSegment in loadRemoteConnInfo;
 * registerLocalMemory(addr, len, "*", 1) in registerMem; postXfer:
 * allocateBatchID(1024) on the handle's first post, then submitTransfer or
 * submitTransferWithNotify(name = agent, msg); checkXfer: getTransferStatus
 * of every request posted on the handle, and once all completed
 * freeBatchID; releaseReqH: freeBatchID if a batch is left; getNotifs:
 * getNotifsFromEngine + freeNotifsMsgBuf (also of an empty result);
 * genNotif: genNotifyInEngine to the peer's segment id; deregisterMem:
 * unregisterLocalMemory; destructor: destroyTransferEngine.
 *
 * The parent is the initiator agent, a forked child the target agent;
 * every byte written and read is checked on both sides.  Also: the bytes
 * in flight that getNicLoadStats reports while the target is stopped, and
 * enableGracefulShutdown (SIGTERM: exit 143, the segment is gone). */
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
#include "../common/test_child.h"
#include "transfer_engine_c.h"

#include <errno.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#define LEN        ((size_t)8 << 20) /* each agent's registered buffer */
#define NDESC      8                 /* descriptors per NIXL transfer */
#define DESC       (LEN / 2 / NDESC)
#define MAX_REQ    1024 /* NIXL's kMaxRequestCount */
#define TIMEOUT_MS 20000

static const char *g_mode;
static const char *g_script;
static char g_conn[256] = "P2PHANDSHAKE";
static char g_tmp[256];
static pid_t g_srv = -1;

#define SEED_INIT   11u /* initiator's lower half, written to the target */
#define SEED_TARGET 23u /* target's upper half, read by the initiator */

static bool p2p(void)
{
    return strcmp(g_mode, "p2p") == 0;
}

static long now_ms(void)
{
    return ms_now_ms();
}

/* ---- the NIXL backend's calls ------------------------------------------- */

struct agent {
    const char *name;
    transfer_engine_t engine;
    char conn_info[64]; /* what getConnInfo hands to the peer */
    char *buf;
};

static void fill(char *p, size_t n, size_t base, unsigned seed);

/* The constructor: P2PHANDSHAKE with the local IP as the segment name; with
 * a metadata service the agent's name is its segment name.  The buffer gets
 * its pattern before it is registered (so that even a race detector, which
 * cannot see the other process, knows the bytes were there first): the
 * lower half seed_low (0: zeros), the upper half seed_high. */
static int agent_start(struct agent *a, const char *name, unsigned seed_low,
                       unsigned seed_high)
{
    a->name = name;
    a->engine = p2p() ? createTransferEngine(g_conn, "127.0.0.1", "", 0, 1)
                      : createTransferEngine(g_conn, name, "127.0.0.1", 0, 1);
    if (!a->engine)
        return -1;
    if (p2p()) {
        const size_t kBufLen = 64;
        if (getLocalIpAndPort(a->engine, a->conn_info, kBufLen) != 0)
            return -1;
    } else {
        snprintf(a->conn_info, sizeof(a->conn_info), "%s", name);
    }
    a->buf = calloc(1, LEN);
    if (!a->buf)
        return -1;
    if (seed_low)
        fill(a->buf, LEN / 2, 0, seed_low);
    if (seed_high)
        fill(a->buf + LEN / 2, LEN / 2, LEN / 2, seed_high);
    return registerLocalMemory(a->engine, a->buf, LEN, "*", 1);
}

static void agent_stop(struct agent *a)
{
    if (a->engine && a->buf)
        (void)unregisterLocalMemory(a->engine, a->buf);
    destroyTransferEngine(a->engine);
    free(a->buf);
}

/* loadRemoteConnInfo */
static int load_remote(struct agent *a, const char *remote_conn_info)
{
    return openSegment(a->engine, remote_conn_info);
}

struct req_handle {
    uint64_t batch_id;
    size_t request_count;
};

/* postXfer: local [loff, +n*DESC) <-> remote [raddr, +n*DESC), n descs. */
static int post_xfer(struct agent *a, struct req_handle *h, int op, int seg,
                     size_t loff, uint64_t raddr, size_t ndesc,
                     const char *notif)
{
    if (h->batch_id == INVALID_BATCH) {
        uint64_t b = allocateBatchID(a->engine, MAX_REQ);
        if (b == INVALID_BATCH)
            return -1;
        h->batch_id = b;
        h->request_count = 0;
    }
    transfer_request_t *request = calloc(ndesc, sizeof(*request));
    for (size_t i = 0; i < ndesc; i++) {
        request[i].opcode = op;
        request[i].source = a->buf + loff + i * DESC;
        request[i].target_offset = raddr + i * DESC;
        request[i].length = DESC;
        request[i].target_id = seg;
    }
    int rc;
    if (notif) {
        notify_msg_t m = {(char *)a->name, (char *)notif};
        rc =
            submitTransferWithNotify(a->engine, h->batch_id, request, ndesc, m);
    } else {
        rc = submitTransfer(a->engine, h->batch_id, request, ndesc);
    }
    free(request);
    if (rc)
        return -1;
    h->request_count += ndesc;
    return 0;
}

/* checkXfer: 1 in progress, 0 done (batch freed), -1 failed. */
static int check_xfer(struct agent *a, struct req_handle *h)
{
    if (h->batch_id == INVALID_BATCH)
        return 0;
    bool has_failed = false;
    for (size_t i = 0; i < h->request_count; i++) {
        transfer_status_t status;
        int rc = getTransferStatus(a->engine, h->batch_id, i, &status);
        if (rc || status.status == STATUS_FAILED)
            has_failed = true;
        else if (status.status == STATUS_PENDING ||
                 status.status == STATUS_WAITING)
            return 1;
    }
    if (!has_failed) {
        freeBatchID(a->engine, h->batch_id);
        h->batch_id = INVALID_BATCH;
        h->request_count = 0;
    }
    return has_failed ? -1 : 0;
}

static int wait_xfer(struct agent *a, struct req_handle *h)
{
    long t0 = now_ms();
    int rc;
    while ((rc = check_xfer(a, h)) == 1)
        if (now_ms() - t0 > TIMEOUT_MS)
            return -2;
    return rc;
}

/* releaseReqH */
static void release_req(struct agent *a, struct req_handle *h)
{
    if (h->batch_id != INVALID_BATCH)
        freeBatchID(a->engine, h->batch_id);
    h->batch_id = INVALID_BATCH;
}

/* getNotifs: appends (name, msg) pairs as "name=msg;" to out. */
static void get_notifs(struct agent *a, char *out, size_t cap)
{
    int size = 0;
    notify_msg_t *notify_msgs = getNotifsFromEngine(a->engine, &size);
    for (int i = 0; i < size; i++) {
        size_t l = strlen(out);
        snprintf(out + l, cap - l, "%s=%s;", notify_msgs[i].name,
                 notify_msgs[i].msg);
    }
    freeNotifsMsgBuf(notify_msgs, size);
}

/* Polls getNotifs until out holds want; -1 after the time limit. */
static int wait_notif(struct agent *a, const char *want, char *out, size_t cap)
{
    long t0 = now_ms();
    while (!strstr(out, want)) {
        if (now_ms() - t0 > TIMEOUT_MS)
            return -1;
        get_notifs(a, out, cap);
        usleep(1000);
    }
    return 0;
}

/* genNotif */
static int gen_notif(struct agent *a, int seg, const char *msg)
{
    notify_msg_t m = {(char *)a->name, (char *)msg};
    return genNotifyInEngine(a->engine, (uint64_t)seg, m);
}

/* ---- patterns ----------------------------------------------------------- */

static unsigned char pattern(size_t i, unsigned seed)
{
    return (unsigned char)((i * 2654435761u + seed) >> 7);
}

static void fill(char *p, size_t n, size_t base, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (char)pattern(base + i, seed);
}

/* Index of the first wrong byte, or -1. */
static long check(const char *p, size_t n, size_t base, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)p[i] != pattern(base + i, seed))
            return (long)i;
    return -1;
}

/* ---- the target agent (child) ------------------------------------------- */

enum { CMD_OPEN = 1, CMD_WAIT_WRITE, CMD_NOTIFY_BACK, CMD_QUIT, CMD_GRACEFUL };

struct hello {
    int ok;
    char conn_info[64];
    uint64_t buf;
};

struct cmd {
    int op;
    char arg[64];
};

struct answer {
    int rc;
    long bad; /* first wrong byte, -1 = all right */
    char notifs[512];
};

static void target_main(int cmd_rd, int ans_wr, void *arg)
{
    (void)arg;
    struct agent t = {0};
    struct hello hi = {0};
    char target_name[64];
    snprintf(target_name, sizeof(target_name), "nixl-target-%d", (int)getpid());
    hi.ok = agent_start(&t, target_name, 0, SEED_TARGET) == 0;
    if (hi.ok) {
        snprintf(hi.conn_info, sizeof(hi.conn_info), "%s", t.conn_info);
        hi.buf = (uint64_t)(uintptr_t)t.buf;
    }
    if (tc_write_all(ans_wr, &hi, sizeof(hi)) || !hi.ok)
        _exit(1);
    int seg_initiator = -1;
    char seen[512] = "";
    struct cmd c;
    while (tc_read_all(cmd_rd, &c, sizeof(c)) == 0) {
        struct answer a = {.rc = 0, .bad = -1};
        switch (c.op) {
        case CMD_OPEN: /* loadRemoteConnInfo of the initiator */
            seg_initiator = load_remote(&t, c.arg);
            a.rc = seg_initiator < 0 ? seg_initiator : 0;
            break;
        case CMD_WAIT_WRITE: /* the write's notification, then the bytes */
            a.rc = wait_notif(&t, c.arg, seen, sizeof(seen));
            a.bad = check(t.buf, LEN / 2, 0, SEED_INIT);
            snprintf(a.notifs, sizeof(a.notifs), "%s", seen);
            break;
        case CMD_NOTIFY_BACK:
            a.rc = gen_notif(&t, seg_initiator, c.arg);
            break;
        case CMD_GRACEFUL:
            enableGracefulShutdown(t.engine);
            break;
        case CMD_QUIT:
            agent_stop(&t);
            tc_write_all(ans_wr, &a, sizeof(a));
            _exit(0);
        }
        if (tc_write_all(ans_wr, &a, sizeof(a)))
            break;
    }
    agent_stop(&t);
    _exit(0);
}

struct peer {
    pid_t pid;
    int cmd, ans;
    struct hello hi;
};

static void peer_start(struct peer *p)
{
    p->pid = tc_fork_child(target_main, NULL, &p->cmd, &p->ans);
    assert_true(p->pid > 0);
    assert_int_equal(tc_read_all(p->ans, &p->hi, sizeof(p->hi)), 0);
    assert_true(p->hi.ok);
}

static struct answer peer_ask(struct peer *p, int op, const char *arg)
{
    struct cmd c = {.op = op};
    snprintf(c.arg, sizeof(c.arg), "%s", arg ? arg : "");
    struct answer a;
    assert_int_equal(tc_write_all(p->cmd, &c, sizeof(c)), 0);
    assert_int_equal(tc_read_all(p->ans, &a, sizeof(a)), 0);
    return a;
}

static void peer_quit(struct peer *p)
{
    (void)peer_ask(p, CMD_QUIT, NULL);
    int st;
    assert_int_equal(waitpid(p->pid, &st, 0), p->pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    close(p->cmd);
    close(p->ans);
}

/* ---- tests -------------------------------------------------------------- */

static void test_nixl_sequence(void **state)
{
    (void)state;
    struct peer tp;
    peer_start(&tp);
    struct agent in = {0};
    char my_name[64];
    snprintf(my_name, sizeof(my_name), "nixl-initiator-%d", (int)getpid());
    assert_int_equal(agent_start(&in, my_name, SEED_INIT, 0), 0);
    /* each agent loads the other's connection info */
    int seg = load_remote(&in, tp.hi.conn_info);
    assert_true(seg > 0);
    assert_int_equal(peer_ask(&tp, CMD_OPEN, in.conn_info).rc, 0);

    /* WRITE with a notification: two posts on one handle (NIXL reuses the
     * handle's batch until a check finds it done), then checkXfer. */
    struct req_handle h = {.batch_id = INVALID_BATCH};
    assert_int_equal(
        post_xfer(&in, &h, OPCODE_WRITE, seg, 0, tp.hi.buf, NDESC / 2, NULL),
        0);
    assert_int_equal(post_xfer(&in, &h, OPCODE_WRITE, seg, NDESC / 2 * DESC,
                               tp.hi.buf + NDESC / 2 * DESC, NDESC / 2,
                               "write-done"),
                     0);
    assert_int_equal(h.request_count, NDESC);
    assert_int_equal(wait_xfer(&in, &h), 0);
    assert_int_equal(h.batch_id, INVALID_BATCH);
    assert_int_equal(check_xfer(&in, &h), 0); /* again: already done */
    char want[128];
    snprintf(want, sizeof(want), "%s=write-done;", my_name);
    struct answer a = peer_ask(&tp, CMD_WAIT_WRITE, want);
    assert_int_equal(a.rc, 0);
    assert_int_equal(a.bad, -1); /* every written byte arrived */
    assert_string_equal(a.notifs, want);

    /* READ back the target's upper half, without a notification. */
    assert_int_equal(post_xfer(&in, &h, OPCODE_READ, seg, LEN / 2,
                               tp.hi.buf + LEN / 2, NDESC, NULL),
                     0);
    assert_int_equal(wait_xfer(&in, &h), 0);
    assert_int_equal(check(in.buf + LEN / 2, LEN / 2, LEN / 2, SEED_TARGET),
                     -1);
    /* and the written half read back over the wire matches too */
    memset(in.buf + LEN / 2, 0, LEN / 2);
    assert_int_equal(
        post_xfer(&in, &h, OPCODE_READ, seg, LEN / 2, tp.hi.buf, NDESC, NULL),
        0);
    assert_int_equal(wait_xfer(&in, &h), 0);
    assert_int_equal(check(in.buf + LEN / 2, LEN / 2, 0, SEED_INIT), -1);

    /* genNotif both ways; getNotifs of an empty queue first. */
    char got[512] = "";
    get_notifs(&in, got, sizeof(got));
    assert_string_equal(got, "");
    assert_int_equal(peer_ask(&tp, CMD_NOTIFY_BACK, "ack").rc, 0);
    char back[128];
    snprintf(back, sizeof(back), "nixl-target-%d=ack;", (int)tp.pid);
    assert_int_equal(wait_notif(&in, back, got, sizeof(got)), 0);
    assert_int_equal(gen_notif(&in, seg, "bye"), 0);

    /* A handle released with its batch still allocated. */
    assert_int_equal(
        post_xfer(&in, &h, OPCODE_WRITE, seg, 0, tp.hi.buf, 1, NULL), 0);
    while (check_xfer(&in, &h) == 1)
        ;
    h.batch_id = allocateBatchID(in.engine, MAX_REQ);
    release_req(&in, &h);

    peer_quit(&tp);
    agent_stop(&in);
}

/* While the target is stopped (SIGSTOP) a write stays in flight and
 * getNicLoadStats counts its bytes on the loopback device; once the target
 * runs again it completes and the count is back to 0. */
static void test_nic_load(void **state)
{
    (void)state;
    struct peer tp;
    peer_start(&tp);
    struct agent in = {0};
    char my_name[64];
    snprintf(my_name, sizeof(my_name), "nixl-load-%d", (int)getpid());
    assert_int_equal(agent_start(&in, my_name, 0, 0), 0);
    int seg = load_remote(&in, tp.hi.conn_info);
    assert_true(seg > 0);
    assert_int_equal(kill(tp.pid, SIGSTOP), 0);
    int st;
    assert_int_equal(waitpid(tp.pid, &st, WUNTRACED), tp.pid); /* stopped */
    assert_true(WIFSTOPPED(st));
    struct req_handle h = {.batch_id = INVALID_BATCH};
    assert_int_equal(
        post_xfer(&in, &h, OPCODE_WRITE, seg, 0, tp.hi.buf, NDESC, NULL), 0);
    nic_load_stat_t s[4];
    size_t n = 4;
    assert_int_equal(getNicLoadStats(in.engine, s, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(s[0].device_name, "lo");
    uint64_t during = s[0].inflight_bytes;
    assert_int_equal(kill(tp.pid, SIGCONT), 0);
    assert_int_equal(during, NDESC * DESC);
    assert_int_equal(wait_xfer(&in, &h), 0);
    n = 4;
    assert_int_equal(getNicLoadStats(in.engine, s, &n), 0);
    assert_int_equal(s[0].inflight_bytes, 0);
    peer_quit(&tp);
    agent_stop(&in);
}

/* enableGracefulShutdown: SIGTERM ends the target with 128 + 15 after its
 * engine is destroyed: its segment cannot be opened any more. */
static void test_graceful_shutdown(void **state)
{
    (void)state;
    struct peer tp;
    peer_start(&tp);
    assert_int_equal(peer_ask(&tp, CMD_GRACEFUL, NULL).rc, 0);
    assert_int_equal(kill(tp.pid, SIGTERM), 0);
    int st;
    assert_int_equal(waitpid(tp.pid, &st, 0), tp.pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 128 + SIGTERM);
    close(tp.cmd);
    close(tp.ans);
    struct agent in = {0};
    char my_name[64];
    snprintf(my_name, sizeof(my_name), "nixl-after-%d", (int)getpid());
    assert_int_equal(agent_start(&in, my_name, 0, 0), 0);
    assert_true(load_remote(&in, tp.hi.conn_info) < 0);
    agent_stop(&in);
}

/* How Mooncake's other bindings create their engines, in this process: the
 * Rust binding's TransferEngine::new (local_server_name, port included,
 * also as ip_or_host_name; auto_discover off, then installTransport) and
 * the Go p2pstore's (a name, an IP, an RPC port; installTransport with a
 * NIC priority matrix).  Peers reach each by its name and bytes move. */
static void test_binding_flows(void **state)
{
    (void)state;
    char rust_name[64], go_name[64];
    snprintf(rust_name, sizeof(rust_name), "127.0.0.1:%d", ms_free_port());
    /* P2PHANDSHAKE: the name's host is the address peers dial */
    snprintf(go_name, sizeof(go_name), p2p() ? "127.0.0.1" : "p2pstore-%d",
             (int)getpid());
    transfer_engine_t rust =
        createTransferEngine(g_conn, rust_name, rust_name, 0, 0);
    assert_non_null(rust);
    assert_non_null(installTransport(rust, "tcp", NULL));
    transfer_engine_t go =
        createTransferEngine(g_conn, go_name, "127.0.0.1", 12345, 0);
    assert_non_null(go);
    void *args[2] = {(void *)"{\"cpu:0\": [[\"mlx5_0\"], []]}", NULL};
    assert_non_null(installTransport(go, "rdma", args));
    struct agent in = {0};
    char my_name[64];
    snprintf(my_name, sizeof(my_name), "nixl-bindings-%d", (int)getpid());
    assert_int_equal(agent_start(&in, my_name, SEED_INIT, 0), 0);
    transfer_engine_t peers[2] = {rust, go};
    for (int i = 0; i < 2; i++) {
        char *dst = calloc(1, LEN / 2);
        assert_int_equal(
            registerLocalMemory(peers[i], dst, LEN / 2, "cpu:0", 1), 0);
        char name[64];
        if (p2p()) /* P2PHANDSHAKE names an engine by its address */
            assert_int_equal(getLocalIpAndPort(peers[i], name, sizeof(name)),
                             0);
        else
            snprintf(name, sizeof(name), "%s", i == 0 ? rust_name : go_name);
        int seg = load_remote(&in, name);
        assert_true(seg > 0);
        struct req_handle h = {.batch_id = INVALID_BATCH};
        assert_int_equal(post_xfer(&in, &h, OPCODE_WRITE, seg, 0,
                                   (uint64_t)(uintptr_t)dst, NDESC / 2, NULL),
                         0);
        assert_int_equal(wait_xfer(&in, &h), 0);
        assert_int_equal(check(dst, NDESC / 2 * DESC, 0, SEED_INIT), -1);
        assert_int_equal(unregisterLocalMemory(peers[i], dst), 0);
        destroyTransferEngine(peers[i]);
        free(dst);
    }
    agent_stop(&in);
}

/* ---- the metadata service ----------------------------------------------- */

static int group_setup(void **state)
{
    (void)state;
    if (p2p())
        return 0;
    int port = ms_free_port(), peer_port = ms_free_port();
    char dir[300], log[300], servers[128];
    snprintf(dir, sizeof(dir), "%s/data", g_tmp);
    snprintf(log, sizeof(log), "%s/server.log", g_tmp);
    g_srv = ms_spawn(g_mode, port, peer_port, dir, log, g_script, NULL);
    if (g_srv <= 0)
        return -1;
    ms_endpoint(g_mode, port, servers, sizeof(servers));
    if (strcmp(g_mode, "http") == 0)
        snprintf(g_conn, sizeof(g_conn), "%s", servers);
    else
        snprintf(g_conn, sizeof(g_conn), "%s://127.0.0.1:%d", g_mode, port);
    /* Ready when an engine can publish its segment there. */
    long t0 = now_ms();
    for (;;) {
        transfer_engine_t e =
            createTransferEngine(g_conn, "nixl-ready", "127.0.0.1", 0, 1);
        if (e) {
            destroyTransferEngine(e);
            return 0;
        }
        int st;
        if (waitpid(g_srv, &st, WNOHANG) == g_srv) {
            fprintf(stderr, "%s server exited during start-up; see %s\n",
                    g_mode, log);
            g_srv = -1;
            return -1;
        }
        if (now_ms() - t0 > 30000) {
            fprintf(stderr, "%s server not ready after 30 s; see %s\n", g_mode,
                    log);
            return -1;
        }
        usleep(100000);
    }
}

static int group_teardown(void **state)
{
    (void)state;
    ms_stop(g_srv);
    g_srv = -1;
    return 0;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    g_mode = argc > 1 ? argv[1] : "";
    g_script = argc > 2 ? argv[2] : NULL;
    if (strcmp(g_mode, "p2p") && strcmp(g_mode, "http") &&
        strcmp(g_mode, "etcd") && strcmp(g_mode, "redis")) {
        fprintf(stderr, "usage: %s p2p|http|etcd|redis [http_meta_server.py]\n",
                argv[0]);
        return 2;
    }
    if (!p2p() && !ms_in_path(ms_server_bin(g_mode))) {
        fprintf(stderr,
                "FAIL: '%s' not found in PATH; this test needs the real "
                "server (apt-get install %s)\n",
                ms_server_bin(g_mode), ms_server_package(g_mode));
        return 1;
    }
    snprintf(g_tmp, sizeof(g_tmp), "/tmp/classic-nixl-%s-XXXXXX", g_mode);
    if (!mkdtemp(g_tmp)) {
        fprintf(stderr, "FAIL: mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    /* The service is on loopback: never through a proxy. */
    unsetenv("http_proxy");
    unsetenv("HTTP_PROXY");
    unsetenv("all_proxy");
    unsetenv("ALL_PROXY");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nixl_sequence),
        cmocka_unit_test(test_nic_load),
        cmocka_unit_test(test_binding_flows),
        cmocka_unit_test(test_graceful_shutdown),
    };
    int rc =
        cmocka_run_group_tests_name(g_mode, tests, group_setup, group_teardown);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_tmp);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", g_tmp);
    return rc;
}

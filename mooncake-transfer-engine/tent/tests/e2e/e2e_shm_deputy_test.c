/* The confused deputy over shm (issue 42, item 3).  Three processes on one
 * host: a victim engine (e2e_peer child) with a read-write buffer from
 * tent_allocate_memory (a memfd), read-only, LOCAL and plain malloc
 * buffers; a rogue (a second child) that serves, as a P2P segment of its
 * own, a descriptor forged from the victim's -- the victim's pid, control
 * page and control socket, and the control entry of the victim's
 * read-write buffer, attached to whatever range and memfd the rogue
 * likes; and this process, the deputy, an engine with shm only that is
 * asked to move data to and from the rogue's segment.
 *
 * What must hold: the deputy never writes the victim's unregistered, LOCAL
 * or READ_ONLY memory nor reads its LOCAL memory or its control page (the
 * victim's bytes are hashed before and after, in the victim); a range that
 * strays past the entry it names is refused; a rogue that listens on a
 * control socket of its own while naming the victim's pid is refused with
 * an error naming its segment; and the deputy's real traffic with the
 * victim still moves and verifies every byte.  Issue 42, item 1: a forged
 * descriptor that names the victim's real entry and range but not its
 * access key (zeros, one bit off, the key of an earlier registration) is
 * refused exactly as a range outside the entry, memfd and cma alike. */
// clang-format off
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
// clang-format on

#include "../common/test_child.h"
#include "e2e_peer.h"
#include "rpc/rpc.h"
#include "rpc/wire.h"
#include "tent/transfer_engine.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define LEN   (1u << 20)
#define SMALL (64u * 1024) /* e2e_peer's ro, local and plain buffers */

static struct e2e_peer g_victim;
static struct tent_wire_desc g_vdesc;     /* the victim's descriptor */
static const struct tent_wire_buf *g_vrw; /* its rw buffer in g_vdesc */
static tent_engine_t g_e;                 /* the deputy */
static uint8_t *g_buf;                    /* the deputy's LEN bytes */
/* What forge_and_start copies: the buffer (NULL: g_vrw) and the key it
 * publishes (NULL: that buffer's own). */
static const struct tent_wire_buf *g_forge_src;
static const uint8_t *g_forge_key;

/* ---- the rogue ------------------------------------------------------------
 */

struct rogue_arg {
    char *json;
    size_t len;
};

static char *rogue_describe(void *ctx, size_t *len)
{
    const struct rogue_arg *a = ctx;
    char *s = malloc(a->len);
    if (s)
        memcpy(s, a->json, a->len);
    *len = a->len;
    return s;
}

static int rogue_notify(void *ctx, const char *peer, const char *from,
                        const char *name, const char *msg)
{
    (void)ctx, (void)peer, (void)from, (void)name, (void)msg;
    return 0;
}

/* Listens on the abstract unix name sock; -1 on failure. */
static int rogue_listen(const char *sock)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t n = strlen(sock);
    if (n + 1 > sizeof(sa.sun_path))
        return -1;
    memcpy(sa.sun_path + 1, sock, n);
    int ls = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    if (ls < 0)
        return -1;
    if (bind(ls, (struct sockaddr *)&sa,
             (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n)) ||
        listen(ls, 16)) {
        close(ls);
        return -1;
    }
    return ls;
}

/* The rogue: one process, forked in setup while this one has no threads
 * (a fork of the deputy, whose engine runs threads, could inherit a lock
 * held at the fork and hang).  Per command 'S' (u32 length, descriptor
 * JSON, u32 length, control socket name or nothing) it serves that
 * descriptor on 127.0.0.1 and answers the port (0: failed); per 'T' it
 * stops serving and answers a byte.  Ends when the command pipe closes. */
static void rogue_main(int cfd, int afd, void *arg)
{
    (void)arg;
    struct rogue_arg a = {0};
    struct tent_rpc_server *srv = NULL;
    int ls = -1;
    char c;
    while (tc_read_all(cfd, &c, 1) == 0) {
        /* 'S' after a case that failed before its 'T': stop that one */
        if (c == 'T' || srv) {
            if (srv)
                tent_rpc_server_stop(srv);
            srv = NULL;
            if (ls >= 0)
                close(ls);
            ls = -1;
            free(a.json);
            a.json = NULL;
            if (c == 'T') {
                tc_write_all(afd, &c, 1);
                continue;
            }
        }
        uint32_t jn = 0, sn = 0;
        char sock[108] = "";
        if (c != 'S' || tc_read_all(cfd, &jn, sizeof(jn)) ||
            !(a.json = malloc(jn ? jn : 1)) || tc_read_all(cfd, a.json, jn) ||
            tc_read_all(cfd, &sn, sizeof(sn)) || sn >= sizeof(sock) ||
            tc_read_all(cfd, sock, sn))
            _exit(2);
        a.len = jn;
        uint16_t port = 0;
        struct tent_rpc_handlers h = {
            .ctx = &a, .describe = rogue_describe, .notify = rogue_notify};
        if ((sn == 0 || (ls = rogue_listen(sock)) >= 0) &&
            tent_rpc_server_start(&h, NULL, "127.0.0.1", 0, &srv, &port))
            port = 0;
        tc_write_all(afd, &port, sizeof(port));
    }
    _exit(0);
}

static struct {
    pid_t pid;
    int cmd, ans;
} g_rogue = {.pid = -1};

struct rogue {
    char name[64];
};

static void rogue_stop(struct rogue *r)
{
    (void)r;
    char c = 'T';
    assert_int_equal(tc_write_all(g_rogue.cmd, &c, 1), 0);
    assert_int_equal(tc_read_all(g_rogue.ans, &c, 1), 0);
}

/* What the rogue publishes: one buffer [base, +len) granting reads and
 * writes, with shm handle handle and the control entry of the victim's rw
 * buffer; the victim's pid, control page and socket (sock overrides the
 * socket). */
static void forge_and_start(struct rogue *r, uint64_t base, uint64_t len,
                            const char *handle, const char *sock)
{
    const struct tent_wire_buf *src = g_forge_src ? g_forge_src : g_vrw;
    struct tent_wire_kv kv[TENT_WIRE_MAX_BUF_ATTRS];
    int nkv = 0;
    for (int i = 0; i < src->nattrs; i++)
        kv[nkv++] = src->attrs[i];
    for (int i = 0; i < nkv; i++)
        if (strcmp(kv[i].key, "shm") == 0)
            snprintf(kv[i].value, sizeof(kv[i].value), "%s", handle);
    struct tent_wire_buf b = *src;
    if (g_forge_key)
        memcpy(b.key, g_forge_key, sizeof(b.key));
    b.base = base;
    b.length = len;
    b.perm = PERM_GLOBAL_READ_WRITE;
    b.attrs = kv;
    b.nattrs = nkv;
    static struct tent_wire_desc d;
    d = g_vdesc;
    d.bufs = &b;
    d.nbufs = 1;
    d.nattrs = 0;
    for (int i = 0; i < g_vdesc.nattrs; i++) {
        if (strcmp(g_vdesc.attr_key[i], "rpc_addr") == 0)
            continue; /* refetches come to the rogue */
        memcpy(d.attr_key[d.nattrs], g_vdesc.attr_key[i], 64);
        memcpy(d.attr_value[d.nattrs], g_vdesc.attr_value[i], 256);
        if (sock && strcmp(d.attr_key[d.nattrs], "shm_sock") == 0)
            snprintf(d.attr_value[d.nattrs], 256, "%s", sock);
        d.nattrs++;
    }
    size_t jn = 0;
    char *json = tent_wire_encode_desc(&d, &jn);
    assert_non_null(json);
    uint32_t n32 = (uint32_t)jn, sn = sock ? (uint32_t)strlen(sock) : 0;
    char c = 'S';
    assert_int_equal(tc_write_all(g_rogue.cmd, &c, 1), 0);
    assert_int_equal(tc_write_all(g_rogue.cmd, &n32, sizeof(n32)), 0);
    assert_int_equal(tc_write_all(g_rogue.cmd, json, jn), 0);
    assert_int_equal(tc_write_all(g_rogue.cmd, &sn, sizeof(sn)), 0);
    if (sn)
        assert_int_equal(tc_write_all(g_rogue.cmd, sock, sn), 0);
    free(json);
    uint16_t port = 0;
    assert_int_equal(tc_read_all(g_rogue.ans, &port, sizeof(port)), 0);
    assert_int_not_equal(port, 0);
    snprintf(r->name, sizeof(r->name), "127.0.0.1:%u", port);
}

/* One request of len bytes between the deputy's buffer and addr of seg:
 * STATUS_COMPLETED or STATUS_FAILED (a refused submit included), the
 * cause's message in msg. */
static int move(tent_segment_id_t seg, int op, uint64_t addr, size_t len,
                char *msg, size_t cap)
{
    msg[0] = '\0';
    tent_batch_id_t b = tent_allocate_batch(g_e, 1);
    assert_true(b != TENT_INVALID_BATCH_ID);
    tent_request_t r = {.opcode = op,
                        .source = g_buf,
                        .target_id = seg,
                        .target_offset = addr,
                        .length = len};
    int st = STATUS_FAILED;
    if (tent_submit(g_e, b, &r, 1) != 0) {
        snprintf(msg, cap, "%s", tent_last_error());
    } else {
        tent_status_t s;
        assert_int_equal(e2e_wait(g_e, b, 30000, &s), 0);
        st = s.status;
        int code = 0, native = 0;
        if (st != STATUS_COMPLETED)
            tent_task_error(g_e, b, 0, &code, &native, msg, cap);
    }
    tent_free_batch(g_e, b);
    return st;
}

/* The deputy asked, through the rogue's segment, for op on [addr, +len)
 * of the victim: it must fail.  Returns the failure's message. */
static void refused(const char *what, uint64_t fbase, uint64_t flen,
                    const char *handle, const char *sock, int op, uint64_t addr,
                    size_t len, char *msg, size_t cap)
{
    struct rogue r;
    forge_and_start(&r, fbase, flen, handle, sock);
    tent_segment_id_t seg;
    assert_int_equal(tent_open_segment(g_e, &seg, r.name), 0);
    int st = move(seg, op, addr, len, msg, cap);
    printf("  %s: %s (%s)\n", what,
           st == STATUS_COMPLETED ? "COMPLETED" : "refused", msg);
    assert_int_equal(st, STATUS_FAILED);
    assert_int_equal(tent_close_segment(g_e, seg), 0);
    rogue_stop(&r);
}

static const struct tent_wire_buf *desc_buf(const struct tent_wire_desc *d,
                                            uint64_t base)
{
    for (size_t i = 0; i < d->nbufs; i++)
        if (d->bufs[i].base == base)
            return &d->bufs[i];
    fail_msg("no buffer at %#llx in the victim's descriptor",
             (unsigned long long)base);
    return NULL;
}

static const char *rw_handle(void)
{
    for (int i = 0; i < g_vrw->nattrs; i++)
        if (strcmp(g_vrw->attrs[i].key, "shm") == 0)
            return g_vrw->attrs[i].value;
    fail_msg("the victim's rw buffer publishes no shm handle");
    return NULL;
}

/* ---- cases ----------------------------------------------------------------
 */

/* Write into the victim's LOCAL, READ_ONLY and unregistered memory through
 * an entry that grants writes elsewhere: nothing changes there. */
static void test_no_write_outside_entry(void **state)
{
    (void)state;
    char msg[512];
    memset(g_buf, 0xEE, LEN);
    struct {
        const char *what;
        uint64_t addr;
    } t[] = {{"LOCAL", g_victim.local_base},
             {"READ_ONLY", g_victim.ro_base},
             {"unregistered", g_victim.reg_base}};
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        uint64_t before = e2e_peer_hash_at(&g_victim, t[i].addr, SMALL);
        assert_int_not_equal(before, 0);
        refused(t[i].what, t[i].addr, SMALL, "cma", NULL, OPCODE_WRITE,
                t[i].addr, SMALL, msg, sizeof(msg));
        assert_int_equal(e2e_peer_hash_at(&g_victim, t[i].addr, SMALL), before);
    }
}

/* Read the victim's LOCAL memory: refused, and no byte of it arrives. */
static void test_no_read_of_local(void **state)
{
    (void)state;
    char msg[512];
    memset(g_buf, 0, SMALL);
    refused("read LOCAL", g_victim.local_base, SMALL, "cma", NULL, OPCODE_READ,
            g_victim.local_base, SMALL, msg, sizeof(msg));
    for (size_t i = 0; i < SMALL; i++)
        assert_int_equal(g_buf[i], 0);
}

/* A range that starts inside the rw entry and runs past its end. */
static void test_straddling_range_refused(void **state)
{
    (void)state;
    char msg[512];
    memset(g_buf, 0xEE, LEN);
    uint64_t tail = g_victim.rw_base + g_victim.rw_len - 2048;
    uint64_t before = e2e_peer_hash_at(&g_victim, tail, 2048);
    refused("past the entry's end", g_victim.rw_base, 2 * g_victim.rw_len,
            "cma", NULL, OPCODE_WRITE, tail, 4096, msg, sizeof(msg));
    assert_non_null(strstr(msg, "outside"));
    assert_int_equal(e2e_peer_hash_at(&g_victim, tail, 2048), before);
}

/* The rw entry with the memfd of the victim's control page: the inode is
 * not the entry's, so its bytes are neither read nor written. */
static void test_memfd_bound_to_entry(void **state)
{
    (void)state;
    char msg[512];
    const char *ctl = NULL;
    for (int i = 0; i < g_vdesc.nattrs; i++)
        if (strcmp(g_vdesc.attr_key[i], "shm_ctl") == 0)
            ctl = g_vdesc.attr_value[i];
    assert_non_null(ctl);
    memset(g_buf, 0, 4096);
    refused("another memfd", g_victim.rw_base, 4096, ctl, NULL, OPCODE_READ,
            g_victim.rw_base, 4096, msg, sizeof(msg));
    static const uint8_t zero[4096];
    assert_memory_equal(g_buf, zero, sizeof(zero));
    /* the entry's inode published, but the fd is the control page's */
    char forged[128];
    int ctlfd = -1;
    unsigned long long rwino = 0;
    assert_int_equal(sscanf(ctl, "memfd:%d:", &ctlfd), 1);
    assert_int_equal(sscanf(rw_handle(), "memfd:%*d:%llu", &rwino), 1);
    snprintf(forged, sizeof(forged), "memfd:%d:%llu", ctlfd, rwino);
    refused("another fd, the entry's inode", g_victim.rw_base, 4096, forged,
            NULL, OPCODE_READ, g_victim.rw_base, 4096, msg, sizeof(msg));
    assert_memory_equal(g_buf, zero, sizeof(zero));
    memset(g_buf, 0xEE, 4096);
    refused("another memfd, write", g_victim.rw_base, 4096, ctl, NULL,
            OPCODE_WRITE, g_victim.rw_base, 4096, msg, sizeof(msg));
}

/* The rogue listens on a control socket of its own and names the victim's
 * pid, with the victim's rw buffer exactly as the victim publishes it. */
static void test_pid_is_the_kernels(void **state)
{
    (void)state;
    char msg[512], sock[64];
    snprintf(sock, sizeof(sock), "tent-rogue/%ld", (long)getpid());
    memset(g_buf, 0xEE, LEN);
    uint64_t before = e2e_peer_hash_at(&g_victim, g_victim.rw_base, 4096);
    struct rogue r;
    forge_and_start(&r, g_vrw->base, g_vrw->length, rw_handle(), sock);
    tent_segment_id_t seg;
    assert_int_equal(tent_open_segment(g_e, &seg, r.name), 0);
    int st = move(seg, OPCODE_WRITE, g_victim.rw_base, 4096, msg, sizeof(msg));
    printf("  own socket: %s (%s)\n",
           st == STATUS_COMPLETED ? "COMPLETED" : "refused", msg);
    assert_int_equal(st, STATUS_FAILED);
    assert_non_null(strstr(msg, r.name));
    assert_non_null(strstr(msg, "pid"));
    assert_int_equal(tent_close_segment(g_e, seg), 0);
    rogue_stop(&r);
    assert_int_equal(e2e_peer_hash_at(&g_victim, g_victim.rw_base, 4096),
                     before);
}

/* The deputy's own traffic with the victim: every byte checked. */
static void test_real_traffic(void **state)
{
    (void)state;
    char msg[512];
    tent_segment_id_t seg;
    assert_int_equal(tent_open_segment(g_e, &seg, g_victim.name), 0);
    e2e_pattern_fill(g_buf, LEN, 12345);
    uint64_t h = e2e_fnv(g_buf, LEN);
    assert_int_equal(
        move(seg, OPCODE_WRITE, g_victim.rw_base, LEN, msg, sizeof(msg)),
        STATUS_COMPLETED);
    assert_int_equal(e2e_peer_hash(&g_victim, false, 0, LEN), h);
    memset(g_buf, 0, LEN);
    assert_int_equal(
        move(seg, OPCODE_READ, g_victim.rw_base, LEN, msg, sizeof(msg)),
        STATUS_COMPLETED);
    assert_int_equal(e2e_fnv(g_buf, LEN), h);
    /* read-only memory is readable (through process_vm_readv) */
    memset(g_buf, 0, SMALL);
    assert_int_equal(
        move(seg, OPCODE_READ, g_victim.ro_base, SMALL, msg, sizeof(msg)),
        STATUS_COMPLETED);
    for (size_t i = 0; i < SMALL; i++)
        assert_int_equal(g_buf[i], e2e_pattern(i));
    /* and not writable */
    assert_int_equal(
        move(seg, OPCODE_WRITE, g_victim.ro_base, SMALL, msg, sizeof(msg)),
        STATUS_FAILED);
    assert_int_equal(tent_close_segment(g_e, seg), 0);
}

/* A forged descriptor that names the victim's rw buffer exactly (entry,
 * range, memfd; and the same entry reached with process_vm_*) and its
 * read-only buffer (a cma entry), but carries a wrong key: zeros, or the
 * real key with one bit off.  Refused as a range outside the entry, and
 * the victim's bytes neither change nor arrive. */
static void test_wrong_key_refused(void **state)
{
    (void)state;
    char msg[512], what[96];
    uint8_t keys[3][TENT_WIRE_KEY_LEN];
    memset(keys[0], 0, sizeof(keys[0]));
    memcpy(keys[1], g_vrw->key, sizeof(keys[1]));
    keys[1][7] ^= 0x10;
    memcpy(keys[2], g_vrw->key, sizeof(keys[2]));
    keys[2][TENT_WIRE_KEY_LEN - 1] ^= 0x01;
    const struct tent_wire_buf *ro = desc_buf(&g_vdesc, g_victim.ro_base);
    static const uint8_t zero[4096];
    for (int k = 0; k < 3; k++) {
        g_forge_key = keys[k];
        const char *how[] = {rw_handle(), "cma"};
        for (int h = 0; h < 2; h++) {
            uint64_t before =
                e2e_peer_hash_at(&g_victim, g_victim.rw_base, 4096);
            memset(g_buf, 0xEE, 4096);
            snprintf(what, sizeof(what), "key %d, %s, write", k, how[h]);
            refused(what, g_vrw->base, g_vrw->length, how[h], NULL,
                    OPCODE_WRITE, g_victim.rw_base, 4096, msg, sizeof(msg));
            assert_non_null(strstr(msg, "outside"));
            assert_int_equal(
                e2e_peer_hash_at(&g_victim, g_victim.rw_base, 4096), before);
            memset(g_buf, 0, 4096);
            snprintf(what, sizeof(what), "key %d, %s, read", k, how[h]);
            refused(what, g_vrw->base, g_vrw->length, how[h], NULL, OPCODE_READ,
                    g_victim.rw_base, 4096, msg, sizeof(msg));
            assert_non_null(strstr(msg, "outside"));
            assert_memory_equal(g_buf, zero, sizeof(zero));
        }
    }
    /* the read-only buffer's cma entry, with its key one bit off */
    uint8_t rokey[TENT_WIRE_KEY_LEN];
    memcpy(rokey, ro->key, sizeof(rokey));
    rokey[0] ^= 0x80;
    g_forge_src = ro;
    g_forge_key = rokey;
    memset(g_buf, 0, 4096);
    refused("read-only, key one bit off", ro->base, ro->length, "cma", NULL,
            OPCODE_READ, g_victim.ro_base, 4096, msg, sizeof(msg));
    assert_non_null(strstr(msg, "outside"));
    assert_memory_equal(g_buf, zero, sizeof(zero));
    /* with its own key the same forged buffer reads: the key was all that
     * was missing */
    g_forge_key = NULL;
    struct rogue r;
    forge_and_start(&r, ro->base, ro->length, "cma", NULL);
    tent_segment_id_t seg;
    assert_int_equal(tent_open_segment(g_e, &seg, r.name), 0);
    assert_int_equal(
        move(seg, OPCODE_READ, g_victim.ro_base, 4096, msg, sizeof(msg)),
        STATUS_COMPLETED);
    for (size_t i = 0; i < 4096; i++)
        assert_int_equal(g_buf[i], e2e_pattern(i));
    assert_int_equal(tent_close_segment(g_e, seg), 0);
    rogue_stop(&r);
    g_forge_src = NULL;
}

/* The victim registers its rw buffer again: a new entry generation and a
 * new key.  The old descriptor is refused, and so is the new entry named
 * with the old key; a fresh descriptor moves data. */
static void test_reregistered_key(void **state)
{
    (void)state;
    char msg[512];
    uint8_t oldkey[TENT_WIRE_KEY_LEN];
    memcpy(oldkey, g_vrw->key, sizeof(oldkey));
    assert_int_equal(e2e_peer_reregister_rw(&g_victim, PERM_GLOBAL_READ_WRITE),
                     0);
    char host[256];
    uint16_t port;
    struct tent_wire_desc nd;
    assert_int_equal(
        tent_rpc_parse_addr(g_victim.name, host, sizeof(host), &port), 0);
    assert_int_equal(tent_rpc_fetch_desc(NULL, "", host, port, 5000, &nd), 0);
    const struct tent_wire_buf *nrw = desc_buf(&nd, g_victim.rw_base);
    assert_memory_not_equal(nrw->key, oldkey, sizeof(oldkey));
    uint64_t before = e2e_peer_hash_at(&g_victim, g_victim.rw_base, 4096);
    memset(g_buf, 0xEE, 4096);
    /* the old descriptor as it was */
    refused("old descriptor", g_vrw->base, g_vrw->length, rw_handle(), NULL,
            OPCODE_WRITE, g_victim.rw_base, 4096, msg, sizeof(msg));
    assert_int_equal(e2e_peer_hash_at(&g_victim, g_victim.rw_base, 4096),
                     before);
    /* the new entry and generation, the old key (memfd and cma) */
    g_forge_src = nrw;
    g_forge_key = oldkey;
    const char *how[] = {rw_handle(), "cma"};
    for (int h = 0; h < 2; h++) {
        refused("new entry, old key", nrw->base, nrw->length, how[h], NULL,
                OPCODE_WRITE, g_victim.rw_base, 4096, msg, sizeof(msg));
        assert_non_null(strstr(msg, "outside"));
        assert_int_equal(e2e_peer_hash_at(&g_victim, g_victim.rw_base, 4096),
                         before);
    }
    g_forge_src = NULL;
    g_forge_key = NULL;
    /* the victim's own, refetched descriptor carries the new key */
    tent_segment_id_t seg;
    assert_int_equal(tent_open_segment(g_e, &seg, g_victim.name), 0);
    e2e_pattern_fill(g_buf, 4096, 777);
    uint64_t h = e2e_fnv(g_buf, 4096);
    assert_int_equal(
        move(seg, OPCODE_WRITE, g_victim.rw_base, 4096, msg, sizeof(msg)),
        STATUS_COMPLETED);
    assert_int_equal(e2e_peer_hash_at(&g_victim, g_victim.rw_base, 4096), h);
    assert_int_equal(tent_close_segment(g_e, seg), 0);
    tent_wire_desc_free(&g_vdesc);
    g_vdesc = nd;
    g_vrw = desc_buf(&g_vdesc, g_victim.rw_base);
}

/* ---- setup ----------------------------------------------------------------
 */

static int setup(void **state)
{
    (void)state;
    e2e_config(true, false);
    if (e2e_peer_start(&g_victim, LEN, true, false) != 0)
        return -1;
    char host[256];
    uint16_t port;
    if (tent_rpc_parse_addr(g_victim.name, host, sizeof(host), &port) ||
        tent_rpc_fetch_desc(NULL, "", host, port, 5000, &g_vdesc))
        return -1;
    for (size_t i = 0; i < g_vdesc.nbufs; i++)
        if (g_vdesc.bufs[i].base == g_victim.rw_base)
            g_vrw = &g_vdesc.bufs[i];
    if (!g_vrw)
        return -1;
    g_rogue.pid = tc_fork_child(rogue_main, NULL, &g_rogue.cmd, &g_rogue.ans);
    if (g_rogue.pid < 0)
        return -1;
    g_e = tent_create_engine();
    void *p;
    if (!g_e || tent_allocate_memory(g_e, &p, LEN, "cpu") ||
        tent_register_memory(g_e, p, LEN))
        return -1;
    g_buf = p;
    /* The plain buffer is the victim's unregistered memory from now on. */
    return e2e_peer_unregister_plain(&g_victim) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    if (g_e) {
        if (g_buf)
            tent_free_memory(g_e, g_buf);
        tent_destroy_engine(g_e);
    }
    tent_wire_desc_free(&g_vdesc);
    if (g_rogue.pid > 0) {
        close(g_rogue.cmd);
        close(g_rogue.ans);
        waitpid(g_rogue.pid, NULL, 0);
    }
    if (g_victim.pid > 0)
        e2e_peer_quit(&g_victim);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1) /* one case by name (cmocka's glob) */
        cmocka_set_test_filter(argv[1]);
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_write_outside_entry),
        cmocka_unit_test(test_no_read_of_local),
        cmocka_unit_test(test_straddling_range_refused),
        cmocka_unit_test(test_memfd_bound_to_entry),
        cmocka_unit_test(test_pid_is_the_kernels),
        cmocka_unit_test(test_real_traffic),
        cmocka_unit_test(test_wrong_key_refused),
        cmocka_unit_test(test_reregistered_key),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

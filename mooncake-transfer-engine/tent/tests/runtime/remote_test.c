/* Transfers to a remote segment through the runtime's segment interface
 * (struct tent_segment_ops), with a fake control plane that "publishes" a
 * peer's buffers (memory of this process, so the fake transports can copy)
 * and records notifications.  Covers open/reuse/close, remote ranges and
 * refetch, remote permissions, reachability and notifications to a peer. */
#include "common/error.h"
#include "runtime/engine.h"
#include "test_util.h"

#define PLEN   16384
#define MAXPUB 4

static struct {
    struct {
        char *mem;
        size_t len;
        int perm;
        bool borrowed; /* inside another entry's memory: not freed */
    } pub[MAXPUB];
    int npub;
    int fetches, releases, notifies;
    int gate;     /* fetches wait until this many are in progress (0 off) */
    int arrivals; /* fetches that reached the gate */
    char last_name[256], last_msg[256];
    uint64_t last_seg;
} peer;

static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;

static int peer_fetch(struct tent_engine *e, const char *name,
                      struct tent_segment *seg)
{
    (void)e;
    pthread_mutex_lock(&gate_lock);
    peer.fetches++;
    if (peer.gate) {
        /* Hold every fetch until all the openers are inside one, so that
         * concurrent opens really overlap (bounded: 5 s). */
        peer.arrivals++;
        pthread_cond_broadcast(&gate_cond);
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 5;
        while (peer.arrivals < peer.gate &&
               pthread_cond_timedwait(&gate_cond, &gate_lock, &until) == 0)
            ;
    }
    pthread_mutex_unlock(&gate_lock);
    if (strcmp(name, "peer:1") != 0)
        return tent_set_error(TENT_ENOSEGMENT, "segment '%s' is not published",
                              name);
    pthread_rwlock_wrlock(&seg->lock);
    snprintf(seg->host_id, sizeof(seg->host_id), "test-host");
    for (int i = 0; i < peer.npub; i++) {
        uint64_t base = (uintptr_t)peer.pub[i].mem;
        bool have = false;
        for (size_t k = 0; k < seg->nbufs; k++)
            have |= seg->bufs[k]->base == base &&
                    seg->bufs[k]->length == peer.pub[i].len;
        if (have)
            continue;
        struct tent_buffer *b = calloc(1, sizeof(*b));
        assert_non_null(b);
        b->base = base;
        b->length = peer.pub[i].len;
        b->perm = peer.pub[i].perm;
        snprintf(b->location, sizeof(b->location), "cpu");
        b->xport_mask = 0xffffffffu; /* the peer serves every transport */
        b->alloc_fd = -1;
        assert_int_equal(tent_segment_insert_locked(seg, b), TENT_OK);
    }
    pthread_rwlock_unlock(&seg->lock);
    return TENT_OK;
}

static void peer_release(struct tent_engine *e, struct tent_segment *seg)
{
    (void)e;
    (void)seg;
    peer.releases++;
}

static int peer_notify(struct tent_engine *e, struct tent_segment *seg,
                       const char *name, const char *msg)
{
    (void)e;
    peer.notifies++;
    peer.last_seg = seg->v.id;
    snprintf(peer.last_name, sizeof(peer.last_name), "%s", name);
    snprintf(peer.last_msg, sizeof(peer.last_msg), "%s", msg);
    return TENT_OK;
}

static const struct tent_segment_ops peer_ops = {
    .fetch = peer_fetch,
    .release = peer_release,
    .notify = peer_notify,
};

static char *publish(size_t len, int perm)
{
    char *m = aligned_alloc(4096, len);
    assert_non_null(m);
    memset(m, 0, len);
    peer.pub[peer.npub].mem = m;
    peer.pub[peer.npub].len = len;
    peer.pub[peer.npub].perm = perm;
    peer.npub++;
    return m;
}

static int setup(void **state)
{
    tu_setup(state);
    memset(&peer, 0, sizeof(peer));
    return 0;
}

static int teardown(void **state)
{
    for (int i = 0; i < peer.npub; i++)
        if (!peer.pub[i].borrowed)
            free(peer.pub[i].mem);
    return tu_teardown(state);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

static tent_engine_t engine_with_peer(const char *const *enable)
{
    tent_engine_t e = tu_engine(enable);
    assert_non_null(e);
    tent_engine_cast(e)->seg_ops = &peer_ops;
    return e;
}

static int run(tent_engine_t e, tent_request_t *r, int *status)
{
    tent_batch_id_t b = tent_allocate_batch(e, 1);
    int rc = tent_submit(e, b, r, 1);
    if (rc == TENT_OK) {
        tent_status_t st;
        assert_int_equal(tu_wait_task(e, b, 0, &st, 2000), TENT_OK);
        *status = st.status;
    }
    assert_int_equal(tent_free_batch(e, b), TENT_OK);
    return rc;
}

static void test_open_write_read(void **state)
{
    (void)state;
    char *pa = publish(PLEN, PERM_GLOBAL_READ_WRITE);
    char *pb = publish(PLEN, PERM_GLOBAL_READ_WRITE);
    tent_engine_t e = engine_with_peer((const char *const[]){"fake_a", NULL});
    tent_segment_id_t h = 0, h2 = 0;
    assert_int_equal(tent_open_segment(e, &h, "peer:1"), TENT_OK);
    assert_int_not_equal(h, LOCAL_SEGMENT_ID);
    assert_int_equal(tent_open_segment(e, &h2, "peer:1"), TENT_OK);
    assert_int_equal(h2, h); /* reused, not fetched again */
    assert_int_equal(peer.fetches, 1);
    /* Opening our own name gives the local segment. */
    char self[128];
    assert_int_equal(tent_segment_name(e, self, sizeof(self)), TENT_OK);
    assert_int_equal(tent_open_segment(e, &h2, self), TENT_OK);
    assert_int_equal(h2, LOCAL_SEGMENT_ID);

    tent_segment_info_t info;
    assert_int_equal(tent_get_segment_info(e, h, &info), TENT_OK);
    assert_int_equal(info.num_buffers, 2);
    tent_free_segment_info(&info);

    struct tu_bufs p;
    tu_bufs_init(e, &p, PLEN);
    tent_request_t r = tu_write(&p, 0, PLEN);
    r.target_id = h;
    r.target_offset = (uintptr_t)pa;
    int status = -1;
    assert_int_equal(run(e, &r, &status), TENT_OK);
    assert_int_equal(status, STATUS_COMPLETED);
    assert_memory_equal(pa, p.src, PLEN);

    memset(pb, 0x5c, PLEN);
    r.opcode = OPCODE_READ;
    r.target_offset = (uintptr_t)pb + 100;
    r.length = 1000;
    assert_int_equal(run(e, &r, &status), TENT_OK);
    assert_int_equal(status, STATUS_COMPLETED);
    assert_memory_equal(pb, p.src, 1000);
    assert_int_equal(peer.fetches, 1);

    assert_int_equal(tent_close_segment(e, h), TENT_OK);
    tu_bufs_fini(e, &p);
    tent_destroy_engine(e);
    assert_int_equal(peer.releases, 1);
}

/* A remote range outside the cached descriptor triggers one refetch: a
 * buffer the peer published since is found, a bogus range is ERANGE. */
static void test_remote_range_and_refetch(void **state)
{
    (void)state;
    char *pa = publish(PLEN, PERM_GLOBAL_READ_WRITE);
    tent_engine_t e = engine_with_peer((const char *const[]){"fake_a", NULL});
    tent_segment_id_t h;
    assert_int_equal(tent_open_segment(e, &h, "peer:1"), TENT_OK);
    struct tu_bufs p;
    tu_bufs_init(e, &p, PLEN);
    tent_request_t r = tu_write(&p, 0, 512);
    r.target_id = h;
    r.target_offset = (uintptr_t)pa + PLEN - 256; /* runs past the end */
    int status;
    assert_int_equal(run(e, &r, &status), TENT_ERANGE);
    assert_contains(tent_last_error(), "segment 'peer:1'");
    assert_int_equal(peer.fetches, 2); /* one refetch */

    char *pc = publish(PLEN, PERM_GLOBAL_READ_WRITE);
    r.target_offset = (uintptr_t)pc;
    assert_int_equal(run(e, &r, &status), TENT_OK);
    assert_int_equal(status, STATUS_COMPLETED);
    assert_memory_equal(pc, p.src, 512);
    assert_int_equal(peer.fetches, 3);
    tu_bufs_fini(e, &p);
    tent_destroy_engine(e);
}

static void test_remote_permissions(void **state)
{
    (void)state;
    char *priv = publish(PLEN, PERM_LOCAL_READ_WRITE);
    char *ro = publish(PLEN, PERM_GLOBAL_READ_ONLY);
    tent_engine_t e = engine_with_peer((const char *const[]){"fake_a", NULL});
    tent_segment_id_t h;
    assert_int_equal(tent_open_segment(e, &h, "peer:1"), TENT_OK);
    struct tu_bufs p;
    tu_bufs_init(e, &p, PLEN);
    tent_request_t r = tu_write(&p, 0, 512);
    r.target_id = h;
    r.target_offset = (uintptr_t)priv;
    int status;
    assert_int_equal(run(e, &r, &status), TENT_EPERM);
    assert_contains(tent_last_error(), "not remotely accessible");
    r.opcode = OPCODE_READ;
    assert_int_equal(run(e, &r, &status), TENT_EPERM);
    r.target_offset = (uintptr_t)ro;
    assert_int_equal(run(e, &r, &status), TENT_OK);
    r.opcode = OPCODE_WRITE;
    assert_int_equal(run(e, &r, &status), TENT_EPERM);
    assert_contains(tent_last_error(), "read-only");
    assert_int_equal(fake_stats[0].submitted, 1);
    tu_bufs_fini(e, &p);
    tent_destroy_engine(e);
}

static void test_unknown_remote_segment(void **state)
{
    (void)state;
    tent_engine_t e = engine_with_peer((const char *const[]){"fake_a", NULL});
    tent_segment_id_t h = 12345;
    assert_int_equal(tent_open_segment(e, &h, "peer:2"), TENT_ENOSEGMENT);
    assert_contains(tent_last_error(), "'peer:2'");
    assert_int_equal(h, 12345); /* output untouched on failure */
    /* Without any control plane the error says so. */
    tent_engine_cast(e)->seg_ops = NULL;
    assert_int_equal(tent_open_segment(e, &h, "peer:1"), TENT_ENOSEGMENT);
    assert_contains(tent_last_error(), "'peer:1'");
    tent_destroy_engine(e);
}

/* A transport that cannot reach the peer is no candidate for it, while it
 * still serves local transfers. */
static void test_reachability(void **state)
{
    (void)state;
    char *pa = publish(PLEN, PERM_GLOBAL_READ_WRITE);
    tent_engine_t e =
        engine_with_peer((const char *const[]){"fake_a", "fake_b", NULL});
    tent_segment_id_t h;
    assert_int_equal(tent_open_segment(e, &h, "peer:1"), TENT_OK);
    struct tu_bufs p;
    tu_bufs_init(e, &p, PLEN);
    fake_behavior[0].unreachable = true;
    tent_request_t r = tu_write(&p, 0, 512);
    r.target_id = h;
    r.target_offset = (uintptr_t)pa;
    int status;
    assert_int_equal(run(e, &r, &status), TENT_OK);
    assert_int_equal(status, STATUS_COMPLETED);
    assert_int_equal(fake_stats[0].submitted, 0);
    assert_int_equal(fake_stats[1].submitted, 1);
    tu_bufs_fini(e, &p);
    tent_destroy_engine(e);
}

static void test_remote_notifications(void **state)
{
    (void)state;
    char *pa = publish(PLEN, PERM_GLOBAL_READ_WRITE);
    tent_engine_t e = engine_with_peer((const char *const[]){"fake_a", NULL});
    tent_segment_id_t h;
    assert_int_equal(tent_open_segment(e, &h, "peer:1"), TENT_OK);
    assert_int_equal(tent_send_notifs(e, h, "hello", "world"), TENT_OK);
    assert_int_equal(peer.notifies, 1);
    assert_int_equal(peer.last_seg, h);
    assert_string_equal(peer.last_name, "hello");
    assert_string_equal(peer.last_msg, "world");

    struct tu_bufs p;
    tu_bufs_init(e, &p, PLEN);
    fake_behavior[0].polls_before_done = 2;
    tent_batch_id_t b = tent_allocate_batch(e, 2);
    tent_request_t r[2] = {tu_write(&p, 0, 512), tu_write(&p, 512, 512)};
    for (int i = 0; i < 2; i++) {
        r[i].target_id = h;
        r[i].target_offset = (uintptr_t)pa + (uint64_t)i * 512;
    }
    assert_int_equal(tent_submit_notif(e, b, r, 2, "kv", "ready"), TENT_OK);
    assert_int_equal(peer.notifies, 1); /* not before the data */
    /* The peer's buffer is pinned while the tasks run (a descriptor refresh
     * must not free it), and released when they are terminal. */
    struct tent_segment *seg = tent_engine_segment(tent_engine_cast(e), h);
    assert_int_equal(atomic_load(&seg->bufs[0]->inflight), 2);
    tent_status_t st;
    assert_int_equal(tu_wait_all(e, b, &st, 2000), TENT_OK);
    assert_int_equal(atomic_load(&seg->bufs[0]->inflight), 0);
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_int_equal(peer.notifies, 2);
    assert_string_equal(peer.last_name, "kv");
    assert_memory_equal(pa, p.src, 1024);
    assert_int_equal(tent_overall_status(e, b, &st), TENT_OK);
    assert_int_equal(tent_free_batch(e, b), TENT_OK);
    assert_int_equal(peer.notifies, 2); /* once */
    tu_bufs_fini(e, &p);
    tent_destroy_engine(e);
}

/* tent_close_segment closes: the handle is invalid afterwards (status,
 * info, submit, a second close), and reopening fetches a fresh descriptor
 * under a new handle. */
static void test_close_segment_really_closes(void **state)
{
    (void)state;
    char *pa = publish(PLEN, PERM_GLOBAL_READ_WRITE);
    tent_engine_t e = engine_with_peer((const char *const[]){"fake_a", NULL});
    tent_segment_id_t h = 0, h2 = 0;
    assert_int_equal(tent_open_segment(e, &h, "peer:1"), TENT_OK);
    assert_int_equal(peer.fetches, 1);
    assert_int_equal(tent_close_segment(e, h), TENT_OK);
    tent_segment_info_t info;
    assert_int_equal(tent_get_segment_info(e, h, &info), TENT_ENOSEGMENT);
    assert_int_equal(tent_close_segment(e, h), TENT_ENOSEGMENT);
    struct tu_bufs p;
    tu_bufs_init(e, &p, PLEN);
    tent_request_t r = tu_write(&p, 0, PLEN);
    r.target_id = h;
    r.target_offset = (uintptr_t)pa;
    tent_batch_id_t b = tent_allocate_batch(e, 1);
    assert_int_equal(tent_submit(e, b, &r, 1), TENT_ENOSEGMENT);
    assert_int_equal(tent_free_batch(e, b), TENT_OK);
    /* The peer published another buffer meanwhile: a reopen sees it. */
    char *pb = publish(PLEN, PERM_GLOBAL_READ_WRITE);
    assert_int_equal(tent_open_segment(e, &h2, "peer:1"), TENT_OK);
    assert_int_not_equal(h2, h);
    assert_int_equal(peer.fetches, 2);
    assert_int_equal(tent_get_segment_info(e, h2, &info), TENT_OK);
    assert_int_equal(info.num_buffers, 2);
    tent_free_segment_info(&info);
    r.target_id = h2;
    r.target_offset = (uintptr_t)pb;
    int status = -1;
    assert_int_equal(run(e, &r, &status), TENT_OK);
    assert_int_equal(status, STATUS_COMPLETED);
    assert_memory_equal(pb, p.src, PLEN);
    tu_bufs_fini(e, &p);
    tent_destroy_engine(e);
    assert_int_equal(peer.releases, 2);
}

/* Overlapping remote ranges: an access must lie wholly inside one range
 * that grants it.  The peer exposes a read-write range and, inside it, a
 * read-only one (registered later, so found first): a write into the
 * shared bytes is granted by the outer range; a write that no range
 * holds wholly is out of range. */
static void test_overlapping_remote_ranges(void **state)
{
    (void)state;
    char *pa = publish(PLEN, PERM_GLOBAL_READ_WRITE);
    peer.pub[peer.npub].mem = pa + 4096;
    peer.pub[peer.npub].len = 4096;
    peer.pub[peer.npub].perm = PERM_GLOBAL_READ_ONLY;
    peer.pub[peer.npub].borrowed = true;
    peer.npub++;
    tent_engine_t e = engine_with_peer((const char *const[]){"fake_a", NULL});
    tent_segment_id_t h = 0;
    assert_int_equal(tent_open_segment(e, &h, "peer:1"), TENT_OK);
    tent_segment_info_t info;
    assert_int_equal(tent_get_segment_info(e, h, &info), TENT_OK);
    assert_int_equal(info.num_buffers, 2);
    tent_free_segment_info(&info);
    struct tu_bufs p;
    tu_bufs_init(e, &p, PLEN);
    tent_request_t r = tu_write(&p, 0, 4096);
    r.target_id = h;
    r.target_offset = (uintptr_t)pa + 4096;
    int status = -1;
    assert_int_equal(run(e, &r, &status), TENT_OK);
    assert_int_equal(status, STATUS_COMPLETED);
    assert_memory_equal(pa + 4096, p.src, 4096);
    r.target_offset = (uintptr_t)pa + PLEN - 100;
    assert_int_equal(run(e, &r, &status), TENT_ERANGE);
    tu_bufs_fini(e, &p);
    tent_destroy_engine(e);
}

struct opener {
    tent_engine_t e;
    tent_segment_id_t h;
    int rc;
};

static void *open_peer(void *arg)
{
    struct opener *o = arg;
    o->rc = tent_open_segment(o->e, &o->h, "peer:1");
    return NULL;
}

/* Opens of one name that race (both fetches in flight at once) return one
 * handle; the loser's descriptor is released at once. */
static void test_concurrent_opens_one_handle(void **state)
{
    (void)state;
    publish(PLEN, PERM_GLOBAL_READ_WRITE);
    tent_engine_t e = engine_with_peer((const char *const[]){"fake_a", NULL});
    peer.gate = 2;
    struct opener o[2] = {{.e = e}, {.e = e}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&t[i], NULL, open_peer, &o[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(peer.arrivals, 2); /* they did overlap */
    assert_int_equal(o[0].rc, TENT_OK);
    assert_int_equal(o[1].rc, TENT_OK);
    assert_int_equal(o[0].h, o[1].h);
    assert_int_equal(peer.releases, 1);
    tent_destroy_engine(e);
    assert_int_equal(peer.releases, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_open_write_read),
        T(test_remote_range_and_refetch),
        T(test_remote_permissions),
        T(test_unknown_remote_segment),
        T(test_reachability),
        T(test_remote_notifications),
        T(test_close_segment_really_closes),
        T(test_overlapping_remote_ranges),
        T(test_concurrent_opens_one_handle),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Batch lifecycle through the public API: capacity, several submit calls,
 * per-task status, status list, overall status, free refused while tasks are
 * in flight, ids that do not come back after free. */
#include "metrics/metrics.h"
#include "runtime/batch.h"
#include "test_util.h"

#define LEN 65536

static void test_lifecycle(void **state)
{
    (void)state;
    tent_engine_t e = TU_ENGINE("fake_a");
    assert_non_null(e);
    struct tu_bufs p;
    tu_bufs_init(e, &p, LEN);
    fake_behavior[0].polls_before_done = 3;
    tent_batch_id_t b = tent_allocate_batch(e, 8);
    assert_int_not_equal(b, TENT_INVALID_BATCH_ID);

    tent_status_t st;
    assert_int_equal(tent_overall_status(e, b, &st), TENT_OK);
    assert_int_equal(st.status, STATUS_WAITING); /* nothing submitted yet */

    tent_request_t r[9];
    for (size_t i = 0; i < 9; i++)
        r[i] = tu_write(&p, i * 4096, 1000 + i);
    assert_int_equal(tent_submit(e, b, r, 3), TENT_OK);
    assert_int_equal(tent_submit(e, b, r + 3, 5), TENT_OK);
    /* Full: one more does not fit. */
    assert_int_equal(tent_submit(e, b, r + 8, 1), TENT_ECAPACITY);
    assert_contains(tent_last_error(), "capacity 8");
    assert_int_equal(fake_stats[0].submitted, 8);

    assert_int_equal(tent_task_status(e, b, 7, &st), TENT_OK);
    assert_int_equal(st.status, STATUS_PENDING);
    assert_int_equal(tent_task_status(e, b, 8, &st), TENT_ENOTASK);
    assert_int_equal(st.status, STATUS_INVALID);
    assert_contains(tent_last_error(), "task 8");

    tent_status_t list[8];
    size_t n = 4;
    assert_int_equal(tent_task_status_list(e, b, list, &n), TENT_EOVERFLOW);
    assert_int_equal(n, 8);
    n = 8;
    assert_int_equal(tent_task_status_list(e, b, list, &n), TENT_OK);
    assert_int_equal(n, 8);
    for (size_t i = 0; i < 8; i++)
        assert_int_equal(list[i].status, STATUS_PENDING);

    assert_int_equal(tu_wait_all(e, b, &st, 2000), TENT_OK);
    assert_int_equal(st.status, STATUS_COMPLETED);
    uint64_t total = 0;
    for (size_t i = 0; i < 8; i++)
        total += 1000 + i;
    assert_int_equal(st.transferred_bytes, total);
    n = 8;
    assert_int_equal(tent_task_status_list(e, b, list, &n), TENT_OK);
    for (size_t i = 0; i < 8; i++) {
        assert_int_equal(list[i].status, STATUS_COMPLETED);
        /* Task ids continue across submit calls, in request order. */
        assert_int_equal(list[i].transferred_bytes, 1000 + i);
        assert_memory_equal(p.src + i * 4096, p.dst + i * 4096, 1000 + i);
    }
    assert_int_equal(tent_cancel_task(e, b, 0), TENT_OK);

    assert_int_equal(tent_free_batch(e, b), TENT_OK);
    assert_int_equal(tent_free_batch(e, b), TENT_ENOBATCH);
    assert_int_equal(tent_task_status(e, b, 0, &st), TENT_ENOBATCH);
    assert_int_equal(tent_submit(e, b, r, 1), TENT_ENOBATCH);
    tu_bufs_fini(e, &p);
    tent_destroy_engine(e);
}

/* Free succeeds once the last in-flight task is terminal, also FAILED. */
static void test_free_after_failure(void **state)
{
    (void)state;
    tent_engine_t e = TU_ENGINE("fake_a");
    struct tu_bufs p;
    tu_bufs_init(e, &p, LEN);
    fake_behavior[0].polls_before_done = 2;
    fake_behavior[0].fail_completion = true;
    tent_batch_id_t b = tent_allocate_batch(e, 2);
    tent_request_t r = tu_write(&p, 0, 100);
    assert_int_equal(tent_submit(e, b, &r, 1), TENT_OK);
    tent_status_t st;
    assert_int_equal(tu_wait_task(e, b, 0, &st, 2000), TENT_OK);
    assert_int_equal(st.status, STATUS_FAILED);
    assert_int_equal(tent_free_batch(e, b), TENT_OK);
    tu_bufs_fini(e, &p);
    tent_destroy_engine(e);
}

/* Reads move remote (here: local target) bytes into the source buffer;
 * the transport completes only after a delay. */
static void test_read(void **state)
{
    (void)state;
    tent_engine_t e = TU_ENGINE("fake_a");
    struct tu_bufs p;
    tu_bufs_init(e, &p, LEN);
    memset(p.dst, 0x6b, LEN);
    fake_behavior[0].complete_after_ns = 5 * 1000000L; /* 5 ms */
    tent_batch_id_t b = tent_allocate_batch(e, 1);
    tent_request_t r = tu_write(&p, 0, LEN);
    r.opcode = OPCODE_READ;
    long t0 = tu_now_ms();
    assert_int_equal(tent_submit(e, b, &r, 1), TENT_OK);
    tent_status_t st;
    assert_int_equal(tent_task_status(e, b, 0, &st), TENT_OK);
    assert_int_equal(st.status, STATUS_PENDING);
    assert_int_equal(tu_wait_task(e, b, 0, &st, 2000), TENT_OK);
    assert_true(tu_now_ms() - t0 >= 5);
    assert_int_equal(tu_wait_task(e, b, 0, &st, 2000), TENT_OK);
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_memory_equal(p.src, p.dst, LEN);
    assert_int_equal(tent_free_batch(e, b), TENT_OK);
    tu_bufs_fini(e, &p);
    tent_destroy_engine(e);
}

/* Many batches: ids stay unique, a freed id never names a new batch, the
 * table grows past its first size. */
static void test_many_batches_unique_ids(void **state)
{
    (void)state;
    tent_engine_t e = TU_ENGINE("fake_a");
    enum { N = 200 };
    tent_batch_id_t ids[N];
    for (int i = 0; i < N; i++) {
        ids[i] = tent_allocate_batch(e, 1 + (size_t)i % 5);
        assert_int_not_equal(ids[i], TENT_INVALID_BATCH_ID);
        for (int j = 0; j < i; j++)
            assert_true(ids[i] != ids[j]);
    }
    for (int i = 0; i < N; i += 2)
        assert_int_equal(tent_free_batch(e, ids[i]), TENT_OK);
    for (int i = 0; i < N; i += 2) {
        tent_batch_id_t again = tent_allocate_batch(e, 2);
        for (int j = 0; j < N; j++)
            assert_true(again != ids[j]);
        tent_status_t st;
        assert_int_equal(tent_overall_status(e, ids[i], &st), TENT_ENOBATCH);
        assert_int_equal(tent_free_batch(e, again), TENT_OK);
    }
    for (int i = 1; i < N; i += 2)
        assert_int_equal(tent_free_batch(e, ids[i]), TENT_OK);
    tent_destroy_engine(e);
}

/* Two engines in one process: an id from one never names a batch of the
 * other, so engine B refuses A's id (and keeps its own batch) instead of
 * freeing the batch that happens to sit in the same slot. */
static void test_ids_unique_across_engines(void **state)
{
    (void)state;
    tent_engine_t a = TU_ENGINE("fake_a");
    tent_engine_t b = TU_ENGINE("fake_a");
    assert_non_null(a);
    assert_non_null(b);
    enum { N = 8 };
    tent_batch_id_t ia[N], ib[N];
    for (int i = 0; i < N; i++) {
        ia[i] = tent_allocate_batch(a, 1);
        ib[i] = tent_allocate_batch(b, 1);
        assert_int_not_equal(ia[i], TENT_INVALID_BATCH_ID);
        assert_int_not_equal(ib[i], TENT_INVALID_BATCH_ID);
    }
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++)
            assert_true(ia[i] != ib[j]);
    tent_status_t st;
    for (int i = 0; i < N; i++) {
        assert_int_equal(tent_free_batch(b, ia[i]), TENT_ENOBATCH);
        assert_contains(tent_last_error(), "unknown batch id");
        assert_int_equal(tent_overall_status(a, ib[i], &st), TENT_ENOBATCH);
    }
    /* B's own batches survived the attempts above. */
    for (int i = 0; i < N; i++) {
        assert_int_equal(tent_overall_status(b, ib[i], &st), TENT_OK);
        assert_int_equal(tent_free_batch(b, ib[i]), TENT_OK);
        assert_int_equal(tent_free_batch(a, ia[i]), TENT_OK);
    }
    /* A slot reused in A after a free does not bring back an id of B. */
    tent_batch_id_t again = tent_allocate_batch(a, 1);
    for (int i = 0; i < N; i++)
        assert_true(again != ib[i] && again != ia[i]);
    assert_int_equal(tent_free_batch(b, again), TENT_ENOBATCH);
    assert_int_equal(tent_free_batch(a, again), TENT_OK);
    tent_destroy_engine(b);
    tent_destroy_engine(a);
}

/* Batch memory is recycled (batch_table.c): a freed batch's memory and slot
 * come back for the next allocation.  The old id must not reach the new
 * batch, and the new batch starts empty whatever the old one held (failed
 * tasks with causes, more or fewer tasks). */
static void test_recycled_batch(void **state)
{
    (void)state;
    tent_engine_t e = TU_ENGINE("fake_a");
    struct tu_bufs p;
    tu_bufs_init(e, &p, LEN);
    static const size_t sizes[] = {4, 2, 2000, 3, 1};
    tent_batch_id_t old = TENT_INVALID_BATCH_ID;
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        size_t n = sizes[k];
        tent_batch_id_t b = tent_allocate_batch(e, n);
        assert_int_not_equal(b, TENT_INVALID_BATCH_ID);
        assert_true(b != old);
        tent_status_t st;
        if (old != TENT_INVALID_BATCH_ID) {
            /* same slot, same memory: the old id is still unknown */
            assert_int_equal(b & 0xffffffffu, old & 0xffffffffu);
            assert_int_equal(tent_overall_status(e, old, &st), TENT_ENOBATCH);
            assert_contains(tent_last_error(), "unknown batch id");
            assert_int_equal(tent_task_status(e, old, 0, &st), TENT_ENOBATCH);
            assert_int_equal(tent_free_batch(e, old), TENT_ENOBATCH);
        }
        /* nothing of the batch before: no task */
        assert_int_equal(tent_task_status(e, b, 0, &st), TENT_ENOTASK);
        assert_int_equal(tent_overall_status(e, b, &st), TENT_OK);
        assert_int_equal(st.status, STATUS_WAITING);
        tent_request_t r[4];
        size_t m = n < 4 ? n : 4;
        for (size_t i = 0; i < m; i++)
            r[i] = tu_write(&p, i * 100, 100);
        /* every other round fails its tasks, leaving causes behind */
        fake_behavior[0].fail_completion = k % 2;
        fake_behavior[0].fail_code = TENT_EPERM;
        assert_int_equal(tent_submit(e, b, r, m), TENT_OK);
        assert_int_equal(tu_wait_all(e, b, &st, 2000), TENT_OK);
        assert_int_equal(st.status, k % 2 ? STATUS_FAILED : STATUS_COMPLETED);
        assert_int_equal(st.transferred_bytes, k % 2 ? 0 : m * 100);
        assert_int_equal(tent_free_batch(e, b), TENT_OK);
        old = b;
    }
    tu_bufs_fini(e, &p);
    tent_destroy_engine(e);
}

/* A batch larger than the runtime's internal submit group (64), submitted
 * in uneven calls, with a transport that completes late. */
static void test_large_batch(void **state)
{
    (void)state;
    tent_engine_t e = TU_ENGINE("fake_a");
    struct tu_bufs p;
    tu_bufs_init(e, &p, LEN);
    fake_behavior[0].polls_before_done = 1;
    enum { N = 300 };
    tent_batch_id_t b = tent_allocate_batch(e, N);
    tent_request_t *r = calloc(N, sizeof(*r));
    for (size_t i = 0; i < N; i++)
        r[i] = tu_write(&p, (i * 200) % (LEN - 200), 200);
    assert_int_equal(tent_submit(e, b, r, 130), TENT_OK);
    assert_int_equal(tent_submit(e, b, r + 130, 1), TENT_OK);
    assert_int_equal(tent_submit(e, b, r + 131, N - 131), TENT_OK);
    assert_int_equal(fake_stats[0].submitted, N);
    tent_status_t st;
    assert_int_equal(tu_wait_all(e, b, &st, 2000), TENT_OK);
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_int_equal(st.transferred_bytes, N * 200);
    assert_int_equal(tent_free_batch(e, b), TENT_OK);
    free(r);
    tu_bufs_fini(e, &p);
    tent_destroy_engine(e);
}

/* tent_cancel_task: a task on the wire gets TENT_ERUNNING (no transport
 * takes back work it started), a task not yet started becomes CANCELED and
 * never runs, a finished one has nothing to cancel. */
static void test_cancel(void **state)
{
    (void)state;
    tent_engine_t e = TU_ENGINE("fake_a");
    struct tu_bufs p;
    tu_bufs_init(e, &p, LEN);
    fake_behavior[0].never_complete = true;
    tent_batch_id_t b = tent_allocate_batch(e, 2);
    tent_request_t r = tu_write(&p, 0, 100);
    assert_int_equal(tent_submit(e, b, &r, 1), TENT_OK);
    assert_int_equal(tent_cancel_task(e, b, 0), TENT_ERUNNING);
    assert_contains(tent_last_error(), "cannot stop it");
    assert_contains(tent_last_error(), "fake_a");
    /* Dispatch is synchronous, so a not-yet-started task exists only inside
     * the runtime: build one as the runtime would (WAITING, pinned). */
    struct tent_engine *E = tent_engine_cast(e);
    struct tent_batch *bt = tent_batch_lock(E, b, "test_cancel");
    assert_non_null(bt);
    struct tent_task *t = &bt->tasks[bt->ntasks++];
    memset(t, 0, sizeof(*t));
    t->req = r;
    t->state = STATUS_WAITING;
    t->xport = -1;
    pthread_rwlock_rdlock(&E->local->lock);
    t->src_buf = tent_segment_find_locked(E->local, (uintptr_t)p.src, 100);
    pthread_rwlock_unlock(&E->local->lock);
    assert_non_null(t->src_buf);
    atomic_fetch_add(&t->src_buf->inflight, 1);
    tent_batch_unlock(bt);
    int submitted = atomic_load(&fake_stats[0].submitted);
    assert_int_equal(tent_cancel_task(e, b, 1), TENT_OK);
    tent_status_t st;
    assert_int_equal(tent_task_status(e, b, 1, &st), TENT_OK);
    assert_int_equal(st.status, STATUS_CANCELED);
    assert_int_equal(atomic_load(&fake_stats[0].submitted), submitted);
    /* unpinned: only task 0 still pins src */
    assert_int_equal(atomic_load(&bt->tasks[0].src_buf->inflight), 1);
    fake_behavior[0].never_complete = false;
    fake_behavior[0].polls_before_done = 0;
    assert_int_equal(tu_wait_task(e, b, 0, &st, 2000), TENT_OK);
    assert_int_equal(tent_cancel_task(e, b, 0), TENT_OK); /* finished */
    assert_int_equal(tent_free_batch(e, b), TENT_OK);
    tu_bufs_fini(e, &p);
    tent_destroy_engine(e);
}

/* An engine over fake_a then fake_b with merge_requests on, merged
 * requests capped at 64 KiB. */
static tent_engine_t merge_engine(void)
{
    tu_config((const char *const[]){"fake_a", "fake_b", NULL});
    tent_set_config("merge_requests", "true");
    tent_set_config("merge_max_bytes", "65536");
    return tent_create_engine();
}

/* Submits 64 blocks of 4 KiB (every `stride` blocks), waits, checks every
 * task COMPLETED with its own 4096 bytes and the bytes landed. */
static void merge_round(tent_engine_t e, struct tu_bufs *p, size_t stride)
{
    enum { N = 64, BLK = 4096 };
    memset(p->dst, 0, p->len);
    tent_request_t r[N];
    for (size_t i = 0; i < N; i++)
        r[i] = tu_write(p, (i * stride * BLK) % p->len, BLK);
    tent_batch_id_t b = tent_allocate_batch(e, N);
    assert_int_equal(tent_submit(e, b, r, N), TENT_OK);
    tent_status_t st;
    assert_int_equal(tu_wait_all(e, b, &st, 5000), TENT_OK);
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_int_equal(st.transferred_bytes, N * BLK);
    for (size_t i = 0; i < N; i++) {
        assert_int_equal(tent_task_status(e, b, i, &st), TENT_OK);
        assert_int_equal(st.status, STATUS_COMPLETED);
        assert_int_equal(st.transferred_bytes, BLK);
        size_t off = (i * stride * BLK) % p->len;
        assert_memory_equal(p->dst + off, p->src + off, BLK);
    }
    assert_int_equal(tent_free_batch(e, b), TENT_OK);
}

/* merge_requests: adjacent contiguous requests reach the transport as one
 * (up to merge_max_bytes); every task still reports its own status and
 * bytes; a gap stops merging; a refused merged request moves all its tasks
 * to the next transport, where they merge again; a completion failure
 * fails every task of it over. */
static void test_merge_requests(void **state)
{
    (void)state;
    tent_engine_t e = merge_engine();
    assert_non_null(e);
    struct tu_bufs p;
    tu_bufs_init(e, &p, 64 * 4096);
    fake_behavior[0].polls_before_done = 1;

    merge_round(e, &p, 1); /* 256 KiB contiguous: 4 requests of 64 KiB */
    assert_int_equal(fake_stats[0].submitted, 4);

    merge_round(e, &p, 2); /* every other block: nothing is adjacent */
    assert_int_equal(fake_stats[0].submitted, 4 + 64);

    /* the first merged request (slot 0) refused by fake_a: its 16 tasks go
     * to fake_b as one request, the other 48 stay on fake_a as 3 */
    fake_behavior[0].fail_submit_slots = 1;
    merge_round(e, &p, 1);
    assert_int_equal(fake_stats[0].submitted, 4 + 64 + 3);
    assert_int_equal(fake_stats[1].submitted, 1);
    fake_behavior[0].fail_submit_slots = 0;

    /* fake_a fails at completion: every task fails over to fake_b */
    fake_behavior[0].fail_completion = true;
    merge_round(e, &p, 1);
    assert_true(fake_stats[1].submitted > 1);

    fake_behavior[0].fail_completion = false;

    /* merging off: one request per task again */
    tu_bufs_fini(e, &p);
    tent_destroy_engine(e);
    e = TU_ENGINE("fake_a");
    tu_bufs_init(e, &p, 64 * 4096);
    int before = fake_stats[0].submitted;
    merge_round(e, &p, 1);
    assert_int_equal(fake_stats[0].submitted - before, 64);
    tu_bufs_fini(e, &p);
    tent_destroy_engine(e);
}

/* TENT's freeBatch on a batch still in flight: OK at once, the id is gone,
 * and the batch (its sub-batches, the pins on its buffers) lives until its
 * tasks end, when a later call frees it: no leak, no use after free. */
static void test_free_in_flight_is_deferred(void **state)
{
    (void)state;
    tent_engine_t e = TU_ENGINE("fake_a");
    struct tu_bufs p;
    tu_bufs_init(e, &p, LEN);
    fake_behavior[0].never_complete = true;
    tent_batch_id_t b = tent_allocate_batch(e, 4);
    tent_request_t r = tu_write(&p, 0, 100);
    assert_int_equal(tent_submit(e, b, &r, 1), TENT_OK);
    assert_int_equal(tent_free_batch(e, b), TENT_OK);
    tent_status_t st;
    assert_int_equal(tent_task_status(e, b, 0, &st), TENT_ENOBATCH);
    assert_int_equal(tent_free_batch(e, b), TENT_ENOBATCH);
    struct tent_engine *ie = tent_engine_cast(e);
    assert_int_equal(atomic_load(&ie->ndeferred), 1);
    /* its task still pins the buffers: they cannot go yet */
    assert_int_equal(tent_unregister_memory(e, p.src, p.len), TENT_EBUSY);
    /* the task ends: the next call reaps the batch */
    fake_behavior[0].never_complete = false;
    tent_batch_id_t b2 = tent_allocate_batch(e, 1);
    assert_int_not_equal(b2, 0);
    assert_int_equal(atomic_load(&ie->ndeferred), 0);
    assert_int_equal(tent_free_batch(e, b2), TENT_OK);
    tu_bufs_fini(e, &p);
    /* and one still in flight at teardown is torn down with the engine */
    tu_bufs_init(e, &p, LEN);
    fake_behavior[0].never_complete = true;
    b = tent_allocate_batch(e, 1);
    r = tu_write(&p, 0, 100);
    assert_int_equal(tent_submit(e, b, &r, 1), TENT_OK);
    assert_int_equal(tent_free_batch(e, b), TENT_OK);
    fake_behavior[0].never_complete = false;
    tent_destroy_engine(e);
    free(p.src);
    free(p.dst);
}

/* A chain of overlapping copies within this process (request i+1 reads
 * what request i wrote) gives the same bytes with merge_requests on as
 * with it off, on shm's in-order local path: such a run is not merged
 * (issue 19 item 9: merged, it was one memmove of the whole range, which
 * shifts the original bytes instead of propagating the first block). */
static void chain_round(bool merge, uint8_t *out)
{
    tu_config(TU_LIST("shm"));
    tent_set_config("merge_requests", merge ? "true" : "false");
    tent_engine_t e = tent_create_engine();
    assert_non_null(e);
    enum { N = 32, B = 8 };
    uint8_t *buf = aligned_alloc(4096, 4096);
    assert_non_null(buf);
    for (int i = 0; i < 4096; i++)
        buf[i] = (uint8_t)(i * 13 + 1);
    assert_int_equal(tent_register_memory(e, buf, 4096), 0);
    tent_request_t r[N];
    for (int i = 0; i < N; i++)
        r[i] = (tent_request_t){.opcode = OPCODE_WRITE,
                                .source = buf + i * B,
                                .target_id = LOCAL_SEGMENT_ID,
                                .target_offset = (uintptr_t)(buf + (i + 1) * B),
                                .length = B};
    tent_batch_id_t b = tent_allocate_batch(e, N);
    assert_int_equal(tent_submit(e, b, r, N), 0);
    tent_status_t st;
    assert_int_equal(tu_wait_all(e, b, &st, 5000), 0);
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_int_equal(tent_free_batch(e, b), 0);
    memcpy(out, buf, (N + 1) * B);
    assert_int_equal(tent_unregister_memory(e, buf, 4096), 0);
    free(buf);
    tent_destroy_engine(e);
}

static void test_merge_keeps_order_of_overlapping_chain(void **state)
{
    (void)state;
    uint8_t on[33 * 8], off[33 * 8];
    chain_round(true, on);
    chain_round(false, off);
    assert_memory_equal(on, off, sizeof(on));
    /* and that is the chain's result: block 0 everywhere */
    for (int i = 1; i <= 32; i++)
        assert_memory_equal(on + i * 8, on, 8);
}

/* A transport that completes requests in submit (tent_xfer_result.done):
 * the tasks, merged followers included, are COMPLETED as soon as submit
 * returns and the transport is never asked about them; reads and writes
 * in one call move the right bytes and leave no buffer pinned. */
static void test_done_at_submit(void **state)
{
    (void)state;
    tu_config((const char *const[]){"fake_a", NULL});
    tent_set_config("merge_requests", "true");
    tent_engine_t e = tent_create_engine();
    assert_non_null(e);
    struct tu_bufs p;
    tu_bufs_init(e, &p, LEN);
    fake_behavior[0].done_at_submit = true;
    for (size_t i = 0; i < LEN; i++) {
        p.src[i] = (char)(i * 7 + 1);
        p.dst[i] = (char)(i * 3 + 2);
    }
    tent_batch_id_t b = tent_allocate_batch(e, 8);
    tent_request_t r[8];
    /* contiguous, of two lengths: merged into one */
    for (size_t i = 0, off = 0; i < 4; off += r[i].length, i++)
        r[i] = tu_write(&p, off, i == 2 ? 40 : 100);
    for (size_t i = 4; i < 8; i++) { /* reads and writes alternate */
        r[i] = tu_write(&p, i * 4096, 512 + i);
        if (i % 2)
            r[i].opcode = OPCODE_READ;
    }
    static char want_src[LEN], want_dst[LEN];
    memcpy(want_src, p.src, LEN);
    memcpy(want_dst, p.dst, LEN);
    for (size_t i = 0; i < 8; i++) {
        size_t off = (size_t)((char *)r[i].source - p.src);
        if (r[i].opcode == OPCODE_WRITE)
            memcpy(want_dst + off, want_src + off, r[i].length);
        else
            memcpy(want_src + off, want_dst + off, r[i].length);
    }
    assert_int_equal(tent_submit(e, b, r, 8), TENT_OK);
    tent_status_t list[8];
    size_t n = 8;
    assert_int_equal(tent_task_status_list(e, b, list, &n), TENT_OK);
    for (size_t i = 0; i < 8; i++) {
        assert_int_equal(list[i].status, STATUS_COMPLETED);
        assert_int_equal(list[i].transferred_bytes, r[i].length);
    }
    assert_int_equal(atomic_load(&fake_stats[0].status_calls), 0);
    assert_int_equal(atomic_load(&fake_stats[0].submitted), 5); /* 4 merged */
    /* the metrics count every task of the merged run with its own size */
    struct tent_metrics *m = tent_engine_cast(e)->metrics;
    uint64_t wbytes = 0, rbytes = 0;
    for (size_t i = 0; i < 8; i++)
        *(r[i].opcode == OPCODE_WRITE ? &wbytes : &rbytes) += r[i].length;
    assert_int_equal(tent_metrics_total(m, TM_WRITE_REQUESTS), 6);
    assert_int_equal(tent_metrics_total(m, TM_READ_REQUESTS), 2);
    assert_int_equal(tent_metrics_total(m, TM_WRITE_BYTES), wbytes);
    assert_int_equal(tent_metrics_total(m, TM_READ_BYTES), rbytes);
    assert_memory_equal(p.src, want_src, LEN);
    assert_memory_equal(p.dst, want_dst, LEN);
    /* no pin left: the batch frees at once and the memory unregisters */
    struct tent_batch *bt = tent_batch_peek(tent_engine_cast(e), b);
    assert_non_null(bt);
    for (size_t i = 0; i < 8; i++) {
        assert_null(bt->tasks[i].src_buf);
        assert_null(bt->tasks[i].dst_buf);
        assert_null(bt->tasks[i].peer);
    }
    assert_int_equal(tent_free_batch(e, b), TENT_OK);
    tu_bufs_fini(e, &p);
    tent_destroy_engine(e);
}

/* The pins buffer addr (registered locally) holds now. */
static int pins_at(tent_engine_t e, const void *addr)
{
    struct tent_segment *seg = tent_engine_cast(e)->local;
    pthread_rwlock_rdlock(&seg->lock);
    struct tent_buffer *buf =
        tent_segment_find_locked(seg, (uintptr_t)addr, 1);
    int n = buf ? atomic_load(&buf->inflight) : -1000;
    pthread_rwlock_unlock(&seg->lock);
    return n;
}

/* Runs of like requests (resolved, merged and completed as a run) mixed
 * over two buffer pairs, with a gap, a change of direction and a run that
 * fails over: every task ends with its own status and bytes, the bytes land
 * where each request says, each run reaches the transport as one request,
 * and no pin is left.  Then, in the same batch, a call whose run on p goes
 * on into q's target, unregistered meanwhile, is refused whole, naming that
 * request, and takes no pin either. */
static void test_like_runs_two_buffers(void **state)
{
    (void)state;
    enum { N = 32, SZ = 64 };
    tent_engine_t e = merge_engine();
    assert_non_null(e);
    struct tu_bufs p, q;
    tu_bufs_init(e, &p, LEN);
    tu_bufs_init(e, &q, LEN);
    fake_behavior[0].done_at_submit = fake_behavior[1].done_at_submit = true;
    fake_behavior[0].fail_submit_slots = 1ull << 24; /* the last run's lead */
    for (size_t i = 0; i < LEN; i++) {
        p.src[i] = q.src[i] = (char)(i * 7 + 1);
        p.dst[i] = q.dst[i] = (char)(i * 3 + 2);
    }
    tent_request_t r[N];
    for (size_t k = 0; k < 8; k++) {
        r[k] = tu_write(&p, k * SZ, SZ);               /* a run on p */
        r[8 + k] = tu_write(&q, k * SZ, SZ);           /* one on q */
        r[24 + k] = tu_write(&q, 16384 + k * SZ, SZ);  /* refused by fake_a */
    }
    for (size_t k = 0; k < 4; k++) {
        r[16 + k] = tu_write(&p, 4096 + k * 2 * SZ, SZ); /* gaps */
        r[20 + k] = tu_write(&p, 8192 + k * SZ, SZ);     /* reads */
        r[20 + k].opcode = OPCODE_READ;
    }
    static char want[2][2][LEN]; /* [p, q][src, dst] */
    memcpy(want[0][0], p.src, LEN);
    memcpy(want[0][1], p.dst, LEN);
    memcpy(want[1][0], q.src, LEN);
    memcpy(want[1][1], q.dst, LEN);
    for (size_t i = 0; i < N; i++) {
        bool onq = (char *)r[i].source >= q.src &&
                   (char *)r[i].source < q.src + LEN;
        size_t off = (size_t)((char *)r[i].source - (onq ? q.src : p.src));
        char(*w)[LEN] = want[onq];
        if (r[i].opcode == OPCODE_WRITE)
            memcpy(w[1] + off, w[0] + off, SZ);
        else
            memcpy(w[0] + off, w[1] + off, SZ);
    }
    tent_batch_id_t b = tent_allocate_batch(e, 2 * N);
    assert_int_equal(tent_submit(e, b, r, N), TENT_OK);
    tent_status_t st;
    for (size_t i = 0; i < N; i++) {
        assert_int_equal(tent_task_status(e, b, i, &st), TENT_OK);
        assert_int_equal(st.status, STATUS_COMPLETED);
        assert_int_equal(st.transferred_bytes, SZ);
    }
    assert_memory_equal(p.src, want[0][0], LEN);
    assert_memory_equal(p.dst, want[0][1], LEN);
    assert_memory_equal(q.src, want[1][0], LEN);
    assert_memory_equal(q.dst, want[1][1], LEN);
    /* fake_a: the two runs, the four gapped writes, the reads; the refused
     * run merged again on fake_b */
    assert_int_equal(atomic_load(&fake_stats[0].submitted), 7);
    assert_int_equal(atomic_load(&fake_stats[0].refused), 1);
    assert_int_equal(atomic_load(&fake_stats[1].submitted), 1);
    assert_int_equal(pins_at(e, p.src), 0);
    assert_int_equal(pins_at(e, p.dst), 0);
    assert_int_equal(pins_at(e, q.src), 0);
    assert_int_equal(pins_at(e, q.dst), 0);

    /* q's target revoked between two calls on the batch */
    assert_int_equal(tent_unregister_memory(e, q.dst, LEN), TENT_OK);
    for (size_t k = 0; k < 8; k++)
        r[k] = tu_write(&p, 32768 + k * SZ, SZ);
    /* its source continues the run on p: only the target differs */
    r[8] = tu_write(&p, 32768 + 8 * SZ, SZ);
    r[8].target_offset = (uintptr_t)q.dst;
    assert_int_equal(tent_submit(e, b, r, 9), TENT_ERANGE);
    assert_contains(tent_last_error(), "request 8");
    assert_int_equal(pins_at(e, p.src), 0);
    assert_int_equal(pins_at(e, p.dst), 0);
    assert_int_equal(pins_at(e, q.src), 0);
    assert_int_equal(tent_overall_status(e, b, &st), TENT_OK);
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_int_equal(st.transferred_bytes, N * SZ);
    assert_int_equal(tent_free_batch(e, b), TENT_OK);
    assert_int_equal(tent_register_memory(e, q.dst, LEN), TENT_OK);
    tu_bufs_fini(e, &q);
    tu_bufs_fini(e, &p);
    tent_destroy_engine(e);
}

/* A call is checked whole before anything is resolved, runs of like
 * requests included: a bad field inside a run is refused naming its
 * request, a request that fails its check is the error even after an
 * earlier one that cannot be resolved, and a refused call leaves no pin. */
static void test_like_runs_checked(void **state)
{
    (void)state;
    enum { N = 6, SZ = 64 };
    tent_engine_t e = merge_engine();
    assert_non_null(e);
    struct tu_bufs p;
    tu_bufs_init(e, &p, LEN);
    static char unregistered[SZ];
    tent_batch_id_t b = tent_allocate_batch(e, N);
    tent_request_t r[N];
    struct {
        size_t at;
        int code;
        const char *what;
    } cases[] = {{2, TENT_EINVAL, "request 2: length is 0"},
                 {3, TENT_EINVAL, "request 3: opcode 5"},
                 {4, TENT_EINVAL, "request 4: length 64 wraps"},
                 {5, TENT_EINVAL, "request 5: priority 7"}};
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        for (size_t i = 0; i < N; i++)
            r[i] = tu_write(&p, i * SZ, SZ);
        switch (k) {
        case 0:
            r[2].length = 0;
            break;
        case 1:
            r[3].opcode = 5;
            break;
        case 2:
            r[4].target_offset = UINT64_MAX - 8;
            break;
        case 3: /* unresolvable before, invalid after */
            r[1].source = unregistered;
            r[5].priority = 7;
            break;
        }
        assert_int_equal(tent_submit(e, b, r, N), cases[k].code);
        assert_contains(tent_last_error(), cases[k].what);
        assert_int_equal(pins_at(e, p.src), 0);
        assert_int_equal(pins_at(e, p.dst), 0);
    }
    /* the unresolvable one alone: its own error */
    for (size_t i = 0; i < N; i++)
        r[i] = tu_write(&p, i * SZ, SZ);
    r[3].source = unregistered;
    assert_int_equal(tent_submit(e, b, r, N), TENT_ENOTREG);
    assert_contains(tent_last_error(), "request 3");
    assert_int_equal(pins_at(e, p.src), 0);
    assert_int_equal(pins_at(e, p.dst), 0);
    tent_status_t st;
    assert_int_equal(tent_overall_status(e, b, &st), TENT_OK);
    assert_int_equal(st.status, STATUS_WAITING); /* nothing was accepted */
    assert_int_equal(tent_free_batch(e, b), TENT_OK);
    tu_bufs_fini(e, &p);
    tent_destroy_engine(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        TU_TEST(test_lifecycle),
        TU_TEST(test_free_after_failure),
        TU_TEST(test_read),
        TU_TEST(test_many_batches_unique_ids),
        TU_TEST(test_recycled_batch),
        TU_TEST(test_large_batch),
        TU_TEST(test_ids_unique_across_engines),
        TU_TEST(test_cancel),
        TU_TEST(test_merge_requests),
        TU_TEST(test_merge_keeps_order_of_overlapping_chain),
        TU_TEST(test_free_in_flight_is_deferred),
        TU_TEST(test_done_at_submit),
        TU_TEST(test_like_runs_two_buffers),
        TU_TEST(test_like_runs_checked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

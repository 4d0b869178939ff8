/* Several threads on one engine: each submits, polls and frees its own
 * batches over its own buffers (with submit-stage failover going on), while
 * others register/unregister memory, read segment info and exchange local
 * notifications.  Every byte is checked.  Run it under TENT_SANITIZE=thread
 * or address to catch races and lifetime bugs. */
#include "test_util.h"
#include "tu_thread.h"

#include <pthread.h>
#include <sched.h>
#include <time.h>

#define WORKERS 4
#define ROUNDS  150
#define CHUNK   512
#define NREQ    8

static tent_engine_t g_engine;
static atomic_int g_failures;
static atomic_bool g_stop;

static void *worker(void *arg)
{
    int id = (int)(intptr_t)arg;
    tent_engine_t e = g_engine;
    size_t len = CHUNK * NREQ;
    char *src = aligned_alloc(4096, 4096 + len),
         *dst = aligned_alloc(4096, len);
    if (tent_register_memory(e, src, 4096 + len) ||
        tent_register_memory(e, dst, len)) {
        atomic_fetch_add(&g_failures, 1);
        return NULL;
    }
    for (int round = 0; round < ROUNDS; round++) {
        for (size_t i = 0; i < len; i++)
            src[i] = (char)(id * 31 + round + (int)i);
        memset(dst, 0, len);
        tent_batch_id_t b = tent_allocate_batch(e, NREQ);
        tent_request_t r[NREQ];
        for (int i = 0; i < NREQ; i++) {
            memset(&r[i], 0, sizeof(r[i]));
            r[i].opcode = OPCODE_WRITE;
            r[i].source = src + i * CHUNK;
            r[i].target_offset = (uintptr_t)(dst + i * CHUNK);
            r[i].length = CHUNK;
        }
        /* Two submit calls into the same batch. */
        if (tent_submit(e, b, r, NREQ / 2) ||
            tent_submit(e, b, r + NREQ / 2, NREQ / 2)) {
            atomic_fetch_add(&g_failures, 1);
            break;
        }
        tent_status_t st;
        if (tu_wait_all(e, b, &st, 5000) || st.status != STATUS_COMPLETED ||
            st.transferred_bytes != len || memcmp(src, dst, len) != 0) {
            atomic_fetch_add(&g_failures, 1);
            break;
        }
        if (tent_free_batch(e, b) != TENT_OK) {
            atomic_fetch_add(&g_failures, 1);
            break;
        }
    }
    if (tent_unregister_memory(e, src, 4096 + len) ||
        tent_unregister_memory(e, dst, len))
        atomic_fetch_add(&g_failures, 1);
    free(src);
    free(dst);
    return NULL;
}

static void *registrar(void *arg)
{
    (void)arg;
    char *m = aligned_alloc(4096, 1 << 16);
    while (!atomic_load(&g_stop)) {
        void *a = NULL;
        if (tent_register_memory(g_engine, m, 1 << 16) ||
            tent_allocate_memory(g_engine, &a, 8192, "cpu") ||
            tent_register_memory(g_engine, a, 8192)) {
            atomic_fetch_add(&g_failures, 1);
            break;
        }
        tent_segment_info_t info;
        if (tent_get_segment_info(g_engine, LOCAL_SEGMENT_ID, &info) == 0)
            tent_free_segment_info(&info);
        if (tent_unregister_memory(g_engine, a, 8192) ||
            tent_free_memory(g_engine, a) ||
            tent_unregister_memory(g_engine, m, 0)) {
            atomic_fetch_add(&g_failures, 1);
            break;
        }
    }
    free(m);
    return NULL;
}

static void *notifier(void *arg)
{
    (void)arg;
    int sent = 0, got = 0;
    while (!atomic_load(&g_stop) || got < sent) {
        if (!atomic_load(&g_stop) &&
            tent_send_notifs(g_engine, LOCAL_SEGMENT_ID, "tick", "tock") == 0)
            sent++;
        tent_notifi_info info;
        if (tent_recv_notifs(g_engine, &info) == 0) {
            got += info.num_records;
            tent_free_notifs(&info);
        }
    }
    if (got != sent)
        atomic_fetch_add(&g_failures, 1);
    return NULL;
}

static void test_threads_share_one_engine(void **state)
{
    (void)state;
    g_engine = TU_ENGINE("fake_a", "fake_b");
    assert_non_null(g_engine);
    fake_behavior[0].polls_before_done = 1;
    fake_behavior[0].fail_submit_every = 7; /* some requests fail over */
    atomic_store(&g_failures, 0);
    atomic_store(&g_stop, false);
    pthread_t w[WORKERS], reg, ntf;
    for (int i = 0; i < WORKERS; i++)
        assert_int_equal(
            pthread_create(&w[i], NULL, worker, (void *)(intptr_t)i), 0);
    assert_int_equal(pthread_create(&reg, NULL, registrar, NULL), 0);
    assert_int_equal(pthread_create(&ntf, NULL, notifier, NULL), 0);
    for (int i = 0; i < WORKERS; i++)
        pthread_join(w[i], NULL);
    atomic_store(&g_stop, true);
    pthread_join(reg, NULL);
    pthread_join(ntf, NULL);
    assert_int_equal(atomic_load(&g_failures), 0);
    assert_true(fake_stats[0].refused > 0);
    assert_int_equal(fake_stats[0].submitted + fake_stats[0].refused,
                     WORKERS * ROUNDS * NREQ);
    assert_int_equal(fake_stats[1].submitted, fake_stats[0].refused);
    tent_segment_info_t info;
    assert_int_equal(tent_get_segment_info(g_engine, LOCAL_SEGMENT_ID, &info),
                     TENT_OK);
    assert_int_equal(info.num_buffers, 0);
    tent_free_segment_info(&info);
    tent_destroy_engine(g_engine);
}

/* Threads racing on the same batch ids: one allocates, submits, polls and
 * frees; others poll and try to free whatever id is current.  Every call
 * returns a defined code (never a crash or a use-after-free), and in the end
 * no buffer is left pinned. */
static _Atomic tent_batch_id_t g_shared;

static void *poker(void *arg)
{
    (void)arg;
    while (!atomic_load(&g_stop)) {
        tent_batch_id_t id = atomic_load(&g_shared);
        tent_status_t st;
        int rc = tent_overall_status(g_engine, id, &st);
        if (rc != TENT_OK && rc != TENT_ENOBATCH)
            atomic_fetch_add(&g_failures, 1);
        rc = tent_task_status(g_engine, id, 0, &st);
        if (rc != TENT_OK && rc != TENT_ENOBATCH && rc != TENT_ENOTASK)
            atomic_fetch_add(&g_failures, 1);
        rc = tent_free_batch(g_engine, id);
        if (rc == TENT_OK) /* tell the main thread: this id is gone */
            atomic_compare_exchange_strong(&g_shared, &id,
                                           TENT_INVALID_BATCH_ID);
        else if (rc != TENT_ENOBATCH && rc != TENT_EBUSY)
            atomic_fetch_add(&g_failures, 1);
    }
    return NULL;
}

/* Until a poker has freed batch b (it resets g_shared when it does). */
static bool freed_by_poker(tent_batch_id_t b)
{
    long end = tu_now_ms() + 2000;
    while (atomic_load(&g_shared) == b && tu_now_ms() < end)
        sched_yield();
    return atomic_load(&g_shared) != b;
}

static void test_racing_on_one_batch(void **state)
{
    (void)state;
    g_engine = TU_ENGINE("fake_a");
    assert_non_null(g_engine);
    fake_behavior[0].polls_before_done = 2;
    atomic_store(&g_failures, 0);
    atomic_store(&g_stop, false);
    atomic_store(&g_shared, TENT_INVALID_BATCH_ID);
    struct tu_bufs p;
    tu_bufs_init(g_engine, &p, 4096);
    pthread_t pk[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&pk[i], NULL, poker, NULL), 0);
    /* Rounds of three kinds: a free-for-all where the main thread submits
     * and polls while the pokers try to free the same id; a batch the main
     * thread hands over empty and waits until a poker has freed it (its
     * submit must then be refused and reach no transport); and a submitted
     * batch left to the pokers, whose free of it (deferred while its tasks
     * run, as TENT does) never cuts a task short.  Each outcome is checked for
     * what it must mean, bytes included. */
    int completed = 0, freed_empty = 0, freed_done = 0;
    for (int round = 0; round < 300; round++) {
        int kind = round % 3;
        for (size_t i = 0; i < p.len; i++)
            p.src[i] = (char)(round * 13 + (int)i);
        memset(p.dst, 0, p.len);
        int sub0 = atomic_load(&fake_stats[0].submitted);
        int done0 = atomic_load(&fake_stats[0].completed);
        tent_batch_id_t b = tent_allocate_batch(g_engine, 4);
        assert_int_not_equal(b, TENT_INVALID_BATCH_ID);
        tent_request_t r[4];
        for (int i = 0; i < 4; i++)
            r[i] = tu_write(&p, (size_t)i * 1024, 1024);
        if (kind != 2)
            atomic_store(&g_shared, b);
        if (kind == 1)
            assert_true(freed_by_poker(b));
        int rc = tent_submit(g_engine, b, r, 4);
        if (kind == 1)
            assert_int_equal(rc, TENT_ENOBATCH);
        if (rc == TENT_ENOBATCH) { /* a poker freed the empty batch */
            assert_int_equal(atomic_load(&fake_stats[0].submitted), sub0);
            for (size_t i = 0; i < p.len; i++)
                assert_int_equal(p.dst[i], 0);
            assert_int_equal(tent_free_batch(g_engine, b), TENT_ENOBATCH);
            freed_empty++;
            continue;
        }
        assert_int_equal(rc, TENT_OK);
        assert_int_equal(atomic_load(&fake_stats[0].submitted), sub0 + 4);
        tent_status_t st;
        if (kind == 2) {
            atomic_store(&g_shared, b);
            assert_true(freed_by_poker(b));
            rc = tent_overall_status(g_engine, b, &st);
            assert_int_equal(rc, TENT_ENOBATCH);
        } else {
            rc = tu_wait_all(g_engine, b, &st, 2000);
        }
        if (rc == TENT_ENOBATCH) {
            /* Freed by a poker, maybe still in flight (TENT defers the
             * free): the tasks still run to their end, driven by later
             * calls that reap deferred batches. */
            long end = tu_now_ms() + 2000;
            while (atomic_load(&fake_stats[0].completed) < done0 + 4 &&
                   tu_now_ms() < end) {
                tent_batch_id_t nb = tent_allocate_batch(g_engine, 1);
                assert_int_not_equal(nb, TENT_INVALID_BATCH_ID);
                assert_int_equal(tent_free_batch(g_engine, nb), TENT_OK);
            }
            assert_int_equal(atomic_load(&fake_stats[0].completed), done0 + 4);
            freed_done++;
        } else {
            assert_int_equal(rc, TENT_OK);
            assert_int_equal(st.status, STATUS_COMPLETED);
            assert_int_equal(st.transferred_bytes, 4096);
            assert_int_equal(atomic_load(&fake_stats[0].completed), done0 + 4);
            completed++;
            rc = tent_free_batch(g_engine, b);
            assert_true(rc == TENT_OK || rc == TENT_ENOBATCH);
        }
        assert_memory_equal(p.dst, p.src, p.len);
    }
    atomic_store(&g_stop, true);
    for (int i = 0; i < 2; i++)
        pthread_join(pk[i], NULL);
    assert_int_equal(atomic_load(&g_failures), 0);
    assert_true(freed_empty >= 100 && freed_done >= 100);
    /* No task was dropped with its batch or reported twice. */
    assert_int_equal(atomic_load(&fake_stats[0].completed),
                     atomic_load(&fake_stats[0].submitted));
    assert_int_equal(atomic_load(&fake_stats[0].submitted),
                     4 * (completed + freed_done));
    print_message("300 rounds: %d completed, %d freed empty by a poker, %d "
                  "freed by a poker and completed\n",
                  completed, freed_empty, freed_done);
    /* Nothing left pinned: both buffers unregister. */
    tu_bufs_fini(g_engine, &p);
    tent_destroy_engine(g_engine);
}

/* A batch whose status call is stuck in a transport holds no runtime lock
 * meanwhile: lookups of other batches, and other calls on the same batch,
 * go on (a second poll of the stuck task reports it PENDING at once). */
static atomic_bool g_block, g_other_done, g_other_ok, g_second_done;
static tent_status_t g_second_st;
static int g_second_rc;

static void *poll_once(void *arg)
{
    tent_status_t st;
    (void)tent_task_status(g_engine, *(tent_batch_id_t *)arg, 0, &st);
    return NULL;
}

static void *poll_second(void *arg)
{
    g_second_rc =
        tent_task_status(g_engine, *(tent_batch_id_t *)arg, 0, &g_second_st);
    atomic_store(&g_second_done, true);
    return NULL;
}

static void *other_batch_work(void *arg)
{
    (void)arg;
    tent_batch_id_t b = tent_allocate_batch(g_engine, 1);
    bool ok = b != TENT_INVALID_BATCH_ID && tent_free_batch(g_engine, b) == 0;
    atomic_store(&g_other_ok, ok);
    atomic_store(&g_other_done, true);
    return NULL;
}

static bool wait_flag(atomic_bool *flag, int ms)
{
    for (int i = 0; i < ms && !atomic_load(flag); i++)
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    return atomic_load(flag);
}

static void test_stuck_batch_does_not_block_others(void **state)
{
    (void)state;
    g_engine = TU_ENGINE("fault");
    assert_non_null(g_engine);
    struct tu_bufs p;
    tu_bufs_init(g_engine, &p, 4096);
    tent_batch_id_t b1 = tent_allocate_batch(g_engine, 1);
    tent_request_t r = tu_write(&p, 0, 4096);
    assert_int_equal(tent_submit(g_engine, b1, &r, 1), TENT_OK);
    atomic_store(&g_block, true);
    atomic_store(&g_other_done, false);
    atomic_store(&g_second_done, false);
    fault_cfg.block_status = &g_block;
    pthread_t a, b, c;
    assert_int_equal(pthread_create(&a, NULL, poll_once, &b1), 0);
    for (int i = 0; i < 2000 && atomic_load(&fault_stats.blocked) == 0; i++)
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    assert_int_equal(atomic_load(&fault_stats.blocked), 1);
    /* a is inside the transport's status call: b, polling the same task,
     * neither waits for a nor calls the transport a second time. */
    assert_int_equal(pthread_create(&b, NULL, poll_second, &b1), 0);
    assert_int_equal(pthread_create(&c, NULL, other_batch_work, NULL), 0);
    bool second = wait_flag(&g_second_done, 2000);
    bool done = wait_flag(&g_other_done, 2000);
    atomic_store(&g_block, false); /* release before asserting: no hang */
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    pthread_join(c, NULL);
    fault_cfg.block_status = NULL;
    assert_true(second);
    assert_int_equal(g_second_rc, TENT_OK);
    assert_int_equal(g_second_st.status, STATUS_PENDING);
    assert_int_equal(atomic_load(&fault_stats.blocked), 1);
    assert_true(done);
    assert_true(atomic_load(&g_other_ok));
    tent_status_t st;
    assert_int_equal(tu_wait_task(g_engine, b1, 0, &st, 2000), TENT_OK);
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_int_equal(tent_free_batch(g_engine, b1), TENT_OK);
    /* The freed id is gone for everyone. */
    assert_int_equal(tent_task_status(g_engine, b1, 0, &st), TENT_ENOBATCH);
    tu_bufs_fini(g_engine, &p);
    tent_destroy_engine(g_engine);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        TU_TEST(test_threads_share_one_engine),
        TU_TEST(test_racing_on_one_batch),
        TU_TEST(test_stuck_batch_does_not_block_others),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Peer down across processes: a forked target registers memory and reports
 * its unique id; it is killed while batches to it are in flight.  The
 * callback fires with that id, every batch finishes (no hang), and the ones
 * that had not finished report SM_NOT_CONNECTED.  A target that stalls
 * (stopped, connections open) fails a batch after MF_TRANSFER_TIMEOUT. */
/* cmocka.h needs these first. */
/* clang-format off */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
/* clang-format on */

#include "mfh_test_util.h"

#include <pthread.h>

static struct mfh_api api;
static const struct mfh_api *A = &api;

#define TARGET_SIZE ((size_t)16 << 20)

static int group_setup(void **state)
{
    (void)state;
    return mfh_api_load(&api);
}

static int down_calls(struct mfh_down_rec *r)
{
    pthread_mutex_lock(&r->lock);
    int n = r->calls;
    pthread_mutex_unlock(&r->lock);
    return n;
}

static void run(uint32_t proto, smem_trans_opcode_t op)
{
    struct mfh_child child;
    assert_int_equal(mfh_child_start(&child, A, proto, TARGET_SIZE), 0);
    assert_int_equal(A->smem_trans_init(0, 0), SM_OK);
    smem_trans_t h = mfh_create(A, proto);
    assert_non_null(h);
    struct mfh_down_rec rec = {.lock = PTHREAD_MUTEX_INITIALIZER};
    assert_int_equal(A->smem_trans_set_peer_down_callback(h, mfh_on_down, &rec),
                     SM_OK);
    uint8_t *local = calloc(1, TARGET_SIZE);
    assert_non_null(local);

    /* Warm up: the connection works. */
    assert_int_equal(mfh_copy1(A, h, child.uid, op, local, child.base, 4096),
                     0);

    /* 64 batches of 256 entries of 64 KiB: 1 GiB in small pieces, far more
     * than can move while the target is being killed. */
    enum { N = 64, E = 256 };
    size_t piece = TARGET_SIZE / E;
    void *src[E], *dst[E];
    size_t sz[E];
    for (int e = 0; e < E; e++) {
        src[e] = local + (size_t)e * piece;
        dst[e] = child.base + (size_t)e * piece;
        sz[e] = piece;
    }
    uint64_t ids[N];
    for (int i = 0; i < N; i++) {
        smem_trans_batch_params_t p = {.destUrl = child.uid,
                                       .srcList = src,
                                       .destList = dst,
                                       .sizeList = sz,
                                       .batchSize = E,
                                       .opcode = op};
        assert_int_equal(A->smem_trans_batch_copy(h, &p, &ids[i]), SM_OK);
    }
    /* Kill the target right after the last submission: the copies run at
     * kernel speed whatever this thread does (under valgrind it may wait
     * long for its turn), so waiting here for a first result could let
     * every batch land before the kill.  The warm-up above showed that
     * copies work. */
    mfh_child_stop(&child, true);

    double end = mfh_now() + 10;
    while (down_calls(&rec) == 0 && mfh_now() < end)
        mfh_sleep_ms(2);
    assert_int_equal(down_calls(&rec), 1);
    assert_string_equal(rec.uid, child.uid);

    int failed = 0;
    for (int i = 0; i < N; i++) {
        int32_t result = 0;
        assert_int_equal(mfh_wait(A, h, ids[i], &result, 15), SM_OK);
        if (result != 0) {
            assert_int_equal(result, SM_NOT_CONNECTED);
            failed++;
        }
        /* consumed */
        assert_int_not_equal(
            A->smem_trans_batch_status_query(h, ids[i], &result, 0), SM_OK);
    }
    assert_true(failed > 0);
    assert_int_equal(down_calls(&rec), 1);

    /* The peer is gone: a new batch to it is refused at once. */
    assert_int_equal(mfh_copy1(A, h, child.uid, op, local, child.base, 1),
                     SM_INVALID_PARAM);
    A->smem_trans_destroy(h, 0);
    A->smem_trans_uninit(0);
    free(local);
}

static void test_tcp_write(void **state)
{
    (void)state;
    run(SMEMB_DATA_OP_HOST_TCP, SMEM_TRANS_OP_WRITE);
}

static void test_tcp_read(void **state)
{
    (void)state;
    run(SMEMB_DATA_OP_HOST_TCP, SMEM_TRANS_OP_READ);
}

static void test_shm_write(void **state)
{
    (void)state;
    run(SMEMB_DATA_OP_HOST_SHM, SMEM_TRANS_OP_WRITE);
}

static void test_shm_read(void **state)
{
    (void)state;
    run(SMEMB_DATA_OP_HOST_SHM, SMEM_TRANS_OP_READ);
}

/* A stalled target (SIGSTOP: connections stay open, nothing answers) fails
 * a batch after the configured MF_TRANSFER_TIMEOUT, not a fixed 10 s. */
static void stalled(smem_trans_opcode_t op)
{
    assert_int_equal(setenv("MF_TRANSFER_TIMEOUT", "1000", 1), 0);
    struct mfh_child child;
    assert_int_equal(
        mfh_child_start(&child, A, SMEMB_DATA_OP_HOST_TCP, TARGET_SIZE), 0);
    assert_int_equal(A->smem_trans_init(0, 0), SM_OK);
    smem_trans_t h = mfh_create(A, SMEMB_DATA_OP_HOST_TCP);
    assert_non_null(h);
    uint8_t *local = calloc(1, TARGET_SIZE);
    assert_non_null(local);
    assert_int_equal(mfh_copy1(A, h, child.uid, op, local, child.base, 4096),
                     0);

    assert_int_equal(kill(child.pid, SIGSTOP), 0);
    void *src[1] = {local}, *dst[1] = {child.base};
    size_t sz[1] = {TARGET_SIZE};
    smem_trans_batch_params_t p = {.destUrl = child.uid,
                                   .srcList = src,
                                   .destList = dst,
                                   .sizeList = sz,
                                   .batchSize = 1,
                                   .opcode = op};
    uint64_t id = 0;
    double t0 = mfh_now();
    assert_int_equal(A->smem_trans_batch_copy(h, &p, &id), SM_OK);
    int32_t result = 0;
    int32_t rc = mfh_wait(A, h, id, &result, 30);
    double took = mfh_now() - t0;
    kill(child.pid, SIGCONT);
    mfh_child_stop(&child, true);
    assert_int_equal(rc, SM_OK);
    assert_int_not_equal(result, 0);
    /* one configured timeout (1 s), with room for a loaded machine; the
     * fixed bound was 10 s */
    assert_true(took >= 0.9);
    assert_true(took < 6.0);

    A->smem_trans_destroy(h, 0);
    A->smem_trans_uninit(0);
    free(local);
    unsetenv("MF_TRANSFER_TIMEOUT");
}

static void test_tcp_stalled_peer_write(void **state)
{
    (void)state;
    stalled(SMEM_TRANS_OP_WRITE);
}

static void test_tcp_stalled_peer_read(void **state)
{
    (void)state;
    stalled(SMEM_TRANS_OP_READ);
}

/* A malformed MF_TRANSFER_TIMEOUT is refused at create, not ignored. */
static void test_bad_transfer_timeout_refused(void **state)
{
    (void)state;
    static const char *bad[] = {"", "0", "-5", "10s", "99999999999"};
    assert_int_equal(A->smem_trans_init(0, 0), SM_OK);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(setenv("MF_TRANSFER_TIMEOUT", bad[i], 1), 0);
        assert_null(mfh_create(A, SMEMB_DATA_OP_HOST_TCP));
    }
    assert_int_equal(setenv("MF_TRANSFER_TIMEOUT", "250", 1), 0);
    smem_trans_t h = mfh_create(A, SMEMB_DATA_OP_HOST_TCP);
    assert_non_null(h);
    A->smem_trans_destroy(h, 0);
    A->smem_trans_uninit(0);
    unsetenv("MF_TRANSFER_TIMEOUT");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tcp_write),
        cmocka_unit_test(test_tcp_read),
        cmocka_unit_test(test_shm_write),
        cmocka_unit_test(test_shm_read),
        cmocka_unit_test(test_tcp_stalled_peer_write),
        cmocka_unit_test(test_tcp_stalled_peer_read),
        cmocka_unit_test(test_bad_transfer_timeout_refused),
    };
    return cmocka_run_group_tests(tests, group_setup, NULL);
}

/* File segments through one file transport (argv[1]: io_uring or bufio):
 * the same data-path suite for each.  tent_open_segment("file://..."),
 * tent_get_segment_info, aligned and unaligned reads and writes checked
 * byte for byte against the file itself, long requests, more requests than
 * the ring holds, short transfers continued, sync mode, close and reopen,
 * and which segments the file transports may serve. */
#include "../common/prio_stream.h"
#include "file_test_util.h"
#include "runtime/engine.h"
#include "transport/file_io.h"
#ifdef TENT_HAVE_IO_URING
#include "transport/io_uring/io_uring_transport.h"
#endif

#include <errno.h>

static const char *X; /* the transport under test */

static bool is_uring(void)
{
    return strcmp(X, "io_uring") == 0;
}

#ifdef TENT_HAVE_IO_URING
static struct tent_iouring_counters counters(tent_engine_t e)
{
    struct tent_engine *en = tent_engine_cast(e);
    struct tent_iouring_counters c = {0};
    for (int i = 0; i < en->nxports; i++)
        if (en->xports[i]->ops->type == TRANSPORT_IOURING)
            tent_iouring_counters(en->xports[i], &c);
    return c;
}
#endif

static tent_engine_t engine(void)
{
    return ft_engine(X, NULL);
}

/* Opens a fresh file of size bytes (pattern seed) as a segment. */
static tent_segment_id_t open_file(tent_engine_t e, const char *name,
                                   uint64_t size, uint64_t seed)
{
    ft_make_file(ft_path(name), size, seed);
    tent_segment_id_t h = 0;
    int rc = tent_open_segment(e, &h, ft_seg(ft_path(name)));
    if (rc)
        fail_msg("open: %s", tent_last_error());
    assert_true(h != LOCAL_SEGMENT_ID);
    return h;
}

static void test_info(void **state)
{
    (void)state;
    tent_engine_t e = engine();
    tent_segment_id_t h = open_file(e, "info", 3 * 4096 + 17, 0);
    tent_segment_info_t info = {0};
    assert_int_equal(tent_get_segment_info(e, h, &info), TENT_OK);
    assert_int_equal(info.type, TYPE_FILE);
    assert_int_equal(info.num_buffers, 1);
    assert_int_equal(info.buffers[0].base, 0);
    assert_int_equal(info.buffers[0].length, 3 * 4096 + 17);
    assert_string_equal(info.buffers[0].location, "*");
    tent_free_segment_info(&info);
    /* the same name is the same handle */
    tent_segment_id_t h2 = 0;
    assert_int_equal(tent_open_segment(e, &h2, ft_seg(ft_path("info"))),
                     TENT_OK);
    assert_int_equal(h2, h);
    /* the local segment stays memory */
    assert_int_equal(tent_get_segment_info(e, LOCAL_SEGMENT_ID, &info),
                     TENT_OK);
    assert_int_equal(info.type, TYPE_MEMORY);
    tent_free_segment_info(&info);
    assert_int_equal(tent_close_segment(e, h), TENT_OK);
    tent_destroy_engine(e);
}

/* 64 aligned 4 KiB writes at scattered offsets, then read back; the file
 * itself holds the bytes. */
static void test_aligned(void **state)
{
    (void)state;
    tent_engine_t e = engine();
    const uint64_t size = 4 << 20, blk = 4096;
    tent_segment_id_t h = open_file(e, "aligned", size, 0);
    uint8_t *src = ft_mem(e, 1 << 20), *dst = ft_mem(e, 1 << 20);
    ft_fill(src, 64 * blk, 11, 0);
    memset(dst, 0, 64 * blk);
    tent_request_t r[64];
    for (int i = 0; i < 64; i++)
        r[i] = ft_req(OPCODE_WRITE, src + i * blk, h,
                      (uint64_t)((i * 37) % 1024) * blk, blk);
    ft_run_ok(e, r, 64);
    for (int i = 0; i < 64; i++) {
        uint8_t *got =
            ft_read_file(ft_path("aligned"), r[i].target_offset, blk);
        assert_memory_equal(got, src + i * blk, blk);
        free(got);
        r[i].opcode = OPCODE_READ;
        r[i].source = dst + i * blk;
    }
    ft_run_ok(e, r, 64);
    assert_memory_equal(dst, src, 64 * blk);
#ifdef TENT_HAVE_IO_URING
    if (is_uring()) {
        struct tent_iouring_counters c = counters(e);
        assert_true(c.direct_ios >= 128); /* every one went O_DIRECT */
        assert_int_equal(c.buffered_ios, 0);
        assert_true(c.fixed_bufs >= 128); /* registered memory */
        assert_true(c.fixed_files >= 128);
    }
#endif
    ft_mem_free(e, src, 1 << 20);
    ft_mem_free(e, dst, 1 << 20);
    tent_destroy_engine(e);
}

/* Unaligned source, offset and length go through the page cache, aligned
 * neighbours of the same batch still O_DIRECT; the bytes are right either
 * way, also where the two kinds meet in the file. */
static void test_unaligned(void **state)
{
    (void)state;
    tent_engine_t e = engine();
    const uint64_t size = 1 << 20;
    tent_segment_id_t h = open_file(e, "unaligned", size, 5);
    uint8_t *src = ft_mem(e, 1 << 20), *dst = ft_mem(e, 1 << 20);
    ft_fill(src, 1 << 20, 6, 0);
    tent_request_t r[4] = {
        ft_req(OPCODE_WRITE, src + 3, h, 5, 1000),       /* all unaligned */
        ft_req(OPCODE_WRITE, src + 8192, h, 8192, 4096), /* aligned */
        ft_req(OPCODE_WRITE, src + 16384 + 1, h, 16384, 4096), /* source */
        ft_req(OPCODE_WRITE, src + 65536, h, 65536, 4095),     /* length */
    };
    ft_run_ok(e, r, 4);
    uint8_t *file = ft_read_file(ft_path("unaligned"), 0, size);
    for (int i = 0; i < 4; i++)
        assert_memory_equal(file + r[i].target_offset, r[i].source,
                            r[i].length);
    /* what was not written keeps the file's old bytes */
    uint8_t old[4];
    ft_fill(old, 4, 5, 0);
    assert_memory_equal(file, old, 4);
    ft_fill(old, 1, 5, 65536 + 4095);
    assert_int_equal(file[65536 + 4095], old[0]);
    free(file);
    for (int i = 0; i < 4; i++) {
        r[i].opcode = OPCODE_READ;
        r[i].source = dst + ((uint8_t *)r[i].source - src);
        memset(r[i].source, 0, r[i].length);
    }
    ft_run_ok(e, r, 4);
    for (int i = 0; i < 4; i++)
        assert_memory_equal(r[i].source, src + ((uint8_t *)r[i].source - dst),
                            r[i].length);
#ifdef TENT_HAVE_IO_URING
    if (is_uring()) {
        struct tent_iouring_counters c = counters(e);
        assert_int_equal(c.direct_ios, 2);   /* the aligned write and read */
        assert_int_equal(c.buffered_ios, 6); /* the others */
    }
#endif
    ft_mem_free(e, src, 1 << 20);
    ft_mem_free(e, dst, 1 << 20);
    tent_destroy_engine(e);
}

/* A request of 40 MiB and one crossing it, more than merge_max_bytes and
 * than one worker's share. */
static void test_large(void **state)
{
    (void)state;
    tent_engine_t e = engine();
    const uint64_t size = 48 << 20, len = 40 << 20;
    tent_segment_id_t h = open_file(e, "large", size, 0);
    uint8_t *src = ft_mem(e, size), *dst = ft_mem(e, size);
    ft_fill(src, size, 21, 0);
    tent_request_t r[2] = {ft_req(OPCODE_WRITE, src, h, 0, len),
                           ft_req(OPCODE_WRITE, src + len, h, len, size - len)};
    ft_run_ok(e, r, 2);
    memset(dst, 0, size);
    tent_request_t q = ft_req(OPCODE_READ, dst, h, 0, size);
    ft_run_ok(e, &q, 1);
    assert_memory_equal(dst, src, size);
    ft_mem_free(e, src, size);
    ft_mem_free(e, dst, size);
    tent_destroy_engine(e);
}

/* 512 requests on a ring of 8 entries (io_uring) or two workers (bufio):
 * the backlog drains, every byte arrives. */
static void test_many(void **state)
{
    (void)state;
    tent_engine_t e = is_uring()
                          ? ft_engine(X,
                                      "transports/io_uring/"
                                      "queue_depth",
                                      "8", "merge_requests", "false", NULL)
                          : ft_engine(X, "merge_requests", "false", NULL);
    const uint64_t blk = 8192, n = 512, size = n * blk;
    tent_segment_id_t h = open_file(e, "many", size, 0);
    uint8_t *src = ft_mem(e, size), *dst = ft_mem(e, size);
    ft_fill(src, size, 31, 0);
    tent_request_t *r = calloc(n, sizeof(*r));
    for (uint64_t i = 0; i < n; i++)
        r[i] = ft_req(OPCODE_WRITE, src + i * blk, h, i * blk, blk);
    ft_run_ok(e, r, n);
    for (uint64_t i = 0; i < n; i++) {
        r[i].opcode = OPCODE_READ;
        r[i].source = dst + i * blk;
    }
    ft_run_ok(e, r, n);
    assert_memory_equal(dst, src, size);
    free(r);
    ft_mem_free(e, src, size);
    ft_mem_free(e, dst, size);
    tent_destroy_engine(e);
}

/* Short transfers (the fault hook halves a few) are continued: COMPLETED
 * with every byte. */
static void test_short(void **state)
{
    (void)state;
    tent_engine_t e = engine();
    const uint64_t size = 1 << 20;
    tent_segment_id_t h = open_file(e, "short", size, 0);
    uint8_t *src = ft_mem(e, size), *dst = ft_mem(e, size);
    ft_fill(src, size, 41, 0);
    tent_fio_fault_set(X, TENT_FIO_FAULT_SHORT, 0, 0, 6);
    tent_request_t r = ft_req(OPCODE_WRITE, src, h, 0, size);
    ft_run_ok(e, &r, 1);
    tent_fio_fault_set(X, TENT_FIO_FAULT_SHORT, 0, 0, 6);
    r = ft_req(OPCODE_READ, dst, h, 0, size);
    ft_run_ok(e, &r, 1);
    tent_fio_fault_clear();
    assert_memory_equal(dst, src, size);
    uint8_t *file = ft_read_file(ft_path("short"), 0, size);
    assert_memory_equal(file, src, size);
    free(file);
#ifdef TENT_HAVE_IO_URING
    struct tent_iouring_counters c0 = {0};
    if (is_uring()) {
        c0 = counters(e);
        assert_true(c0.resubmits >= 12);
    }
#endif
    /* half of 3 x 512 B leaves a rest aligned to no block size: it goes
     * through the page cache */
    tent_fio_fault_set(X, TENT_FIO_FAULT_SHORT, 0, 0, 1);
    r = ft_req(OPCODE_WRITE, src + 8192, h, 8192, 1536);
    ft_run_ok(e, &r, 1);
    tent_fio_fault_clear();
    file = ft_read_file(ft_path("short"), 8192, 1536);
    assert_memory_equal(file, src + 8192, 1536);
    free(file);
#ifdef TENT_HAVE_IO_URING
    if (is_uring()) {
        struct tent_iouring_counters c = counters(e);
        assert_int_equal(c.resubmits, c0.resubmits + 1);
        assert_true(c.buffered_ios > c0.buffered_ios);
    }
#endif
    ft_mem_free(e, src, size);
    ft_mem_free(e, dst, size);
    tent_destroy_engine(e);
}

/* transports/<x>/sync: writes complete after an fdatasync (io_uring
 * counts them: fewer than the writes, one per file per round). */
static void test_sync(void **state)
{
    (void)state;
    char key[64];
    snprintf(key, sizeof(key), "transports/%s/sync", X);
    tent_engine_t e =
        ft_engine(X, key, "true", "merge_requests", "false", NULL);
    const uint64_t blk = 4096, n = 32;
    tent_segment_id_t h = open_file(e, "sync", n * blk, 0);
    uint8_t *src = ft_mem(e, n * blk);
    ft_fill(src, n * blk, 51, 0);
    tent_request_t r[32];
    for (uint64_t i = 0; i < n; i++)
        r[i] = ft_req(OPCODE_WRITE, src + i * blk, h, i * blk, blk);
    ft_run_ok(e, r, n);
    uint8_t *file = ft_read_file(ft_path("sync"), 0, n * blk);
    assert_memory_equal(file, src, n * blk);
    free(file);
#ifdef TENT_HAVE_IO_URING
    if (is_uring()) {
        struct tent_iouring_counters c = counters(e);
        assert_true(c.fsyncs >= 1);
        assert_true(c.fsyncs <= n);
    }
#endif
    ft_mem_free(e, src, n * blk);
    tent_destroy_engine(e);
}

/* tent_close_segment: busy while a task pins the file (nobody polled it
 * yet), then closed; the handle is dead; a reopen sees the new size. */
static void test_close_reopen(void **state)
{
    (void)state;
    tent_engine_t e = engine();
    tent_segment_id_t h = open_file(e, "reopen", 64 << 10, 0);
    uint8_t *src = ft_mem(e, 64 << 10);
    tent_request_t r = ft_req(OPCODE_READ, src, h, 0, 64 << 10);
    tent_batch_id_t b = tent_allocate_batch(e, 1);
    assert_int_equal(tent_submit(e, b, &r, 1), TENT_OK);
    assert_int_equal(tent_close_segment(e, h), TENT_EBUSY);
    ft_assert_contains(tent_last_error(), "reopen");
    ft_wait(e, b, 1);
    assert_int_equal(tent_free_batch(e, b), TENT_OK);
    assert_int_equal(tent_close_segment(e, h), TENT_OK);
    b = tent_allocate_batch(e, 1);
    assert_int_equal(tent_submit(e, b, &r, 1), TENT_ENOSEGMENT);
    assert_int_equal(tent_free_batch(e, b), TENT_OK);
    assert_int_equal(truncate(ft_path("reopen"), 128 << 10), 0);
    tent_segment_id_t h2 = 0;
    assert_int_equal(tent_open_segment(e, &h2, ft_seg(ft_path("reopen"))),
                     TENT_OK);
    assert_true(h2 != h);
    tent_segment_info_t info;
    assert_int_equal(tent_get_segment_info(e, h2, &info), TENT_OK);
    assert_int_equal(info.buffers[0].length, 128 << 10);
    tent_free_segment_info(&info);
    r.target_id = h2;
    ft_run_ok(e, &r, 1);
    ft_mem_free(e, src, 64 << 10);
    tent_destroy_engine(e); /* with the segment still open */
}

/* File segments go only to file transports, memory segments never do. */
static void test_selection(void **state)
{
    (void)state;
    char both[64];
    snprintf(both, sizeof(both), "tcp,%s", X);
    tent_engine_t e = ft_engine(both, NULL);
    tent_segment_id_t h = open_file(e, "select", 1 << 20, 0);
    uint8_t *src = ft_mem(e, 1 << 20), *dst = ft_mem(e, 1 << 20);
    char name[32];
    ft_run_by(e, ft_req(OPCODE_WRITE, src, h, 0, 4096), name, sizeof(name));
    assert_string_equal(name, X);
    ft_run_by(e,
              ft_req(OPCODE_WRITE, src, LOCAL_SEGMENT_ID, (uintptr_t)dst, 4096),
              name, sizeof(name));
    assert_string_equal(name, "tcp");
    /* pinning the other kind is no use */
    tent_request_t r = ft_req(OPCODE_WRITE, src, h, 0, 4096);
    r.transport_hint = TRANSPORT_TCP;
    ft_run_by(e, r, name, sizeof(name));
    assert_string_equal(name, X);
    ft_mem_free(e, src, 1 << 20);
    ft_mem_free(e, dst, 1 << 20);
    tent_destroy_engine(e);

    /* only the file transport: local memory finds no transport */
    e = engine();
    src = ft_mem(e, 1 << 20);
    dst = ft_mem(e, 1 << 20);
    tent_batch_id_t b = tent_allocate_batch(e, 1);
    r = ft_req(OPCODE_WRITE, src, LOCAL_SEGMENT_ID, (uintptr_t)dst, 4096);
    assert_int_equal(tent_submit(e, b, &r, 1), TENT_ENOTRANSPORT);
    assert_int_equal(tent_free_batch(e, b), TENT_OK);
    ft_mem_free(e, src, 1 << 20);
    ft_mem_free(e, dst, 1 << 20);
    tent_destroy_engine(e);

    /* only tcp: the file finds no transport */
    e = ft_engine("tcp", NULL);
    h = open_file(e, "select_tcp", 1 << 20, 0);
    src = ft_mem(e, 1 << 20);
    b = tent_allocate_batch(e, 1);
    r = ft_req(OPCODE_WRITE, src, h, 0, 4096);
    assert_int_equal(tent_submit(e, b, &r, 1), TENT_ENOTRANSPORT);
    ft_assert_contains(tent_last_error(), "select_tcp");
    assert_int_equal(tent_free_batch(e, b), TENT_OK);
    ft_mem_free(e, src, 1 << 20);
    tent_destroy_engine(e);
}

/* A policy for segment_type "file" orders the file transports. */
static void test_policy(void **state)
{
    (void)state;
    const char *other = is_uring() ? "bufio" : "io_uring";
    char list[64], pol[160];
    snprintf(list, sizeof(list), "%s,%s", X, other);
    snprintf(pol, sizeof(pol),
             "[{\"segment_type\": \"file\", \"transports\": [\"%s\", \"%s\"]}]",
             X, other);
    tent_engine_t e = ft_engine(list, "policy", pol, NULL);
    tent_segment_id_t h = open_file(e, "policy", 1 << 20, 0);
    uint8_t *src = ft_mem(e, 1 << 20);
    char name[32];
    ft_run_by(e, ft_req(OPCODE_WRITE, src, h, 0, 4096), name, sizeof(name));
#ifndef TENT_HAVE_IO_URING
    assert_string_equal(name, "bufio");
#else
    assert_string_equal(name, X);
#endif
    ft_mem_free(e, src, 1 << 20);
    tent_destroy_engine(e);
}

/* Priorities: with one worker (io_uring: one ring of 8 entries), LOW writes
 * of 16 x 16 MiB are under way when a HIGH write of 4 KiB is submitted.
 * The HIGH one is served ahead of the LOW ones still queued and between two
 * pieces of the LOW one being moved: it completes while most LOW ones are
 * still pending (served in order, it would wait for all of them).  Then
 * every byte of both is in the file. */
static void test_priority(void **state)
{
    (void)state;
    tent_engine_t e =
        is_uring() ? ft_engine(X, "transports/io_uring/workers", "1",
                               "transports/io_uring/queue_depth", "8",
                               "merge_requests", "false", NULL)
                   : ft_engine(X, "transports/bufio/workers", "1",
                               "merge_requests", "false", NULL);
    const uint64_t nlow = 16, blk = 16 << 20, size = nlow * blk + 4096;
    tent_segment_id_t h = open_file(e, "prio", size, 0);
    uint8_t *src = ft_mem(e, size);
    ft_fill(src, size, 41, 0);
    tent_request_t low[16], high = ft_req(OPCODE_WRITE, src + nlow * blk, h,
                                          nlow * blk, 4096);
    for (uint64_t i = 0; i < nlow; i++) {
        low[i] = ft_req(OPCODE_WRITE, src + i * blk, h, i * blk, blk);
        low[i].priority = TENT_PRIO_LOW;
    }
    high.priority = TENT_PRIO_HIGH;
    tent_batch_id_t bl = tent_allocate_batch(e, nlow);
    tent_batch_id_t bh = tent_allocate_batch(e, 1);
    assert_int_equal(tent_submit(e, bl, low, nlow), TENT_OK);
    assert_int_equal(tent_submit(e, bh, &high, 1), TENT_OK);
    ft_wait(e, bh, 1);
    size_t pending = 0;
    for (uint64_t i = 0; i < nlow; i++) {
        tent_status_t st;
        assert_int_equal(tent_task_status(e, bl, i, &st), TENT_OK);
        pending += st.status == STATUS_PENDING || st.status == STATUS_WAITING;
    }
    tent_status_t st;
    assert_int_equal(tent_task_status(e, bh, 0, &st), TENT_OK);
    assert_int_equal(st.status, STATUS_COMPLETED);
    if (pending < nlow / 2)
        fail_msg("the HIGH write completed after %zu of %llu LOW writes",
                 (size_t)nlow - pending, (unsigned long long)nlow);
    ft_wait(e, bl, nlow);
    for (uint64_t i = 0; i < nlow; i++) {
        assert_int_equal(tent_task_status(e, bl, i, &st), TENT_OK);
        assert_int_equal(st.status, STATUS_COMPLETED);
        assert_int_equal(st.transferred_bytes, blk);
    }
    assert_int_equal(tent_free_batch(e, bl), TENT_OK);
    assert_int_equal(tent_free_batch(e, bh), TENT_OK);
    uint8_t *got = ft_read_file(ft_path("prio"), 0, size);
    assert_memory_equal(got, src, size);
    free(got);
    ft_mem_free(e, src, size);
    tent_destroy_engine(e);
}

/* One run of test_low_not_starved (ps_run_fn): HIGH writes of 1 MiB,
 * NHIGH of them in flight, to NDST places (the same bytes to each place),
 * and a LOW write of 16 MiB after them, through one worker of transport X.
 * NHIGH is a deep backlog (about 0.1 s of work here) so that a feeder
 * thread the scheduler holds back leaves no gap: with 64, two CPU hogs
 * made the run without promotion fail 4 times in 4. */
#define NHIGH 256
#define NDST  64
static double low_under_high(void *ctx, const char *promo_us, double secs,
                             int *nhigh)
{
    (void)ctx;
    tent_engine_t e =
        is_uring()
            ? ft_engine(X, "transports/io_uring/workers", "1",
                        "transports/io_uring/queue_depth", "8",
                        "transports/io_uring/priority_promotion_timeout_us",
                        promo_us, "merge_requests", "false", NULL)
            : ft_engine(X, "transports/bufio/workers", "1",
                        "transports/bufio/priority_promotion_timeout_us",
                        promo_us, "merge_requests", "false", NULL);
    const uint64_t mib = 1 << 20, low_len = 16 * mib;
    const uint64_t size = low_len + NDST * mib;
    tent_segment_id_t h = open_file(e, "starve", size, 0);
    uint8_t *src = ft_mem(e, size);
    ft_fill(src, size, 43, 0);
    tent_request_t hr[NHIGH];
    for (int i = 0; i < NHIGH; i++) {
        const uint64_t at = low_len + (uint64_t)(i % NDST) * mib;
        hr[i] = ft_req(OPCODE_WRITE, src + at, h, at, mib);
        hr[i].priority = TENT_PRIO_HIGH;
    }
    tent_request_t lr = ft_req(OPCODE_WRITE, src, h, 0, low_len);
    lr.priority = TENT_PRIO_LOW;
    double done_at = ps_low_under_high(e, hr, NHIGH, &lr, secs, nhigh);
    uint8_t *got = ft_read_file(ft_path("starve"), 0, size);
    assert_memory_equal(got, src, size);
    free(got);
    ft_mem_free(e, src, size);
    tent_destroy_engine(e);
    return done_at;
}

/* Promotion keeps LOW from starving (ps_check_promotion): under a stream
 * of HIGH writes that never lets the HIGH queue run dry (NHIGH in flight:
 * one bufio worker takes 16 at a time, and with 32 the queue ran dry
 * between takes), a LOW write completes while the stream still runs
 * (priority_promotion_timeout_us, 10 ms: a LOW queue not served for two
 * timeouts counts as HIGH, and the one that waited longer goes first);
 * with promotion off it is still not done after a second of the stream. */
static void test_low_not_starved(void **state)
{
    (void)state;
    char what[64];
    snprintf(what, sizeof(what), "%s, LOW 16 MiB", X);
    ps_check_promotion(low_under_high, NULL, what);
}

int main(int argc, char **argv)
{
    X = argc > 1 ? argv[1] : "bufio";
#ifndef TENT_HAVE_IO_URING
    if (strcmp(X, "io_uring") == 0) {
        fprintf(stderr, "io_uring transport not built\n");
        return 77;
    }
#endif
    ft_mkdir();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_info),      cmocka_unit_test(test_aligned),
        cmocka_unit_test(test_unaligned), cmocka_unit_test(test_large),
        cmocka_unit_test(test_many),      cmocka_unit_test(test_short),
        cmocka_unit_test(test_sync),      cmocka_unit_test(test_close_reopen),
        cmocka_unit_test(test_selection), cmocka_unit_test(test_policy),
        cmocka_unit_test(test_priority),
        cmocka_unit_test(test_low_not_starved),
    };
    return cmocka_run_group_tests_name(X, tests, NULL, NULL);
}

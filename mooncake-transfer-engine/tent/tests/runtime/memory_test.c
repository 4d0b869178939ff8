/* Memory through the public API: register/unregister (single, batch, _ex,
 * permissions), overlap and duplicate rejection, in-flight protection,
 * tent_allocate_memory for "cpu" and "cpu:<node>", hugepage settings. */
#include "common/error.h"
#include "test_util.h"

#include <sys/mman.h>
#include <sys/syscall.h>

#define LEN 65536

static int setup(void **state)
{
    tu_setup(state);
    unsetenv("MC_STORE_USE_HUGEPAGE");
    unsetenv("MC_STORE_HUGEPAGE_SIZE");
    return 0;
}

static int teardown(void **state)
{
    tu_teardown(state);
    unsetenv("MC_STORE_USE_HUGEPAGE");
    unsetenv("MC_STORE_HUGEPAGE_SIZE");
    return 0;
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

static int nbufs(tent_engine_t e)
{
    tent_segment_info_t info;
    assert_int_equal(tent_get_segment_info(e, LOCAL_SEGMENT_ID, &info),
                     TENT_OK);
    int n = info.num_buffers;
    tent_free_segment_info(&info);
    return n;
}

static void test_register_single(void **state)
{
    (void)state;
    tent_engine_t e = TU_ENGINE("fake_a", "fake_b");
    char *m = aligned_alloc(4096, 4 * LEN);
    assert_int_equal(tent_register_memory(e, m + LEN, LEN), TENT_OK);
    assert_int_equal(fake_stats[0].buffers, 1);
    assert_int_equal(fake_stats[1].buffers, 1);
    tent_segment_info_t info;
    assert_int_equal(tent_get_segment_info(e, LOCAL_SEGMENT_ID, &info),
                     TENT_OK);
    assert_int_equal(info.type, TYPE_MEMORY);
    assert_int_equal(info.num_buffers, 1);
    assert_int_equal(info.buffers[0].base, (uintptr_t)(m + LEN));
    assert_int_equal(info.buffers[0].length, LEN);
    assert_string_equal(info.buffers[0].location, "cpu");
    tent_free_segment_info(&info);

    /* TENT's rules: the same range again raises its reference count (no
     * new entry, no second transport registration); overlapping ranges at
     * either end, containing or contained, are entries of their own. */
    assert_int_equal(tent_register_memory(e, m + LEN, LEN), TENT_OK);
    assert_int_equal(nbufs(e), 1);
    assert_int_equal(fake_stats[0].buffers, 1);
    void *ov[4] = {m + LEN / 2, m + LEN + LEN / 2, m, m + LEN + 8};
    size_t ovlen[4] = {LEN, LEN, 3 * LEN, 16};
    for (int i = 0; i < 4; i++)
        assert_int_equal(tent_register_memory(e, ov[i], ovlen[i]), TENT_OK);
    assert_int_equal(nbufs(e), 5);
    assert_int_equal(fake_stats[0].buffers, 5);
    for (int i = 0; i < 4; i++)
        assert_int_equal(tent_unregister_memory(e, ov[i], ovlen[i]), TENT_OK);
    assert_int_equal(nbufs(e), 1);
    /* Adjacent on both sides is fine. */
    assert_int_equal(tent_register_memory(e, m, LEN), TENT_OK);
    assert_int_equal(tent_register_memory(e, m + 2 * LEN, LEN), TENT_OK);
    assert_int_equal(nbufs(e), 3);

    /* Unregister: wrong size, not a buffer start, unknown. */
    assert_int_equal(tent_unregister_memory(e, m + LEN, 5), TENT_EINVAL);
    assert_contains(tent_last_error(), "5 bytes");
    assert_int_equal(tent_unregister_memory(e, m + LEN + 8, 0), TENT_ENOTREG);
    assert_int_equal(tent_unregister_memory(e, m + 3 * LEN, LEN), TENT_ENOTREG);
    assert_int_equal(nbufs(e), 3);
    /* Two registrations of m + LEN: the first unregister keeps it. */
    assert_int_equal(tent_unregister_memory(e, m + LEN, LEN), TENT_OK);
    assert_int_equal(nbufs(e), 3);
    assert_int_equal(tent_unregister_memory(e, m + LEN, LEN), TENT_OK);
    assert_int_equal(nbufs(e), 2);
    assert_int_equal(tent_unregister_memory(e, m + LEN, LEN), TENT_ENOTREG);
    assert_int_equal(tent_unregister_memory(e, m, 0), TENT_OK);
    assert_int_equal(tent_unregister_memory(e, m + 2 * LEN, LEN), TENT_OK);
    assert_int_equal(nbufs(e), 0);
    assert_int_equal(fake_stats[0].buffers, 0);
    assert_int_equal(fake_stats[1].buffers, 0);
    tent_destroy_engine(e);
    free(m);
}

static void test_register_batch_all_or_nothing(void **state)
{
    (void)state;
    tent_engine_t e = TU_ENGINE("fake_a");
    char *m = aligned_alloc(4096, 8 * LEN);
    void *addrs[3] = {m, m + LEN, m + 2 * LEN};
    size_t sizes[3] = {LEN, LEN, LEN};
    assert_int_equal(
        tent_register_memory_batch(e, addrs, sizes, 3, PERM_GLOBAL_READ_WRITE),
        TENT_OK);
    assert_int_equal(nbufs(e), 3);
    assert_int_equal(tent_unregister_memory_batch(e, addrs, sizes, 3), TENT_OK);
    assert_int_equal(nbufs(e), 0);

    /* Entries overlapping each other are entries of their own. */
    void *ov[2] = {m, m + LEN / 2};
    assert_int_equal(
        tent_register_memory_batch(e, ov, sizes, 2, PERM_GLOBAL_READ_WRITE),
        TENT_OK);
    assert_int_equal(nbufs(e), 2);
    assert_int_equal(tent_unregister_memory_batch(e, ov, sizes, 2), TENT_OK);
    assert_int_equal(nbufs(e), 0);

    /* The third entry fails in the transport: the first two are undone,
     * and the count bump of the first (already registered) is given back:
     * one unregister then removes it. */
    assert_int_equal(tent_register_memory(e, m + 5 * LEN, LEN), TENT_OK);
    void *late[3] = {m + 5 * LEN, m + LEN, m + 6 * LEN};
    fake_behavior[0].refuse_buffer_base = (uintptr_t)(m + 6 * LEN);
    tent_memory_options_t only_a = {.permission = PERM_GLOBAL_READ_WRITE,
                                    .transport_type = FAKE_A_TYPE};
    assert_int_equal(tent_register_memory_batch_ex(e, late, sizes, 3, &only_a),
                     TENT_EIO);
    assert_contains(tent_last_error(), "entry 2");
    fake_behavior[0].refuse_buffer_base = 0;
    assert_int_equal(nbufs(e), 1);
    assert_int_equal(fake_stats[0].buffers, 1);
    assert_int_equal(tent_unregister_memory(e, m + 5 * LEN, LEN), TENT_OK);
    assert_int_equal(nbufs(e), 0);
    assert_int_equal(tent_register_memory(e, m + 5 * LEN, LEN), TENT_OK);
    assert_int_equal(tent_register_memory(e, m, LEN), TENT_OK);

    /* Unregister batch with one unknown entry: nothing unregistered. */
    void *un[2] = {m, m + 7 * LEN};
    assert_int_equal(tent_unregister_memory_batch(e, un, NULL, 2),
                     TENT_ENOTREG);
    assert_contains(tent_last_error(), "entry 1");
    assert_int_equal(nbufs(e), 2);

    /* The same buffer twice in one unregister batch: refused whole, not
     * half-applied (the first entry must stay registered). */
    void *dup[2] = {m, m};
    assert_int_equal(tent_unregister_memory_batch(e, dup, NULL, 2),
                     TENT_EINVAL);
    assert_contains(tent_last_error(), "entries 0 and 1");
    assert_int_equal(nbufs(e), 2);

    /* _ex batch with options: location and permission carried. */
    tent_memory_options_t o;
    memset(&o, 0, sizeof(o));
    o.permission = PERM_GLOBAL_READ_ONLY;
    snprintf(o.location, sizeof(o.location), "cpu:0");
    void *ex[2] = {m + 2 * LEN, m + 3 * LEN};
    assert_int_equal(tent_register_memory_batch_ex(e, ex, sizes, 2, &o),
                     TENT_OK);
    tent_segment_info_t info;
    assert_int_equal(tent_get_segment_info(e, LOCAL_SEGMENT_ID, &info),
                     TENT_OK);
    assert_int_equal(info.num_buffers, 4);
    assert_string_equal(info.buffers[2].location, "cpu:0");
    tent_free_segment_info(&info);
    void *all[4] = {m, m + 2 * LEN, m + 3 * LEN, m + 5 * LEN};
    assert_int_equal(tent_unregister_memory_batch(e, all, NULL, 4), TENT_OK);
    assert_int_equal(nbufs(e), 0);
    tent_destroy_engine(e);
    free(m);
}

/* Permissions: a read-only target refuses writes but serves reads. */
static void test_permissions(void **state)
{
    (void)state;
    tent_engine_t e = TU_ENGINE("fake_a");
    char *src = aligned_alloc(4096, LEN), *dst = aligned_alloc(4096, LEN);
    memset(src, 1, LEN);
    memset(dst, 2, LEN);
    assert_int_equal(tent_register_memory(e, src, LEN), TENT_OK);
    tent_memory_options_t o;
    memset(&o, 0, sizeof(o));
    o.permission = PERM_GLOBAL_READ_ONLY;
    assert_int_equal(tent_register_memory_ex(e, dst, LEN, &o), TENT_OK);
    tent_batch_id_t b = tent_allocate_batch(e, 2);
    tent_request_t r = {.opcode = OPCODE_WRITE,
                        .source = src,
                        .target_offset = (uintptr_t)dst,
                        .length = LEN};
    assert_int_equal(tent_submit(e, b, &r, 1), TENT_EPERM);
    assert_contains(tent_last_error(), "read-only");
    r.opcode = OPCODE_READ;
    assert_int_equal(tent_submit(e, b, &r, 1), TENT_OK);
    tent_status_t st;
    assert_int_equal(tu_wait_task(e, b, 0, &st, 2000), TENT_OK);
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_int_equal(src[0], 2);
    assert_int_equal(tent_free_batch(e, b), TENT_OK);
    /* A bad permission value. */
    assert_int_equal(tent_register_memory_with_perm(e, src + 1, 1, 3),
                     TENT_EINVAL);
    assert_contains(tent_last_error(), "permission 3");
    assert_int_equal(tent_unregister_memory(e, src, LEN), TENT_OK);
    assert_int_equal(tent_unregister_memory(e, dst, LEN), TENT_OK);
    tent_destroy_engine(e);
    free(src);
    free(dst);
}

/* Memory used by an in-flight task cannot be unregistered. */
static void test_unregister_inflight(void **state)
{
    (void)state;
    tent_engine_t e = TU_ENGINE("fake_a");
    struct tu_bufs p;
    tu_bufs_init(e, &p, LEN);
    char *other = aligned_alloc(4096, LEN);
    assert_int_equal(tent_register_memory(e, other, LEN), TENT_OK);
    fake_behavior[0].polls_before_done = 3;
    tent_batch_id_t b = tent_allocate_batch(e, 1);
    tent_request_t r = tu_write(&p, 0, LEN);
    assert_int_equal(tent_submit(e, b, &r, 1), TENT_OK);
    assert_int_equal(tent_unregister_memory(e, p.src, LEN), TENT_EBUSY);
    assert_contains(tent_last_error(), "in flight");
    assert_int_equal(tent_unregister_memory(e, p.dst, LEN), TENT_EBUSY);
    void *both[2] = {other, p.src};
    assert_int_equal(tent_unregister_memory_batch(e, both, NULL, 2),
                     TENT_EBUSY);
    assert_int_equal(nbufs(e), 3); /* "other" is still registered too */
    tent_status_t st;
    assert_int_equal(tu_wait_task(e, b, 0, &st, 2000), TENT_OK);
    assert_int_equal(st.status, STATUS_COMPLETED);
    /* Terminal: the memory is free to go although the batch still exists. */
    assert_int_equal(tent_unregister_memory_batch(e, both, NULL, 2), TENT_OK);
    assert_int_equal(tent_free_batch(e, b), TENT_OK);
    assert_int_equal(tent_unregister_memory(e, p.dst, LEN), TENT_OK);
    tent_destroy_engine(e);
    free(p.src);
    free(p.dst);
    free(other);
}

static void test_allocate_cpu(void **state)
{
    (void)state;
    tent_engine_t e = TU_ENGINE("fake_a");
    void *a = NULL, *b = NULL, *c = NULL;
    assert_int_equal(tent_allocate_memory(e, &a, 10000, "cpu"), TENT_OK);
    assert_non_null(a);
    assert_int_equal((uintptr_t)a % (uintptr_t)sysconf(_SC_PAGESIZE), 0);
    memset(a, 0x33, 10000);
    assert_int_equal(tent_allocate_memory(e, &b, 4096, NULL), TENT_OK);
    assert_int_equal(tent_allocate_memory(e, &c, 4096, "cpu:0"), TENT_OK);
    assert_int_equal((uintptr_t)c % 4096, 0);
    /* Allocating registers nothing: peers see nothing yet, and the memory
     * is no transfer source until registered (TENT's pattern). */
    assert_int_equal(nbufs(e), 0);
    assert_int_equal(fake_stats[0].buffers, 0);
    tent_batch_id_t bt = tent_allocate_batch(e, 1);
    tent_request_t r = {.opcode = OPCODE_WRITE,
                        .source = a,
                        .target_offset = (uintptr_t)b,
                        .length = 4096};
    assert_int_equal(tent_submit(e, bt, &r, 1), TENT_ENOTREG);
    assert_int_equal(tent_register_memory(e, a, 10000), TENT_OK);
    assert_int_equal(tent_register_memory(e, b, 4096), TENT_OK);
    assert_int_equal(tent_register_memory(e, c, 4096), TENT_OK);
    tent_segment_info_t info;
    assert_int_equal(tent_get_segment_info(e, LOCAL_SEGMENT_ID, &info),
                     TENT_OK);
    assert_int_equal(info.num_buffers, 3);
    int found = 0;
    for (int i = 0; i < info.num_buffers; i++) {
        if (info.buffers[i].base == (uintptr_t)a) {
            assert_int_equal(info.buffers[i].length, 10000);
            assert_string_equal(info.buffers[i].location, "cpu");
            found++;
        }
        if (info.buffers[i].base == (uintptr_t)c) {
            assert_string_equal(info.buffers[i].location, "cpu:0");
            found++;
        }
    }
    assert_int_equal(found, 2);
    tent_free_segment_info(&info);
    assert_int_equal(tent_submit(e, bt, &r, 1), TENT_OK);
    tent_status_t st;
    assert_int_equal(tu_wait_task(e, bt, 0, &st, 2000), TENT_OK);
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_memory_equal(a, b, 4096);
    assert_int_equal(tent_free_batch(e, bt), TENT_OK);

    /* Unregister, then free (TENT's order); freeing memory that is still
     * registered unregisters it first. */
    assert_int_equal(tent_unregister_memory(e, a, 0), TENT_OK);
    assert_int_equal(tent_free_memory(e, a), TENT_OK);
    assert_int_equal(tent_free_memory(e, a), TENT_EINVAL);
    assert_contains(tent_last_error(), "not allocated by");
    assert_int_equal(nbufs(e), 2);
    assert_int_equal(tent_free_memory(e, b), TENT_OK);
    assert_int_equal(tent_free_memory(e, c), TENT_OK);
    assert_int_equal(nbufs(e), 0);
    assert_int_equal(fake_stats[0].buffers, 0);
    char *reg = aligned_alloc(4096, 4096);
    assert_int_equal(tent_register_memory(e, reg, 4096), TENT_OK);
    assert_int_equal(tent_free_memory(e, reg), TENT_EINVAL);
    assert_int_equal(tent_unregister_memory(e, reg, 4096), TENT_OK);
    free(reg);

    /* Bad locations name the location. */
    void *x = NULL;
    assert_int_equal(tent_allocate_memory(e, &x, 4096, "cpu:4000"),
                     TENT_EINVAL);
    assert_contains(tent_last_error(), "cpu:4000");
    assert_int_equal(tent_allocate_memory(e, &x, 4096, "cpu:zero"),
                     TENT_EINVAL);
    assert_contains(tent_last_error(), "cpu:zero");
    assert_int_equal(tent_allocate_memory(e, &x, 4096, "gpu:0"), TENT_ENOTSUP);
    assert_contains(tent_last_error(), "gpu:0");
    assert_int_equal(tent_allocate_memory(e, &x, 4096, "npu:x"), TENT_EINVAL);
    assert_contains(tent_last_error(), "npu:x");
    assert_null(x);
    assert_int_equal(nbufs(e), 0);
    tent_destroy_engine(e);
}

/* The NUMA node of "cpu:0" is applied to the mapping (MPOL_BIND to node 0)
 * and the pages are there. */
static void test_allocate_numa_policy(void **state)
{
    (void)state;
    tent_engine_t e = TU_ENGINE("fake_a");
    void *a = NULL;
    assert_int_equal(tent_allocate_memory(e, &a, 1 << 20, "cpu:0"), TENT_OK);
    int mode = -1;
    unsigned long mask[16] = {0};
    /* get_mempolicy(&mode, mask, maxnode, addr, MPOL_F_ADDR) */
    long rc = syscall(SYS_get_mempolicy, &mode, mask, 1024ul, a, 2ul);
    assert_int_equal(rc, 0);
    assert_int_equal(mode, 2); /* MPOL_BIND */
    assert_int_equal(mask[0], 1ul);
    int node = -1;
    /* MPOL_F_NODE | MPOL_F_ADDR: the node of the page at addr */
    rc = syscall(SYS_get_mempolicy, &node, NULL, 0ul, a, 3ul);
    assert_int_equal(rc, 0);
    assert_int_equal(node, 0);
    assert_int_equal(tent_free_memory(e, a), TENT_OK);
    tent_destroy_engine(e);
}

static void test_hugepage_size_rejected(void **state)
{
    (void)state;
    setenv("MC_STORE_USE_HUGEPAGE", "1", 1);
    setenv("MC_STORE_HUGEPAGE_SIZE", "3MB", 1);
    struct tu_capture cap;
    tu_capture_begin(&cap);
    tent_engine_t e = TU_ENGINE("fake_a");
    char *log = tu_capture_end(&cap);
    assert_null(e);
    assert_contains(log, "2MB, 512MB, 1GB");
    free(log);
    assert_contains(tent_last_error(), "MC_STORE_HUGEPAGE_SIZE='3MB'");
    assert_contains(tent_last_error(), "2MB, 512MB, 1GB");
    /* Every accepted size gives an engine. */
    const char *ok[] = {"2MB", "512MB", "1GB"};
    for (int i = 0; i < 3; i++) {
        setenv("MC_STORE_HUGEPAGE_SIZE", ok[i], 1);
        e = TU_ENGINE("fake_a");
        assert_non_null(e);
        tent_destroy_engine(e);
    }
}

static long free_hugepages_2mb(void)
{
    FILE *f =
        fopen("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages", "r");
    long n = 0;
    if (!f)
        return 0;
    if (fscanf(f, "%ld", &n) != 1)
        n = 0;
    fclose(f);
    return n;
}

/* No hugepages reserved: the allocation fails, says why with the real
 * errno, in the log and in tent_last_error, and registers nothing. */
static void test_hugepage_unavailable(void **state)
{
    (void)state;
    if (free_hugepages_2mb() > 0)
        skip(); /* the machine has hugepages: nothing to provoke */
    setenv("MC_STORE_USE_HUGEPAGE", "1", 1);
    setenv("MC_STORE_HUGEPAGE_SIZE", "2MB", 1);
    tent_engine_t e = TU_ENGINE("fake_a");
    assert_non_null(e);
    void *a = NULL;
    struct tu_capture cap;
    tu_capture_begin(&cap);
    int rc = tent_allocate_memory(e, &a, 4096, "cpu");
    char *log = tu_capture_end(&cap);
    assert_int_equal(rc, TENT_ENOMEM);
    assert_null(a);
    assert_contains(log, "mmap failed, errno=12 (Cannot allocate memory)");
    assert_contains(tent_last_error(),
                    "mmap failed, errno=12 (Cannot allocate memory)");
    free(log);
    assert_int_equal(nbufs(e), 0);
    tent_destroy_engine(e);
}

/* ---- hugepage success path (own CTest entry: needs root, changes a
 * system-wide setting, reported as skipped when it cannot run) ---------- */

#define HP_SYSFS "/sys/kernel/mm/hugepages/hugepages-2048kB/"
#define HP_2MB   ((size_t)2 << 20)

static bool g_hp_skipped;    /* the case could not run here */
static long g_hp_saved = -1; /* nr_hugepages to restore, -1: untouched */

static long hp_read(const char *file)
{
    char path[128];
    snprintf(path, sizeof(path), HP_SYSFS "%s", file);
    FILE *f = fopen(path, "r");
    long n = -1;
    if (!f)
        return -1;
    if (fscanf(f, "%ld", &n) != 1)
        n = -1;
    fclose(f);
    return n;
}

static bool hp_write_nr(long n)
{
    FILE *f = fopen(HP_SYSFS "nr_hugepages", "w");
    if (!f)
        return false;
    bool ok = fprintf(f, "%ld\n", n) > 0;
    return fclose(f) == 0 && ok;
}

static int hp_teardown(void **state)
{
    if (g_hp_saved >= 0 && !hp_write_nr(g_hp_saved))
        fprintf(stderr, "could not restore " HP_SYSFS "nr_hugepages to %ld\n",
                g_hp_saved);
    g_hp_saved = -1;
    return teardown(state);
}

/* The smaps entry of the mapping that starts at addr: its KernelPageSize
 * and the hugetlb bytes mapped (Shared_Hugetlb + Private_Hugetlb), in kB. */
static void smaps_of(const void *addr, long *page_kb, long *hugetlb_kb)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    assert_non_null(f);
    char line[512];
    bool in = false, found = false;
    *page_kb = -1;
    *hugetlb_kb = 0;
    while (fgets(line, sizeof(line), f)) {
        unsigned long lo, hi;
        long kb;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) { /* a mapping's header */
            in = lo == (uintptr_t)addr;
            found |= in;
        } else if (in && sscanf(line, "KernelPageSize: %ld kB", &kb) == 1) {
            *page_kb = kb;
        } else if (in && (sscanf(line, "Shared_Hugetlb: %ld kB", &kb) == 1 ||
                          sscanf(line, "Private_Hugetlb: %ld kB", &kb) == 1)) {
            *hugetlb_kb += kb;
        }
    }
    fclose(f);
    if (!found)
        fail_msg("no mapping starts at %p in /proc/self/smaps", addr);
}

/* MC_STORE_USE_HUGEPAGE=1: tent_allocate_memory backs the buffer with 2 MB
 * pages taken from the pool the test reserved, and gives them back on
 * free. */
static void test_hugepage_allocation(void **state)
{
    (void)state;
    if (geteuid() != 0) {
        print_message("skipped: not root (reserving hugepages needs it)\n");
        g_hp_skipped = true;
        skip();
    }
    long nr = hp_read("nr_hugepages");
    if (nr < 0) {
        print_message("skipped: no " HP_SYSFS " (no 2 MB hugepages)\n");
        g_hp_skipped = true;
        skip();
    }
    const long want = 2; /* 2 MB + 4 KiB rounds up to two pages */
    g_hp_saved = nr;
    if (!hp_write_nr(nr + want) || hp_read("free_hugepages") < want) {
        print_message("skipped: the kernel did not reserve %ld 2 MB pages "
                      "(nr_hugepages %ld -> %ld)\n",
                      want, nr, hp_read("nr_hugepages"));
        g_hp_skipped = true;
        skip();
    }
    long free_before = hp_read("free_hugepages");

    setenv("MC_STORE_USE_HUGEPAGE", "1", 1);
    setenv("MC_STORE_HUGEPAGE_SIZE", "2MB", 1);
    tent_engine_t e = TU_ENGINE("fake_a");
    assert_non_null(e);
    uint8_t *a = NULL;
    assert_int_equal(tent_allocate_memory(e, (void **)&a, HP_2MB + 4096, "cpu"),
                     TENT_OK);
    assert_non_null(a);
    assert_int_equal((uintptr_t)a % HP_2MB, 0);
    assert_int_equal(tent_register_memory(e, a, HP_2MB + 4096), TENT_OK);
    for (size_t i = 0; i < HP_2MB + 4096; i += 4096)
        a[i] = (uint8_t)(i >> 12);
    for (size_t i = 0; i < HP_2MB + 4096; i += 4096)
        assert_int_equal(a[i], (uint8_t)(i >> 12));

    long page_kb, hugetlb_kb;
    smaps_of(a, &page_kb, &hugetlb_kb);
    assert_int_equal(page_kb, 2048);
    assert_int_equal(hugetlb_kb, 2 * 2048);
    assert_int_equal(hp_read("free_hugepages"), free_before - want);

    assert_int_equal(tent_unregister_memory(e, a, HP_2MB + 4096), TENT_OK);
    assert_int_equal(tent_free_memory(e, a), TENT_OK);
    assert_int_equal(hp_read("free_hugepages"), free_before);
    tent_destroy_engine(e);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "hugepage") == 0) {
        const struct CMUnitTest hp[] = {cmocka_unit_test_setup_teardown(
            test_hugepage_allocation, setup, hp_teardown)};
        int failed = cmocka_run_group_tests_name("hugepage", hp, NULL, NULL);
        return failed ? failed : g_hp_skipped ? 77 : 0;
    }
    const struct CMUnitTest tests[] = {
        T(test_register_single),
        T(test_register_batch_all_or_nothing),
        T(test_permissions),
        T(test_unregister_inflight),
        T(test_allocate_cpu),
        T(test_allocate_numa_policy),
        T(test_hugepage_size_rejected),
        T(test_hugepage_unavailable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

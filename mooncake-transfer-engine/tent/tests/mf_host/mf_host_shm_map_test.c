/* host_shm through shared mappings: the target's memory is a memfd mapping
 * (as TENT's tent_allocate_memory makes) and this side's buffer is
 * registered, so mf_host maps the target's range and copies with memcpy.
 * Every byte is checked at the target; the mapping is seen in our own
 * /proc/self/maps; when the target replaces its memory (deregister, new
 * memfd at the same address, register) the stale mapping is dropped and the
 * bytes land in the new memory; a dead target fails the batch. */
/* cmocka.h needs these first. */
/* clang-format off */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
/* clang-format on */

#include "mfh_test_util.h"

static struct mfh_api api;
static const struct mfh_api *A = &api;

#define TARGET_SIZE ((size_t)12 << 20)

struct fixture {
    struct mfh_child child;
    smem_trans_t h;
    uint8_t *local;
};

static int setup(void **state)
{
    if (mfh_api_load(&api) != 0)
        return -1;
    struct fixture *f = calloc(1, sizeof(*f));
    setenv("MFH_CHILD_MEMFD", "1", 1);
    int rc =
        f ? mfh_child_start(&f->child, A, SMEMB_DATA_OP_HOST_SHM, TARGET_SIZE)
          : -1;
    unsetenv("MFH_CHILD_MEMFD");
    if (rc != 0)
        return -1;
    f->local = mmap(NULL, TARGET_SIZE, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (f->local == MAP_FAILED || A->smem_trans_init(0, 0) != SM_OK)
        return -1;
    f->h = mfh_create(A, SMEMB_DATA_OP_HOST_SHM);
    if (!f->h ||
        A->smem_trans_register_mem(f->h, f->local, TARGET_SIZE, 0) != SM_OK)
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    if (!f)
        return 0;
    A->smem_trans_destroy(f->h, 0);
    A->smem_trans_uninit(0);
    if (f->child.pid > 0)
        mfh_child_stop(&f->child, false);
    munmap(f->local, TARGET_SIZE);
    free(f);
    return 0;
}

/* Whether this process maps a file whose name contains what. */
static bool maps_have(const char *what)
{
    FILE *m = fopen("/proc/self/maps", "re");
    char line[1024];
    bool found = false;
    while (m && !found && fgets(line, sizeof(line), m))
        found = strstr(line, what) != NULL;
    if (m)
        fclose(m);
    return found;
}

static void write_and_verify(struct fixture *f, uint32_t seed0)
{
    static const size_t sizes[] = {1,       4095,          4097,    65536 + 7,
                                   1 << 20, (1 << 20) + 1, 5u << 20};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        size_t n = sizes[k], off = (k * 4099) % 8192 + 1;
        uint32_t seed = seed0 + (uint32_t)k;
        assert_int_equal(mfh_child_cmd(&f->child, 'Z', 0, 0, 0), 0);
        mfh_fill(f->local, n, seed);
        assert_int_equal(mfh_copy1(A, f->h, f->child.uid, SMEM_TRANS_OP_WRITE,
                                   f->local, f->child.base + off, n),
                         0);
        if (mfh_child_cmd(&f->child, 'V', off, n, seed) != 0)
            fail_msg("write of %zu bytes at offset %zu: target differs", n,
                     off);
        /* and back */
        assert_int_equal(mfh_child_cmd(&f->child, 'F', off, n, seed + 1000), 0);
        memset(f->local, 0, n + 1);
        assert_int_equal(mfh_copy1(A, f->h, f->child.uid, SMEM_TRANS_OP_READ,
                                   f->local, f->child.base + off, n),
                         0);
        size_t bad = mfh_check(f->local, n, seed + 1000);
        if (bad != n)
            fail_msg("read of %zu bytes: byte %zu differs", n, bad);
        assert_int_equal(f->local[n], 0);
    }
}

static void test_copies_through_mapping(void **state)
{
    struct fixture *f = *state;
    assert_false(maps_have("mfh_child_a"));
    write_and_verify(f, 1);
    assert_true(maps_have("/memfd:mfh_child_a"));
}

static void test_target_replaces_memory(void **state)
{
    struct fixture *f = *state;
    write_and_verify(f, 10);
    assert_true(maps_have("/memfd:mfh_child_a"));
    /* same address, new memory: the old mapping must not be used */
    assert_int_equal(mfh_child_cmd(&f->child, 'M', 0, 0, 0), 0);
    write_and_verify(f, 20);
    assert_true(maps_have("/memfd:mfh_child_b"));
    assert_false(maps_have("/memfd:mfh_child_a"));
}

/* An unregistered local buffer takes the cross-memory path (where a bad
 * address is an error, not a fault); the bytes are the same. */
static void test_unregistered_local_buffer(void **state)
{
    struct fixture *f = *state;
    uint8_t *plain = malloc(1 << 20);
    assert_non_null(plain);
    assert_int_equal(mfh_child_cmd(&f->child, 'Z', 0, 0, 0), 0);
    mfh_fill(plain, 1 << 20, 77);
    assert_int_equal(mfh_copy1(A, f->h, f->child.uid, SMEM_TRANS_OP_WRITE,
                               plain, f->child.base + 3, 1 << 20),
                     0);
    assert_int_equal(mfh_child_cmd(&f->child, 'V', 3, 1 << 20, 77), 0);
    free(plain);
}

static void test_dead_target_fails(void **state)
{
    struct fixture *f = *state;
    write_and_verify(f, 30); /* the mapping exists */
    mfh_child_stop(&f->child, true);
    f->child.pid = 0;
    mfh_fill(f->local, 1 << 20, 5);
    int32_t rc = mfh_copy1(A, f->h, f->child.uid, SMEM_TRANS_OP_WRITE, f->local,
                           f->child.base, 1 << 20);
    assert_int_not_equal(rc, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_copies_through_mapping, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_target_replaces_memory, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_unregistered_local_buffer, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_dead_target_fails, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

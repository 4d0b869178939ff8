/* The shm control page's checks in one process (issue 42, items 1 and 3):
 * a copy must lie inside its entry (no wrap), the entry hands back the
 * range, memfd identity and access key its owner wrote (only that key
 * opens it), a control socket is only taken for the pid the kernel
 * names behind it, and the owner's liveness reads true only while its
 * engine runs. */
// clang-format off
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
// clang-format on

#include "common/error.h"
#include "tent/transfer_engine.h"
#include "transport/shm/shm_ctl.h"

#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

static void test_inside(void **state)
{
    (void)state;
    struct shm_ctl_entry e = {.base = 0x1000, .length = 0x1000};
    assert_true(shm_ctl_inside(&e, 0x1000, 0x1000));
    assert_true(shm_ctl_inside(&e, 0x1fff, 1));
    assert_true(shm_ctl_inside(&e, 0x1800, 0));
    assert_false(shm_ctl_inside(&e, 0xfff, 2));
    assert_false(shm_ctl_inside(&e, 0x1fff, 2));
    assert_false(shm_ctl_inside(&e, 0x2000, 1));
    assert_false(shm_ctl_inside(&e, 0x1000, 0x1001));
    /* addr + len wraps: must not pass as a small end */
    assert_false(shm_ctl_inside(&e, 0x1800, UINT64_MAX - 0x100));
    assert_false(shm_ctl_inside(&e, UINT64_MAX, 2));
    struct shm_ctl_entry top = {.base = UINT64_MAX - 0xfff, .length = 0x1000};
    assert_true(shm_ctl_inside(&top, UINT64_MAX, 1));
    assert_false(shm_ctl_inside(&top, UINT64_MAX, 2));
}

/* The owner's entry comes back whole from shm_ctl_begin; a revoked one or
 * one whose range wraps (a peer scribbled on the page) does not. */
static void test_entry_round_trip(void **state)
{
    (void)state;
    struct shm_ctl_owner o;
    assert_int_equal(shm_ctl_create(&o, 0x1234), 0);
    uint32_t idx;
    uint64_t gen;
    uint8_t key[16];
    for (int i = 0; i < 16; i++)
        key[i] = (uint8_t)(0xa0 + i);
    assert_int_equal(shm_ctl_enter(&o, 0x10000, 0x4000, PERM_GLOBAL_READ_WRITE,
                                   77, 9, key, &idx, &gen),
                     0);
    char h[64];
    shm_ctl_handle(&o, h, sizeof(h));
    struct shm_ctl_view v;
    assert_int_equal(shm_ctl_attach(&v, (long)getpid(), h, 0x1234), 0);
    struct shm_ctl_entry e;
    assert_int_equal(shm_ctl_begin(&v, idx, gen, true, &e), 0);
    assert_true(shm_ctl_end(&v));
    assert_int_equal(e.base, 0x10000);
    assert_int_equal(e.length, 0x4000);
    assert_int_equal(e.ino, 77);
    assert_int_equal(e.dev, 9);
    assert_memory_equal(e.key, key, sizeof(key));
    atomic_store(&o.ctl->regs[idx].length, UINT64_MAX);
    assert_int_equal(shm_ctl_begin(&v, idx, gen, true, &e), TENT_EPROTO);
    shm_ctl_end(&v);
    long who = 0;
    assert_int_equal(shm_ctl_revoke(&o, idx, 1000, &who), 0);
    assert_int_equal(shm_ctl_begin(&v, idx, gen, false, &e), TENT_ERANGE);
    shm_ctl_end(&v);
    shm_ctl_free(&o, idx);
    shm_ctl_detach(&v);
    shm_ctl_destroy(&o);
}

/* Only the key the owner wrote opens an entry: not zeros, not one bit
 * off anywhere, not the key of the entry's previous registration. */
static void test_entry_key(void **state)
{
    (void)state;
    struct shm_ctl_owner o;
    assert_int_equal(shm_ctl_create(&o, 0x99), 0);
    uint8_t key[16], zero[16] = {0};
    for (int i = 0; i < 16; i++)
        key[i] = (uint8_t)(0x5a ^ (i * 37));
    uint32_t idx;
    uint64_t gen;
    assert_int_equal(shm_ctl_enter(&o, 0x1000, 0x1000, PERM_GLOBAL_READ_WRITE,
                                   0, 0, key, &idx, &gen),
                     0);
    char h[64];
    shm_ctl_handle(&o, h, sizeof(h));
    struct shm_ctl_view v;
    assert_int_equal(shm_ctl_attach(&v, (long)getpid(), h, 0x99), 0);
    struct shm_ctl_entry e;
    assert_int_equal(shm_ctl_begin(&v, idx, gen, true, &e), 0);
    assert_true(shm_ctl_end(&v));
    assert_true(shm_ctl_key_ok(&e, key));
    assert_false(shm_ctl_key_ok(&e, zero));
    for (int bit = 0; bit < 128; bit++) {
        uint8_t k[16];
        memcpy(k, key, sizeof(k));
        k[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        assert_false(shm_ctl_key_ok(&e, k));
    }
    /* The same range registered again with a new key: the entry now holds
     * that one, and the old key no longer opens it. */
    long who = 0;
    assert_int_equal(shm_ctl_revoke(&o, idx, 1000, &who), 0);
    shm_ctl_free(&o, idx);
    uint8_t key2[16];
    for (int i = 0; i < 16; i++)
        key2[i] = (uint8_t)(key[i] + 1);
    uint32_t idx2;
    uint64_t gen2;
    assert_int_equal(shm_ctl_enter(&o, 0x1000, 0x1000, PERM_GLOBAL_READ_WRITE,
                                   0, 0, key2, &idx2, &gen2),
                     0);
    assert_int_equal(idx2, idx);
    assert_int_equal(shm_ctl_begin(&v, idx2, gen2, true, &e), 0);
    assert_true(shm_ctl_end(&v));
    assert_true(shm_ctl_key_ok(&e, key2));
    assert_false(shm_ctl_key_ok(&e, key));
    shm_ctl_free(&o, idx2);
    shm_ctl_detach(&v);
    shm_ctl_destroy(&o);
}

static void test_identify(void **state)
{
    (void)state;
    struct shm_ctl_owner o;
    assert_int_equal(shm_ctl_create(&o, 0xabcdef), 0);
    int pidfd = -1;
    assert_int_equal(
        shm_ctl_identify("me", o.sock_name, (long)getpid(), &pidfd), 0);
    if (pidfd >= 0)
        close(pidfd);
    /* a descriptor naming another pid behind this socket */
    assert_int_equal(
        shm_ctl_identify("liar:1", o.sock_name, (long)getppid(), &pidfd),
        TENT_EPEER);
    assert_int_equal(pidfd, -1);
    assert_non_null(strstr(tent_last_error(), "'liar:1'"));
    /* nothing listens there, or nothing published */
    assert_int_equal(
        shm_ctl_identify("gone", "tent-shm/none/0", (long)getpid(), &pidfd),
        TENT_ENOTSUP);
    assert_int_equal(shm_ctl_identify("old", "", (long)getpid(), &pidfd),
                     TENT_ENOTSUP);
    shm_ctl_destroy(&o);
    /* once the owner is gone its name answers no more */
    assert_int_equal(
        shm_ctl_identify("me", o.sock_name, (long)getpid(), &pidfd),
        TENT_ENOTSUP);
}

/* The owner's liveness as initiators read it: alive while its engine
 * runs, gone once it is destroyed (the mutex unlocked) or its process is
 * killed (the kernel marks the mutex's owner dead). */
static void test_owner_alive(void **state)
{
    (void)state;
    struct shm_ctl_owner o;
    assert_int_equal(shm_ctl_create(&o, 0x77), 0);
    char h[64];
    shm_ctl_handle(&o, h, sizeof(h));
    struct shm_ctl_view v;
    assert_int_equal(shm_ctl_attach(&v, (long)getpid(), h, 0x77), 0);
    assert_true(shm_ctl_owner_alive(&v));
    shm_ctl_destroy(&o);
    assert_false(shm_ctl_owner_alive(&v)); /* the view still maps the page */
    shm_ctl_detach(&v);

    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlives a failed test */
        alarm(60);
        close(fds[0]);
        struct shm_ctl_owner co;
        char ch[64] = "";
        if (shm_ctl_create(&co, 0x78) == 0)
            shm_ctl_handle(&co, ch, sizeof(ch));
        ssize_t w = write(fds[1], ch, sizeof(ch));
        (void)w;
        for (;;)
            pause(); /* killed below, holding the page */
    }
    close(fds[1]);
    char ch[64] = "";
    ssize_t got = read(fds[0], ch, sizeof(ch));
    close(fds[0]);
    int arc = got == (ssize_t)sizeof(ch) && ch[0]
                  ? shm_ctl_attach(&v, (long)child, ch, 0x78)
                  : -1;
    bool before = arc == 0 && shm_ctl_owner_alive(&v);
    kill(child, SIGKILL); /* before any assertion can end the test */
    int st;
    assert_int_equal(waitpid(child, &st, 0), child);
    assert_int_equal(arc, 0);
    assert_true(before);
    assert_false(shm_ctl_owner_alive(&v));
    shm_ctl_detach(&v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_inside),
        cmocka_unit_test(test_entry_round_trip),
        cmocka_unit_test(test_entry_key),
        cmocka_unit_test(test_identify),
        cmocka_unit_test(test_owner_alive),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

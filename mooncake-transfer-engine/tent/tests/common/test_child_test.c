/* test_child.h's rule for children of a threaded test process: while
 * another thread holds a lock, tc_fork_child refuses (its child could
 * inherit the held lock and hang on it), and a tc_spawn_child child, a
 * fresh exec of this binary, takes that same lock and answers. */
// clang-format off
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
// clang-format on

#include "test_child.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/wait.h>

/* Held by a thread of the parent for the whole of each case. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

struct echo_arg {
    uint32_t add;
    char tag[16];
};

/* The child: takes g_lock (a fork's copy of it would be held forever),
 * then answers each u32 command with command + add, and the tag. */
static void echo_main(int cmd_rd, int ans_wr, void *arg)
{
    const struct echo_arg *a = arg;
    pthread_mutex_lock(&g_lock);
    uint32_t v;
    while (tc_read_all(cmd_rd, &v, sizeof(v)) == 0) {
        v += a->add;
        if (tc_write_all(ans_wr, &v, sizeof(v)) ||
            tc_write_all(ans_wr, a->tag, sizeof(a->tag)))
            _exit(3);
    }
    pthread_mutex_unlock(&g_lock);
    _exit(0);
}

TC_CHILD_ROLE("echo", echo_main)

static struct {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool holding, release;
} g_holder = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void *holder_main(void *p)
{
    (void)p;
    pthread_mutex_lock(&g_lock);
    pthread_mutex_lock(&g_holder.mu);
    g_holder.holding = true;
    pthread_cond_broadcast(&g_holder.cv);
    while (!g_holder.release)
        pthread_cond_wait(&g_holder.cv, &g_holder.mu);
    pthread_mutex_unlock(&g_holder.mu);
    pthread_mutex_unlock(&g_lock);
    return NULL;
}

/* A second thread, holding g_lock until teardown. */
static int setup(void **state)
{
    (void)state;
    g_holder.holding = g_holder.release = false;
    if (pthread_create(&g_holder.th, NULL, holder_main, NULL))
        return -1;
    pthread_mutex_lock(&g_holder.mu);
    while (!g_holder.holding)
        pthread_cond_wait(&g_holder.cv, &g_holder.mu);
    pthread_mutex_unlock(&g_holder.mu);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    pthread_mutex_lock(&g_holder.mu);
    g_holder.release = true;
    pthread_cond_broadcast(&g_holder.cv);
    pthread_mutex_unlock(&g_holder.mu);
    return pthread_join(g_holder.th, NULL);
}

static void test_fork_refused_with_threads(void **state)
{
    (void)state;
    assert_true(tc_thread_count() >= 2);
    struct echo_arg a = {.add = 1};
    int cmd = -1, ans = -1;
    assert_int_equal(tc_fork_child(echo_main, &a, &cmd, &ans), -1);
    assert_int_equal(cmd, -1);
    assert_int_equal(ans, -1);
}

static void test_spawned_child_starts_clean(void **state)
{
    (void)state;
    struct echo_arg a = {.add = 1000};
    snprintf(a.tag, sizeof(a.tag), "spawned");
    int cmd = -1, ans = -1;
    pid_t pid = tc_spawn_child("echo", &a, sizeof(a), &cmd, &ans);
    assert_true(pid > 0);
    for (uint32_t v = 1; v <= 3; v++) {
        uint32_t got = 0;
        char tag[16];
        assert_int_equal(tc_write_all(cmd, &v, sizeof(v)), 0);
        /* bounded: a child stuck on an inherited lock never answers */
        struct pollfd pf = {.fd = ans, .events = POLLIN};
        assert_int_equal(poll(&pf, 1, 20000), 1);
        assert_int_equal(tc_read_all(ans, &got, sizeof(got)), 0);
        assert_int_equal(tc_read_all(ans, tag, sizeof(tag)), 0);
        assert_int_equal(got, v + 1000);
        assert_string_equal(tag, "spawned");
    }
    /* the parent's ends are close-on-exec: a later child holds no copy */
    assert_int_equal(fcntl(cmd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
    assert_int_equal(fcntl(ans, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
    close(cmd);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    close(ans);
}

static void test_unknown_role_exits(void **state)
{
    (void)state;
    int cmd = -1, ans = -1;
    pid_t pid = tc_spawn_child("no_such_role", NULL, 0, &cmd, &ans);
    assert_true(pid > 0);
    /* no role took it: main ran with the role's arguments and the cases
     * filter below ends it at once; the answer pipe reads end of file */
    char c;
    assert_int_equal(tc_read_all(ans, &c, 1), -1);
    close(cmd);
    close(ans);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_not_equal(WEXITSTATUS(st), 0);
}

static void test_fork_allowed_single_threaded(void **state)
{
    (void)state;
    if (tc_thread_count() > TC_OWN_THREADS)
        skip();
    struct echo_arg a = {.add = 7};
    snprintf(a.tag, sizeof(a.tag), "forked");
    int cmd = -1, ans = -1;
    pid_t pid = tc_fork_child(echo_main, &a, &cmd, &ans);
    assert_true(pid > 0);
    uint32_t v = 5, got = 0;
    char tag[16];
    assert_int_equal(tc_write_all(cmd, &v, sizeof(v)), 0);
    assert_int_equal(tc_read_all(ans, &got, sizeof(got)), 0);
    assert_int_equal(tc_read_all(ans, tag, sizeof(tag)), 0);
    assert_int_equal(got, 12);
    assert_string_equal(tag, "forked");
    close(cmd);
    close(ans);
    assert_int_equal(waitpid(pid, NULL, 0), pid);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], TC_ROLE_FLAG) == 0)
        return 2; /* a role this binary does not have */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fork_allowed_single_threaded),
        cmocka_unit_test_setup_teardown(test_fork_refused_with_threads, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_spawned_child_starts_clean, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_unknown_role_exits, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

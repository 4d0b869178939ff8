/* mf_host's port with the cluster secret (MC_TENT_SECRET_FILE, issue 42
 * item 2): a target in a child process holds the secret.  A raw-wire rogue
 * that knows only host:port gets no answer to HELLO, RANGES or READ; an
 * instance of this library without the secret and one with a wrong secret
 * can neither write nor read, and the target's memory is unchanged; one
 * with the secret writes and reads back every byte; a secret file that
 * others can read makes create fail. */
/* cmocka.h needs these first. */
/* clang-format off */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
/* clang-format on */

#include "../common/secret_files.h"
#include "mf_host/mf_host.h"
#include "mfh_test_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#define TARGET_SIZE ((size_t)1 << 20)
#define SEED        77

static struct mfh_api api;
static const struct mfh_api *A = &api;
static struct mfh_child g_target;
static struct secret_files g_sf;

static int group_setup(void **state)
{
    (void)state;
    if (mfh_api_load(&api) != 0)
        return -1;
    if (secret_files_make(&g_sf, "mfh_auth", "mf_host's shared cluster secret",
                          "not the cluster's secret at all") != 0)
        return -1;
    setenv("MC_TENT_SECRET_FILE", g_sf.good, 1);
    int rc = mfh_child_start(&g_target, A, SMEMB_DATA_OP_HOST_TCP, TARGET_SIZE);
    unsetenv("MC_TENT_SECRET_FILE");
    if (rc != 0 ||
        mfh_child_cmd(&g_target, 'F', 0, TARGET_SIZE, SEED) != 0)
        return -1;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    mfh_child_stop(&g_target, false);
    return secret_files_remove(&g_sf);
}

static void target_unchanged(void)
{
    assert_int_equal(mfh_child_cmd(&g_target, 'V', 0, TARGET_SIZE, SEED), 0);
}

static int raw_connect(void)
{
    const char *colon = strrchr(g_target.uid, ':');
    assert_non_null(colon);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct timeval tv = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)atoi(colon + 1))};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    return fd;
}

static void test_raw_rogue(void **state)
{
    (void)state;
    struct mfh_hello h;
    memset(&h, 0, sizeof(h));
    h.version = MFH_VERSION;
    h.pid = (uint32_t)getpid();
    h.ctl_fd = -1;
    snprintf(h.uid, sizeof(h.uid), "rogue");
    uint16_t types[3] = {MFH_MSG_HELLO, MFH_MSG_RANGES, MFH_MSG_READ};
    for (int i = 0; i < 3; i++) {
        int fd = raw_connect();
        struct mfh_msg m = {.magic = MFH_MAGIC, .type = types[i]};
        if (types[i] == MFH_MSG_HELLO)
            m.len = sizeof(h);
        if (types[i] == MFH_MSG_READ) {
            m.addr = (uint64_t)(uintptr_t)g_target.base;
            m.len = 4096;
        }
        (void)send(fd, &m, sizeof(m), MSG_NOSIGNAL);
        if (types[i] == MFH_MSG_HELLO)
            (void)send(fd, &h, sizeof(h), MSG_NOSIGNAL);
        assert_int_equal(bytes_until_close(fd), 0);
        close(fd);
    }
    target_unchanged();
}

/* An instance made with secret file path (NULL: none) writes zeros over
 * the target and reads from it: both must fail when refuse, else work. */
static void copy_with(const char *path, bool refuse)
{
    if (path)
        setenv("MC_TENT_SECRET_FILE", path, 1);
    setenv("MF_TRANSFER_TIMEOUT", "3000", 1);
    assert_int_equal(A->smem_trans_init(0, 0), SM_OK);
    smem_trans_t h = mfh_create(A, SMEMB_DATA_OP_HOST_TCP);
    unsetenv("MF_TRANSFER_TIMEOUT");
    unsetenv("MC_TENT_SECRET_FILE");
    assert_non_null(h);
    enum { LEN = 64 << 10 };
    uint8_t *buf = calloc(1, LEN);
    assert_non_null(buf);
    assert_int_equal(A->smem_trans_register_mem(h, buf, LEN, 0), SM_OK);
    int32_t w = mfh_copy1(A, h, g_target.uid, SMEM_TRANS_OP_WRITE, buf,
                          g_target.base + 4096, LEN);
    memset(buf, 0xab, LEN);
    int32_t r = mfh_copy1(A, h, g_target.uid, SMEM_TRANS_OP_READ, buf,
                          g_target.base, LEN);
    if (refuse) {
        assert_int_not_equal(w, 0);
        assert_int_not_equal(r, 0);
        for (size_t i = 0; i < LEN; i++)
            assert_int_equal(buf[i], 0xab);
    } else {
        assert_int_equal(w, 0);
        assert_int_equal(r, 0);
        assert_int_equal(mfh_check(buf, LEN, SEED), 4096);
        for (size_t i = 4096; i < LEN; i++)
            assert_int_equal(buf[i], 0);
    }
    A->smem_trans_destroy(h, 0);
    A->smem_trans_uninit(0);
    free(buf);
}

static void test_instances_without_the_secret(void **state)
{
    (void)state;
    copy_with(NULL, true);
    copy_with(g_sf.wrong, true);
    target_unchanged();
}

static void test_loose_file_refused(void **state)
{
    (void)state;
    setenv("MC_TENT_SECRET_FILE", g_sf.loose, 1);
    assert_int_equal(A->smem_trans_init(0, 0), SM_OK);
    smem_trans_t h = mfh_create(A, SMEMB_DATA_OP_HOST_TCP);
    unsetenv("MC_TENT_SECRET_FILE");
    assert_null(h);
    A->smem_trans_uninit(0);
}

/* Last: the legitimate instance writes zeros at 4096.. and reads back. */
static void test_legit_instance(void **state)
{
    (void)state;
    copy_with(g_sf.good, false);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_raw_rogue),
        cmocka_unit_test(test_instances_without_the_secret),
        cmocka_unit_test(test_loose_file_refused),
        cmocka_unit_test(test_legit_instance),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

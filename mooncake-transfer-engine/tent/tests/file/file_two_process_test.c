/* Two processes: the parent writes blocks from its memory to a file segment
 * (io_uring, else bufio), reads the file back into another buffer of its
 * memory and checks it; a peer process then reads that buffer over tcp
 * from the parent and checks every byte: the KV-cache round trip of memory,
 * file and network. */
#include "../common/test_child.h"
#include "file_test_util.h"

#include <signal.h>
#include <sys/wait.h>

#define BLOCK (1u << 20)
#define NBLK  16
#define LEN   ((uint64_t)BLOCK * NBLK)
#define SEED  1234

struct ask {
    char segment[256];
    uint64_t addr, len;
};

/* The peer: opens the parent's segment over tcp, reads [addr, +len) and
 * answers 0 when every byte is the pattern, else the first bad offset + 1
 * (or -1 when the transfer failed). */
static void peer_main(int cmd, int ans, void *arg)
{
    (void)arg;
    struct ask a;
    int64_t out = -1;
    if (tc_read_all(cmd, &a, sizeof(a)) != 0)
        _exit(2);
    tent_config_reset_global();
    tent_set_config("log_level", "error");
    tent_set_config("transports/io_uring/enable", "false");
    tent_set_config("transports/bufio/enable", "false");
    tent_engine_t e = tent_create_engine();
    void *buf = NULL;
    tent_segment_id_t h;
    if (e && tent_allocate_memory(e, &buf, a.len, "cpu") == TENT_OK &&
        tent_register_memory(e, buf, a.len) == TENT_OK &&
        tent_open_segment(e, &h, a.segment) == TENT_OK) {
        tent_request_t r = {.opcode = OPCODE_READ,
                            .source = buf,
                            .target_id = h,
                            .target_offset = a.addr,
                            .length = a.len};
        tent_batch_id_t b = tent_allocate_batch(e, 1);
        tent_status_t st = {0};
        if (b && tent_submit(e, b, &r, 1) == TENT_OK) {
            double end = ft_now() + 20;
            do
                tent_task_status(e, b, 0, &st);
            while (
                (st.status == STATUS_PENDING || st.status == STATUS_WAITING) &&
                ft_now() < end);
        }
        if (st.status == STATUS_COMPLETED) {
            out = 0;
            for (uint64_t i = 0; i < a.len && !out; i++)
                if (((uint8_t *)buf)[i] != ft_byte(SEED, i))
                    out = (int64_t)i + 1;
        } else {
            int code = 0, native = 0;
            char msg[512] = "";
            tent_task_error(e, b, 0, &code, &native, msg, sizeof(msg));
            fprintf(stderr, "peer: read ended %d: %s (code %d, native %d)\n",
                    st.status, msg, code, native);
        }
        tent_free_batch(e, b);
    } else {
        fprintf(stderr, "peer: setup failed: %s\n", tent_last_error());
    }
    tc_write_all(ans, &out, sizeof(out));
    if (e)
        tent_destroy_engine(e);
    _exit(0);
}

static void test_memory_file_network(void **state)
{
    (void)state;
    int cmd = -1, ans = -1;
    pid_t pid = tc_fork_child(peer_main, NULL, &cmd, &ans);
    assert_true(pid > 0);

    tent_engine_t e = ft_engine("tcp,io_uring,bufio", NULL);
    uint8_t *src = ft_mem(e, LEN), *back = ft_mem(e, LEN);
    ft_fill(src, LEN, SEED, 0);
    memset(back, 0, LEN);
    ft_make_file(ft_path("kv"), LEN, 0);
    tent_segment_id_t h;
    assert_int_equal(tent_open_segment(e, &h, ft_seg(ft_path("kv"))), TENT_OK);
    tent_request_t r[NBLK];
    /* offload: blocks of memory to the file, in reverse order */
    for (int i = 0; i < NBLK; i++)
        r[i] = ft_req(OPCODE_WRITE, src + (uint64_t)i * BLOCK, h,
                      (uint64_t)(NBLK - 1 - i) * BLOCK, BLOCK);
    ft_run_ok(e, r, NBLK);
    /* reload: the file back into other memory, in place */
    for (int i = 0; i < NBLK; i++) {
        r[i].opcode = OPCODE_READ;
        r[i].source = back + (uint64_t)i * BLOCK;
    }
    ft_run_ok(e, r, NBLK);
    assert_memory_equal(back, src, LEN);

    /* the peer reads it from our memory over tcp */
    struct ask a = {.addr = (uintptr_t)back, .len = LEN};
    assert_int_equal(tent_segment_name(e, a.segment, sizeof(a.segment)),
                     TENT_OK);
    assert_int_equal(tc_write_all(cmd, &a, sizeof(a)), 0);
    int64_t got = -2;
    assert_int_equal(tc_read_all(ans, &got, sizeof(got)), 0);
    if (got != 0)
        fail_msg("peer: %s",
                 got < 0 ? "the read over tcp failed" : "a byte differs");
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    close(cmd);
    close(ans);
    assert_int_equal(tent_close_segment(e, h), TENT_OK);
    ft_mem_free(e, src, LEN);
    ft_mem_free(e, back, LEN);
    tent_destroy_engine(e);
}

int main(void)
{
    ft_mkdir();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_memory_file_network),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

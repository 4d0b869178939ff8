/* Both sides of a transfer with TENT's C API: a target process registers a
 * buffer and publishes its segment; an initiator opens that segment by name,
 * writes 1 MiB into the target's buffer and reads it back.  Here the target
 * is a forked child that hands its segment name and buffer address over a
 * pipe; between machines the same two strings travel however you like (the
 * metadata service, or your own control plane). */
#define _POSIX_C_SOURCE 200809L /* fdopen */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <tent/transfer_engine.h>
#include <unistd.h>

#define LEN (1u << 20)

static int target(int out) /* serves its buffer until the initiator is done */
{
    tent_engine_t e = tent_create_engine();
    void *buf = NULL;
    char name[256], line[320];
    if (!e || tent_allocate_memory(e, &buf, LEN, "cpu") ||
        tent_register_memory(e, buf, LEN) ||
        tent_segment_name(e, name, sizeof(name)))
        return fprintf(stderr, "target: %s\n", tent_last_error()), 1;
    int n = snprintf(line, sizeof(line), "%s %llu\n", name,
                     (unsigned long long)(uintptr_t)buf);
    if (write(out, line, (size_t)n) != n)
        return 1;
    char done;
    while (read(STDIN_FILENO, &done, 1) < 0) /* the initiator closes it */
        ;
    tent_unregister_memory(e, buf, LEN);
    tent_free_memory(e, buf);
    tent_destroy_engine(e);
    return 0;
}

/* One request on engine e, polled to its end; 0 when it completed. */
static int run(tent_engine_t e, int op, void *local, tent_segment_id_t seg,
               uint64_t remote)
{
    tent_request_t r = {0}; /* zero: no hint, policy decides */
    r.opcode = op;
    r.source = local;
    r.target_id = seg;
    r.target_offset = remote;
    r.length = LEN;
    tent_batch_id_t b = tent_allocate_batch(e, 1);
    tent_status_t st = {0};
    int rc = tent_submit(e, b, &r, 1);
    while (rc == 0 && (rc = tent_task_status(e, b, 0, &st)) == 0 &&
           st.status == STATUS_PENDING)
        ;
    tent_free_batch(e, b);
    return rc || st.status != STATUS_COMPLETED;
}

int main(void)
{
    int to_child[2], from_child[2];
    if (pipe(to_child) || pipe(from_child))
        return 1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(to_child[0], STDIN_FILENO);
        close(to_child[1]);
        _exit(target(from_child[1]));
    }
    close(from_child[1]);
    char line[320] = "", name[256];
    unsigned long long remote;
    FILE *in = fdopen(from_child[0], "r");
    if (!in || !fgets(line, sizeof(line), in) ||
        sscanf(line, "%255s %llu", name, &remote) != 2)
        return fprintf(stderr, "initiator: the target did not start\n"), 1;

    tent_engine_t e = tent_create_engine();
    static unsigned char src[LEN], back[LEN];
    for (size_t i = 0; i < LEN; i++)
        src[i] = (unsigned char)(i * 131 + 7);
    tent_segment_id_t seg;
    int ok = e && !tent_register_memory(e, src, LEN) &&
             !tent_register_memory(e, back, LEN) &&
             !tent_open_segment(e, &seg, name) &&
             !run(e, OPCODE_WRITE, src, seg, remote) &&
             !run(e, OPCODE_READ, back, seg, remote) &&
             memcmp(src, back, LEN) == 0;
    printf("example_two_sided: 1 MiB written to %s and read back: %s\n", name,
           ok ? "every byte matches" : tent_last_error());
    close(to_child[1]); /* the target may go */
    int st;
    waitpid(pid, &st, 0);
    if (e)
        tent_destroy_engine(e); /* frees what the engine holds */
    return ok && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}

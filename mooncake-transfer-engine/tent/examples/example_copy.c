/* Moves bytes with TENT's C API only: allocates two buffers, writes one into
 * the other through the engine (local segment), checks every byte. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tent/transfer_engine.h>

int main(int argc, char **argv)
{
    size_t size = argc > 1 ? strtoull(argv[1], NULL, 0) : (8u << 20);
    tent_engine_t engine = tent_create_engine();
    if (!engine) {
        fprintf(stderr, "tent_create_engine: %s\n", tent_last_error());
        return 1;
    }
    /* TENT's pattern: allocate, then register (allocating alone exposes
     * nothing to transports or peers). */
    void *src = NULL, *dst = NULL;
    if (tent_allocate_memory(engine, &src, size, "cpu") ||
        tent_allocate_memory(engine, &dst, size, "cpu")) {
        fprintf(stderr, "tent_allocate_memory: %s\n", tent_last_error());
        tent_destroy_engine(engine);
        return 1;
    }
    if (tent_register_memory(engine, src, size) ||
        tent_register_memory(engine, dst, size)) {
        fprintf(stderr, "tent_register_memory: %s\n", tent_last_error());
        tent_destroy_engine(engine);
        return 1;
    }
    for (size_t i = 0; i < size; i++)
        ((unsigned char *)src)[i] = (unsigned char)(i * 131 + 7);
    memset(dst, 0, size);

    tent_batch_id_t batch = tent_allocate_batch(engine, 1);
    tent_request_t req = {0};
    req.opcode = OPCODE_WRITE;
    req.source = src;
    req.target_id = LOCAL_SEGMENT_ID;
    req.target_offset = (uint64_t)(uintptr_t)dst;
    req.length = size;
    int rc = tent_submit(engine, batch, &req, 1);
    tent_status_t st = {0};
    while (rc == 0) {
        rc = tent_task_status(engine, batch, 0, &st);
        if (st.status != STATUS_PENDING)
            break;
    }
    int ok = rc == 0 && st.status == STATUS_COMPLETED &&
             st.transferred_bytes == size && memcmp(src, dst, size) == 0;
    printf("example_copy: %zu bytes %s (status %d)\n", size,
           ok ? "moved and verified" : "FAILED", st.status);
    if (!ok && rc)
        fprintf(stderr, "error: %s\n", tent_last_error());
    tent_free_batch(engine, batch);
    tent_unregister_memory(engine, src, size);
    tent_unregister_memory(engine, dst, size);
    tent_free_memory(engine, src);
    tent_free_memory(engine, dst);
    tent_destroy_engine(engine);
    return ok ? 0 : 1;
}

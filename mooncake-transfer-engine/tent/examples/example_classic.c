/* Mooncake's classic C API (transfer_engine_c.h, libtransfer_engine): two
 * engines in this process over P2PHANDSHAKE on 127.0.0.1; one writes a
 * buffer into the other's and reads it back, with a notification, and
 * every byte is checked.
 *
 *   cc example_classic.c $(pkg-config --cflags --libs transfer_engine)
 *   ./a.out [bytes]
 */
#include "transfer_engine_c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int wait_task(transfer_engine_t e, batch_id_t b, size_t task)
{
    transfer_status_t st;
    do {
        if (getTransferStatus(e, b, task, &st) != 0)
            return -1;
    } while (st.status == STATUS_WAITING || st.status == STATUS_PENDING);
    return st.status == STATUS_COMPLETED ? 0 : -1;
}

int main(int argc, char **argv)
{
    size_t len = argc > 1 ? strtoull(argv[1], NULL, 0) : 1 << 20;
    transfer_engine_t a =
        createTransferEngine("P2PHANDSHAKE", "127.0.0.1", "", 0, 1);
    transfer_engine_t b =
        createTransferEngine("P2PHANDSHAKE", "127.0.0.1", "", 0, 1);
    char *src = malloc(len), *dst = calloc(1, len), *back = calloc(1, len);
    if (!a || !b || !src || !dst || !back || len == 0) {
        fprintf(stderr, "setup failed\n");
        return 1;
    }
    for (size_t i = 0; i < len; i++)
        src[i] = (char)(i * 131 + 7);
    char name_b[64];
    int rc = getLocalIpAndPort(b, name_b, sizeof(name_b));
    rc = rc ? rc : registerLocalMemory(a, src, len, "*", 1);
    rc = rc ? rc : registerLocalMemory(a, back, len, "*", 1);
    rc = rc ? rc : registerLocalMemory(b, dst, len, "*", 1);
    segment_id_t seg = rc ? -1 : openSegment(a, name_b);
    batch_id_t batch = seg < 0 ? INVALID_BATCH : allocateBatchID(a, 2);
    if (batch == INVALID_BATCH) {
        fprintf(stderr, "register/open/allocate failed (%d)\n", rc);
        return 1;
    }
    transfer_request_t req[2] = {
        {OPCODE_WRITE, src, seg, (uint64_t)(uintptr_t)dst, len},
        {OPCODE_READ, back, seg, (uint64_t)(uintptr_t)dst, len}};
    notify_msg_t note = {(char *)"example", (char *)"written"};
    if (submitTransferWithNotify(a, batch, &req[0], 1, note) != 0 ||
        wait_task(a, batch, 0) != 0 || submitTransfer(a, batch, &req[1], 1) ||
        wait_task(a, batch, 1) != 0) {
        fprintf(stderr, "transfer failed\n");
        return 1;
    }
    int n = 0;
    notify_msg_t *msgs = NULL;
    for (int tries = 0; !msgs && tries < 100000; tries++)
        msgs = getNotifsFromEngine(b, &n);
    int noted = msgs && n == 1 && strcmp(msgs[0].msg, "written") == 0;
    freeNotifsMsgBuf(msgs, n);
    if (memcmp(src, dst, len) || memcmp(src, back, len) || !noted) {
        fprintf(stderr, "bytes or notification wrong\n");
        return 1;
    }
    freeBatchID(a, batch);
    destroyTransferEngine(a);
    destroyTransferEngine(b);
    free(src);
    free(dst);
    free(back);
    printf("classic: %zu bytes moved and verified\n", len);
    return 0;
}

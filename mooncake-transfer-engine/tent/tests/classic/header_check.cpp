/* transfer_engine_c.h compiles as C++ and as strict C99 (CTest, -pedantic
 * -Werror), alone and together with TENT's header (the two share the
 * OPCODE_* and STATUS_* macros, with the same values). */
#include "transfer_engine_c.h"
#include "tent/transfer_engine.h"

int main(void)
{
    transfer_request_t r = {OPCODE_WRITE, 0, LOCAL_SEGMENT, 0, 0};
    transfer_status_t st = {STATUS_WAITING, 0};
    notify_msg_t m = {0, 0};
    nic_load_stat_t n;
    buffer_entry_t b = {0, 0};
    segment_id_t id = r.target_id;
    batch_id_t bid = INVALID_BATCH;
    (void)st;
    (void)m;
    (void)n;
    (void)b;
    (void)id;
    (void)bid;
    transfer_engine_t (*volatile create)(const char *, const char *,
                                         const char *, uint64_t,
                                         int) = createTransferEngine;
    return create ? 0 : 1;
}

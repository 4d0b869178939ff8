/* Control interface of the test-only mock libmf_smem.so.
 *
 * The mock implements the 13 smem_trans symbols of smem_trans_abi.h in one
 * process: a "remote" address is an address of the same process, registered
 * by the handle whose unique id is the batch's destUrl.  Bytes are copied at
 * the query that answers SM_OK with result 0 (so nothing moves while a batch
 * is pending), following the direction convention of smem_trans_abi.h.
 *
 * The test finds the mock_* functions with dlsym on the same library the
 * transport loads; MOCK_CONTROLS lists them once, X(ret, name, params). */
#ifndef TENT_TEST_MOCK_SMEM_H
#define TENT_TEST_MOCK_SMEM_H

#include "transport/memfabric/smem_trans_abi.h"

#include <stdint.h>

#define MOCK_MAX_LIST 2048

struct mock_batch_info {
    char dest_url[128];
    uint32_t batch_size;
    int opcode;
    void *stream;
    uint32_t flags;
    void *src[MOCK_MAX_LIST];
    void *dst[MOCK_MAX_LIST];
    size_t sizes[MOCK_MAX_LIST];
};

#define MOCK_CONTROLS(X)                                                       \
    /* Forget knobs, counters and live batches (handles stay). */              \
    X(void, mock_reset, (void))                                                \
    /* New batches answer SM_NEED_RETRY to their first n queries. */           \
    X(void, mock_set_pending_polls, (int n))                                   \
    /* New batches never complete until mock_complete_all(). */                \
    X(void, mock_set_never_complete, (int on))                                 \
    /* Execution result of new batches (0 = success). */                       \
    X(void, mock_set_result, (int32_t result))                                 \
    /* Result of the next new batch only (queued, before the default). */      \
    X(void, mock_push_result, (int32_t result))                                \
    /* A failed batch first writes half of its first entry. */                 \
    X(void, mock_set_partial_on_failure, (int on))                             \
    /* The next n queries return code, consuming nothing (n < 0: all). */      \
    X(void, mock_set_query_error, (int32_t code, int n))                       \
    /* The next n batch_copy calls return code (n < 0: all). */                \
    X(void, mock_set_batch_copy_error, (int32_t code, int n))                  \
    /* The next call of symbol sym fails with code (create: NULL). */          \
    X(void, mock_fail_next, (const char *sym, int32_t code))                   \
    /* Queries block until mock_block_queries(0). */                           \
    X(void, mock_block_queries, (int on))                                      \
    /* Threads blocked in a query right now. */                                \
    X(int, mock_blocked_queries, (void))                                       \
    /* Every live batch completes at its next query. */                        \
    X(void, mock_complete_all, (void))                                         \
    /* Calls of symbol sym since the last reset. */                            \
    X(int, mock_call_count, (const char *sym))                                 \
    /* Parameters of the last successful batch_copy; 0 if none. */             \
    X(int, mock_last_batch, (struct mock_batch_info * out))                    \
    X(int, mock_live_batches, (void))                                          \
    /* Queries of an unknown or already consumed batch id. */                  \
    X(int, mock_stale_queries, (void))                                         \
    /* batch_copy calls refused for unregistered memory or unknown peer. */    \
    X(int, mock_bad_params, (void))                                            \
    /* Queries whose result pointer was NULL or flags non-zero. */             \
    X(int, mock_bad_queries, (void))                                           \
    X(int, mock_is_registered, (void *addr))                                   \
    X(int, mock_registered_regions, (void))                                    \
    X(int, mock_live_handles, (void))                                          \
    X(int, mock_init_refs, (void))                                             \
    X(int, mock_last_config, (smem_trans_config_t * out))                      \
    X(int, mock_last_log_level, (void))                                        \
    X(uint64_t, mock_copied_bytes, (void))                                     \
    /* Calls every handle's peer-down callback with peer; returns count. */    \
    X(int, mock_fire_peer_down, (const char *peer))

#define MOCK_PROTOTYPE(ret, name, params) ret name params;
MOCK_CONTROLS(MOCK_PROTOTYPE)
#undef MOCK_PROTOTYPE

#endif

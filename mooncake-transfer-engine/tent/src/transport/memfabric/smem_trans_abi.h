/* The smem_trans ABI of Huawei's libmf_smem.so, as this project relies on it.
 *
 * This header is the only statement of the vendor ABI in the tree: the
 * memfabric transport loads these symbols with dlsym, and the test mock and
 * the host-memory implementation (mf_host) define them.  Nothing from the
 * vendor is needed at build time.
 *
 * Return codes: SM_OK (0) success; SM_NEED_RETRY (1) pending; anything else
 * is an error (the vendor's own codes are negative, named below after the
 * public memfabric_hybrid sources).  The batch status query takes four
 * arguments (the seed's contract, SMEM_TRANS_SYMBOLS): on SM_OK it writes
 * the execution result to *result (0 = the whole batch succeeded, anything
 * else = failed, a vendor code) and guarantees that the batch no longer
 * accesses memory; the result is consumed by that query.
 *
 * Some library revisions (the fork this transport comes from) export the
 * same symbol with three arguments instead, smem_trans_status_query3_fn:
 * 0 = done, 1 = pending, anything else = failed.  The transport calls that
 * form only when transports/memfabric/status_query_abi is 3
 * (docs/memfabric.md). */
#ifndef TENT_SMEM_TRANS_ABI_H
#define TENT_SMEM_TRANS_ABI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SM_OK                0
#define SM_NEED_RETRY        1
#define SM_ERROR             (-1)
#define SM_INVALID_PARAM     (-2000)
#define SM_MALLOC_FAILED     (-2001)
#define SM_NEW_OBJECT_FAILED (-2002)
#define SM_NOT_STARTED       (-2003)
#define SM_TIMEOUT           (-2004)
#define SM_REPEAT_CALL       (-2005)
#define SM_DUPLICATED        (-2006)
#define SM_OBJECT_NOT_EXISTS (-2007)
#define SM_NOT_INITIALIZED   (-2008)
#define SM_RESOURCE_IN_USE   (-2009)
#define SM_FILE_NOT_EXISTS   (-2010)
#define SM_NOT_SUPPORTED     (-2011)
#define SM_PARTIAL_FAILED    (-2012)
#define SM_INNER_BUSY        (-2013)
#define SM_NOT_CONNECTED     (-2014)

#define SMEM_TLS_PATH_SIZE 256

typedef enum {
    SMEMB_DATA_OP_SDMA = 1U << 0,
    SMEMB_DATA_OP_HOST_RDMA = 1U << 1,
    SMEMB_DATA_OP_HOST_TCP = 1U << 2,
    SMEMB_DATA_OP_DEVICE_RDMA = 1U << 3,
    SMEMB_DATA_OP_HOST_URMA = 1U << 4,
    SMEMB_DATA_OP_HOST_SHM = 1U << 5,
    SMEMB_DATA_OP_DEVICE_URMA = 1U << 6,
    SMEMB_DATA_OP_DEVICE_UBOE = 1U << 7,
    /* later public releases; no MF_PROTOCOL name selects it yet */
    SMEMB_DATA_OP_HOST_DEVICE_URMA = 1U << 8,
    SMEMB_DATA_OP_BUTT
} smem_bm_data_op_type;

/* The protocols by name (MF_PROTOCOL, logs): X(bit, "name").  The one
 * table of them: the memfabric transport and mf_host both expand it. */
#define SMEM_DATA_OPS(X)                                                       \
    X(SMEMB_DATA_OP_SDMA, "device_sdma")                                       \
    X(SMEMB_DATA_OP_DEVICE_RDMA, "device_rdma")                                \
    X(SMEMB_DATA_OP_HOST_RDMA, "host_rdma")                                    \
    X(SMEMB_DATA_OP_DEVICE_URMA, "device_urma")                                \
    X(SMEMB_DATA_OP_DEVICE_UBOE, "device_uboe")                                \
    X(SMEMB_DATA_OP_HOST_TCP, "host_tcp")                                      \
    X(SMEMB_DATA_OP_HOST_SHM, "host_shm")                                      \
    X(SMEMB_DATA_OP_HOST_URMA, "host_urma")

/* The name of one protocol bit; NULL for anything else. */
static inline const char *smem_data_op_name(uint32_t op)
{
#define SMEM_DATA_OP_CASE(bit, name)                                           \
    if (op == (uint32_t)(bit))                                                 \
        return name;
    SMEM_DATA_OPS(SMEM_DATA_OP_CASE)
#undef SMEM_DATA_OP_CASE
    return NULL;
}

typedef struct {
    bool tlsEnable;
    char caPath[SMEM_TLS_PATH_SIZE];
    char crlPath[SMEM_TLS_PATH_SIZE];
    char certPath[SMEM_TLS_PATH_SIZE];
    char keyPath[SMEM_TLS_PATH_SIZE];
    char keyPassPath[SMEM_TLS_PATH_SIZE];
    char packagePath[SMEM_TLS_PATH_SIZE];
    char decrypterLibPath[SMEM_TLS_PATH_SIZE];
} smem_tls_config;

typedef void *smem_trans_t;

typedef enum {
    SMEM_TRANS_NONE = 0,
    SMEM_TRANS_SENDER,
    SMEM_TRANS_RECEIVER,
    SMEM_TRANS_BOTH,
    SMEM_TRANS_BUTT
} smem_trans_role_t;

typedef struct {
    smem_trans_role_t role;
    uint32_t initTimeout;
    uint32_t deviceId;
    uint32_t flags;
    smem_bm_data_op_type dataOpType;
    char nic[64];
    char url[64];
    smem_tls_config hcomTlsConfig;
} smem_trans_config_t;

typedef enum {
    SMEM_TRANS_OP_READ = 0,
    SMEM_TRANS_OP_WRITE = 1,
} smem_trans_opcode_t;

/* Direction convention, which the memfabric transport, the test mock and
 * mf_host all follow: srcList[i] is always an address in the caller's own
 * (local) memory and destList[i] an address in the memory of the peer whose
 * unique id is destUrl.  SMEM_TRANS_OP_WRITE copies srcList[i] ->
 * destList[i] (local to remote); SMEM_TRANS_OP_READ copies destList[i] ->
 * srcList[i] (remote to local).  A batch holds one opcode and one peer. */
typedef struct {
    const char *destUrl;
    void **srcList;
    void **destList;
    size_t *sizeList;
    uint32_t batchSize;
    smem_trans_opcode_t opcode;
    void *stream;
    uint32_t flags;
} smem_trans_batch_params_t;

typedef void (*smem_trans_peer_down_callback_t)(const char *peerUniqueId,
                                                void *userData);

/* The 13 symbols: X(return type, name, parameter list).  Expanded into the
 * loader's pointer table and dlsym loop, and into prototypes below. */
#define SMEM_TRANS_SYMBOLS(X)                                                  \
    X(int32_t, smem_trans_init, (uint32_t deviceId, uint32_t flags))           \
    X(void, smem_trans_uninit, (uint32_t flags))                               \
    X(int32_t, smem_trans_config_init, (smem_trans_config_t * config))         \
    X(smem_trans_t, smem_trans_create,                                         \
      (const smem_trans_config_t *config, uint32_t flags))                     \
    X(void, smem_trans_destroy, (smem_trans_t handle, uint32_t flags))         \
    X(int32_t, smem_trans_get_rpc_port,                                        \
      (smem_trans_t handle, uint16_t * port))                                  \
    X(int32_t, smem_trans_register_mem,                                        \
      (smem_trans_t handle, void *address, size_t capacity, uint32_t flags))   \
    X(int32_t, smem_trans_batch_register_mem,                                  \
      (smem_trans_t handle, void *addresses[], size_t capacities[],            \
       uint32_t count, uint32_t flags))                                        \
    X(int32_t, smem_trans_deregister_mem,                                      \
      (smem_trans_t handle, void *address))                                    \
    X(int32_t, smem_trans_batch_copy,                                          \
      (smem_trans_t handle, smem_trans_batch_params_t * params,                \
       uint64_t * batchId))                                                    \
    X(int32_t, smem_trans_batch_status_query,                                  \
      (smem_trans_t handle, uint64_t batchId, int32_t * result,                \
       uint32_t flags))                                                        \
    X(int32_t, smem_trans_set_peer_down_callback,                              \
      (smem_trans_t handle, smem_trans_peer_down_callback_t callback,          \
       void *userData))                                                        \
    X(int32_t, smem_set_log_level, (int level))

/* The three-argument status query of the fork's revisions (see above). */
typedef int32_t (*smem_trans_status_query3_fn)(smem_trans_t handle,
                                               uint64_t batchId,
                                               uint32_t flags);
#define SM_QUERY3_DONE    0
#define SM_QUERY3_PENDING 1

/* mf_host's extensions: not in the vendor's library, whose ABI has no room
 * for an access key; the memfabric transport resolves them when present.
 * A range registered with a key (SMEM_TRANS_EXT_KEY_LEN bytes, the TENT
 * registration's) is served only to requests that carry it; a range
 * registered through smem_trans_register_mem carries none and is served as
 * the vendor ABI serves it.  keys: batchSize keys back to back, the one of
 * the peer's range each destList[i] lies in. */
#define SMEM_TRANS_EXT_KEY_LEN 16
#define SMEM_TRANS_EXT_SYMBOLS(X)                                              \
    X(int32_t, smem_trans_ext_register_mem_keyed,                              \
      (smem_trans_t handle, void *address, size_t capacity,                    \
       const uint8_t *key, uint32_t flags))                                    \
    X(int32_t, smem_trans_ext_batch_copy_keyed,                                \
      (smem_trans_t handle, smem_trans_batch_params_t * params,                \
       const uint8_t *keys, uint64_t *batchId))

/* Prototypes, for libraries that implement the ABI (mock, mf_host). */
#define SMEM_TRANS_PROTOTYPE(ret, name, params) ret name params;
SMEM_TRANS_SYMBOLS(SMEM_TRANS_PROTOTYPE)
SMEM_TRANS_EXT_SYMBOLS(SMEM_TRANS_PROTOTYPE)
#undef SMEM_TRANS_PROTOTYPE

#ifdef __cplusplus
}
#endif

#endif

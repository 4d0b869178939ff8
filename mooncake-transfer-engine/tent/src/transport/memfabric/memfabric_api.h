/* MemFabricUnderApi: the one place that loads libmf_smem.so.
 *
 * memfabric_api_load() dlopen()s the library (MF_SMEM_LIBRARY names a file,
 * else "libmf_smem.so" through the loader search path, LD_LIBRARY_PATH) and
 * resolves exactly the 13 symbols of SMEM_TRANS_SYMBOLS (and, when the
 * library has them, mf_host's key extensions); loads are
 * reference-counted under a lock, and the last memfabric_api_unload()
 * dlclose()s it.  The memfabric_* inline functions below forward to the
 * loaded symbols; call them only between a successful load and its unload.
 *
 * The device id comes from ACL (platform/acl.h) when libascendcl.so is
 * there. */
#ifndef TENT_MEMFABRIC_API_H
#define TENT_MEMFABRIC_API_H

#include "transport/memfabric/smem_trans_abi.h"

#include <stdbool.h>
#include <stdint.h>

/* The pointer table: one member per symbol of SMEM_TRANS_SYMBOLS. */
struct memfabric_api_table {
#define MEMFABRIC_API_MEMBER(ret, name, params) ret(*name) params;
    SMEM_TRANS_SYMBOLS(MEMFABRIC_API_MEMBER)
#undef MEMFABRIC_API_MEMBER
};

/* Filled while the library is loaded, all NULL otherwise. */
extern struct memfabric_api_table memfabric_api;
/* mf_host's key extensions (smem_trans_abi.h SMEM_TRANS_EXT_SYMBOLS): set
 * while a library that has them is loaded, NULL otherwise (the vendor's
 * library has none: its registrations carry no key). */
struct memfabric_api_ext_table {
#define MEMFABRIC_API_MEMBER(ret, name, params) ret(*name) params;
    SMEM_TRANS_EXT_SYMBOLS(MEMFABRIC_API_MEMBER)
#undef MEMFABRIC_API_MEMBER
};
extern struct memfabric_api_ext_table memfabric_api_ext;
/* The same smem_trans_batch_status_query symbol, typed as the fork's
 * three-argument form; call it only when the library has that shape
 * (transports/memfabric/status_query_abi = 3). */
extern smem_trans_status_query3_fn memfabric_status_query3;

/* The seed's words for a broken setup, as every front-end shows them
 * (its Troubleshooting headings; the second carries its log line too). */
#define MEMFABRIC_MSG_NO_PROTOCOL "InvalidArgument: MF_PROTOCOL must be set"
#define MEMFABRIC_MSG_NO_LIBRARY                                               \
    "DeviceNotFound: MemFabricUnderApi::LoadLibrary failed, libmf_smem.so "    \
    "unavailable"

/* Loads (or takes another reference on) the library.  TENT_OK, or
 * TENT_ENODEV after logging MEMFABRIC_MSG_NO_LIBRARY followed by
 * dlerror()'s text, which names the missing file or symbol; nothing stays
 * loaded then. */
int memfabric_api_load(void);
/* Drops one reference; the last one dlclose()s the library. */
void memfabric_api_unload(void);
/* Current number of references (tests). */
int memfabric_api_refcount(void);

/* ---- inline forwarding, one function per symbol ------------------------ */
static inline int32_t memfabric_smem_trans_init(uint32_t deviceId,
                                                uint32_t flags)
{
    return memfabric_api.smem_trans_init(deviceId, flags);
}
static inline void memfabric_smem_trans_uninit(uint32_t flags)
{
    memfabric_api.smem_trans_uninit(flags);
}
static inline int32_t memfabric_smem_trans_config_init(smem_trans_config_t *c)
{
    return memfabric_api.smem_trans_config_init(c);
}
static inline smem_trans_t
memfabric_smem_trans_create(const smem_trans_config_t *c, uint32_t flags)
{
    return memfabric_api.smem_trans_create(c, flags);
}
static inline void memfabric_smem_trans_destroy(smem_trans_t h, uint32_t flags)
{
    memfabric_api.smem_trans_destroy(h, flags);
}
static inline int32_t memfabric_smem_trans_get_rpc_port(smem_trans_t h,
                                                        uint16_t *port)
{
    return memfabric_api.smem_trans_get_rpc_port(h, port);
}
static inline int32_t memfabric_smem_trans_register_mem(smem_trans_t h,
                                                        void *address,
                                                        size_t capacity,
                                                        uint32_t flags)
{
    return memfabric_api.smem_trans_register_mem(h, address, capacity, flags);
}
static inline int32_t
memfabric_smem_trans_batch_register_mem(smem_trans_t h, void *addresses[],
                                        size_t capacities[], uint32_t count,
                                        uint32_t flags)
{
    return memfabric_api.smem_trans_batch_register_mem(h, addresses, capacities,
                                                       count, flags);
}
static inline int32_t memfabric_smem_trans_deregister_mem(smem_trans_t h,
                                                          void *address)
{
    return memfabric_api.smem_trans_deregister_mem(h, address);
}
static inline int32_t memfabric_smem_trans_batch_copy(
    smem_trans_t h, smem_trans_batch_params_t *params, uint64_t *batchId)
{
    return memfabric_api.smem_trans_batch_copy(h, params, batchId);
}
static inline int32_t memfabric_smem_trans_batch_status_query(smem_trans_t h,
                                                              uint64_t batchId,
                                                              int32_t *result,
                                                              uint32_t flags)
{
    return memfabric_api.smem_trans_batch_status_query(h, batchId, result,
                                                       flags);
}
static inline int32_t memfabric_smem_trans_set_peer_down_callback(
    smem_trans_t h, smem_trans_peer_down_callback_t cb, void *user)
{
    return memfabric_api.smem_trans_set_peer_down_callback(h, cb, user);
}
static inline int32_t memfabric_smem_set_log_level(int level)
{
    return memfabric_api.smem_set_log_level(level);
}

static inline int32_t memfabric_smem_trans_batch_status_query3(smem_trans_t h,
                                                               uint64_t batchId,
                                                               uint32_t flags)
{
    return memfabric_status_query3(h, batchId, flags);
}

/* Every forwarder exists and has exactly the type of its ABI symbol: a
 * symbol added to SMEM_TRANS_SYMBOLS without a forwarder, or a forwarder
 * that drifts from the ABI, fails to compile here. */
#define MEMFABRIC_API_CHECK(ret, name, params)                                 \
    _Static_assert(                                                            \
        _Generic(&memfabric_##name, ret(*) params : 1, default : 0),           \
        "forwarder memfabric_" #name " does not match the ABI");
SMEM_TRANS_SYMBOLS(MEMFABRIC_API_CHECK)
#undef MEMFABRIC_API_CHECK

#endif

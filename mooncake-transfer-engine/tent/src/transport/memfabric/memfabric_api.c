/* MemFabricUnderApi: dlopen/dlsym of libmf_smem.so (see memfabric_api.h). */
#include "transport/memfabric/memfabric_api.h"

#include "common/dl.h"
#include "common/error.h"
#include "common/log.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MEMFABRIC_LIBRARY "libmf_smem.so"

struct memfabric_api_table memfabric_api;
struct memfabric_api_ext_table memfabric_api_ext;
smem_trans_status_query3_fn memfabric_status_query3;

/* Guards everything below and memfabric_api.  Taken by load/unload only,
 * never while calling into the vendor library. */
static pthread_mutex_t api_lock = PTHREAD_MUTEX_INITIALIZER;
static int api_refs;
static void *api_handle;

int memfabric_api_load(void)
{
    pthread_mutex_lock(&api_lock);
    if (api_refs > 0) {
        api_refs++;
        pthread_mutex_unlock(&api_lock);
        return TENT_OK;
    }
    /* An explicit file for this process; ignored in setuid programs. */
    const char *path = secure_getenv("MF_SMEM_LIBRARY");
    if (!path || !*path)
        path = MEMFABRIC_LIBRARY;
    char err[512];
    (void)dlerror();
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        tent_dl_copy_error(err, sizeof(err), path);
        goto fail;
    }
    /* The dlsym loop: the same X-macro list that built the table, so the
     * two cannot drift apart.  POSIX makes dlsym's object pointer
     * convertible to a function pointer; memcpy states that without a cast
     * between incompatible pointer types. */
    struct memfabric_api_table table;
    void *sym;
#define MEMFABRIC_API_RESOLVE(ret, name, params)                               \
    sym = tent_dl_resolve(h, #name, err, sizeof(err));                         \
    if (!sym)                                                                  \
        goto fail_close;                                                       \
    memcpy(&table.name, &sym, sizeof(sym));
    SMEM_TRANS_SYMBOLS(MEMFABRIC_API_RESOLVE)
#undef MEMFABRIC_API_RESOLVE
    memfabric_api = table;
    /* optional: absent from the vendor's library */
    struct memfabric_api_ext_table ext;
#define MEMFABRIC_API_RESOLVE_EXT(ret, name, params)                           \
    sym = dlsym(h, #name);                                                     \
    memcpy(&ext.name, &sym, sizeof(sym));
    SMEM_TRANS_EXT_SYMBOLS(MEMFABRIC_API_RESOLVE_EXT)
#undef MEMFABRIC_API_RESOLVE_EXT
    (void)dlerror();
    memfabric_api_ext = ext;
    sym = tent_dl_resolve(h, "smem_trans_batch_status_query", err, sizeof(err));
    memcpy(&memfabric_status_query3, &sym, sizeof(sym));
    api_handle = h;
    api_refs = 1;
    pthread_mutex_unlock(&api_lock);
    LOG_INFO("loaded %s", path);
    return TENT_OK;

fail_close:
    dlclose(h);
fail:
    memset(&memfabric_api, 0, sizeof(memfabric_api));
    memset(&memfabric_api_ext, 0, sizeof(memfabric_api_ext));
    memfabric_status_query3 = NULL;
    pthread_mutex_unlock(&api_lock);
    LOG_ERROR("%s: %s", MEMFABRIC_MSG_NO_LIBRARY, err);
    return tent_set_error(TENT_ENODEV, "%s: %s", MEMFABRIC_MSG_NO_LIBRARY, err);
}

void memfabric_api_unload(void)
{
    pthread_mutex_lock(&api_lock);
    if (api_refs > 0 && --api_refs == 0) {
        memset(&memfabric_api, 0, sizeof(memfabric_api));
        memset(&memfabric_api_ext, 0, sizeof(memfabric_api_ext));
        memfabric_status_query3 = NULL;
        dlclose(api_handle);
        api_handle = NULL;
    }
    pthread_mutex_unlock(&api_lock);
}

int memfabric_api_refcount(void)
{
    pthread_mutex_lock(&api_lock);
    int n = api_refs;
    pthread_mutex_unlock(&api_lock);
    return n;
}

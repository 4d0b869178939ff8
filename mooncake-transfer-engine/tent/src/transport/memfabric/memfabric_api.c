/* MemFabricUnderApi: dlopen/dlsym of libmf_smem.so (see memfabric_api.h). */
#include "transport/memfabric/memfabric_api.h"

#include "common/error.h"
#include "common/log.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MEMFABRIC_LIBRARY "libmf_smem.so"
#define ACL_LIBRARY       "libascendcl.so"

typedef int (*acl_get_device_fn)(int32_t *device_id);

struct memfabric_api_table memfabric_api;

/* Guards everything below and memfabric_api.  Taken by load/unload only,
 * never while calling into the vendor library. */
static pthread_mutex_t api_lock = PTHREAD_MUTEX_INITIALIZER;
static int api_refs;
static void *api_handle;
static void *acl_handle;
static acl_get_device_fn acl_get_device;

/* Copies dlerror()'s text at once: the next dl call overwrites it. */
static void copy_dlerror(char *buf, size_t len, const char *fallback)
{
    const char *e = dlerror();
    snprintf(buf, len, "%s", e ? e : fallback);
}

/* Resolves name in handle itself, not in a library it happens to pull in
 * (the vendor's symbol must come from the vendor's object). */
static void *resolve(void *handle, const char *name, char *err, size_t errlen)
{
    (void)dlerror();
    void *sym = dlsym(handle, name);
    if (!sym) {
        copy_dlerror(err, errlen, "undefined symbol");
        return NULL;
    }
    struct link_map *own = NULL, *def = NULL;
    Dl_info info;
    if (dlinfo(handle, RTLD_DI_LINKMAP, &own) == 0 &&
        dladdr1(sym, &info, (void **)&def, RTLD_DL_LINKMAP) != 0 && own &&
        def && own != def) {
        snprintf(err, errlen,
                 "%s: symbol %s is defined by %s, not by the "
                 "library itself",
                 own->l_name, name, def->l_name);
        return NULL;
    }
    return sym;
}

static void load_acl_locked(void)
{
    (void)dlerror();
    acl_handle = dlopen(ACL_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (!acl_handle) {
        char err[512];
        copy_dlerror(err, sizeof(err), "not found");
        LOG_DEBUG("%s not loaded (%s); the device id comes from "
                  "transports/memfabric/device_id",
                  ACL_LIBRARY, err);
        return;
    }
    char err[512];
    void *sym = resolve(acl_handle, "aclrtGetDevice", err, sizeof(err));
    if (!sym) {
        LOG_WARN("%s has no usable aclrtGetDevice (%s); the device id comes "
                 "from transports/memfabric/device_id",
                 ACL_LIBRARY, err);
        dlclose(acl_handle);
        acl_handle = NULL;
        return;
    }
    /* POSIX guarantees object/function pointer conversion through dlsym. */
    memcpy(&acl_get_device, &sym, sizeof(sym));
}

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
        copy_dlerror(err, sizeof(err), path);
        goto fail;
    }
    /* The dlsym loop: the same X-macro list that built the table, so the
     * two cannot drift apart.  POSIX makes dlsym's object pointer
     * convertible to a function pointer; memcpy states that without a cast
     * between incompatible pointer types. */
    struct memfabric_api_table table;
    void *sym;
#define MEMFABRIC_API_RESOLVE(ret, name, params)                               \
    sym = resolve(h, #name, err, sizeof(err));                                 \
    if (!sym)                                                                  \
        goto fail_close;                                                       \
    memcpy(&table.name, &sym, sizeof(sym));
    SMEM_TRANS_SYMBOLS(MEMFABRIC_API_RESOLVE)
#undef MEMFABRIC_API_RESOLVE
    memfabric_api = table;
    api_handle = h;
    load_acl_locked();
    api_refs = 1;
    pthread_mutex_unlock(&api_lock);
    LOG_INFO("loaded %s", path);
    return TENT_OK;

fail_close:
    dlclose(h);
fail:
    memset(&memfabric_api, 0, sizeof(memfabric_api));
    pthread_mutex_unlock(&api_lock);
    LOG_ERROR("MemFabricUnderApi::LoadLibrary failed, libmf_smem.so "
              "unavailable: %s",
              err);
    return tent_set_error(
        TENT_ENODEV,
        "MemFabricUnderApi::LoadLibrary failed, libmf_smem.so "
        "unavailable: %s",
        err);
}

void memfabric_api_unload(void)
{
    pthread_mutex_lock(&api_lock);
    if (api_refs > 0 && --api_refs == 0) {
        memset(&memfabric_api, 0, sizeof(memfabric_api));
        dlclose(api_handle);
        api_handle = NULL;
        if (acl_handle)
            dlclose(acl_handle);
        acl_handle = NULL;
        acl_get_device = NULL;
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

bool memfabric_api_acl_device(uint32_t *device_id)
{
    pthread_mutex_lock(&api_lock);
    acl_get_device_fn fn = acl_get_device;
    pthread_mutex_unlock(&api_lock);
    if (!fn)
        return false;
    int32_t dev = -1;
    int rc = fn(&dev);
    if (rc != 0 || dev < 0) {
        LOG_WARN("aclrtGetDevice failed (code %d); the device id comes from "
                 "transports/memfabric/device_id",
                 rc);
        return false;
    }
    *device_id = (uint32_t)dev;
    return true;
}

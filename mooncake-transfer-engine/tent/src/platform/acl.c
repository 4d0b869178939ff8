#include "platform/acl.h"

#include "common/dl.h"
#include "common/error.h"
#include "common/log.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define ACL_LIBRARY "libascendcl.so"
/* aclrtMalloc's policy: huge pages first, normal pages when none are left. */
#define ACL_MEM_MALLOC_HUGE_FIRST 0

/* The ACL symbols, listed once for the pointer table and the lookup. */
#define ACL_SYMBOLS(X)                                                         \
    X(int, aclrtSetDevice, (int32_t device_id))                                \
    X(int, aclrtMalloc, (void **dev_ptr, size_t size, int policy))             \
    X(int, aclrtFree, (void *dev_ptr))                                         \
    X(int, aclrtGetDevice, (int32_t * device_id))

#define ACL_PTR(ret, name, params) ret(*name) params;
static struct {
    ACL_SYMBOLS(ACL_PTR)
} acl;
#undef ACL_PTR

/* Guards everything below; held across the device calls so that
 * aclrtSetDevice and the allocation after it are one step. */
static pthread_mutex_t acl_lock = PTHREAD_MUTEX_INITIALIZER;
static bool tried;
static void *acl_handle;
static char acl_error[384]; /* why the library could not be loaded */

static void load_locked(void)
{
    if (tried)
        return;
    tried = true;
    (void)dlerror();
    void *h = dlopen(ACL_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        char why[256];
        tent_dl_copy_error(why, sizeof(why), "not found");
        snprintf(acl_error, sizeof(acl_error),
                 "the Ascend runtime %s, which cannot be loaded: %s",
                 ACL_LIBRARY, why);
        return;
    }
    char err[256];
    void *sym;
#define ACL_RESOLVE(ret, name, params)                                         \
    sym = tent_dl_resolve(h, #name, err, sizeof(err));                         \
    if (sym)                                                                   \
        memcpy(&acl.name, &sym, sizeof(sym));                                  \
    else                                                                       \
        LOG_DEBUG("%s: %s not usable: %s", ACL_LIBRARY, #name, err);
    ACL_SYMBOLS(ACL_RESOLVE)
#undef ACL_RESOLVE
    acl_handle = h;
}

/* Loads the library and checks that sym is there; else TENT_ENODEV. */
static int need_locked(const void *sym, const char *name, const char *what)
{
    load_locked();
    if (!acl_handle)
        return tent_set_error(TENT_ENODEV, "%s needs %s", what, acl_error);
    if (!sym)
        return tent_set_error(TENT_ENODEV, "%s: %s has no symbol %s", what,
                              ACL_LIBRARY, name);
    return TENT_OK;
}

int tent_acl_malloc(int device, size_t size, void **out)
{
    const char *what = "tent_allocate_memory: device memory";
    pthread_mutex_lock(&acl_lock);
    int rc = need_locked(acl.aclrtSetDevice, "aclrtSetDevice", what);
    if (!rc)
        rc = need_locked(acl.aclrtMalloc, "aclrtMalloc", what);
    if (rc == TENT_OK) {
        int arc = acl.aclrtSetDevice(device);
        void *p = NULL;
        if (arc != 0)
            rc = tent_set_error(TENT_EVENDOR,
                                "tent_allocate_memory: aclrtSetDevice(%d) "
                                "failed: ACL code %d",
                                device, arc);
        else if ((arc = acl.aclrtMalloc(&p, size, ACL_MEM_MALLOC_HUGE_FIRST)) !=
                     0 ||
                 !p)
            rc = tent_set_error(TENT_ENOMEM,
                                "tent_allocate_memory: aclrtMalloc(%zu bytes "
                                "on npu:%d) failed: ACL code %d",
                                size, device, arc);
        else
            *out = p;
    }
    pthread_mutex_unlock(&acl_lock);
    return rc;
}

int tent_acl_free(int device, void *ptr)
{
    pthread_mutex_lock(&acl_lock);
    int rc = need_locked(acl.aclrtFree, "aclrtFree", "tent_free_memory");
    if (rc == TENT_OK) {
        int arc = acl.aclrtFree(ptr);
        if (arc != 0)
            rc = tent_set_error(TENT_EVENDOR,
                                "tent_free_memory: aclrtFree(%p on npu:%d) "
                                "failed: ACL code %d",
                                ptr, device, arc);
    }
    pthread_mutex_unlock(&acl_lock);
    return rc;
}

bool tent_acl_get_device(uint32_t *device_id)
{
    pthread_mutex_lock(&acl_lock);
    load_locked();
    int (*fn)(int32_t *) = acl.aclrtGetDevice;
    pthread_mutex_unlock(&acl_lock);
    if (!fn) {
        LOG_DEBUG("%s: aclrtGetDevice unavailable (%s)", ACL_LIBRARY,
                  acl_handle ? "no such symbol" : acl_error);
        return false;
    }
    int32_t dev = -1;
    int rc = fn(&dev);
    if (rc != 0 || dev < 0) {
        LOG_WARN("aclrtGetDevice failed (code %d)", rc);
        return false;
    }
    *device_id = (uint32_t)dev;
    return true;
}

/* Accelerator memory for tent_allocate_memory(..., "npu:N"): Ascend's ACL
 * runtime (libascendcl.so), opened with dlopen on first use and kept open
 * for the life of the process (device pointers handed out must stay
 * freeable).  Without the library the allocation fails with TENT_ENODEV and
 * a message naming it. */
#include "common/error.h"
#include "common/log.h"
#include "runtime/engine.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define ACL_LIBRARY "libascendcl.so"
/* aclrtMalloc's policy: huge pages first, normal pages when none are left. */
#define ACL_MEM_MALLOC_HUGE_FIRST 0

/* The three ACL symbols, listed once for the pointer table and the loop. */
#define ACL_SYMBOLS(X)                                                         \
    X(int, aclrtSetDevice, (int32_t device_id))                                \
    X(int, aclrtMalloc, (void **dev_ptr, size_t size, int policy))             \
    X(int, aclrtFree, (void *dev_ptr))

#define ACL_PTR(ret, name, params) ret(*name) params;
static struct {
    ACL_SYMBOLS(ACL_PTR)
} acl;
#undef ACL_PTR

/* Guards acl, acl_handle and acl_error; held across the device calls so
 * that aclrtSetDevice and the allocation after it are one step. */
static pthread_mutex_t acl_lock = PTHREAD_MUTEX_INITIALIZER;
static void *acl_handle;
static char acl_error[384]; /* why loading failed; tried once */

static int acl_load_locked(void)
{
    if (acl_handle)
        return TENT_OK;
    if (acl_error[0])
        return tent_set_error(TENT_ENODEV, "%s", acl_error);
    void *h = dlopen(ACL_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        snprintf(acl_error, sizeof(acl_error),
                 "device memory needs the Ascend runtime %s, which cannot be "
                 "loaded: %s",
                 ACL_LIBRARY, why ? why : "not found");
        return tent_set_error(TENT_ENODEV, "%s", acl_error);
    }
    const char *missing = NULL;
    void *sym;
#define ACL_RESOLVE(ret, name, params)                                         \
    if (!missing) {                                                            \
        sym = dlsym(h, #name);                                                 \
        if (sym)                                                               \
            memcpy(&acl.name, &sym, sizeof(sym));                              \
        else                                                                   \
            missing = #name;                                                   \
    }
    ACL_SYMBOLS(ACL_RESOLVE)
#undef ACL_RESOLVE
    if (missing) {
        dlclose(h);
        snprintf(acl_error, sizeof(acl_error),
                 "device memory: %s has no symbol %s", ACL_LIBRARY, missing);
        return tent_set_error(TENT_ENODEV, "%s", acl_error);
    }
    acl_handle = h;
    return TENT_OK;
}

int tent_device_malloc(int device, size_t size, void **out)
{
    pthread_mutex_lock(&acl_lock);
    int rc = acl_load_locked();
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

int tent_device_free(int device, void *ptr)
{
    pthread_mutex_lock(&acl_lock);
    int rc = acl_load_locked();
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

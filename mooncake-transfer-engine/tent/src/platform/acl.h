/* Ascend's ACL runtime (libascendcl.so), the one loader of it: opened with
 * dlopen on first use and kept open for the life of the process (device
 * pointers handed out must stay freeable); each symbol is looked up once
 * and may be missing on its own (a call that needs it then fails with
 * TENT_ENODEV naming it).  Used by tent_allocate_memory ("npu:N") and the
 * memfabric transport (the device id); no build-time dependency on CANN. */
#ifndef TENT_PLATFORM_ACL_H
#define TENT_PLATFORM_ACL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* aclrtSetDevice + aclrtMalloc as one step. */
int tent_acl_malloc(int device, size_t size, void **out);
int tent_acl_free(int device, void *ptr);
/* aclrtGetDevice: false when the library or the call is not there (the
 * caller falls back to its configuration). */
bool tent_acl_get_device(uint32_t *device_id);

#endif

/* Test-only libascendcl.so: aclrtGetDevice (reports device 5) and device
 * memory (aclrtSetDevice, aclrtMalloc, aclrtFree) backed by host memory,
 * with counters the test reads through dlsym (fake_acl_*). */
#include <stdint.h>
#include <stdlib.h>

int aclrtGetDevice(int32_t *deviceId);
int aclrtSetDevice(int32_t deviceId);
int aclrtMalloc(void **devPtr, size_t size, int policy);
int aclrtFree(void *devPtr);
int fake_acl_live(void);
int fake_acl_last_device(void);

static int live, last_device = -1;

int aclrtGetDevice(int32_t *deviceId)
{
    *deviceId = 5;
    return 0;
}

int aclrtSetDevice(int32_t deviceId)
{
    if (deviceId < 0 || deviceId > 7)
        return 107001; /* ACL_ERROR_RT_INVALID_DEVICEID-like */
    last_device = deviceId;
    return 0;
}

int aclrtMalloc(void **devPtr, size_t size, int policy)
{
    (void)policy;
    if (!devPtr || size == 0)
        return 100000;
    *devPtr = aligned_alloc(4096, (size + 4095) / 4096 * 4096);
    if (!*devPtr)
        return 207001;
    __atomic_add_fetch(&live, 1, __ATOMIC_SEQ_CST);
    return 0;
}

int aclrtFree(void *devPtr)
{
    if (!devPtr)
        return 100000;
    free(devPtr);
    __atomic_sub_fetch(&live, 1, __ATOMIC_SEQ_CST);
    return 0;
}

int fake_acl_live(void)
{
    return __atomic_load_n(&live, __ATOMIC_SEQ_CST);
}

int fake_acl_last_device(void)
{
    return last_device;
}

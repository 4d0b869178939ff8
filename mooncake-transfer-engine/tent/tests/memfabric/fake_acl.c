/* Test-only libascendcl.so: just aclrtGetDevice, reporting device 5. */
#include <stdint.h>

int aclrtGetDevice(int32_t *deviceId);

int aclrtGetDevice(int32_t *deviceId)
{
    *deviceId = 5;
    return 0;
}

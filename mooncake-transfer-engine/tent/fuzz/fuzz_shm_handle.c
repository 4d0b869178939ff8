/* libFuzzer: the shm fields of a peer's descriptor ("memfd:<fd>:<inode>"
 * handles and the "pid" attribute). */
#include "fuzz.h"
#include "transport/shm/shm_handle.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = 0;
    int fd;
    unsigned long long ino;
    if (tent_shm_parse_handle(s, &fd, &ino) == 0 && fd < 0)
        __builtin_trap();
    long pid = tent_shm_parse_pid(s);
    if (pid != -1 && (pid < 1 || pid > (1L << 30)))
        __builtin_trap();
    free(s);
    return 0;
}

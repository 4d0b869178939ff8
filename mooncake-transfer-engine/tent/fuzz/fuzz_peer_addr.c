/* libFuzzer: "<host>:<port>" strings (segment names, the rpc_addr attribute
 * of a peer's descriptor). */
#include "fuzz.h"
#include "rpc/rpc.h"

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
    char host[256];
    uint16_t port;
    if (tent_rpc_parse_addr(s, host, sizeof(host), &port) == 0 &&
        (port == 0 || strlen(host) >= sizeof(host) || !host[0]))
        __builtin_trap();
    free(s);
    return 0;
}

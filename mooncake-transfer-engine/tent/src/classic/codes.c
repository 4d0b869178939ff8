/* Result codes and logging of the classic API. */
#include "classic/classic.h"
#include "common/log.h"

#include <stdarg.h>

/* Each TENT_E* code with the Mooncake Status code and the ERR_* value that
 * say the same thing. */
static const struct {
    int tent, status, err;
} g_codes[] = {
    {TENT_OK, CLASSIC_ST_OK, 0},
    {TENT_EINVAL, CLASSIC_ST_INVALID_ARGUMENT, CLASSIC_ERR_INVALID_ARGUMENT},
    {TENT_ENULL, CLASSIC_ST_INVALID_ARGUMENT, CLASSIC_ERR_INVALID_ARGUMENT},
    {TENT_ENOMEM, CLASSIC_ST_MEMORY, CLASSIC_ERR_MEMORY},
    {TENT_ENOSEGMENT, CLASSIC_ST_INVALID_ARGUMENT, CLASSIC_ERR_METADATA},
    {TENT_ENOBATCH, CLASSIC_ST_INVALID_ARGUMENT, CLASSIC_ERR_INVALID_ARGUMENT},
    {TENT_ENOTREG, CLASSIC_ST_ADDRESS_NOT_REGISTERED,
     CLASSIC_ERR_ADDRESS_NOT_REGISTERED},
    {TENT_ERANGE, CLASSIC_ST_ADDRESS_NOT_REGISTERED,
     CLASSIC_ERR_ADDRESS_NOT_REGISTERED},
    {TENT_EPERM, CLASSIC_ST_INVALID_ARGUMENT, CLASSIC_ERR_INVALID_ARGUMENT},
    {TENT_ECAPACITY, CLASSIC_ST_TOO_MANY_REQUESTS,
     CLASSIC_ERR_TOO_MANY_REQUESTS},
    {TENT_EBUSY, CLASSIC_ST_BATCH_BUSY, CLASSIC_ERR_BATCH_BUSY},
    {TENT_EEXIST, CLASSIC_ST_ADDRESS_OVERLAPPED,
     CLASSIC_ERR_ADDRESS_OVERLAPPED},
    {TENT_ECONFIG, CLASSIC_ST_INVALID_ARGUMENT, CLASSIC_ERR_INVALID_ARGUMENT},
    {TENT_ENODEV, CLASSIC_ST_DEVICE_NOT_FOUND, CLASSIC_ERR_DEVICE_NOT_FOUND},
    {TENT_ENOTRANSPORT, CLASSIC_ST_NOT_SUPPORTED_TRANSPORT,
     CLASSIC_ERR_INVALID_ARGUMENT},
    {TENT_EIO, CLASSIC_ST_SOCKET, CLASSIC_ERR_SOCKET},
    {TENT_ETIMEDOUT, CLASSIC_ST_SOCKET, CLASSIC_ERR_SOCKET},
    {TENT_ENOTSUP, CLASSIC_ST_NOT_IMPLEMENTED, CLASSIC_ERR_NOT_IMPLEMENTED},
    {TENT_EVENDOR, CLASSIC_ST_CONTEXT, CLASSIC_ERR_CONTEXT},
    {TENT_EPEER, CLASSIC_ST_SOCKET, CLASSIC_ERR_SOCKET},
    {TENT_EPROTO, CLASSIC_ST_MALFORMED_JSON, CLASSIC_ERR_MALFORMED_JSON},
    {TENT_ENOTASK, CLASSIC_ST_INVALID_ARGUMENT, CLASSIC_ERR_INVALID_ARGUMENT},
    {TENT_ESHUTDOWN, CLASSIC_ST_CONTEXT, CLASSIC_ERR_CONTEXT},
    {TENT_EOVERFLOW, CLASSIC_ST_INVALID_ARGUMENT, CLASSIC_ERR_INVALID_ARGUMENT},
    {TENT_ERUNNING, CLASSIC_ST_BATCH_BUSY, CLASSIC_ERR_BATCH_BUSY},
};

int classic_status_of(int tent_code)
{
    for (size_t i = 0; i < sizeof(g_codes) / sizeof(g_codes[0]); i++)
        if (g_codes[i].tent == tent_code)
            return g_codes[i].status;
    return CLASSIC_ST_CONTEXT;
}

int classic_err_of(int tent_code)
{
    for (size_t i = 0; i < sizeof(g_codes) / sizeof(g_codes[0]); i++)
        if (g_codes[i].tent == tent_code)
            return g_codes[i].err;
    return CLASSIC_ERR_CONTEXT;
}

void classic_log(const char *level, const char *file, int line, const char *fmt,
                 ...)
{
    va_list ap;
    va_start(ap, fmt);
    tent_log_vemit(level, "classic", file, line, fmt, ap);
    va_end(ap);
}

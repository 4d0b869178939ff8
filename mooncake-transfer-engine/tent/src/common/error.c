#include "common/error.h"

#include "common/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char last_error[512];

static const char *const error_names[] = {
    [0] = "TENT_OK: success",
    [1] = "TENT_EINVAL: invalid argument",
    [2] = "TENT_ENULL: null pointer",
    [3] = "TENT_ENOMEM: out of memory",
    [4] = "TENT_ENOSEGMENT: unknown segment",
    [5] = "TENT_ENOBATCH: unknown batch",
    [6] = "TENT_ENOTREG: memory not registered",
    [7] = "TENT_ERANGE: outside registered buffers",
    [8] = "TENT_EPERM: permission denied",
    [9] = "TENT_ECAPACITY: batch capacity exceeded",
    [10] = "TENT_EBUSY: tasks in flight",
    [11] = "TENT_EEXIST: overlapping registration",
    [12] = "TENT_ECONFIG: configuration error",
    [13] = "TENT_ENODEV: DeviceNotFound",
    [14] = "TENT_ENOTRANSPORT: no transport available",
    [15] = "TENT_EIO: input/output error",
    [16] = "TENT_ETIMEDOUT: timed out",
    [17] = "TENT_ENOTSUP: not supported",
    [18] = "TENT_EVENDOR: vendor library error",
    [19] = "TENT_EPEER: peer unreachable",
    [20] = "TENT_EPROTO: protocol error",
    [21] = "TENT_ENOTASK: unknown task",
    [22] = "TENT_ESHUTDOWN: transport shut down",
    [23] = "TENT_EOVERFLOW: buffer too small",
    [24] = "TENT_ERUNNING: task running, cannot be cancelled",
    [25] = "TENT_ESTALE: peer restarted (stale incarnation)",
};

const char *tent_strerror(int code)
{
    /* Compare before negating: -INT_MIN overflows. */
    const int count = (int)(sizeof(error_names) / sizeof(error_names[0]));
    if (code > 0 || code <= -count)
        return "unknown TENT error code";
    return error_names[-code];
}

bool tent_error_is_transient(int code)
{
    switch (code) {
    case TENT_EINVAL:
    case TENT_ENULL:
    case TENT_ENOTREG:
    case TENT_ERANGE:
    case TENT_EPERM:
    case TENT_ECAPACITY:
    case TENT_EEXIST:
    case TENT_ECONFIG:
    case TENT_EOVERFLOW:
    case TENT_ENOSEGMENT:
    case TENT_ENOBATCH:
    case TENT_ENOTASK:
    case TENT_ESTALE:
        return false;
    default:
        return code != TENT_OK;
    }
}

bool tent_attempt_is_transient(int code, int native, int opcode,
                               bool file_target)
{
    if (!tent_error_is_transient(code))
        return false;
    if (opcode != OPCODE_WRITE || !file_target)
        return true;
    switch (native) {
    case EIO:
    case ENOSPC:
    case EDQUOT:
    case EROFS:
        return false;
    default:
        return true;
    }
}

const char *tent_last_error(void)
{
    return last_error;
}

void tent_clear_error(void)
{
    last_error[0] = '\0';
}

/* Messages often quote the previous error ("...: %s", tent_last_error()), so
 * format into a scratch buffer first: vsnprintf must not read its own
 * destination. */
__attribute__((format(printf, 1, 0))) static void
format_last_error(const char *fmt, va_list ap)
{
    char tmp[sizeof(last_error)];
    vsnprintf(tmp, sizeof(tmp), fmt, ap);
    memcpy(last_error, tmp, sizeof(tmp));
}

int tent_set_error(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    format_last_error(fmt, ap);
    va_end(ap);
    return code;
}

int tent_fail_at(const char *file, int line, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    format_last_error(fmt, ap);
    va_end(ap);
    if (TENT_LOG_ENABLED(TENT_LOG_WARNING))
        tent_log_write(TENT_LOG_WARNING, file, line, "%s (%s)", last_error,
                       tent_strerror(code));
    return code;
}

/* Error reporting: every failure path sets the thread's last-error message
 * (tent_last_error()) and returns a negative TENT_E* code. */
#ifndef TENT_COMMON_ERROR_H
#define TENT_COMMON_ERROR_H

#include "tent/transfer_engine.h"

#include <stdbool.h>

/* Records "msg" as the calling thread's last error and returns code. */
int tent_set_error(int code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Records the error and logs it at WARNING with the caller's location. */
int tent_fail_at(const char *file, int line, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define TENT_FAIL(code, ...)                                                   \
    tent_fail_at(__FILE__, __LINE__, (code), __VA_ARGS__)

void tent_clear_error(void);

/* Whether a failure with this code may succeed on another transport (a
 * reset or refused connection, a timeout, a peer or device that went away,
 * a transport that cannot serve the request), as opposed to one that no
 * transport can fix (permission refused, out of bounds, not registered, a
 * bad argument), which fails at once with its cause. */
bool tent_error_is_transient(int code);

/* Whether a failed attempt of a request may succeed on another transport:
 * tent_error_is_transient(code), except that a WRITE to a file whose
 * native cause is the storage refusing it (EIO, ENOSPC, EDQUOT, EROFS) is
 * permanent.  Every file transport writes to the same device, and one that
 * goes through the page cache would report COMPLETED for bytes that a later
 * fsync loses (docs/durability.md). */
bool tent_attempt_is_transient(int code, int native, int opcode,
                               bool file_target);

#endif

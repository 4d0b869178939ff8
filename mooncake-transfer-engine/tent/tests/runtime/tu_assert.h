/* Checks that a helper makes on a test's behalf, reported at the test's
 * line.  The helper takes the caller's place, a struct tu_at, and checks
 * with the at_* forms below: cmocka's own assertions (same comparison, same
 * message) with the caller's file and line instead of the helper's.  A macro
 * of the helper's name passes TU_HERE, so that tests call it as before:
 *
 *     #define reg_buf(e, len, fill) reg_buf_at(TU_HERE, e, len, fill)
 *
 * Header-only; includes <cmocka.h>. */
#ifndef TENT_TEST_TU_ASSERT_H
#define TENT_TEST_TU_ASSERT_H

/* cmocka needs these first. */
/* clang-format off */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
/* clang-format on */

/* Where a check is reported: the test's file and line. */
struct tu_at {
    const char *file;
    int line;
};

#define TU_HERE ((struct tu_at){__FILE__, __LINE__})

#define at_int_equal(at, a, b)                                                 \
    _assert_int_equal(cast_to_largest_integral_type(a),                        \
                      cast_to_largest_integral_type(b), (at).file, (at).line)
#define at_int_not_equal(at, a, b)                                             \
    _assert_int_not_equal(cast_to_largest_integral_type(a),                    \
                          cast_to_largest_integral_type(b), (at).file,         \
                          (at).line)
#define at_true(at, c)                                                         \
    _assert_true(cast_to_largest_integral_type(c), #c, (at).file, (at).line)
#define at_non_null(at, c)                                                     \
    _assert_true(cast_ptr_to_largest_integral_type(c), #c, (at).file, (at).line)
#define at_memory_equal(at, a, b, size)                                        \
    _assert_memory_equal((const void *)(a), (const void *)(b), size,           \
                         (at).file, (at).line)
/* fail_msg(msg, ...) at the caller's line; msg is a string literal. */
#define at_fail_msg(at, ...)                                                   \
    do {                                                                       \
        print_error("ERROR: " __VA_ARGS__);                                    \
        print_error("\n");                                                     \
        _fail((at).file, (at).line);                                           \
    } while (0)

#endif

/* stderr capture for the tests that check log lines (tu_capture_begin /
 * tu_capture_end) and assert_contains.  Header-only; includes <cmocka.h>. */
#ifndef TENT_TEST_TU_CAPTURE_H
#define TENT_TEST_TU_CAPTURE_H

#include "tu_assert.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* stderr capture: everything written to fd 2 between begin and end. */
struct tu_capture {
    int saved_fd;
    char path[64];
};

#define tu_capture_begin(c) tu_capture_begin_at(TU_HERE, c)
static inline void tu_capture_begin_at(struct tu_at at, struct tu_capture *c)
{
    fflush(stderr);
    snprintf(c->path, sizeof(c->path), "/tmp/tent_test_stderr_XXXXXX");
    int fd = mkstemp(c->path);
    at_true(at, fd >= 0);
    c->saved_fd = dup(2);
    at_true(at, c->saved_fd >= 0);
    at_true(at, dup2(fd, 2) >= 0);
    close(fd);
}

/* Returns the captured text (malloc'd; caller frees). */
#define tu_capture_end(c) tu_capture_end_at(TU_HERE, c)
static inline char *tu_capture_end_at(struct tu_at at, struct tu_capture *c)
{
    fflush(stderr);
    dup2(c->saved_fd, 2);
    close(c->saved_fd);
    FILE *f = fopen(c->path, "rb");
    at_non_null(at, f);
    char *text = calloc(1, 1 << 16);
    at_non_null(at, text);
    size_t n = fread(text, 1, (1 << 16) - 1, f);
    text[n] = '\0';
    fclose(f);
    unlink(c->path);
    return text;
}

#define assert_contains(hay, needle)                                           \
    do {                                                                       \
        const char *h_ = (hay), *n_ = (needle);                                \
        if (!strstr(h_, n_))                                                   \
            fail_msg("expected \"%s\" in \"%s\"", n_, h_);                     \
    } while (0)

#endif

/* Logging to stderr: "<time> <LEVEL> <file>:<line>] message", the time of
 * day in UTC.
 * The level check happens before any formatting, so a disabled level costs
 * one relaxed atomic load. errno is preserved across a log call. */
#ifndef TENT_COMMON_LOG_H
#define TENT_COMMON_LOG_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>

enum tent_log_level {
    TENT_LOG_TRACE = 0,
    TENT_LOG_DEBUG = 1,
    TENT_LOG_INFO = 2,
    TENT_LOG_WARNING = 3,
    TENT_LOG_ERROR = 4,
    TENT_LOG_OFF = 5,
};

extern atomic_int tent_log_threshold;

/* Parses "trace".."error" (also "warn", "off"); returns -1 if unknown. */
int tent_log_level_parse(const char *name);
const char *tent_log_level_name(int level);
void tent_log_set_level(int level);
/* While mute is true, nothing the calling thread logs is written (an
 * engine started in a thread of its own to probe a transport). */
void tent_log_mute_thread(bool mute);

void tent_log_write(int level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The one line formatter, also used by mf_host (with its own levels):
 * "<time> <level> [<tag> ]<file>:<line>] message"; keeps errno. */
void tent_log_vemit(const char *level, const char *tag, const char *file,
                    int line, const char *fmt, va_list ap)
    __attribute__((format(printf, 5, 0)));
void tent_log_emit(const char *level, const char *tag, const char *file,
                   int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

#define TENT_LOG_ENABLED(lvl)                                                  \
    ((lvl) >= atomic_load_explicit(&tent_log_threshold, memory_order_relaxed))

#define TENT_LOG(lvl, ...)                                                     \
    do {                                                                       \
        if (TENT_LOG_ENABLED(lvl))                                             \
            tent_log_write((lvl), __FILE__, __LINE__, __VA_ARGS__);            \
    } while (0)

/* A rate limit for a log line that a peer can trigger at will (refused
 * connections, dropped notifications): at most one line per interval; the
 * lines held back are counted and reported with the next one.  Zero
 * initialised; safe from any thread. */
struct tent_log_ratelimit {
    atomic_llong next_ms;
    atomic_ulong held;
};

/* True when a line may be written now; *held is then how many were held
 * back since the last one (and the count restarts). */
bool tent_log_ratelimit_ok(struct tent_log_ratelimit *rl, int interval_ms,
                           unsigned long *held);

#define LOG_TRACE(...) TENT_LOG(TENT_LOG_TRACE, __VA_ARGS__)
#define LOG_DEBUG(...) TENT_LOG(TENT_LOG_DEBUG, __VA_ARGS__)
#define LOG_INFO(...)  TENT_LOG(TENT_LOG_INFO, __VA_ARGS__)
#define LOG_WARN(...)  TENT_LOG(TENT_LOG_WARNING, __VA_ARGS__)
#define LOG_ERROR(...) TENT_LOG(TENT_LOG_ERROR, __VA_ARGS__)

#endif

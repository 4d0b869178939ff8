#include "common/log.h"

#include "common/clock.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* warnings and errors until an engine's log_level (or MC_LOG_LEVEL) says
 * otherwise */
atomic_int tent_log_threshold = TENT_LOG_WARNING;

static const char *const level_names[] = {"TRACE",   "DEBUG", "INFO",
                                          "WARNING", "ERROR", "OFF"};

int tent_log_level_parse(const char *name)
{
    static const struct {
        const char *name;
        int level;
    } table[] = {
        {"trace", TENT_LOG_TRACE},  {"debug", TENT_LOG_DEBUG},
        {"info", TENT_LOG_INFO},    {"warning", TENT_LOG_WARNING},
        {"warn", TENT_LOG_WARNING}, {"error", TENT_LOG_ERROR},
        {"off", TENT_LOG_OFF},
    };
    if (!name)
        return -1;
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
        if (strcasecmp(name, table[i].name) == 0)
            return table[i].level;
    return -1;
}

const char *tent_log_level_name(int level)
{
    if (level < TENT_LOG_TRACE || level > TENT_LOG_OFF)
        return "?";
    return level_names[level];
}

void tent_log_set_level(int level)
{
    if (level >= TENT_LOG_TRACE && level <= TENT_LOG_OFF)
        atomic_store(&tent_log_threshold, level);
}

/* UTC, so that the lines of several processes (libtent, mf_host, peers in
 * other time zones) compare directly, and no time-zone file is read. */
void tent_log_vemit(const char *level, const char *tag, const char *file,
                    int line, const char *fmt, va_list ap)
{
    int saved_errno = errno;
    char msg[1024];
    vsnprintf(msg, sizeof(msg), fmt, ap);

    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    /* One fprintf call per line keeps lines from different threads whole. */
    fprintf(stderr, "%02d:%02d:%02d.%06ld %s %s%s%s:%d] %s\n", tm.tm_hour,
            tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000, level, tag ? tag : "",
            tag ? " " : "", base, line, msg);
    errno = saved_errno;
}

void tent_log_emit(const char *level, const char *tag, const char *file,
                   int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tent_log_vemit(level, tag, file, line, fmt, ap);
    va_end(ap);
}

static _Thread_local bool t_muted;

void tent_log_mute_thread(bool mute)
{
    t_muted = mute;
}

void tent_log_write(int level, const char *file, int line, const char *fmt, ...)
{
    if (t_muted)
        return;
    va_list ap;
    va_start(ap, fmt);
    tent_log_vemit(tent_log_level_name(level), NULL, file, line, fmt, ap);
    va_end(ap);
}

bool tent_log_ratelimit_ok(struct tent_log_ratelimit *rl, int interval_ms,
                           unsigned long *held)
{
    long long now = tent_now_ms();
    long long next = atomic_load(&rl->next_ms);
    if (now < next || !atomic_compare_exchange_strong(&rl->next_ms, &next,
                                                      now + interval_ms)) {
        atomic_fetch_add(&rl->held, 1);
        return false;
    }
    *held = atomic_exchange(&rl->held, 0);
    return true;
}

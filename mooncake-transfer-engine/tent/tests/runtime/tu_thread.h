/* Waiting until another thread is blocked, instead of sleeping and hoping:
 * Linux shows the system call a sleeping thread is in (number, arguments)
 * in /proc/self/task/<tid>/syscall, and "running" while it runs. */
#ifndef TENT_TEST_TU_THREAD_H
#define TENT_TEST_TU_THREAD_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

static inline pid_t tu_gettid(void)
{
    return (pid_t)syscall(SYS_gettid);
}

/* True once thread tid sleeps in futex() on the word at addr (NULL: on any
 * word), false if it does not within ms milliseconds.  A contended pthread
 * mutex waits on its own address, so with addr = &mutex this says the thread
 * is waiting for that lock. */
static inline bool tu_wait_futex(pid_t tid, const void *addr, int ms)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/self/task/%d/syscall", (int)tid);
    for (int i = 0; i <= ms; i++) {
        FILE *f = fopen(path, "r");
        if (f) {
            long nr = -1;
            unsigned long word = 0;
            int n = fgets(line, sizeof(line), f)
                        ? sscanf(line, "%ld %lx", &nr, &word)
                        : 0;
            fclose(f);
            if (n == 2 && nr == SYS_futex &&
                (!addr || word == (unsigned long)(uintptr_t)addr))
                return true;
        }
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    return false;
}

#endif

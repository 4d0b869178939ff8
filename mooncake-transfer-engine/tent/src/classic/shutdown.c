/* enableGracefulShutdown: on SIGINT or SIGTERM, and at exit, the engines
 * that asked for it are destroyed (so their metadata entries go away)
 * before the process ends, as Mooncake does.
 *
 * The signal handler only writes the signal number to a pipe; a watcher
 * thread, which never takes the signals itself, reads it, stops the
 * engines and exits with 128 + the signal (after a deadline even if they
 * did not stop).  An engine is destroyed only
 * once no call is inside it (every call counts itself); one still busy
 * after a grace period is left alone. */
#include "classic/classic.h"
#include "common/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define GRACE_MS 2000

/* g_lock guards the list and the installation state.  Lock order:
 * g_lock, then an engine's lock. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct classic_engine *g_engines;
static pid_t g_installed_pid;
static bool g_atexit;
static int g_pipe[2] = {-1, -1};
static volatile sig_atomic_t g_handler_pid;
static volatile sig_atomic_t g_seen;

static void stop_guarded(struct classic_engine *ce)
{
    atomic_store(&ce->closing, true);
    long long until = tent_now_ms() + GRACE_MS;
    while (atomic_load(&ce->active) > 0 && tent_now_ms() < until) {
        struct timespec ms = {.tv_sec = 0, .tv_nsec = 1000000};
        nanosleep(&ms, NULL);
    }
    if (atomic_load(&ce->active) > 0) {
        CLASSIC_WARN("graceful shutdown: engine %p is still busy after %d "
                     "ms; left running",
                     (void *)ce, GRACE_MS);
        return;
    }
    classic_engine_stop(ce);
}

/* Stops every guarded engine.  The list lock is taken with a deadline: a
 * thread that the signal caught while holding it never lets it go. */
static void stop_all(void)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += GRACE_MS / 1000;
    if (pthread_mutex_timedlock(&g_lock, &until) != 0) {
        CLASSIC_WARN("graceful shutdown: engine list busy; engines left "
                     "running");
        return;
    }
    struct classic_engine *list = g_engines;
    g_engines = NULL;
    for (struct classic_engine *ce = list; ce; ce = ce->next_guarded)
        stop_guarded(ce);
    pthread_mutex_unlock(&g_lock);
}

static void at_exit(void)
{
    stop_all();
}

static atomic_bool g_stopped;

static void *stopper(void *arg)
{
    (void)arg;
    stop_all();
    atomic_store(&g_stopped, true);
    return NULL;
}

/* Stops the engines from a thread of its own and exits when it is done, or
 * after a deadline: a thread the signal caught inside the engine (its
 * handler never returns) may hold what the teardown waits for. */
static void *watcher(void *arg)
{
    (void)arg;
    unsigned char signo = 0;
    ssize_t r;
    do
        r = read(g_pipe[0], &signo, 1);
    while (r < 0 && errno == EINTR);
    if (r != 1)
        _exit(1);
    pthread_t thr;
    if (pthread_create(&thr, NULL, stopper, NULL) != 0) {
        stop_all();
        _exit(128 + signo);
    }
    pthread_detach(thr);
    long long until = tent_now_ms() + 3LL * GRACE_MS;
    while (!atomic_load(&g_stopped) && tent_now_ms() < until) {
        struct timespec ms = {.tv_sec = 0, .tv_nsec = 1000000};
        nanosleep(&ms, NULL);
    }
    if (!atomic_load(&g_stopped))
        CLASSIC_WARN("graceful shutdown: engines not stopped after %d ms; "
                     "exiting",
                     3 * GRACE_MS);
    _exit(128 + signo);
}

static void on_signal(int signo)
{
    /* A child forked after installation has the handler but no watcher. */
    if (g_handler_pid != (sig_atomic_t)getpid())
        _exit(128 + signo);
    if (!g_seen) {
        g_seen = signo;
        unsigned char b = (unsigned char)signo;
        if (write(g_pipe[1], &b, 1) != 1)
            _exit(128 + signo);
    }
    for (;;)
        pause();
}

/* Caller holds g_lock. */
static int install_locked(void)
{
    pid_t pid = getpid();
    if (g_installed_pid == pid)
        return 0;
    if (!g_atexit && atexit(at_exit) == 0)
        g_atexit = true;
    for (int i = 0; i < 2; i++)
        if (g_pipe[i] >= 0) {
            close(g_pipe[i]); /* inherited across fork */
            g_pipe[i] = -1;
        }
    if (pipe2(g_pipe, O_CLOEXEC) != 0) {
        CLASSIC_WARN("enableGracefulShutdown: pipe: %s", strerror(errno));
        return -1;
    }
    g_seen = 0;
    /* The watcher starts with both signals blocked, so that it never runs
     * the handler (which would leave no reader). */
    sigset_t block, saved;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &block, &saved);
    pthread_t thr;
    int rc = pthread_create(&thr, NULL, watcher, NULL);
    if (rc == 0) {
        pthread_detach(thr);
        g_handler_pid = (sig_atomic_t)pid;
        struct sigaction sa = {.sa_handler = on_signal};
        sa.sa_mask = block;
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        g_installed_pid = pid;
    }
    pthread_sigmask(SIG_SETMASK, &saved, NULL);
    if (rc != 0) {
        CLASSIC_WARN("enableGracefulShutdown: pthread_create: %s",
                     strerror(rc));
        close(g_pipe[0]);
        close(g_pipe[1]);
        g_pipe[0] = g_pipe[1] = -1;
        return -1;
    }
    return 0;
}

CLASSIC_API void enableGracefulShutdown(transfer_engine_t engine)
{
    struct classic_engine *ce = classic_engine_of(engine, __func__);
    if (!ce)
        return;
    pthread_mutex_lock(&g_lock);
    if (install_locked() == 0 && !atomic_load(&ce->guarded)) {
        atomic_store(&ce->guarded, true);
        ce->next_guarded = g_engines;
        g_engines = ce;
    }
    pthread_mutex_unlock(&g_lock);
}

void classic_shutdown_forget(struct classic_engine *ce)
{
    pthread_mutex_lock(&g_lock);
    for (struct classic_engine **p = &g_engines; *p; p = &(*p)->next_guarded)
        if (*p == ce) {
            *p = ce->next_guarded;
            break;
        }
    pthread_mutex_unlock(&g_lock);
}

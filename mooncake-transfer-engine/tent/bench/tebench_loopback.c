/* tebench --loopback: the target in a forked child, the initiator in this
 * process, over the transport the flags (or this build) choose; and where a
 * libmf_smem.so for the memfabric transport is found. */
#include "tebench.h"

#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* How long the child may take to report its segment. */
#define TB_TARGET_READY_S 30

static bool file_exists(const char *p)
{
    struct stat st;
    return p && *p && stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static bool on_loader_path(void)
{
    void *h = dlopen("libmf_smem.so", RTLD_LAZY | RTLD_LOCAL);
    if (h)
        dlclose(h);
    return h != NULL;
}

/* Whether a libmf_smem.so is reachable: MF_SMEM_LIBRARY, else the mf_host
 * library of this build (or its installed copy) and the loader's search
 * path, in the order prefer_vendor says.  Picking mf_host sets
 * MF_SMEM_LIBRARY, so the engines (and a loopback child) load that file. */
bool tb_find_mf_library(bool prefer_vendor, char *why, size_t len)
{
    const char *env = getenv("MF_SMEM_LIBRARY");
    if (env && *env) {
        snprintf(why, len, "MF_SMEM_LIBRARY=%s", env);
        return file_exists(env);
    }
    if (prefer_vendor && on_loader_path()) {
        snprintf(why, len, "libmf_smem.so on the loader path");
        return true;
    }
#ifdef TEBENCH_MF_HOST_LIB
    /* The copy beside this executable first: an installed tebench loads
     * the installed library (found from its own location, so a moved
     * prefix works too), the build tree's tebench the build's. */
    char exe[4096], near[4096 + 64];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    exe[n > 0 ? n : 0] = '\0';
    bool in_build = strcmp(exe, TEBENCH_BUILD_EXE) == 0;
    char *slash = strrchr(exe, '/');
    near[0] = '\0';
    if (slash && !in_build) {
        *slash = '\0';
        snprintf(near, sizeof(near), "%s/%s", exe,
                 TEBENCH_MF_HOST_LIB_FROM_BIN);
    }
    const char *const order[] = {
        in_build ? TEBENCH_MF_HOST_LIB : near,
        TEBENCH_MF_HOST_LIB_INSTALLED,
        in_build ? near : TEBENCH_MF_HOST_LIB,
    };
    for (size_t i = 0; i < sizeof(order) / sizeof(*order); i++)
        if (order[i][0] && file_exists(order[i])) {
            char real[4096];
            const char *path = realpath(order[i], real) ? real : order[i];
            setenv("MF_SMEM_LIBRARY", path, 1);
            snprintf(why, len, "mf_host %s", path);
            return true;
        }
#endif
    if (!prefer_vendor && on_loader_path()) {
        snprintf(why, len, "libmf_smem.so on the loader path");
        return true;
    }
    snprintf(why, len,
             "no libmf_smem.so (set MF_SMEM_LIBRARY or build mf_host)");
    return false;
}

/* Loopback default: memfabric over mf_host when it is there, else tcp. */
static const char *loopback_transport(const struct tb_opts *o)
{
    char why[600];
    if (strcasecmp(o->xport_type, "memfabric") == 0) {
        if (tb_find_mf_library(false, why, sizeof(why)) &&
            !getenv("MF_PROTOCOL"))
            setenv("MF_PROTOCOL", "host_tcp", 1);
        fprintf(stderr,
                "tebench: loopback over memfabric (%s, MF_PROTOCOL=%s)\n", why,
                getenv("MF_PROTOCOL") ? getenv("MF_PROTOCOL") : "unset");
        return "memfabric";
    }
    if (o->xport_type[0])
        return o->xport_type; /* tcp, shm, or auto: the engine's policy */
    if (tb_find_mf_library(false, why, sizeof(why))) {
        if (!getenv("MF_PROTOCOL"))
            setenv("MF_PROTOCOL", "host_tcp", 1);
        tent_engine_t e = tb_make_engine(o, "memfabric");
        if (e) {
            tent_destroy_engine(e);
            fprintf(stderr,
                    "tebench: loopback over memfabric (%s, MF_PROTOCOL=%s)\n",
                    why, getenv("MF_PROTOCOL"));
            return "memfabric";
        }
        fprintf(stderr, "tebench: memfabric transport not usable here; "
                        "loopback over tcp\n");
    } else {
        fprintf(stderr, "tebench: loopback over tcp (%s)\n", why);
    }
    return "tcp";
}

static void reap_child(pid_t pid)
{
    if (kill(pid, SIGTERM) != 0 && errno != ESRCH)
        perror("tebench: kill target");
    double deadline = tb_now() + 5;
    int st;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid || (r < 0 && errno != EINTR))
            break;
        if (tb_now() > deadline) {
            fprintf(stderr,
                    "tebench: target process %d did not exit within "
                    "5 s of SIGTERM; killing it\n",
                    (int)pid);
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return;
        }
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
}

int tb_run_loopback(struct tb_opts *o)
{
    const char *xport = loopback_transport(o);
    int fds[2];
    if (pipe(fds)) {
        perror("tebench: pipe");
        return TB_EXIT_ERROR;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        perror("tebench: fork");
        return TB_EXIT_ERROR;
    }
    if (pid == 0) {
        close(fds[0]);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
            _exit(TB_EXIT_ERROR);
        int rc = tb_run_target(o, xport, fds[1]);
        fflush(stdout);
        fflush(stderr);
        _exit(rc);
    }
    close(fds[1]);
    /* --rpc_server_port and --seg_name name the target's endpoint; the
     * initiator picks its own */
    if (o->rpc_server_port >= 0)
        tent_set_config("rpc_server_port", "0");
    if (o->seg_name[0])
        tent_set_config("local_segment_name", "");
    o->rpc_server_port = -1;
    o->seg_name[0] = 0;
    char line[600] = "";
    size_t got = 0;
    double deadline = tb_now() + TB_TARGET_READY_S;
    while (got < sizeof(line) - 1 && !strchr(line, '\n')) {
        double left = deadline - tb_now();
        struct pollfd pfd = {.fd = fds[0], .events = POLLIN};
        int pr = left > 0 ? poll(&pfd, 1, (int)(left * 1000) + 1) : 0;
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            break;
        ssize_t n = read(fds[0], line + got, sizeof(line) - 1 - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
        line[got] = 0;
    }
    close(fds[0]);
    char *nl = strchr(line, '\n');
    if (!nl || strncmp(line, "OK ", 3) != 0) {
        if (nl)
            *nl = 0;
        fprintf(stderr, "tebench: loopback target did not start: %s\n",
                line[0] ? line : "no answer within 30 s");
        reap_child(pid);
        return TB_EXIT_ERROR;
    }
    *nl = 0;
    snprintf(o->target_seg_name, sizeof(o->target_seg_name), "%s", line + 3);
    fprintf(stderr, "tebench: loopback target pid %d serves segment '%s'\n",
            (int)pid, o->target_seg_name);
    o->target_pid = (int)pid;
    int rc = tb_run_initiator(o, xport);
    o->target_pid = 0;
    reap_child(pid);
    return rc;
}

/* For tests that need a metadata service: etcd, redis-server or the python3
 * HTTP test server (tests/meta/http_meta_server.py), started on loopback
 * ports of the test's own and stopped by it.  Header-only, without TENT
 * dependencies; include it as "../common/meta_server.h".  Each test says
 * itself when the service is ready (with its own client). */
#ifndef TENT_TESTS_META_SERVER_H
#define TENT_TESTS_META_SERVER_H

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* A loopback port free right now (-1 on error). */
static inline int ms_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t l = sizeof(a);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) ||
        getsockname(fd, (struct sockaddr *)&a, &l)) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    return ntohs(a.sin_port);
}

static inline bool ms_in_path(const char *bin)
{
    const char *path = getenv("PATH");
    char buf[1024];
    while (path && *path) {
        size_t n = strcspn(path, ":");
        snprintf(buf, sizeof(buf), "%.*s/%s", (int)n, path, bin);
        if (access(buf, X_OK) == 0)
            return true;
        path += n + (path[n] == ':');
    }
    return false;
}

/* The program that serves kind ("etcd", "redis", "http") and the Debian
 * package that has it. */
static inline const char *ms_server_bin(const char *kind)
{
    return strcmp(kind, "etcd") == 0    ? "etcd"
           : strcmp(kind, "redis") == 0 ? "redis-server"
                                        : "python3";
}

static inline const char *ms_server_package(const char *kind)
{
    return strcmp(kind, "etcd") == 0    ? "etcd-server"
           : strcmp(kind, "redis") == 0 ? "redis-server"
                                        : "python3";
}

/* The service's address as TENT's metadata_servers takes it. */
static inline void ms_endpoint(const char *kind, int port, char *out,
                               size_t cap)
{
    if (strcmp(kind, "redis") == 0)
        snprintf(out, cap, "127.0.0.1:%d", port);
    else if (strcmp(kind, "http") == 0)
        snprintf(out, cap, "http://127.0.0.1:%d/metadata", port);
    else
        snprintf(out, cap, "http://127.0.0.1:%d", port);
}

/* Starts the server for kind on 127.0.0.1:port (etcd also uses peer_port)
 * with its data in dir and its output in log; script is the HTTP server's
 * path, password redis's (NULL: none).  The server dies with the test.
 * Returns its pid, or -1. */
static inline pid_t ms_spawn(const char *kind, int port, int peer_port,
                             const char *dir, const char *log,
                             const char *script, const char *password)
{
    char client[64], peer[64], ports[16], cluster[128];
    snprintf(client, sizeof(client), "http://127.0.0.1:%d", port);
    snprintf(peer, sizeof(peer), "http://127.0.0.1:%d", peer_port);
    snprintf(ports, sizeof(ports), "%d", port);
    snprintf(cluster, sizeof(cluster), "meta-test=%s", peer);
    mkdir(dir, 0700);
    fflush(NULL);
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
    }
    if (strcmp(kind, "etcd") == 0)
        execlp("etcd", "etcd", "--name", "meta-test", "--data-dir", dir,
               "--listen-client-urls", client, "--advertise-client-urls",
               client, "--listen-peer-urls", peer,
               "--initial-advertise-peer-urls", peer, "--initial-cluster",
               cluster, (char *)NULL);
    else if (strcmp(kind, "redis") == 0 && password)
        execlp("redis-server", "redis-server", "--port", ports, "--bind",
               "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir,
               "--requirepass", password, "--protected-mode", "no",
               "--daemonize", "no", (char *)NULL);
    else if (strcmp(kind, "redis") == 0)
        execlp("redis-server", "redis-server", "--port", ports, "--bind",
               "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir,
               "--protected-mode", "no", "--daemonize", "no", (char *)NULL);
    else
        execlp("python3", "python3", script, ports, (char *)NULL);
    _exit(127);
}

static inline long ms_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* SIGTERM, and SIGKILL after 10 s. */
static inline void ms_stop(pid_t pid)
{
    if (pid <= 0)
        return;
    kill(pid, SIGTERM);
    long t0 = ms_now_ms();
    while (waitpid(pid, NULL, WNOHANG) == 0) {
        if (ms_now_ms() - t0 > 10000) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            break;
        }
        usleep(10000);
    }
}

#endif

/* For tests whose process owns memory that a peer copies into over
 * host_shm: finds this process's mf_host control page(s) (mf_host_ctl.h)
 * and tells whether a given peer process holds a copy window open, i.e. is
 * inside a copy into or out of our memory right now.  Header-only, no TENT
 * dependency (the e2e revoke test uses it too). */
#ifndef TENT_TESTS_MFH_CTL_PROBE_H
#define TENT_TESTS_MFH_CTL_PROBE_H

#include "mf_host/mf_host_ctl.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define MFH_PROBE_MAX 8

/* Read-only mappings of the control pages this process's instances keep. */
struct mfh_probe {
    const struct mfh_ctl *ctl[MFH_PROBE_MAX];
    int n;
};

/* Maps every control page of this process (the memfds named
 * "mf_host-ctl"); returns how many were found. */
static inline int mfh_probe_open(struct mfh_probe *pr)
{
    pr->n = 0;
    DIR *d = opendir("/proc/self/fd");
    struct dirent *de;
    while (d && pr->n < MFH_PROBE_MAX && (de = readdir(d)) != NULL) {
        char path[300], target[256];
        snprintf(path, sizeof(path), "/proc/self/fd/%s", de->d_name);
        ssize_t k = readlink(path, target, sizeof(target) - 1);
        if (k <= 0)
            continue;
        target[k] = '\0';
        if (strncmp(target, "/memfd:mf_host-ctl", 18) != 0)
            continue;
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd < 0)
            continue;
        void *m = MAP_FAILED;
        if (fstat(fd, &st) == 0 && (size_t)st.st_size >= sizeof(struct mfh_ctl))
            m = mmap(NULL, sizeof(struct mfh_ctl), PROT_READ, MAP_SHARED, fd,
                     0);
        close(fd);
        if (m == MAP_FAILED)
            continue;
        if (((const struct mfh_ctl *)m)->magic != MFH_CTL_MAGIC) {
            munmap(m, sizeof(struct mfh_ctl));
            continue;
        }
        pr->ctl[pr->n++] = m;
    }
    if (d)
        closedir(d);
    return pr->n;
}

static inline void mfh_probe_close(struct mfh_probe *pr)
{
    for (int i = 0; i < pr->n; i++)
        munmap((void *)pr->ctl[i], sizeof(struct mfh_ctl));
    pr->n = 0;
}

/* Whether process pid is inside a copy window of one of our pages. */
static inline bool mfh_probe_window_open(const struct mfh_probe *pr, pid_t pid)
{
    for (int i = 0; i < pr->n; i++)
        for (uint32_t s = 0; s < MFH_CTL_SLOTS; s++) {
            const struct mfh_win *w = &pr->ctl[i]->slots[s];
            if (atomic_load(&w->pid) == (int64_t)pid &&
                (atomic_load(&w->seq) & 1))
                return true;
        }
    return false;
}

#endif

/* mf_host batches: submission, the worker threads that execute them, and
 * the consume-once status table.
 *
 * A batch goes through two phases on the work queue.  CHECK: one worker
 * asks the peer whether every remote range of the batch lies in memory it
 * registered; if not, the batch fails with SM_INVALID_PARAM before any byte
 * moves.  COPY: workers claim slices (at most MFH_SLICE bytes each) from
 * the head batch, so one large batch is spread over all workers and the
 * peer's connection pool.  The worker finishing the last slice publishes
 * the result; only then does a query answer SM_OK, so no memory of the
 * batch is accessed after its result is seen.  The check is made as of the
 * peer's rev_gen (b->rev_snap), against which every slice is admitted
 * (copy_cma_slice; a tcp slice carries it to the peer's server). */
#include "mf_host.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

static int io_fail(struct mfh_peer *p, struct mfh_conn *c, int err)
{
    /* A bad local buffer breaks only this connection; anything else means
     * the connection to the peer dropped. */
    mfh_conn_release(p, c, true);
    if (err == EFAULT) {
        MFH_ERROR("%s: copy with %s: a local buffer is not accessible",
                  p->h->uid, p->uid);
        return SM_ERROR;
    }
    mfh_peer_mark_down(p, strerror(err));
    return SM_NOT_CONNECTED;
}

static void log_bad_range(struct mfh_batch *b, uint64_t i)
{
    struct mfh_peer *p = b->peer;
    MFH_ERROR("%s: batch %llu: remote range %llu [0x%llx, +%llu) is not "
              "registered at %s",
              p->h->uid, (unsigned long long)b->id, (unsigned long long)i,
              i < b->n_ranges ? (unsigned long long)b->ranges[i].addr : 0ULL,
              i < b->n_ranges ? (unsigned long long)b->ranges[i].len : 0ULL,
              p->uid);
}

static int32_t run_check(struct mfh_batch *b)
{
    struct mfh_peer *p = b->peer;
    struct mfh_conn *c = mfh_conn_acquire(p);
    if (!c)
        return SM_NOT_CONNECTED;
    struct mfh_msg m = {.magic = MFH_MAGIC,
                        .type = MFH_MSG_CHECK,
                        .count = b->n_ranges,
                        .len = (uint64_t)b->n_ranges * sizeof(*b->ranges)};
    if (mfh_send_full(c->fd, &m, sizeof(m)) != 0 ||
        mfh_send_full(c->fd, b->ranges, m.len) != 0 ||
        mfh_recv_full(c->fd, &m, sizeof(m)) != 0)
        return io_fail(p, c, errno);
    if (m.magic != MFH_MAGIC || m.type != MFH_MSG_REPLY || m.len != 0)
        return io_fail(p, c, EPROTO);
    mfh_conn_release(p, c, false);
    if (m.status != SM_OK)
        log_bad_range(b, m.addr);
    b->rev_snap = m.gen;
    return m.status;
}

/* A process being killed loses its address space before its sockets are
 * closed, so a cross-memory copy into it fails with EFAULT just before the
 * control connection drops.  Give the connection a moment to tell which it
 * is: a peer going down, or a bad address. */
static bool peer_exiting(struct mfh_peer *p)
{
    if (atomic_load(&p->down))
        return true;
    struct pollfd pfd = {.fd = p->ctrl_fd, .events = POLLIN | POLLRDHUP};
    if (poll(&pfd, 1, 200) <= 0)
        return false;
    char c;
    ssize_t n = recv(p->ctrl_fd, &c, 1, MSG_DONTWAIT | MSG_PEEK);
    return n == 0 || (n < 0 && errno != EAGAIN);
}

/* Fetches the peer's registered ranges into its cache. */
static int32_t fetch_ranges(struct mfh_peer *p)
{
    struct mfh_conn *c = mfh_conn_acquire(p);
    if (!c)
        return SM_NOT_CONNECTED;
    struct mfh_msg m = {.magic = MFH_MAGIC, .type = MFH_MSG_RANGES};
    if (mfh_send_full(c->fd, &m, sizeof(m)) != 0 ||
        mfh_recv_full(c->fd, &m, sizeof(m)) != 0)
        return io_fail(p, c, errno);
    if (m.magic != MFH_MAGIC || m.type != MFH_MSG_REPLY ||
        (m.status == SM_OK &&
         (m.count > MFH_MAX_BATCH ||
          m.len != (uint64_t)m.count * sizeof(struct mfh_wire_range))) ||
        (m.status != SM_OK && m.len != 0))
        return io_fail(p, c, EPROTO);
    if (m.status != SM_OK) {
        mfh_conn_release(p, c, false);
        return m.status;
    }
    struct mfh_wire_range *w = malloc(m.len ? m.len : 1);
    struct mfh_range *r = calloc(m.count ? m.count : 1, sizeof(*r));
    if (!w || !r) {
        free(w);
        free(r);
        mfh_conn_release(p, c, true); /* the reply is left unread */
        return SM_MALLOC_FAILED;
    }
    if (m.len && mfh_recv_full(c->fd, w, m.len) != 0) {
        free(w);
        free(r);
        return io_fail(p, c, errno);
    }
    mfh_conn_release(p, c, false);
    for (uint32_t i = 0; i < m.count; i++)
        r[i] = (struct mfh_range){.base = (uintptr_t)w[i].addr,
                                  .len = (size_t)w[i].len};
    free(w);
    pthread_mutex_lock(&p->cache_lock);
    free(p->cache);
    p->cache = r;
    p->n_cache = m.count;
    p->cache_gen = m.addr;
    p->cache_rev = m.gen;
    p->cache_valid = true;
    pthread_mutex_unlock(&p->cache_lock);
    mfh_shm_invalidate(p); /* registrations changed: maps may be stale */
    return SM_OK;
}

/* Checks a batch to a cross-memory-attach peer against its cached ranges,
 * refreshed whenever the peer's generation (in its control page) has moved
 * on, so steady traffic costs no round trip per batch. */
static int32_t run_check_cma(struct mfh_batch *b)
{
    struct mfh_peer *p = b->peer;
    for (int attempt = 0; attempt < 3; attempt++) {
        uint64_t gen = atomic_load(&p->ctl->mem_gen);
        pthread_mutex_lock(&p->cache_lock);
        if (p->cache_valid && p->cache_gen == gen) {
            int32_t rc = SM_OK;
            for (uint32_t i = 0; i < b->n_ranges; i++) {
                if (!mfh_ranges_cover(p->cache, p->n_cache, b->ranges[i].addr,
                                      b->ranges[i].len, NULL)) {
                    rc = SM_INVALID_PARAM;
                    log_bad_range(b, i);
                    break;
                }
            }
            b->rev_snap = p->cache_rev;
            pthread_mutex_unlock(&p->cache_lock);
            return rc;
        }
        pthread_mutex_unlock(&p->cache_lock);
        int32_t rc = fetch_ranges(p);
        if (rc != SM_OK)
            return rc;
    }
    return run_check(b); /* registrations keep changing: ask the peer */
}

static int32_t copy_cma(struct mfh_batch *b, const struct mfh_slice *s)
{
    struct mfh_peer *p = b->peer;
    size_t done = 0;
    while (done < s->len) {
        struct iovec l = {.iov_base = (void *)(s->local + done),
                          .iov_len = s->len - done};
        struct iovec r = {.iov_base = (void *)(uintptr_t)(s->remote + done),
                          .iov_len = s->len - done};
        /* the kernel copies user memory: hidden from TSan (mf_host.h) */
        TENT_USER_IO_BEGIN();
        ssize_t n = b->opcode == SMEM_TRANS_OP_WRITE
                        ? process_vm_writev(p->pid, &l, 1, &r, 1, 0)
                        : process_vm_readv(p->pid, &l, 1, &r, 1, 0);
        int cma_err = errno;
        TENT_USER_IO_END();
        if (n <= 0) {
            int err = n < 0 ? cma_err : EFAULT;
            if (err == EINTR)
                continue;
            if (err == ESRCH || peer_exiting(p)) {
                mfh_peer_mark_down(p, "process is gone");
                return SM_NOT_CONNECTED;
            }
            MFH_ERROR("%s: batch %llu: %s of %zu bytes at 0x%llx in pid %d: "
                      "%s",
                      p->h->uid, (unsigned long long)b->id,
                      b->opcode == SMEM_TRANS_OP_WRITE ? "process_vm_writev"
                                                       : "process_vm_readv",
                      s->len - done, (unsigned long long)(s->remote + done),
                      (int)p->pid, strerror(err));
            return SM_ERROR;
        }
        done += (size_t)n;
    }
    return SM_OK;
}

/* Copies slice s of b to or from a cross-memory-attach peer, through a
 * shared mapping or process_vm_*, inside worker widx's window in the
 * peer's control page: refused if the peer deregistered memory overlapping
 * it since the batch's check, failed if the peer gave up waiting for the
 * copy (we stalled inside it longer than its timeout). */
static int32_t copy_cma_slice(struct mfh_batch *b, int widx,
                              const struct mfh_slice *s)
{
    struct mfh_peer *p = b->peer;
    struct mfh_win *w = p->slots[widx];
    if (!mfh_win_open(w, p->ctl, b->rev_snap, s->remote, s->len)) {
        MFH_ERROR("%s: batch %llu: [0x%llx, +%zu) was deregistered by %s "
                  "during the batch",
                  p->h->uid, (unsigned long long)b->id,
                  (unsigned long long)s->remote, s->len, p->uid);
        return SM_INVALID_PARAM;
    }
    int32_t rc = mfh_shm_copy(p, b->opcode, s);
    if (rc == MFH_SHM_NOMAP)
        rc = copy_cma(b, s);
    else
        atomic_store(&b->used_map, true);
    if (!mfh_win_close(w)) {
        MFH_ERROR("%s: batch %llu: %s stopped waiting for our copy of "
                  "[0x%llx, +%zu) (we stalled inside it beyond its "
                  "MF_TRANSFER_TIMEOUT while it deregistered the range)",
                  p->h->uid, (unsigned long long)b->id, p->uid,
                  (unsigned long long)s->remote, s->len);
        if (rc == SM_OK)
            rc = SM_TIMEOUT;
    }
    return rc;
}

/* Copies a run of k slices of b over one data connection, pipelined: every
 * request goes out first (one sendmsg), then the answers are read in
 * order, so small slices cost one round trip per run rather than one
 * each.  The server answers each request in turn; its answers to writes
 * are small enough to wait in our receive buffer while we still send, and
 * read requests are small enough to wait in its.  Each request carries the
 * batch's rev_snap, so the server refuses a slice into memory deregistered
 * since the batch was checked. */
static int32_t copy_tcp_run(struct mfh_batch *b, const struct mfh_slice *s,
                            size_t k)
{
    struct mfh_peer *p = b->peer;
    struct mfh_conn *c = mfh_conn_acquire(p);
    if (!c)
        return SM_NOT_CONNECTED;
    bool write = b->opcode == SMEM_TRANS_OP_WRITE;
    struct mfh_msg m[MFH_RUN_MAX];
    struct iovec iov[2 * MFH_RUN_MAX];
    int n = 0;
    for (size_t i = 0; i < k; i++) {
        m[i] = (struct mfh_msg){.magic = MFH_MAGIC,
                                .type = write ? MFH_MSG_WRITE : MFH_MSG_READ,
                                .addr = s[i].remote,
                                .len = s[i].len,
                                .gen = b->rev_snap};
        memcpy(m[i].key, s[i].key, MFH_KEY_LEN);
        iov[n++] = (struct iovec){.iov_base = &m[i], .iov_len = sizeof(m[i])};
        if (write)
            iov[n++] = (struct iovec){.iov_base = (void *)s[i].local,
                                      .iov_len = s[i].len};
    }
    if (mfh_sendv_user(c->fd, iov, n) != 0)
        return io_fail(p, c, errno);
    /* Answers to writes through a buffer (one receive call for many);
     * answers to reads unbuffered, their data straight into the local
     * buffer, where the kernel reports a bad address as an error, received
     * with the final status that follows them. */
    uint8_t in_buf[8192];
    struct tent_net_inbuf in = {.b = in_buf, .cap = sizeof(in_buf)};
    int32_t status = SM_OK;
    for (size_t i = 0; i < k; i++) {
        struct mfh_msg r;
        if ((write ? tent_net_inbuf_read(c->fd, &in, &r, sizeof(r), SIZE_MAX)
                   : mfh_recv_full(c->fd, &r, sizeof(r))) != 0)
            return io_fail(p, c, errno);
        if (r.magic != MFH_MAGIC || r.type != MFH_MSG_REPLY ||
            (!write && r.status == SM_OK && r.len != s[i].len) ||
            ((write || r.status != SM_OK) && r.len != 0))
            return io_fail(p, c, EPROTO);
        if (!write && r.status == SM_OK) {
            struct mfh_msg t;
            struct iovec v[2] = {
                {.iov_base = (void *)s[i].local, .iov_len = s[i].len},
                {.iov_base = &t, .iov_len = sizeof(t)}};
            if (mfh_recvv_user(c->fd, v, 2) != 0)
                return io_fail(p, c, errno);
            if (t.magic != MFH_MAGIC || t.type != MFH_MSG_REPLY || t.len != 0)
                return io_fail(p, c, EPROTO);
            r.status = t.status;
        }
        if (r.status != SM_OK) {
            MFH_ERROR("%s: batch %llu: peer %s refused [0x%llx, +%zu): %d",
                      p->h->uid, (unsigned long long)b->id, p->uid,
                      (unsigned long long)s[i].remote, s[i].len, (int)r.status);
            if (status == SM_OK)
                status = r.status;
        }
    }
    if (in.pos != in.len) /* more than we asked for */
        return io_fail(p, c, EPROTO);
    mfh_conn_release(p, c, false);
    return status;
}

static void batch_finish(struct mfh_handle *h, struct mfh_batch *b,
                         int32_t result)
{
    struct mfh_peer *p = b->peer;
    b->peer = NULL;
    mfh_peer_put(p);
    pthread_mutex_lock(&h->batch_lock);
    b->result = result;
    b->done = true;
    pthread_mutex_unlock(&h->batch_lock);
    /* b may be consumed and freed from here on. */
}

/* Wakes as many workers as can take part of b: one for a check or for what
 * one run carries, all of them for several runs to share. */
static void q_wake(struct mfh_handle *h, const struct mfh_batch *b)
{
    if (b->phase == MFH_PHASE_CHECK || b->bytes_left <= MFH_SLICE ||
        b->n_slices - b->next_slice == 1)
        pthread_cond_signal(&h->q_cond);
    else
        pthread_cond_broadcast(&h->q_cond);
}

static void q_push(struct mfh_handle *h, struct mfh_batch *b)
{
    b->q_next = NULL;
    if (h->q_tail)
        h->q_tail->q_next = b;
    else
        h->q_head = b;
    h->q_tail = b;
    q_wake(h, b);
}

static void q_pop(struct mfh_handle *h)
{
    h->q_head = h->q_head->q_next;
    if (!h->q_head)
        h->q_tail = NULL;
}

static void *worker_main(void *arg)
{
    const struct mfh_worker *self = arg;
    struct mfh_handle *h = self->h;
    pthread_mutex_lock(&h->q_lock);
    for (;;) {
        while (!atomic_load(&h->stopping) && !h->q_head)
            pthread_cond_wait(&h->q_cond, &h->q_lock);
        if (atomic_load(&h->stopping))
            break;
        struct mfh_batch *b = h->q_head;
        if (b->phase == MFH_PHASE_CHECK) {
            q_pop(h);
            pthread_mutex_unlock(&h->q_lock);
            int32_t rc = b->peer->use_cma ? run_check_cma(b) : run_check(b);
            if (rc != SM_OK) {
                batch_finish(h, b, rc);
                pthread_mutex_lock(&h->q_lock);
                continue;
            }
            /* Checked: its copy goes first, and this worker takes the
             * first run at once (no hand-off to another thread). */
            pthread_mutex_lock(&h->q_lock);
            b->phase = MFH_PHASE_COPY;
            b->q_next = h->q_head;
            h->q_head = b;
            if (!h->q_tail)
                h->q_tail = b;
            if (b->bytes_left > MFH_SLICE)
                pthread_cond_broadcast(&h->q_cond);
            continue;
        }
        /* A run of slices: an even share of what is left among the
         * workers, but at least MFH_SLICE bytes when there are, at most
         * MFH_RUN_MAX slices and MFH_RUN_BYTES (one slice at least), so
         * that small slices are pipelined by one worker (splitting 32 x
         * 4 KiB four ways cost more wake-ups than it saved) and large
         * ones still spread over every worker and connection. */
        size_t idx = b->next_slice, left = b->n_slices - idx;
        size_t want = (left + MFH_WORKERS - 1) / MFH_WORKERS, k = 0;
        size_t bytes = 0;
        while (k < left && k < MFH_RUN_MAX && (k < want || bytes < MFH_SLICE) &&
               (k == 0 || bytes + b->slices[idx + k].len <= MFH_RUN_BYTES))
            bytes += b->slices[idx + k++].len;
        b->next_slice += k;
        b->bytes_left -= bytes;
        if (b->next_slice == b->n_slices)
            q_pop(h);
        pthread_mutex_unlock(&h->q_lock);

        int32_t rc = SM_OK;
        if (atomic_load(&b->first_error) != SM_OK) {
            /* the batch failed already: its other slices are not copied */
        } else if (atomic_load(&b->peer->down)) {
            rc = SM_NOT_CONNECTED;
        } else if (b->peer->use_cma) {
            for (size_t i = 0; i < k && rc == SM_OK; i++) {
                rc = copy_cma_slice(b, self->idx, &b->slices[idx + i]);
            }
        } else {
            rc = copy_tcp_run(b, &b->slices[idx], k);
        }
        if (rc != SM_OK) {
            int expected = SM_OK;
            atomic_compare_exchange_strong(&b->first_error, &expected, rc);
        }
        if (atomic_fetch_sub(&b->remaining, k) == k) {
            int32_t result = atomic_load(&b->first_error);
            /* A mapping outlives the peer: its bytes count only if the
             * peer is still there after the last one. */
            if (result == SM_OK && atomic_load(&b->used_map) &&
                !mfh_shm_peer_alive(b->peer)) {
                mfh_peer_mark_down(b->peer, "process is gone");
                result = SM_NOT_CONNECTED;
            }
            batch_finish(h, b, result);
        }
        pthread_mutex_lock(&h->q_lock);
    }
    pthread_mutex_unlock(&h->q_lock);
    return NULL;
}

int mfh_workers_start(struct mfh_handle *h)
{
    for (int i = 0; i < MFH_WORKERS; i++) {
        h->worker_args[i] = (struct mfh_worker){.h = h, .idx = i};
        if (pthread_create(&h->workers[i], NULL, worker_main,
                           &h->worker_args[i]) != 0) {
            MFH_ERROR("cannot start worker thread %d", i);
            return SM_ERROR;
        }
        h->n_workers++;
    }
    return SM_OK;
}

void mfh_workers_stop(struct mfh_handle *h)
{
    pthread_mutex_lock(&h->q_lock);
    pthread_cond_broadcast(&h->q_cond);
    pthread_mutex_unlock(&h->q_lock);
    for (int i = 0; i < h->n_workers; i++)
        pthread_join(h->workers[i], NULL);
    h->n_workers = 0;
}

static void batch_free(struct mfh_batch *b)
{
    if (b->peer)
        mfh_peer_put(b->peer);
    free(b->ranges);
    free(b->slices);
    free(b);
}

/* Parameters are validated by the caller; p is referenced and handed to
 * the batch on success. */
int32_t mfh_batch_submit(struct mfh_handle *h, struct mfh_peer *p,
                         const smem_trans_batch_params_t *params,
                         const uint8_t *keys, uint64_t *batch_id)
{
    uint32_t n = params->batchSize;
    size_t n_slices = 0;
    for (uint32_t i = 0; i < n; i++)
        n_slices += (params->sizeList[i] + MFH_SLICE - 1) / MFH_SLICE;

    struct mfh_batch *b = calloc(1, sizeof(*b));
    if (!b)
        return SM_MALLOC_FAILED;
    b->ranges = calloc(n, sizeof(*b->ranges));
    b->slices = calloc(n_slices, sizeof(*b->slices));
    if (!b->ranges || !b->slices) {
        batch_free(b);
        return SM_MALLOC_FAILED;
    }
    b->opcode = params->opcode;
    b->n_ranges = n;
    b->n_slices = n_slices;
    size_t k = 0;
    for (uint32_t i = 0; i < n; i++) {
        uintptr_t local = (uintptr_t)params->srcList[i];
        uint64_t remote = (uint64_t)(uintptr_t)params->destList[i];
        size_t len = params->sizeList[i];
        b->ranges[i] = (struct mfh_wire_range){.addr = remote, .len = len};
        if (keys)
            memcpy(b->ranges[i].key, keys + (size_t)i * MFH_KEY_LEN,
                   MFH_KEY_LEN);
        for (size_t off = 0; off < len; off += MFH_SLICE) {
            size_t sl = len - off < MFH_SLICE ? len - off : MFH_SLICE;
            b->slices[k++] = (struct mfh_slice){.local = local + off,
                                                .remote = remote + off,
                                                .len = sl,
                                                .key = b->ranges[i].key};
        }
    }
    atomic_init(&b->remaining, n_slices);
    for (size_t i = 0; i < n_slices; i++)
        b->bytes_left += b->slices[i].len;
    atomic_init(&b->first_error, SM_OK);
    atomic_init(&b->used_map, false);
    /* The server validates each tcp request itself, so a batch of one slice
     * needs no separate check; everything else is checked up front so a
     * bad range leaves the batch's memory untouched. */
    b->phase =
        (n_slices == 1 && !p->use_cma) ? MFH_PHASE_COPY : MFH_PHASE_CHECK;
    b->peer = p;

    pthread_mutex_lock(&h->batch_lock);
    b->id = ++h->next_batch_id;
    struct mfh_batch **bucket = &h->batch_tab[b->id % MFH_BATCH_BUCKETS];
    b->tab_next = *bucket;
    *bucket = b;
    pthread_mutex_unlock(&h->batch_lock);

    *batch_id = b->id;
    pthread_mutex_lock(&h->q_lock);
    q_push(h, b);
    pthread_mutex_unlock(&h->q_lock);
    return SM_OK;
}

int32_t mfh_batch_query(struct mfh_handle *h, uint64_t id, int32_t *result)
{
    struct mfh_batch *found = NULL;
    int32_t rc;
    pthread_mutex_lock(&h->batch_lock);
    struct mfh_batch **pp = &h->batch_tab[id % MFH_BATCH_BUCKETS];
    while (*pp && (*pp)->id != id)
        pp = &(*pp)->tab_next;
    if (!*pp) {
        rc = SM_OBJECT_NOT_EXISTS;
    } else if (!(*pp)->done) {
        rc = SM_NEED_RETRY;
    } else {
        found = *pp;
        *pp = found->tab_next;
        *result = found->result;
        rc = SM_OK;
    }
    pthread_mutex_unlock(&h->batch_lock);
    if (found)
        batch_free(found);
    return rc;
}

/* Called after the workers stopped: frees every unconsumed batch. */
void mfh_batches_free(struct mfh_handle *h)
{
    for (size_t i = 0; i < MFH_BATCH_BUCKETS; i++) {
        struct mfh_batch *b = h->batch_tab[i];
        while (b) {
            struct mfh_batch *next = b->tab_next;
            batch_free(b);
            b = next;
        }
        h->batch_tab[i] = NULL;
    }
    h->q_head = h->q_tail = NULL;
}

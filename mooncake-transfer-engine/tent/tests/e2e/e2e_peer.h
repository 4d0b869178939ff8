/* Two-process harness for the end-to-end tests: a child process runs a
 * target engine and answers commands over a pipe; the parent drives its own
 * engine against the child's segment through the public API. */
#ifndef TENT_TESTS_E2E_PEER_H
#define TENT_TESTS_E2E_PEER_H

#include "rpc/wire.h"
#include "tent/transfer_engine.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct e2e_peer {
    pid_t pid;
    int cmd_fd, ans_fd;
    char name[256];
    uint64_t rw_base, ro_base, local_base, reg_base;
    size_t rw_len, small_len;
};

/* Sets the common configuration (log level, shm enable) for engines created
 * from now on in this process. */
void e2e_config(bool shm, bool tcp);
/* transports/tcp/timeout_ms of the suites: 1500, or E2E_TCP_TIMEOUT_MS
 * (the TSan leg raises it: instrumented peers can be silent that long). */
int e2e_tcp_timeout_ms(void);
/* Whether e2e_config also enables the memfabric transport (off by default;
 * MF_PROTOCOL and MF_SMEM_LIBRARY come from the environment).  Children
 * started afterwards inherit the choice. */
void e2e_set_memfabric(bool on);
/* Children started from now on set RLIMIT_NOFILE to soft/hard before they
 * create their engine (0 leaves the inherited value), and set the config
 * keys kv (NULL-terminated key, value pairs; NULL = none) after the common
 * ones.  kv must stay valid until the child has started. */
void e2e_set_child_nofile(unsigned long soft, unsigned long hard);
void e2e_set_child_config(const char *const *kv);
/* Children started from now on map their rw buffer at addr (anonymous
 * memory, registered; 0: from tent_allocate_memory, the default), so that
 * a restarted peer's buffer sits where its predecessor's did. */
void e2e_set_child_rw_at(uint64_t addr);
/* Starts a child target engine with a rw buffer of rw_len bytes from
 * tent_allocate_memory (filled with e2e_pattern), plus small read-only,
 * local-only and plain-registered (malloc) buffers. */
int e2e_peer_start(struct e2e_peer *p, size_t rw_len, bool shm, bool tcp);
/* FNV-1a of [off, off+len) of the child's rw buffer (or plain buffer). */
uint64_t e2e_peer_hash(struct e2e_peer *p, bool plain, uint64_t off,
                       uint64_t len);
/* FNV-1a of [addr, +len) of the child's memory, at any address info gave
 * (rw_base, ro_base, local_base, reg_base), registered or not. */
uint64_t e2e_peer_hash_at(struct e2e_peer *p, uint64_t addr, uint64_t len);
/* Registers len more bytes (pattern-filled malloc memory) in the child;
 * returns its address or 0. */
uint64_t e2e_peer_register(struct e2e_peer *p, uint64_t len);
/* The child frees its rw buffer (tent_free_memory); returns its result. */
int e2e_peer_free_rw(struct e2e_peer *p);
/* The child unregisters its rw buffer, keeping the memory; its result. */
int e2e_peer_unregister_rw(struct e2e_peer *p);
/* The child unregisters and free()s a buffer e2e_peer_register made. */
int e2e_peer_release_malloc(struct e2e_peer *p, uint64_t addr, uint64_t len);
/* The child runs threads with 8 MiB stacks that keep 4 MiB of them
 * patterned for ms; 1 when no byte changed meanwhile. */
int e2e_peer_stack_check(struct e2e_peer *p, int ms);
/* The child unregisters its plain (malloc) buffer. */
int e2e_peer_unregister_plain(struct e2e_peer *p);
/* The child opens segment name (ours, say): its result. */
int e2e_peer_open(struct e2e_peer *p, const char *name);
/* The child starts one request of len bytes between its rw (or plain)
 * buffer and address remote of the segment it opened, and polls it to its
 * end; e2e_peer_transfer_end reads the outcome: the final STATUS_* (-1 when
 * the child is gone) and the cause's code in *code. */
int e2e_peer_transfer_start(struct e2e_peer *p, int opcode, bool plain,
                            uint64_t remote, uint64_t len);
int e2e_peer_transfer_end(struct e2e_peer *p, int *code);
/* The child registers its rw buffer (again) with permission perm
 * (PERM_*), unregistering it first if it is registered; its result. */
int e2e_peer_reregister_rw(struct e2e_peer *p, int perm);
/* The target allocates len bytes with tent_allocate_memory and registers
 * them (an "already registered" answer counts as registered); returns the
 * address or 0. */
uint64_t e2e_peer_alloc(struct e2e_peer *p, uint64_t len);
/* The target unregisters and frees what e2e_peer_alloc returned; 0 or the
 * failing call's code. */
int e2e_peer_release(struct e2e_peer *p, uint64_t addr, uint64_t len);
/* Asks the child to stop its RPC server (data and control plane). */
void e2e_peer_stop_rpc(struct e2e_peer *p);
/* The child's memfabric transport goes away while its engine (RPC server,
 * tcp data path) keeps serving: the transport is uninstalled, which
 * destroys the child's libmf_smem instance, and the engine never calls it
 * again.  Returns 0, or -1 when the child has no memfabric transport. */
int e2e_peer_drop_memfabric(struct e2e_peer *p);
/* The child checks its queued notifications: each msg is "<off> <len>
 * <hash>" and must match the buffer content when dequeued; returns the
 * number received and in-order/valid flag via ok. */
int e2e_peer_check_notifs(struct e2e_peer *p, int expect, int timeout_ms,
                          bool *ok);
/* The counters of the child's RPC server (rpc.h); 0, or -1 when the peer
 * is gone. */
struct tent_rpc_stats;
int e2e_peer_rpc_stats(struct e2e_peer *p, struct tent_rpc_stats *out);
/* The child opens descriptors (of /dev/null) and keeps them until only
 * free_left are free below its RLIMIT_NOFILE, as an application that uses
 * many files would; free_left < 0 closes them again.  Returns how many it
 * holds, or -1 when the peer is gone. */
int e2e_peer_hold_fds(struct e2e_peer *p, int free_left);
void e2e_peer_kill(struct e2e_peer *p);
void e2e_peer_quit(struct e2e_peer *p);

/* The access key the descriptor served at host:port publishes for the
 * buffer holding addr (the first one listed): 0, 1 with zeros when no
 * buffer holds addr, -1 when the descriptor could not be fetched. */
int e2e_desc_key(const char *host, uint16_t port, uint64_t addr,
                 uint8_t key[TENT_WIRE_KEY_LEN]);
uint8_t e2e_pattern(uint64_t i);
/* Fills buf[0, n) with e2e_pattern(seed + i): the pattern repeats every
 * 2 MiB, so it computes one period and copies it, which keeps filling a
 * large buffer quick under the sanitizers. */
void e2e_pattern_fill(void *buf, size_t n, uint64_t seed);
uint64_t e2e_fnv(const void *p, size_t n);

/* This process's threads, open fds and resident set (kB), as the
 * per-peer cost tests read them from /proc/self. */
struct e2e_usage {
    long threads, fds, rss_kb;
};
/* A numeric field of /proc/self/status ("Threads", "VmRSS"); -1 if absent. */
long e2e_status_field(const char *key);
long e2e_count_fds(void);
struct e2e_usage e2e_usage_now(void);
/* Polls the batch until no task is pending or timeout; returns overall. */
int e2e_wait(tent_engine_t e, tent_batch_id_t b, int timeout_ms,
             tent_status_t *st);
long e2e_now_ms(void);
/* One request in a batch of its own: submits it, waits (e2e_wait) and
 * frees the batch.  Returns 2 when allocating or freeing the batch failed,
 * else the submit's code when it refused (st->status is then
 * STATUS_FAILED), 1 when the wait timed out, else 0 with st the batch's
 * overall status.  So a test that accepts a refusal asserts rc <= 0. */
int e2e_run_one(tent_engine_t e, const tent_request_t *r, int timeout_ms,
                tent_status_t *st);

#endif

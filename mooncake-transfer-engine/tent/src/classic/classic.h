/* libtransfer_engine: Mooncake's classic C API (transfer_engine_c.h) over
 * TENT's public C API.  Nothing here reaches into the runtime: a classic
 * engine owns one tent engine and translates arguments, results and
 * conventions.
 *
 *   engine.c     createTransferEngine, installTransport
 *   settings.c   Mooncake's arguments -> tent configuration (shared with
 *                the Python extension: public API only)
 *   memory.c     registration (Mooncake's overlap rules, kept here)
 *   transfer.c   segments, batches, status, notifications, NIC load
 *   shutdown.c   enableGracefulShutdown
 *   codes.c      TENT_E* -> Mooncake Status codes and ERR_* values, logging
 */
#ifndef TENT_CLASSIC_CLASSIC_H
#define TENT_CLASSIC_CLASSIC_H

#include "classic/settings.h"
#include "tent/transfer_engine.h"
#include "transfer_engine_c.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The functions of transfer_engine_c.h are the only symbols exported. */
#define CLASSIC_API __attribute__((visibility("default")))

/* ---- Mooncake's result codes -------------------------------------------- */

/* Status::Code (submitTransfer, getTransferStatus, freeBatchID ...). */
#define CLASSIC_ST_OK                      0
#define CLASSIC_ST_INVALID_ARGUMENT        1
#define CLASSIC_ST_TOO_MANY_REQUESTS       2
#define CLASSIC_ST_ADDRESS_NOT_REGISTERED  3
#define CLASSIC_ST_BATCH_BUSY              4
#define CLASSIC_ST_DEVICE_NOT_FOUND        6
#define CLASSIC_ST_ADDRESS_OVERLAPPED      7
#define CLASSIC_ST_NOT_SUPPORTED_TRANSPORT 8
#define CLASSIC_ST_SOCKET                  102
#define CLASSIC_ST_MALFORMED_JSON          103
#define CLASSIC_ST_CONTEXT                 202
#define CLASSIC_ST_MEMORY                  302
#define CLASSIC_ST_NOT_IMPLEMENTED         999

/* error.h's ERR_* (the int functions). */
#define CLASSIC_ERR_INVALID_ARGUMENT       (-1)
#define CLASSIC_ERR_TOO_MANY_REQUESTS      (-2)
#define CLASSIC_ERR_ADDRESS_NOT_REGISTERED (-3)
#define CLASSIC_ERR_BATCH_BUSY             (-4)
#define CLASSIC_ERR_DEVICE_NOT_FOUND       (-6)
#define CLASSIC_ERR_ADDRESS_OVERLAPPED     (-7)
#define CLASSIC_ERR_SOCKET                 (-102)
#define CLASSIC_ERR_MALFORMED_JSON         (-103)
#define CLASSIC_ERR_METADATA               (-200)
#define CLASSIC_ERR_CONTEXT                (-202)
#define CLASSIC_ERR_MEMORY                 (-302)
#define CLASSIC_ERR_NOT_IMPLEMENTED        (-303)

/* A TENT_E* code as a Status code / as an ERR_* value. */
int classic_status_of(int tent_code);
int classic_err_of(int tent_code);

/* Warnings and errors go to stderr in libtent's line format, tagged
 * "classic" (the classic API has no last-error call: the log says why). */
void classic_log(const char *level, const char *file, int line, const char *fmt,
                 ...) __attribute__((format(printf, 4, 5)));
#define CLASSIC_WARN(...)                                                      \
    classic_log("WARNING", __FILE__, __LINE__, __VA_ARGS__)
#define CLASSIC_ERROR(...) classic_log("ERROR", __FILE__, __LINE__, __VA_ARGS__)

/* ---- the engine --------------------------------------------------------- */

/* What installTransport returns: one per kind, inside the engine. */
struct classic_transport {
    struct classic_engine *owner;
    enum classic_kind kind;
};

struct classic_region {
    uintptr_t addr;
    size_t length;
};

#define CLASSIC_MAGIC 0x636c61737369630aull /* "classic\n" */

/*
 * Locking: `lock` guards the settings, the transport set, the region and
 * segment lists, the stash and (until the engine is sealed) `te`.  It is
 * not held across a blocking tent call on the data path (submit, status).
 *
 * Sealing: the first registration, opened segment or allocated batch seals
 * the engine; from then on `te` never changes and the data path reads it
 * without a lock.  Before that, installTransport may replace the tent
 * engine by one with more transports (same address and port).
 */
struct classic_engine {
    uint64_t magic;
    pthread_mutex_t lock;
    tent_engine_t te;
    atomic_bool sealed;
    struct classic_settings set;
    bool have[CLASSIC_NKINDS];
    struct classic_transport xport[CLASSIC_NKINDS];
    char nic[64];     /* the network device of the RPC address */
    char warned[512]; /* ",rdma,efa," protocols already warned about */
    struct classic_region *regions; /* sorted by addr, disjoint */
    size_t nregions, regions_cap;
    int32_t *segs; /* ids openSegment returned and not closed */
    size_t nsegs, segs_cap;
    tent_notifi_info stash; /* taken from a replaced tent engine */

    /* Calls count themselves in `active`; destroyTransferEngine and
     * enableGracefulShutdown's stop set `closing` and wait for them. */
    atomic_bool guarded, closing;
    atomic_int active;
    struct classic_engine *next_guarded;
};

/* The engine behind a handle, or NULL (logged) for NULL or a pointer that
 * does not carry the engine's magic (a destroyed engine loses it). */
struct classic_engine *classic_engine_of(transfer_engine_t engine,
                                         const char *fn);

/* Brackets every call that uses the tent engine: fails (false) once
 * destroyTransferEngine or graceful shutdown has begun.  `counted` goes to
 * classic_leave. */
bool classic_enter(struct classic_engine *ce, bool *counted);
void classic_leave(struct classic_engine *ce, bool counted);

/* The tent engine for a control-path call: with `lock` held (returned
 * true in *locked) until the engine is sealed.  NULL if it is gone. */
tent_engine_t classic_te_lock(struct classic_engine *ce, bool *locked);
void classic_te_unlock(struct classic_engine *ce, bool locked);

/* Seals the engine; caller holds `lock` or the engine is sealed. */
void classic_seal(struct classic_engine *ce);

/* Destroys the tent engine (graceful shutdown and destroyTransferEngine). */
void classic_engine_stop(struct classic_engine *ce);

/* ---- notifications (transfer.c) ----------------------------------------- */

/* Keeps n received notifications for the next getNotifsFromEngine (from a
 * tent engine being replaced, or that could not be handed out).  Caller
 * holds `lock`.  -1 when out of memory (the records are then lost, and the
 * caller says so). */
int classic_stash_append(struct classic_engine *ce,
                         const tent_notifi_record_t *records, int n);

/* ---- batches (transfer.c) ----------------------------------------------- */

/* ---- graceful shutdown (shutdown.c) ------------------------------------- */

/* Takes the engine off the shutdown list (destroyTransferEngine); waits
 * for a shutdown that is running. */
void classic_shutdown_forget(struct classic_engine *ce);

/* ---- test hooks (internal library only, not exported) ------------------- */

/* The tent engine under a classic engine (NULL if none). */
tent_engine_t classic_tent_engine(transfer_engine_t engine);

#endif

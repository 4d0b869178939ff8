/* Mooncake's engine arguments -- a local server name, a metadata connection
 * string and Mooncake's environment variables -- turned into the
 * configuration of one tent engine, and that engine started.  One
 * translation for both Mooncake surfaces: the classic C API
 * (createTransferEngine) and Python's mooncake.engine (initialize).
 *
 * Depends only on the public API (tent/transfer_engine.h) and libc: the
 * Python extension, which links libtent's public symbols only, compiles
 * this file too. */
#ifndef TENT_CLASSIC_SETTINGS_H
#define TENT_CLASSIC_SETTINGS_H

#include "classic/protocols.h"
#include "tent/transfer_engine.h"

#include <stdbool.h>
#include <stddef.h>

/* The transports a Mooncake protocol can map to. */
enum classic_kind {
    CLASSIC_TCP,
    CLASSIC_SHM,
    CLASSIC_MEMFABRIC,
    CLASSIC_LIBFABRIC, /* rdma, efa, cxi: through a libfabric provider */
    CLASSIC_NKINDS,
};

/* Their tent names ("tcp", "shm", "memfabric", "libfabric"). */
extern const char *const classic_kind_names[CLASSIC_NKINDS];

/* A Mooncake protocol name, as both Mooncake surfaces take it (the
 * classic API's installTransport, mooncake.engine's initialize). */
struct classic_protocol {
    const char *xport; /* its transport in transports.def ("rdma", ...) */
    int kind; /* the enum classic_kind that runs it, or -1: this engine has
               * no such transport and tcp runs instead (a warning) */
    /* kind -1 with a libfabric provider for its NICs ("efa"): the
     * libfabric transport with that provider runs it when it installs */
    const char *fabric;
};

/* Looks proto up in the one table of Mooncake protocol names
 * (classic/protocols.h): 0, or -1 for a name Mooncake does not have. */
int classic_protocol_find(const char *proto, struct classic_protocol *out);

/* What transports/<kind>/enable is staged as. */
enum classic_enable {
    CLASSIC_KEEP, /* not staged: MC_TENT_CONF, else the engine's default */
    CLASSIC_ON,
    CLASSIC_OFF,
};

/* Mooncake's RPC port range (MC_MIN_RPC_PORT, MC_MAX_RPC_PORT). */
#define CLASSIC_RPC_PORT_MIN 15000
#define CLASSIC_RPC_PORT_MAX 17000

/* Mooncake's local server name: "host", "host:port", "[v6]", "[v6]:port"
 * or a bare IPv6 address, each optionally followed by Ascend's
 * ":npu_<id>". */
struct classic_name {
    char host[256]; /* "" when the name has none */
    unsigned port;  /* 0 when has_port is false */
    bool has_port;
    int npu; /* -1 = no ":npu_<id>" */
};

/* 0, or -1 when s is not such a name (or too long). */
int classic_parse_name(const char *s, struct classic_name *out);

/* One tent engine's configuration, as tent_set_config keys. */
struct classic_settings {
    char meta_type[8];       /* metadata_type: p2p, etcd, redis, http */
    char meta_servers[1024]; /* metadata_servers; "" with p2p */
    char host[256];          /* rpc_server_hostname */
    unsigned port;           /* rpc_server_port; 0 = from the range */
    unsigned port_min;       /* rpc_server_port_range with port 0; */
    unsigned port_max;       /*   0, 0 = an ephemeral port */
    char segment_name[256];  /* local_segment_name; "" = <host>:<port> */
    int npu;                 /* transports/memfabric/device_id, -1 = keep */
    bool force_tcp;          /* MC_FORCE_TCP is set */
    bool quiet; /* a probe: log_quiet staged, the start logs nothing */
    char redis_password[256]; /* metadata_password (MC_REDIS_PASSWORD) */
    int redis_db;             /* metadata_db (MC_REDIS_DB_INDEX), -1 = keep */
    enum classic_enable xport[CLASSIC_NKINDS];
    /* transports/libfabric/provider; "" = not staged */
    char fabric_provider[64];
    /* transports/tcp/nics: interface names or numeric addresses separated
     * by ','; "" = not staged (MC_TENT_CONF, else every interface) */
    char nics[1024];
};

/* The arguments, and what the caller calls them in its messages. */
struct classic_args {
    const char *conn;       /* "P2PHANDSHAKE", "etcd://...", "host:port" */
    const char *local;      /* the local server name */
    const char *ip;         /* ip_or_host_name; NULL or "" = none */
    const char *conn_label; /* "metadata_conn_string", "metadata_server" */
    const char *local_label;
    const char *ip_label;
};

/* A warning for the caller's log (a variable ignored, a default used). */
typedef void (*classic_warn_fn)(void *ctx, const char *msg);

/* Fills *out from the arguments and Mooncake's environment variables
 * (MC_TCP_BIND_ADDRESS, MC_LEGACY_RPC_PORT_BINDING, MC_MIN_RPC_PORT,
 * MC_MAX_RPC_PORT, MC_FORCE_TCP, MC_REDIS_PASSWORD, MC_REDIS_DB_INDEX),
 * with Mooncake's choice of address and port.  Every transport is
 * CLASSIC_KEEP except with MC_FORCE_TCP (tcp on, the others off); the
 * caller turns on what its protocol asks.  0, or -1 with the reason in
 * err (naming the argument by its label) and *out untouched. */
int classic_settings_parse(const struct classic_args *args,
                           struct classic_settings *out, classic_warn_fn warn,
                           void *warn_ctx, char *err, size_t err_len);

/* Mooncake's device_name -- devices separated by ',', "" or
 * "auto-discovery" for all of them -- as the tcp transport's NICs
 * (set->nics).  A name is kept when it is an interface of this host that
 * is up with an address (or is such an address), and the transport can
 * serve it: loopback only for an engine bound to loopback (set->host), no
 * other interface then.  The others -- the RDMA devices (mlx5_0) SGLang
 * and vLLM pass where tcp runs instead, names of nothing here, interfaces
 * down -- are left out with one warning naming them; when none is kept,
 * set->nics is "" and every interface serves, as Mooncake's engine runs
 * tcp on the whole host when the RDMA devices it was given are missing.
 * Call after classic_settings_parse.  0, or -1 with the reason in err
 * (device_name too long) and *set untouched. */
int classic_settings_devices(struct classic_settings *set, const char *devices,
                             classic_warn_fn warn, void *warn_ctx, char *err,
                             size_t err_len);

/* Creates the tent engine of *set: its keys are staged with
 * tent_set_config in a thread of its own (staging is per thread, so they
 * reach this engine only, on top of MC_TENT_CONF, which the library
 * reads).  Blocks until the engine runs or failed; NULL with the reason in
 * why.  The engine's threads have SIGINT and SIGTERM blocked. */
tent_engine_t classic_settings_start(const struct classic_settings *set,
                                     char *why, size_t why_len);

/* Whether transport kind runs here with *set's keys: an engine of that
 * transport alone, without metadata, port or segment name, started and
 * destroyed.  0, or -1 with the reason in why. */
int classic_settings_probe(const struct classic_settings *set, int kind,
                           char *why, size_t why_len);

/* "host:port", "[v6]:port" for an IPv6 host; snprintf's result. */
int classic_format_hostport(char *buf, size_t len, const char *host,
                            unsigned port);

#endif

/* Configuration: a JSON tree (cJSON) addressed by '/'-separated paths such as
 * "transports/memfabric/enable".
 *
 * Inputs, staged per thread as in TENT: a file (tent_load_config_from_file,
 * else MC_TENT_CONF: a file, or inline JSON) and overrides
 * (tent_set_config).  Each engine takes a snapshot of its creating thread's
 * inputs at creation, so later changes affect only engines created later. */
#ifndef TENT_COMMON_CONFIG_H
#define TENT_COMMON_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

struct cJSON;

struct tent_config {
    struct cJSON *root; /* always an object */
};

/* Builds the snapshot: file (explicit, else $MC_TENT_CONF), then overrides.
 * A file that is not there is a warning and the defaults; one that is not a
 * regular file, is larger than 16 MiB, does not parse or gives a key twice
 * fails with TENT_ECONFIG naming the file (and line:column, or the key). */
int tent_config_snapshot(struct tent_config **out);
/* An empty configuration (tests, tools). */
int tent_config_new_empty(struct tent_config **out);
void tent_config_free(struct tent_config *cfg);

/* Parses JSON text; on error the message names source and line:column, or
 * a key given twice at any level. */
int tent_config_parse_text(const char *text, const char *source,
                           struct cJSON **out);
/* Sets path (creating objects on the way) to the typed value of text. */
int tent_config_set(struct tent_config *cfg, const char *path,
                    const char *text);

/* Getters: a missing key (or null) yields def; a value of the wrong kind,
 * out of range, or a number that is not an integer where one is wanted, is
 * TENT_ECONFIG naming the key and the value (TENT would take the default). */
const struct cJSON *tent_config_node(const struct tent_config *cfg,
                                     const char *path);
int tent_config_get_bool(const struct tent_config *cfg, const char *path,
                         bool def, bool *out);
int tent_config_get_int(const struct tent_config *cfg, const char *path,
                        int64_t def, int64_t *out);
/* tent_config_get_int, and TENT_ECONFIG naming the key, its value and the
 * range when the value lies outside lo..hi (inclusive). */
int tent_config_get_int_range(const struct tent_config *cfg, const char *path,
                              int64_t def, int64_t lo, int64_t hi,
                              int64_t *out);
/* A number within lo..hi (inclusive), as tent_config_get_int_range. */
int tent_config_get_double_range(const struct tent_config *cfg,
                                 const char *path, double def, double lo,
                                 double hi, double *out);
int tent_config_get_string(const struct tent_config *cfg, const char *path,
                           const char *def, const char **out);
/* TENT_ECONFIG: "config key '<path>' = <value> is a <kind>, not <want>",
 * for readers of tent_config_node whose key has a kind of its own. */
int tent_config_wrong_kind(const char *path, const struct cJSON *n,
                           const char *want);

/* Resets the calling thread's staged file and overrides (tests). */
void tent_config_reset_global(void);

#endif

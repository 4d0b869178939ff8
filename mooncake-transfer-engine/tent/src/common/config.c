#include "common/config.h"

#include "common/error.h"
#include "common/log.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* What tent_load_config_from_file and tent_set_config staged for the
 * engines this thread creates next, as TENT stages them: per thread.  Held
 * as thread-specific data, so that a thread that staged and ends (the
 * Mooncake surfaces start each engine in a thread of their own) frees it. */
struct staged {
    char *file_path;  /* tent_load_config_from_file */
    cJSON *overrides; /* [path, value] pairs, in order */
};

static pthread_key_t g_staged_key;
static pthread_once_t g_staged_once = PTHREAD_ONCE_INIT;

static void staged_free(void *p)
{
    struct staged *s = p;
    free(s->file_path);
    cJSON_Delete(s->overrides);
    free(s);
}

static void staged_key_init(void)
{
    (void)pthread_key_create(&g_staged_key, staged_free);
}

/* The calling thread's staged inputs; created when `create` (NULL when
 * out of memory, or when nothing is staged and !create). */
static struct staged *staged(bool create)
{
    pthread_once(&g_staged_once, staged_key_init);
    struct staged *s = pthread_getspecific(g_staged_key);
    if (!s && create) {
        s = calloc(1, sizeof(*s));
        if (s && pthread_setspecific(g_staged_key, s) != 0) {
            free(s);
            s = NULL;
        }
    }
    return s;
}

#define MAX_CONFIG_FILE (16u << 20)

static void position_of(const char *text, const char *at, int *line, int *col)
{
    *line = 1;
    *col = 1;
    for (const char *p = text; p < at && *p; p++) {
        if (*p == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}

int tent_config_parse_text(const char *text, const char *source, cJSON **out)
{
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
    if (!root) {
        int line, col;
        position_of(text, end ? end : text, &line, &col);
        return tent_set_error(TENT_ECONFIG,
                              "config %s: malformed JSON at line %d, column %d",
                              source, line, col);
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return tent_set_error(
            TENT_ECONFIG, "config %s: top level must be a JSON object", source);
    }
    *out = root;
    return TENT_OK;
}

static int read_file(const char *path, char **out)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return tent_set_error(TENT_ECONFIG, "config %s: cannot open: %s", path,
                              strerror(errno));
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    if (!buf) {
        fclose(f);
        return tent_set_error(TENT_ENOMEM, "config %s: out of memory", path);
    }
    for (;;) {
        if (len + 1 >= cap) {
            if (cap >= MAX_CONFIG_FILE) {
                free(buf);
                fclose(f);
                return tent_set_error(TENT_ECONFIG,
                                      "config %s: larger than %u bytes", path,
                                      MAX_CONFIG_FILE);
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                fclose(f);
                return tent_set_error(TENT_ENOMEM, "config %s: out of memory",
                                      path);
            }
            buf = nb;
            cap *= 2;
        }
        size_t n = fread(buf + len, 1, cap - len - 1, f);
        if (n == 0)
            break;
        len += n;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        return tent_set_error(TENT_ECONFIG, "config %s: read error", path);
    }
    buf[len] = '\0';
    *out = buf;
    return TENT_OK;
}

static cJSON *parse_value_text(const char *text)
{
    /* Numbers, booleans, null, arrays and objects are JSON; anything else
     * (or JSON that does not parse) is a plain string. */
    const char *p = text;
    while (*p == ' ' || *p == '\t')
        p++;
    if (*p == '{' || *p == '[' || *p == '-' || (*p >= '0' && *p <= '9') ||
        strcmp(p, "true") == 0 || strcmp(p, "false") == 0 ||
        strcmp(p, "null") == 0 || *p == '"') {
        const char *end = NULL;
        cJSON *v = cJSON_ParseWithOpts(text, &end, 1);
        if (v)
            return v;
    }
    return cJSON_CreateString(text);
}

static int set_path(cJSON *root, const char *path, cJSON *value)
{
    char buf[512];
    if (!path || !*path || strlen(path) >= sizeof(buf)) {
        cJSON_Delete(value);
        return tent_set_error(TENT_EINVAL,
                              "config key '%s' is empty or too long",
                              path ? path : "(null)");
    }
    strcpy(buf, path);
    cJSON *node = root;
    char *save = NULL;
    char *tok = strtok_r(buf, "/", &save);
    while (tok) {
        char *next = strtok_r(NULL, "/", &save);
        if (!next) {
            if (cJSON_GetObjectItemCaseSensitive(node, tok))
                cJSON_ReplaceItemInObjectCaseSensitive(node, tok, value);
            else
                cJSON_AddItemToObject(node, tok, value);
            return TENT_OK;
        }
        cJSON *child = cJSON_GetObjectItemCaseSensitive(node, tok);
        if (!child || !cJSON_IsObject(child)) {
            cJSON *obj = cJSON_CreateObject();
            if (child)
                cJSON_ReplaceItemInObjectCaseSensitive(node, tok, obj);
            else
                cJSON_AddItemToObject(node, tok, obj);
            child = obj;
        }
        node = child;
        tok = next;
    }
    cJSON_Delete(value);
    return tent_set_error(TENT_EINVAL, "config key '%s' has no name", path);
}

int tent_config_set(struct tent_config *cfg, const char *path, const char *text)
{
    if (!cfg || !text)
        return tent_set_error(TENT_ENULL, "config set: NULL argument");
    cJSON *v = parse_value_text(text);
    if (!v)
        return tent_set_error(TENT_ENOMEM, "config set: out of memory");
    return set_path(cfg->root, path, v);
}

int tent_config_new_empty(struct tent_config **out)
{
    struct tent_config *cfg = calloc(1, sizeof(*cfg));
    if (!cfg)
        return tent_set_error(TENT_ENOMEM, "config: out of memory");
    cfg->root = cJSON_CreateObject();
    if (!cfg->root) {
        free(cfg);
        return tent_set_error(TENT_ENOMEM, "config: out of memory");
    }
    *out = cfg;
    return TENT_OK;
}

void tent_config_free(struct tent_config *cfg)
{
    if (!cfg)
        return;
    cJSON_Delete(cfg->root);
    free(cfg);
}

/* The base configuration: the staged file, else MC_TENT_CONF (a file, or
 * inline JSON as TENT accepts it), else empty.  A file that is not there is
 * a warning and the defaults, as in TENT; one that does not parse is an
 * error naming it and the position. */
static int load_base(struct tent_config **out)
{
    const struct staged *st = staged(false);
    const char *path = st ? st->file_path : NULL, *what = "file";
    if (!path) {
        const char *env = getenv("MC_TENT_CONF");
        if (env && *env)
            path = env, what = "MC_TENT_CONF";
    }
    if (path && access(path, F_OK) != 0) {
        const char *p = path;
        while (*p == ' ' || *p == '\t' || *p == '\n')
            p++;
        if (*p == '{' && strcmp(what, "MC_TENT_CONF") == 0) {
            struct tent_config *cfg = calloc(1, sizeof(*cfg));
            if (!cfg)
                return tent_set_error(TENT_ENOMEM, "config: out of memory");
            int rc = tent_config_parse_text(path, "MC_TENT_CONF (inline JSON)",
                                            &cfg->root);
            if (rc) {
                free(cfg);
                return rc;
            }
            *out = cfg;
            return TENT_OK;
        }
        LOG_WARN("config %s '%s' cannot be opened (%s); using the defaults",
                 what, path, strerror(errno));
        path = NULL;
    }
    if (!path)
        return tent_config_new_empty(out);
    char *text = NULL;
    int rc = read_file(path, &text);
    struct tent_config *cfg = NULL;
    if (rc == TENT_OK) {
        cfg = calloc(1, sizeof(*cfg));
        if (!cfg)
            rc = tent_set_error(TENT_ENOMEM, "config: out of memory");
        else
            rc = tent_config_parse_text(text, path, &cfg->root);
        free(text);
    }
    if (rc) {
        free(cfg);
        return rc;
    }
    LOG_DEBUG("loaded configuration from %s", path);
    *out = cfg;
    return TENT_OK;
}

int tent_config_snapshot(struct tent_config **out)
{
    struct tent_config *cfg = NULL;
    int rc = load_base(&cfg);
    const struct staged *st = staged(false);
    if (rc == TENT_OK && st && st->overrides) {
        const cJSON *pair;
        cJSON_ArrayForEach(pair, st->overrides) {
            const cJSON *k = cJSON_GetArrayItem(pair, 0);
            cJSON *v = cJSON_Duplicate(cJSON_GetArrayItem(pair, 1), 1);
            rc = set_path(cfg->root, k->valuestring, v);
            if (rc != TENT_OK)
                break;
        }
    }
    if (rc != TENT_OK) {
        tent_config_free(cfg);
        return rc;
    }
    *out = cfg;
    return TENT_OK;
}

void tent_config_reset_global(void)
{
    struct staged *st = staged(false);
    if (!st)
        return;
    free(st->file_path);
    st->file_path = NULL;
    cJSON_Delete(st->overrides);
    st->overrides = NULL;
}

void tent_load_config_from_file(const char *path)
{
    struct staged *st = staged(path != NULL);
    if (!st) {
        if (path)
            tent_set_error(TENT_ENOMEM, "tent_load_config_from_file: out of "
                                        "memory");
        return;
    }
    free(st->file_path);
    st->file_path = path ? strdup(path) : NULL;
}

void tent_set_config(const char *key, const char *value)
{
    if (!key || !value) {
        tent_set_error(TENT_ENULL, "tent_set_config: key or value is NULL");
        return;
    }
    /* A key that can never be applied would fail every later engine. */
    if (strlen(key) >= 512 || strspn(key, "/") == strlen(key)) {
        tent_set_error(TENT_EINVAL,
                       "tent_set_config: key '%.64s' is empty or too long; "
                       "ignored",
                       key);
        return;
    }
    cJSON *pair = cJSON_CreateArray();
    cJSON *v = parse_value_text(value);
    if (!pair || !v) {
        cJSON_Delete(pair);
        cJSON_Delete(v);
        return;
    }
    cJSON_AddItemToArray(pair, cJSON_CreateString(key));
    cJSON_AddItemToArray(pair, v);
    struct staged *st = staged(true);
    if (st && !st->overrides)
        st->overrides = cJSON_CreateArray();
    if (!st || !st->overrides) {
        cJSON_Delete(pair);
        return;
    }
    cJSON_AddItemToArray(st->overrides, pair);
}

const cJSON *tent_config_node(const struct tent_config *cfg, const char *path)
{
    if (!cfg || !path)
        return NULL;
    const cJSON *node = cfg->root;
    const char *p = path;
    while (node && *p) {
        const char *slash = strchr(p, '/');
        size_t len = slash ? (size_t)(slash - p) : strlen(p);
        const cJSON *child = NULL;
        if (cJSON_IsObject(node)) {
            const cJSON *it;
            cJSON_ArrayForEach(it, node) {
                if (it->string && strlen(it->string) == len &&
                    memcmp(it->string, p, len) == 0) {
                    child = it;
                    break;
                }
            }
        }
        node = child;
        p = slash ? slash + 1 : p + len;
    }
    return node;
}

/* What a value is, for the wrong-type warning. */
static const char *kind_of(const cJSON *n)
{
    return cJSON_IsBool(n)     ? "boolean"
           : cJSON_IsNumber(n) ? "number"
           : cJSON_IsString(n) ? "string"
           : cJSON_IsArray(n)  ? "array"
                               : "object";
}

/* A value of the wrong type is the default, as in TENT, with a warning. */
static void wrong_type(const char *path, const cJSON *n, const char *want,
                       const char *def)
{
    LOG_WARN("config key '%s' is a %s, not a %s: using the default %s", path,
             kind_of(n), want, def);
}

int tent_config_get_bool(const struct tent_config *cfg, const char *path,
                         bool def, bool *out)
{
    const cJSON *n = tent_config_node(cfg, path);
    if (!n || cJSON_IsNull(n)) {
        *out = def;
        return TENT_OK;
    }
    if (!cJSON_IsBool(n)) {
        wrong_type(path, n, "boolean (true/false)", def ? "true" : "false");
        *out = def;
        return TENT_OK;
    }
    *out = cJSON_IsTrue(n);
    return TENT_OK;
}

int tent_config_get_int(const struct tent_config *cfg, const char *path,
                        int64_t def, int64_t *out)
{
    const cJSON *n = tent_config_node(cfg, path);
    if (!n || cJSON_IsNull(n)) {
        *out = def;
        return TENT_OK;
    }
    if (!cJSON_IsNumber(n)) {
        char d[32];
        snprintf(d, sizeof(d), "%lld", (long long)def);
        wrong_type(path, n, "integer", d);
        *out = def;
        return TENT_OK;
    }
    /* Range first: converting an out-of-range double is undefined. */
    if (!(n->valuedouble >= -9.2e18 && n->valuedouble <= 9.2e18) ||
        n->valuedouble != (double)(int64_t)n->valuedouble)
        return tent_set_error(TENT_ECONFIG,
                              "config key '%s' must be an integer", path);
    *out = (int64_t)n->valuedouble;
    return TENT_OK;
}

int tent_config_get_int_range(const struct tent_config *cfg, const char *path,
                              int64_t def, int64_t lo, int64_t hi, int64_t *out)
{
    int64_t v = def;
    int rc = tent_config_get_int(cfg, path, def, &v);
    if (rc)
        return rc;
    if (v < lo || v > hi)
        return tent_set_error(TENT_ECONFIG,
                              "config key '%s' = %lld is outside %lld..%lld",
                              path, (long long)v, (long long)lo, (long long)hi);
    *out = v;
    return TENT_OK;
}

int tent_config_get_double_range(const struct tent_config *cfg,
                                 const char *path, double def, double lo,
                                 double hi, double *out)
{
    const cJSON *n = tent_config_node(cfg, path);
    if (!n || cJSON_IsNull(n)) {
        *out = def;
        return TENT_OK;
    }
    if (!cJSON_IsNumber(n)) {
        char d[32];
        snprintf(d, sizeof(d), "%g", def);
        wrong_type(path, n, "number", d);
        *out = def;
        return TENT_OK;
    }
    if (!(n->valuedouble >= lo && n->valuedouble <= hi))
        return tent_set_error(TENT_ECONFIG,
                              "config key '%s' = %g is outside %g..%g", path,
                              n->valuedouble, lo, hi);
    *out = n->valuedouble;
    return TENT_OK;
}

int tent_config_get_string(const struct tent_config *cfg, const char *path,
                           const char *def, const char **out)
{
    const cJSON *n = tent_config_node(cfg, path);
    if (!n || cJSON_IsNull(n)) {
        *out = def;
        return TENT_OK;
    }
    if (!cJSON_IsString(n)) {
        wrong_type(path, n, "string", def ? def : "(none)");
        *out = def;
        return TENT_OK;
    }
    *out = n->valuestring;
    return TENT_OK;
}

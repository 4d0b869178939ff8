#include "common/config.h"

#include "common/error.h"
#include "common/log.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

static int find_duplicates(const cJSON *root, const char *source);

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
    int rc = find_duplicates(root, source);
    if (rc) {
        cJSON_Delete(root);
        return rc;
    }
    *out = root;
    return TENT_OK;
}

/* Reads a configuration file whole.  Opened without blocking and checked
 * before the first read: a FIFO, a device or a directory named by mistake
 * would otherwise hang or fail obscurely, and a huge file would be read
 * into memory. */
static int read_file(const char *path, char **out)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return tent_set_error(TENT_ECONFIG, "config %s: cannot open: %s", path,
                              strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int err = errno;
        close(fd);
        return tent_set_error(TENT_ECONFIG, "config %s: cannot stat: %s", path,
                              strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return tent_set_error(TENT_ECONFIG,
                              "config %s: not a regular file (%s)", path,
                              S_ISDIR(st.st_mode)    ? "a directory"
                              : S_ISFIFO(st.st_mode) ? "a FIFO"
                              : S_ISSOCK(st.st_mode) ? "a socket"
                              : S_ISCHR(st.st_mode)  ? "a character device"
                              : S_ISBLK(st.st_mode)  ? "a block device"
                                                     : "not a file");
    }
    if (st.st_size > (off_t)MAX_CONFIG_FILE) {
        close(fd);
        return tent_set_error(TENT_ECONFIG,
                              "config %s: %lld bytes, larger than the %u "
                              "allowed",
                              path, (long long)st.st_size, MAX_CONFIG_FILE);
    }
    /* Room for the NUL and one byte more: EOF shows without growing, and a
     * file that grew meanwhile still meets the bound below. */
    size_t cap = (size_t)st.st_size + 2, len = 0;
    char *buf = malloc(cap);
    if (!buf) {
        close(fd);
        return tent_set_error(TENT_ENOMEM, "config %s: out of memory", path);
    }
    for (;;) {
        if (len + 1 == cap) {
            size_t ncap =
                cap * 2 > MAX_CONFIG_FILE + 2 ? MAX_CONFIG_FILE + 2 : cap * 2;
            if (ncap <= cap) {
                free(buf);
                close(fd);
                return tent_set_error(TENT_ECONFIG,
                                      "config %s: larger than the %u bytes "
                                      "allowed",
                                      path, MAX_CONFIG_FILE);
            }
            char *nb = realloc(buf, ncap);
            if (!nb) {
                free(buf);
                close(fd);
                return tent_set_error(TENT_ENOMEM, "config %s: out of memory",
                                      path);
            }
            buf = nb;
            cap = ncap;
        }
        ssize_t n = read(fd, buf + len, cap - len - 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int err = errno;
            free(buf);
            close(fd);
            return tent_set_error(TENT_ECONFIG, "config %s: read error: %s",
                                  path, strerror(err));
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    close(fd);
    buf[len] = '\0';
    *out = buf;
    return TENT_OK;
}

/* ---- keys given twice ---------------------------------------------------- */

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* cJSON keeps every member of an object, and lookups find the first: a key
 * given twice would silently lose its second value.  Sorting the names
 * keeps a large object cheap to check.  path holds the node's own path
 * (len bytes of a buffer of cap), extended in place for its children so
 * that deep nesting costs little stack. */
static int find_dups_at(const cJSON *node, char *path, size_t len, size_t cap,
                        const char *source)
{
    int n = cJSON_GetArraySize(node);
    if (cJSON_IsObject(node) && n > 1) {
        const char **names = malloc((size_t)n * sizeof(*names));
        if (!names)
            return tent_set_error(TENT_ENOMEM, "config %s: out of memory",
                                  source);
        int k = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, node)
            names[k++] = it->string ? it->string : "";
        qsort(names, (size_t)k, sizeof(*names), cmp_names);
        for (int i = 1; i < k; i++)
            if (strcmp(names[i - 1], names[i]) == 0) {
                int rc = tent_set_error(
                    TENT_ECONFIG,
                    "config %s: key '%s%s%.200s' is given more than once",
                    source, path, len ? "/" : "", names[i]);
                free(names);
                return rc;
            }
        free(names);
    }
    int i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, node) {
        if (cJSON_IsObject(it) || cJSON_IsArray(it)) {
            if (cJSON_IsObject(node))
                snprintf(path + len, cap - len, "%s%s", len ? "/" : "",
                         it->string);
            else
                snprintf(path + len, cap - len, "[%d]", i);
            size_t sub = strlen(path);
            int rc = find_dups_at(it, path, sub, cap, source);
            path[len] = '\0';
            if (rc)
                return rc;
        }
        i++;
    }
    return TENT_OK;
}

static int find_duplicates(const cJSON *root, const char *source)
{
    char path[512] = "";
    return find_dups_at(root, path, 0, sizeof(path), source);
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
        /* A number keeps its text as well, for keys that want a string:
         * cJSON frees and duplicates valuestring whatever the type. */
        if (v && cJSON_IsNumber(v) && !v->valuestring) {
            v->valuestring = strdup(text);
            if (!v->valuestring) {
                cJSON_Delete(v);
                return NULL;
            }
        }
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

/* What a value is, for the wrong-kind error. */
static const char *kind_of(const cJSON *n)
{
    return cJSON_IsBool(n)     ? "boolean"
           : cJSON_IsNumber(n) ? "number"
           : cJSON_IsString(n) ? "string"
           : cJSON_IsArray(n)  ? "array"
                               : "object";
}

/* The value as JSON text, shortened, for error messages. */
static void value_text(const cJSON *n, char *buf, size_t cap)
{
    char *t = cJSON_PrintUnformatted(n);
    if (!t) {
        snprintf(buf, cap, "(%s)", kind_of(n));
        return;
    }
    if (strlen(t) >= cap && cap > 4)
        snprintf(buf, cap, "%.*s...", (int)(cap - 4), t);
    else
        snprintf(buf, cap, "%s", t);
    free(t);
}

/* A value of the wrong kind fails the engine naming key and value: a
 * mistyped setting taken silently as its default is found only much
 * later, if at all. */
int tent_config_wrong_kind(const char *path, const cJSON *n, const char *want)
{
    char v[80];
    value_text(n, v, sizeof(v));
    return tent_set_error(TENT_ECONFIG, "config key '%s' = %s is a %s, not %s",
                          path, v, kind_of(n), want);
}

int tent_config_get_bool(const struct tent_config *cfg, const char *path,
                         bool def, bool *out)
{
    const cJSON *n = tent_config_node(cfg, path);
    if (!n || cJSON_IsNull(n)) {
        *out = def;
        return TENT_OK;
    }
    if (!cJSON_IsBool(n))
        return tent_config_wrong_kind(path, n, "a boolean (true or false)");
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
    if (!cJSON_IsNumber(n))
        return tent_config_wrong_kind(path, n, "an integer");
    /* Range first: converting an out-of-range double is undefined. */
    if (!(n->valuedouble >= -9.2e18 && n->valuedouble <= 9.2e18) ||
        n->valuedouble != (double)(int64_t)n->valuedouble)
        return tent_set_error(TENT_ECONFIG,
                              "config key '%s' = %.17g must be an integer",
                              path, n->valuedouble);
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
    if (!cJSON_IsNumber(n))
        return tent_config_wrong_kind(path, n, "a number");
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
    /* A number given through tent_set_config keeps its text (see
     * parse_value_text): "12345" is also a fine name or password. */
    if (cJSON_IsNumber(n) && n->valuestring) {
        *out = n->valuestring;
        return TENT_OK;
    }
    if (!cJSON_IsString(n))
        return tent_config_wrong_kind(path, n, "a string");
    *out = n->valuestring;
    return TENT_OK;
}

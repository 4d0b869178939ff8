/* Every key of docs/configuration.md with bad values: tent_create_engine
 * must fail naming the key and the value.  The key list is the document's
 * tables, and every literal key the sources read must have a row there, so
 * that the document and the code cannot drift apart.
 *
 * TENT_DOC_PATH and TENT_SRC_DIR come from CMake. */
#include "test_util.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <ftw.h>
#include <regex.h>

#define MAX_ROWS 256

struct row {
    char key[128];
    char type[32];
    char range[256];
    char when[512];
    bool env; /* the environment table */
};

static struct row rows[MAX_ROWS];
static size_t nrows;
static char *doc_text;

static char *read_whole(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    size_t n;
    while (buf && (n = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += n;
        if (len + 1 == cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    fclose(f);
    if (buf)
        buf[len] = '\0';
    return buf;
}

/* Copies cell text without backticks and surrounding blanks. */
static void cell_copy(char *dst, size_t cap, const char *b, const char *e)
{
    while (b < e && (*b == ' ' || *b == '`'))
        b++;
    while (e > b && (e[-1] == ' ' || e[-1] == '`'))
        e--;
    size_t n = 0;
    for (const char *p = b; p < e && n + 1 < cap; p++)
        if (*p != '`')
            dst[n++] = *p;
    dst[n] = '\0';
}

/* The rows of the tables headed "| key | type |" and "| variable | type |". */
static void parse_doc(void)
{
    doc_text = read_whole(TENT_DOC_PATH);
    if (!doc_text)
        fail_msg("cannot read %s", TENT_DOC_PATH);
    int table = 0; /* 0 none, 1 keys, 2 environment */
    for (char *line = doc_text; *line;) {
        char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        if (strncmp(line, "| key | type |", 14) == 0)
            table = 1;
        else if (strncmp(line, "| variable | type |", 19) == 0)
            table = 2;
        else if (len == 0 || line[0] != '|')
            table = 0;
        else if (table && strncmp(line, "| `", 3) == 0) {
            const char *cells[7];
            int nc = 0;
            for (const char *p = line; p < line + len && nc < 7; p++)
                if (*p == '|')
                    cells[nc++] = p;
            assert_true(nc >= 6);
            assert_true(nrows < MAX_ROWS);
            struct row *r = &rows[nrows++];
            cell_copy(r->key, sizeof(r->key), cells[0] + 1, cells[1]);
            cell_copy(r->type, sizeof(r->type), cells[1] + 1, cells[2]);
            cell_copy(r->range, sizeof(r->range), cells[3] + 1, cells[4]);
            /* "read when" keeps its backticks: they delimit names/values */
            const char *b = cells[4] + 1, *e = cells[5];
            while (b < e && *b == ' ')
                b++;
            while (e > b && e[-1] == ' ')
                e--;
            snprintf(r->when, sizeof(r->when), "%.*s", (int)(e - b), b);
            r->env = table == 2;
        }
        line = end ? end + 1 : line + len;
    }
    if (nrows < 20)
        fail_msg("%s: only %zu rows found", TENT_DOC_PATH, nrows);
}

static const struct row *row_of(const char *key)
{
    for (size_t i = 0; i < nrows; i++)
        if (strcmp(rows[i].key, key) == 0)
            return &rows[i];
    return NULL;
}

/* Sets path (a/b/c) in obj to the JSON value text. */
static void json_set(cJSON *obj, const char *path, const char *json)
{
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", path);
    char *save = NULL, *tok = strtok_r(buf, "/", &save);
    while (tok) {
        char *next = strtok_r(NULL, "/", &save);
        if (!next) {
            cJSON *v = cJSON_Parse(json);
            assert_non_null(v);
            cJSON_DeleteItemFromObjectCaseSensitive(obj, tok);
            cJSON_AddItemToObject(obj, tok, v);
            return;
        }
        cJSON *child = cJSON_GetObjectItemCaseSensitive(obj, tok);
        if (!child)
            child = cJSON_AddObjectToObject(obj, tok);
        obj = child;
        tok = next;
    }
}

/* Applies "read when": `name` = `value` items separated by ';'.  Names
 * in capitals are environment variables (set; listed in envs to unset). */
static void apply_when(const char *when, cJSON *obj, char envs[][64],
                       int *nenv)
{
    const char *p = when;
    while ((p = strchr(p, '`'))) {
        char name[60], value[256];
        const char *ne = strchr(p + 1, '`');
        assert_non_null(ne);
        snprintf(name, sizeof(name), "%.*s", (int)(ne - p - 1), p + 1);
        const char *vb = strchr(ne + 1, '`');
        assert_non_null(vb);
        const char *ve = strchr(vb + 1, '`');
        assert_non_null(ve);
        snprintf(value, sizeof(value), "%.*s", (int)(ve - vb - 1), vb + 1);
        if (strchr(name, '/') || !isupper((unsigned char)name[0])) {
            json_set(obj, name, value);
        } else {
            setenv(name, value, 1);
            snprintf(envs[(*nenv)++], 64, "%.60s", name);
        }
        p = ve + 1;
    }
}

/* The transport a key belongs to is built into this library. */
static bool transport_built(const char *key, const char *when)
{
    const char *names[2] = {key, when};
    for (int k = 0; k < 2; k++) {
        const char *t = strstr(names[k], "transports/");
        if (!t)
            continue;
        t += strlen("transports/");
        char name[32];
        snprintf(name, sizeof(name), "%.*s", (int)strcspn(t, "/"), t);
        const struct tent_transport_ops *ops[16];
        size_t n = tent_transport_registry_snapshot(ops, 16);
        bool found = false;
        for (size_t i = 0; i < n; i++)
            found |= strcmp(ops[i]->name, name) == 0;
        if (!found)
            return false;
    }
    return true;
}

struct bad {
    char value[64];  /* JSON text (a key), or the variable's text */
    char expect[80]; /* what the error must contain besides the key */
};

/* The bad values a row's type and range imply. */
static int bad_values(const struct row *r, struct bad *out)
{
    int n = 0;
#define BAD(v, ...)                                                            \
    do {                                                                       \
        snprintf(out[n].value, sizeof(out[n].value), "%s", v);                \
        snprintf(out[n].expect, sizeof(out[n].expect), __VA_ARGS__);          \
        n++;                                                                   \
    } while (0)
    char v[64];
    if (strcmp(r->type, "integer") == 0 || strcmp(r->type, "number") == 0) {
        bool integer = r->type[0] == 'i';
        char lo_s[64] = "", hi_s[64] = "";
        const char *dots = strstr(r->range, "..");
        if (!dots)
            fail_msg("%s: range '%s' is not lo..hi", r->key, r->range);
        snprintf(lo_s, sizeof(lo_s), "%.*s", (int)(dots - r->range), r->range);
        snprintf(hi_s, sizeof(hi_s), "%s", dots + 2);
        if (integer) {
            long long lo = strtoll(lo_s, NULL, 10);
            snprintf(v, sizeof(v), "%lld", lo - 1);
            BAD(v, r->env ? "'%s'" : "= %s", v);
            if (*hi_s) {
                long long hi = strtoll(hi_s, NULL, 10);
                snprintf(v, sizeof(v), "%lld", hi + 1);
                BAD(v, r->env ? "'%s'" : "= %s", v);
            }
            BAD("1.5", r->env ? "'1.5'" : "= 1.5");
        } else {
            double lo = strtod(lo_s, NULL), hi = strtod(hi_s, NULL);
            snprintf(v, sizeof(v), "%.17g", lo - 1);
            BAD(v, "= %g", lo - 1);
            snprintf(v, sizeof(v), "%.17g", hi + 1);
            BAD(v, "= %g", hi + 1);
        }
        if (r->env)
            BAD("abc", "'abc'");
        else
            BAD("\"abc\"", "= \"abc\"");
    } else if (strcmp(r->type, "boolean") == 0) {
        BAD("\"yes\"", "= \"yes\"");
        BAD("1", "= 1");
    } else if (strcmp(r->type, "enum") == 0) {
        if (r->env) {
            BAD("bogus", "'bogus'");
        } else {
            BAD("\"bogus\"", "bogus");
            BAD("7", "= 7");
        }
    } else if (strcmp(r->type, "string") == 0) {
        BAD("[1]", "= [1]");
        BAD("{}", "= {}");
    } else if (strcmp(r->type, "string or array") == 0 ||
               strcmp(r->type, "array") == 0) {
        BAD("true", "= true");
        BAD("12", "= 12");
    } else {
        fail_msg("%s: unknown type '%s'", r->key, r->type);
    }
#undef BAD
    return n;
}

static char conf_path[64];

static void write_conf(const cJSON *obj)
{
    char *text = cJSON_Print(obj);
    assert_non_null(text);
    snprintf(conf_path, sizeof(conf_path), "/tmp/tent_keys_XXXXXX");
    int fd = mkstemp(conf_path);
    assert_true(fd >= 0);
    size_t n = strlen(text);
    assert_int_equal(write(fd, text, n), (ssize_t)n);
    close(fd);
    free(text);
}

static void test_every_key_refuses_bad_values(void **state)
{
    (void)state;
    parse_doc();
    int checked = 0, skipped = 0, failed = 0;
    for (size_t i = 0; i < nrows; i++) {
        const struct row *r = &rows[i];
        if (!transport_built(r->key, r->when)) {
            skipped++;
            continue;
        }
        struct bad bad[8];
        int nbad = bad_values(r, bad);
        for (int b = 0; b < nbad; b++) {
            tent_config_reset_global();
            cJSON *obj = cJSON_CreateObject();
            char envs[8][64];
            int nenv = 0;
            apply_when(r->when, obj, envs, &nenv);
            if (r->env) {
                setenv(r->key, bad[b].value, 1);
                snprintf(envs[nenv++], 64, "%.60s", r->key);
            } else {
                json_set(obj, r->key, bad[b].value);
            }
            write_conf(obj);
            cJSON_Delete(obj);
            tent_load_config_from_file(conf_path);
            struct tu_capture cap;
            tu_capture_begin(&cap);
            tent_engine_t e = tent_create_engine();
            free(tu_capture_end(&cap));
            unlink(conf_path);
            for (int k = 0; k < nenv; k++)
                unsetenv(envs[k]);
            checked++;
            if (e) {
                tent_destroy_engine(e);
                print_error("%s = %s: the engine was created\n", r->key,
                            bad[b].value);
                failed++;
                continue;
            }
            const char *err = tent_last_error();
            if (strstr(err, "is not built in")) { /* a metadata backend */
                checked--;
                skipped++;
                break;
            }
            if (!strstr(err, r->key) || !strstr(err, bad[b].expect)) {
                print_error("%s = %s: \"%s\" lacks '%s' or '%s'\n", r->key,
                            bad[b].value, err, r->key, bad[b].expect);
                failed++;
            }
        }
    }
    print_message("%d bad values of %zu keys tried, %d not refused naming key "
                  "and value; %d keys skipped (not built)\n",
                  checked, nrows, failed, skipped);
    assert_int_equal(failed, 0);
    assert_true(checked > 100);
}

/* ---- every key the sources read has a row ---------------------------- */

static char missing[4096];
static regex_t re_key, re_sched, re_env;

static void scan_text(const char *path, const char *text)
{
    regmatch_t m[3];
    for (const char *p = text; regexec(&re_key, p, 3, m, 0) == 0;
         p += m[0].rm_eo) {
        char key[128];
        snprintf(key, sizeof(key), "%.*s", (int)(m[2].rm_eo - m[2].rm_so),
                 p + m[2].rm_so);
        if (!row_of(key) && strlen(missing) + strlen(key) + 200 <
                                sizeof(missing))
            snprintf(missing + strlen(missing),
                     sizeof(missing) - strlen(missing), " '%s' (%s)", key,
                     path);
    }
    /* tent_sched_params_load's KEY("name"): read under transports/tcp */
    for (const char *p = text; regexec(&re_sched, p, 2, m, 0) == 0;
         p += m[0].rm_eo) {
        char key[160];
        snprintf(key, sizeof(key), "transports/tcp/%.*s",
                 (int)(m[1].rm_eo - m[1].rm_so), p + m[1].rm_so);
        if (!row_of(key))
            snprintf(missing + strlen(missing),
                     sizeof(missing) - strlen(missing), " '%s' (%s)", key,
                     path);
    }
    for (const char *p = text; regexec(&re_env, p, 2, m, 0) == 0;
         p += m[0].rm_eo) {
        char name[128];
        snprintf(name, sizeof(name), "`%.*s`", (int)(m[1].rm_eo - m[1].rm_so),
                 p + m[1].rm_so);
        if (!strstr(doc_text, name))
            snprintf(missing + strlen(missing),
                     sizeof(missing) - strlen(missing), " %s (%s)", name,
                     path);
    }
}

static int scan_file(const char *path, const struct stat *st, int type,
                     struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    size_t n = strlen(path);
    /* The Mooncake surfaces read variables of their own (README). */
    if (type != FTW_F || n < 2 || strcmp(path + n - 2, ".c") != 0 ||
        strstr(path, "/src/classic/"))
        return 0;
    char *text = read_whole(path);
    if (text) {
        scan_text(path, text);
        free(text);
    }
    return 0;
}

static void test_every_key_in_the_code_has_a_row(void **state)
{
    (void)state;
    if (!doc_text)
        parse_doc();
    assert_int_equal(
        regcomp(&re_key,
                "(tent_config_get_[a-z_]+|tent_config_node|cfg_int|get_int)"
                "\\([^,();]*cfg[^,();]*,[[:space:]]*\"([^\"%]+)\"",
                REG_EXTENDED),
        0);
    assert_int_equal(regcomp(&re_sched, "KEY\\(\"([^\"]+)\"\\)", REG_EXTENDED),
                     0);
    assert_int_equal(
        regcomp(&re_env, "getenv\\(\"([A-Z_0-9]+)\"\\)", REG_EXTENDED), 0);
    missing[0] = '\0';
    assert_int_equal(nftw(TENT_SRC_DIR, scan_file, 16, FTW_PHYS), 0);
    regfree(&re_key);
    regfree(&re_sched);
    regfree(&re_env);
    if (missing[0])
        fail_msg("read by the code, missing from %s:%s", TENT_DOC_PATH,
                 missing);
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    unsetenv("MC_TENT_CONF");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_key_refuses_bad_values),
        cmocka_unit_test(test_every_key_in_the_code_has_a_row),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    free(doc_text);
    return rc;
}

/* Lets CTest run a cmocka suite in parts, so that its slow cases run beside
 * the rest instead of after it: linked with
 * -Wl,--wrap=_cmocka_run_group_tests (tent_split_test() in
 * cmake/TentTestLabels.cmake), it runs only the cases TENT_TEST_ONLY names
 * and leaves out those TENT_TEST_SKIP names (comma-separated case names).
 * A name that is not a case of the suite fails the run: a renamed case is
 * never dropped without a word. */
// clang-format off
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
// clang-format on

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int __real__cmocka_run_group_tests(const char *group,
                                   const struct CMUnitTest *tests, size_t n,
                                   CMFixtureFunction setup,
                                   CMFixtureFunction teardown);
int __wrap__cmocka_run_group_tests(const char *group,
                                   const struct CMUnitTest *tests, size_t n,
                                   CMFixtureFunction setup,
                                   CMFixtureFunction teardown);

/* Whether name is one of list's comma-separated names. */
static bool listed(const char *list, const char *name)
{
    size_t len = strlen(name);
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n == len && strncmp(p, name, n) == 0)
            return true;
        p += n + (end ? 1 : 0);
    }
    return false;
}

/* Every name of list is a case of the suite; else says which is not. */
static bool all_known(const char *var, const char *list,
                      const struct CMUnitTest *tests, size_t n)
{
    char buf[4096];
    snprintf(buf, sizeof(buf), "%s", list);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        bool found = false;
        for (size_t i = 0; i < n && !found; i++)
            found = strcmp(tests[i].name, tok) == 0;
        if (!found) {
            fprintf(stderr,
                    "%s names '%s', which is not a case of this "
                    "suite\n",
                    var, tok);
            return false;
        }
    }
    return true;
}

int __wrap__cmocka_run_group_tests(const char *group,
                                   const struct CMUnitTest *tests, size_t n,
                                   CMFixtureFunction setup,
                                   CMFixtureFunction teardown)
{
    const char *only = getenv("TENT_TEST_ONLY");
    const char *skip = getenv("TENT_TEST_SKIP");
    if ((!only || !*only) && (!skip || !*skip))
        return __real__cmocka_run_group_tests(group, tests, n, setup, teardown);
    if ((only && !all_known("TENT_TEST_ONLY", only, tests, n)) ||
        (skip && !all_known("TENT_TEST_SKIP", skip, tests, n)))
        return 1;
    struct CMUnitTest *keep = calloc(n ? n : 1, sizeof(*keep));
    if (!keep)
        return 1;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if ((!only || !*only || listed(only, tests[i].name)) &&
            (!skip || !listed(skip, tests[i].name)))
            keep[k++] = tests[i];
    int rc = __real__cmocka_run_group_tests(group, keep, k, setup, teardown);
    free(keep);
    return rc;
}

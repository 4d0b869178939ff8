/* dlopen of libfabric (see libfabric_api.h). */
#include "transport/libfabric/libfabric_api.h"

#include "common/dl.h"
#include "common/error.h"

#include <dlfcn.h>
#include <string.h>

#define LF_DEFAULT_LIBRARY "libfabric.so.1"

int lf_api_open(struct lf_api *api, const char *path)
{
    if (!path || !*path)
        path = LF_DEFAULT_LIBRARY;
    memset(api, 0, sizeof(*api));
    char err[512];
    (void)dlerror();
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!h) {
        tent_dl_copy_error(err, sizeof(err), path);
        return tent_set_error(TENT_ENODEV, "libfabric: cannot load %s: %s",
                              path, err);
    }
    struct lf_api a = {.handle = h};
    void *sym;
    /* POSIX lets dlsym's object pointer become a function pointer; memcpy
     * says so without a cast between incompatible pointer types. */
#define LF_RESOLVE(field, name)                                                \
    sym = tent_dl_resolve(h, name, err, sizeof(err));                          \
    if (!sym)                                                                  \
        goto fail;                                                             \
    memcpy(&a.field, &sym, sizeof(sym));
    LF_RESOLVE(getinfo, "fi_getinfo")
    LF_RESOLVE(freeinfo, "fi_freeinfo")
    LF_RESOLVE(dupinfo, "fi_dupinfo")
    LF_RESOLVE(fabric, "fi_fabric")
    LF_RESOLVE(strerror, "fi_strerror")
    LF_RESOLVE(version, "fi_version")
#undef LF_RESOLVE
    *api = a;
    return TENT_OK;
fail:
    dlclose(h);
    return tent_set_error(TENT_ENODEV, "libfabric: %s: %s", path, err);
}

void lf_api_close(struct lf_api *api)
{
    if (api->handle)
        dlclose(api->handle);
    memset(api, 0, sizeof(*api));
}

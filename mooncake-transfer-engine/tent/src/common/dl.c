#include "common/dl.h"

#include <dlfcn.h>
#include <link.h>
#include <stdio.h>

void tent_dl_copy_error(char *buf, size_t len, const char *fallback)
{
    const char *e = dlerror();
    snprintf(buf, len, "%s", e ? e : fallback);
}

void *tent_dl_resolve(void *handle, const char *name, char *err, size_t errlen)
{
    (void)dlerror();
    void *sym = dlsym(handle, name);
    if (!sym) {
        tent_dl_copy_error(err, errlen, "undefined symbol");
        return NULL;
    }
    struct link_map *own = NULL, *def = NULL;
    Dl_info info;
    if (dlinfo(handle, RTLD_DI_LINKMAP, &own) == 0 &&
        dladdr1(sym, &info, (void **)&def, RTLD_DL_LINKMAP) != 0 && own &&
        def && own != def) {
        snprintf(err, errlen,
                 "%s: symbol %s is defined by %s, not by the library itself",
                 own->l_name, name, def->l_name);
        return NULL;
    }
    return sym;
}

/* The few real exported symbols of libfabric, loaded with dlopen.  Every
 * other fi_* call is a static inline wrapper of <rdma/fabric.h> and friends
 * that goes through the ops tables of the objects these return, so nothing
 * else needs resolving (and the engine never links libfabric). */
#ifndef TENT_TRANSPORT_LIBFABRIC_API_H
#define TENT_TRANSPORT_LIBFABRIC_API_H

#include <rdma/fabric.h>
#include <stdint.h>

struct lf_api {
    void *handle;
    int (*getinfo)(uint32_t version, const char *node, const char *service,
                   uint64_t flags, const struct fi_info *hints,
                   struct fi_info **info);
    void (*freeinfo)(struct fi_info *info);
    struct fi_info *(*dupinfo)(const struct fi_info *info);
    int (*fabric)(struct fi_fabric_attr *attr, struct fid_fabric **fabric,
                  void *context);
    const char *(*strerror)(int errnum);
    uint32_t (*version)(void);
};

/* Opens path (NULL: "libfabric.so.1") and resolves the symbols.  TENT_ENODEV
 * with the loader's reason when the file or a symbol is missing. */
int lf_api_open(struct lf_api *api, const char *path);
void lf_api_close(struct lf_api *api);

#endif

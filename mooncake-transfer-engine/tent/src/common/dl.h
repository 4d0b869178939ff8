/* dlopen helpers shared by every loader of a vendor library (memfabric's
 * libmf_smem.so, ACL's libascendcl.so). */
#ifndef TENT_COMMON_DL_H
#define TENT_COMMON_DL_H

#include <stddef.h>

/* Copies dlerror()'s text into buf at once (the next dl call overwrites
 * it), fallback when there is none. */
void tent_dl_copy_error(char *buf, size_t len, const char *fallback);
/* Resolves name in handle itself, not in a library it happens to pull in
 * (a vendor's symbol must come from the vendor's object).  NULL, with the
 * reason in err, otherwise. */
void *tent_dl_resolve(void *handle, const char *name, char *err, size_t errlen);

#endif

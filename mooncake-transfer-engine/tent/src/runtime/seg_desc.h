/* Segment descriptors: export of the local segment, import of a peer's. */
#ifndef TENT_RUNTIME_SEG_DESC_H
#define TENT_RUNTIME_SEG_DESC_H

#include <stddef.h>

struct tent_engine;
struct tent_segment;
struct tent_wire_desc;

/* The local segment's descriptor as JSON (what DESC_RESP carries and the
 * metadata services store); malloc'd, length in *len, NULL when out of
 * memory. */
char *tent_desc_export(struct tent_engine *e, size_t *len);
/* Installs a decoded descriptor into a remote segment (buffer records that
 * left it are retired, never freed while the segment lives); on failure seg
 * is unchanged. */
int tent_desc_import(struct tent_segment *seg, const struct tent_wire_desc *d);
/* Frees what imports kept for seg (retired buffer records).  Idempotent. */
void tent_desc_release(struct tent_segment *seg);

#endif

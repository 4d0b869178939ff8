/* libfabric_pair.c: pairing our rails with a peer's (see the header). */
#include "libfabric_pair.h"

#include <string.h>

bool lf_fabric_loopback(const char *fabric)
{
    return strncmp(fabric, "127.", 4) == 0 || strncmp(fabric, "::1/", 4) == 0;
}

/* The peer rail for our rail k by fabric name, or LF_PAIR_NONE. */
static int by_fabric(const char *const *mine, const bool *usable, int k,
                     const char *const *theirs, int ntheirs, const bool *ok)
{
    int same = 0, rank = 0;
    for (int j = 0; j < ntheirs; j++)
        same += ok[j] && strcmp(theirs[j], mine[k]) == 0;
    if (!same)
        return LF_PAIR_NONE;
    for (int i = 0; i < k; i++)
        rank += usable[i] && strcmp(mine[i], mine[k]) == 0;
    rank %= same;
    for (int j = 0; j < ntheirs; j++)
        if (ok[j] && strcmp(theirs[j], mine[k]) == 0 && rank-- == 0)
            return j;
    return LF_PAIR_NONE; /* not reached */
}

int lf_pair_rails(const char *const *mine, const bool *usable, int nmine,
                  const char *const *theirs, int ntheirs, bool same_host,
                  int *peer_of)
{
    bool ok[64] = {false}, taken[64] = {false};
    if (ntheirs > 64)
        ntheirs = 64;
    for (int j = 0; j < ntheirs; j++)
        ok[j] = same_host || !lf_fabric_loopback(theirs[j]);
    int paired = 0;
    for (int k = 0; k < nmine; k++) {
        peer_of[k] = LF_PAIR_NONE;
        if (usable[k] && *mine[k])
            peer_of[k] = by_fabric(mine, usable, k, theirs, ntheirs, ok);
        if (peer_of[k] != LF_PAIR_NONE) {
            taken[peer_of[k]] = true;
            paired++;
        }
    }
    /* the rest in order with the peer rails no fabric matched */
    int j = 0;
    for (int k = 0; k < nmine; k++) {
        if (!usable[k] || peer_of[k] != LF_PAIR_NONE)
            continue;
        while (j < ntheirs && (taken[j] || !ok[j]))
            j++;
        if (j == ntheirs)
            break;
        peer_of[k] = j++;
        paired++;
    }
    return paired;
}

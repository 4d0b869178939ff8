/* Compiler attributes shared by all our code (libtent, mf_host, tests,
 * bench). */
#ifndef TENT_COMMON_COMPILER_H
#define TENT_COMMON_COMPILER_H

/* Marks a parameter that a callback or ops-table signature requires but this
 * implementation does not read (we build with -Wunused-parameter). */
#define TENT_UNUSED __attribute__((unused))

#endif

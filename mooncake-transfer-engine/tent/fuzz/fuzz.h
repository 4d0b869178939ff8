/* The entry point libFuzzer calls, declared once for every fuzz target. */
#ifndef TENT_FUZZ_FUZZ_H
#define TENT_FUZZ_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif

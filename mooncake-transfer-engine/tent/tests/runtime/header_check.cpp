// The public header compiles as C++ (checked by CTest with -pedantic -Werror)
// and its types and functions are usable from C++ code.
#include "tent/transfer_engine.h"

int main()
{
    tent_request_t r = tent_request_t();
    r.opcode = OPCODE_WRITE;
    r.target_id = LOCAL_SEGMENT_ID;
    tent_status_t st = tent_status_t();
    tent_memory_options_t o = tent_memory_options_t();
    (void)r;
    (void)st;
    (void)o;
    return tent_strerror(TENT_EINVAL) != nullptr ? 0 : 1;
}

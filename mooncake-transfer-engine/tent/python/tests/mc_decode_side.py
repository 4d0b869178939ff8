"""The decode side of test_mooncake_package.py, in a process of its own:
SGLang's or vLLM's engine code (mc_frameworks.py) with its KV cache of
LAYERS buffers registered, as the framework registers it.

    mc_decode_side.py sglang|vllm LAYERS LAYER_BYTES

Prints one JSON line {"session", "ptrs"}, then answers lines:
    hash            sha256 of the layers, in order
    quit            deregisters and exits
"""
import hashlib
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mc_frameworks  # noqa: E402


def main():
    kind, layers, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    kv = [np.zeros(size, dtype=np.uint8) for _ in range(layers)]
    ptrs = [k.ctypes.data for k in kv]
    if kind == "sglang":
        eng = mc_frameworks.SGLangMooncakeTransferEngine("127.0.0.1", 0)
        assert eng.batch_register(ptrs, [size] * layers) == 0
        session = eng.get_session_id()
    else:
        eng = mc_frameworks.VLLMMooncakeWorker("127.0.0.1", {})
        eng.register_kv_caches(ptrs, [size] * layers)
        session = "%s:%d" % (eng.hostname, eng.rpc_port)
    print(json.dumps({"session": session, "ptrs": ptrs}), flush=True)
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "hash":
            h = hashlib.sha256()
            for k in kv:
                h.update(k.tobytes())
            print(h.hexdigest(), flush=True)
        elif cmd == "quit":
            break
    if kind == "sglang":
        assert eng.batch_deregister(ptrs) == 0
    else:
        assert eng.engine.batch_unregister_memory(ptrs) == 0
    return 0


if __name__ == "__main__":
    sys.exit(main())

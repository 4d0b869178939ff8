"""Environment shared by the tests, the peer and the benchmark."""
import json
import os
import tempfile

import numpy as np

# A tcp peer may be silent this long before its tasks fail (the default,
# 3 s, is tight for sanitizer builds on a loaded machine).
TCP_TIMEOUT_MS = 10000


def mf_host_lib():
    return os.environ.get("TENT_MF_HOST_LIB", "")


def setup_env(proto):
    """memfabric runs over mf_host (host_tcp) as libmf_smem.so."""
    if proto == "memfabric":
        os.environ["MF_SMEM_LIBRARY"] = mf_host_lib()
        os.environ.setdefault("MF_PROTOCOL", "host_tcp")


def mc_protocol(proto):
    return proto


def tent_config(proto, extra=None):
    """A JSON config enabling only `proto`; returns its path."""
    cfg = {"log_level": "warning",
           "transports": {p: {"enable": p == proto}
                          for p in ("tcp", "shm", "memfabric")}}
    cfg["transports"]["tcp"]["timeout_ms"] = TCP_TIMEOUT_MS
    if extra:
        cfg.update(extra)
    fd, path = tempfile.mkstemp(prefix="tent-py-test-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(cfg, f)
    return path


def pattern(seed, size):
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8)

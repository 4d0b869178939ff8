"""100,000 calls through both APIs — successes, engine failures and Python
exceptions — with Python memory (tracemalloc), RSS and the reference counts
of the objects passed in stable."""
import gc
import os
import sys
import tracemalloc

import numpy as np

import tent
from conftest import mooncake_engine, tent_engine

CALLS = 100_000


def rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_hundred_thousand_calls(peer_factory):
    peer = peer_factory(proto="shm", size=1 << 20)
    eng = mooncake_engine("shm")
    local = np.zeros(1 << 20, dtype=np.uint8)
    assert eng.register_memory(local, local.nbytes) == 0
    teng = tent_engine("tcp")
    unreg = np.zeros(64, np.uint8)
    session = peer.session
    src = [local.ctypes.data + i * 64 for i in range(8)]
    dst = [peer.addr + i * 64 for i in range(8)]
    lens = [64] * 8
    view = local[:64]

    def one(i):
        k = i % 8
        if k == 0:
            assert eng.batch_transfer_sync_write(session, src, dst, lens) == 0
        elif k == 1:
            assert eng.transfer_sync_read(session, view, peer.addr, 64) == 0
        elif k == 2:  # engine failure: -1
            assert eng.transfer_sync_write(session, unreg.ctypes.data,
                                           peer.addr, 64) == -1
        elif k == 3:  # Python exception
            try:
                eng.transfer_sync_write(session, "x", peer.addr, 64)
            except TypeError:
                pass
        elif k == 4:
            bid = eng.batch_transfer_async_write(session, src[:1], dst[:1],
                                                 lens[:1])
            assert eng.get_batch_transfer_status([bid]) == 0
        elif k == 5:
            try:
                teng.get_transfer_status(12345, 0)
            except tent.InvalidEntryError:
                pass
        elif k == 6:
            assert eng.register_memory(unreg, 64) == 0
            assert eng.unregister_memory(unreg) == 0
        else:
            eng.get_notifies()
            teng.recv_notifi()

    for i in range(2000):  # warm-up: caches, allocator pools
        one(i)
    gc.collect()
    refs = [sys.getrefcount(o) for o in (local, unreg, view, session, src,
                                         dst, lens, eng, teng)]
    tracemalloc.start()
    snap0 = tracemalloc.take_snapshot()
    rss0 = rss_kib()
    for i in range(CALLS):
        one(i)
    gc.collect()
    snap1 = tracemalloc.take_snapshot()
    rss1 = rss_kib()
    tracemalloc.stop()
    growth = sum(s.size_diff for s in snap1.compare_to(snap0, "filename"))
    assert growth < 64 * 1024, "Python memory grew by %d bytes" % growth
    if "asan" not in os.environ.get("LD_PRELOAD", ""):
        # (ASan's quarantine keeps freed memory resident by design)
        assert rss1 - rss0 < 8 * 1024, "RSS grew by %d KiB" % (rss1 - rss0)
    assert refs == [sys.getrefcount(o) for o in (local, unreg, view, session,
                                                 src, dst, lens, eng, teng)]
    eng.close()
    teng.close()

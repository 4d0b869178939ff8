"""Transfer workloads shared by the tests: random non-overlapping ranges
written and read through either API, with every byte of the peer's buffer
checked against a local model."""
import time

import numpy as np

import tentenv
from conftest import sha

MiB = 1 << 20


def ranges(rng, size, max_len=MiB):
    """1..64 non-overlapping (offset, length) ranges inside size bytes."""
    k = int(rng.integers(1, 65))
    slot = size // k
    out = []
    for i in range(k):
        n = int(rng.integers(1, min(slot, max_len) + 1))
        out.append((i * slot + int(rng.integers(0, slot - n + 1)), n))
    return out


def mooncake_roundtrip(eng, peer, local, local_addr, seed, rounds=3,
                       use_objects=False):
    """Writes then reads random ranges; local is a uint8 numpy view of the
    registered local buffer at local_addr (same size as the peer's)."""
    size = peer.size
    sid = peer.session
    rng = np.random.default_rng(seed)
    peer.fill(seed)
    mirror = tentenv.pattern(seed, size)
    for r in range(rounds):
        local[:] = tentenv.pattern(seed * 100 + r, size)
        rs = ranges(rng, size)
        if use_objects:
            # One sync call per range, the buffer given as a slice object.
            for o, n in rs:
                assert eng.transfer_sync_write(sid, local[o:o + n],
                                               peer.addr + o, n) == 0, \
                    eng.last_error()
        else:
            rc = eng.batch_transfer_sync_write(
                sid, [local_addr + o for o, _ in rs],
                [peer.addr + o for o, _ in rs], [n for _, n in rs])
            assert rc == 0, eng.last_error()
        for o, n in rs:
            mirror[o:o + n] = local[o:o + n]
        assert peer.sha() == sha(mirror), "peer bytes differ after writes"
        local[:] = 0
        rs = ranges(rng, size)
        if use_objects:
            for o, n in rs:
                assert eng.transfer_sync_read(sid, local[o:o + n],
                                              peer.addr + o, n) == 0
        else:
            rc = eng.batch_transfer_sync_read(
                sid, [local_addr + o for o, _ in rs],
                [peer.addr + o for o, _ in rs], [n for _, n in rs])
            assert rc == 0, eng.last_error()
        for o, n in rs:
            assert np.array_equal(local[o:o + n], mirror[o:o + n]), \
                "read back bytes differ at %d+%d" % (o, n)
    # The whole buffer, read back in 1 MiB requests.
    local[:] = 0
    offs = list(range(0, size, MiB))
    lens = [min(MiB, size - o) for o in offs]
    assert eng.batch_transfer_sync_read(sid, [local_addr + o for o in offs],
                                        [peer.addr + o for o in offs],
                                        lens) == 0, eng.last_error()
    assert np.array_equal(local, mirror)


def tent_run(eng, reqs, timeout=30.0):
    import tent
    bid = eng.allocate_transfer_batch(len(reqs))
    try:
        eng.submit_transfer(bid, reqs)
        deadline = time.monotonic() + timeout
        while True:
            st = eng.get_transfer_status_overall(bid)
            if st.state != tent.TransferStatusEnum.PENDING:
                break
            assert time.monotonic() < deadline, "batch did not end"
        return st
    finally:
        eng.free_transfer_batch(bid)


def tent_roundtrip(eng, peer, local, local_addr, seed, rounds=3):
    import tent
    size = peer.size
    h = eng.open_segment(peer.session)
    rng = np.random.default_rng(seed)
    peer.fill(seed)
    mirror = tentenv.pattern(seed, size)
    W, R = tent.OpCode.WRITE, tent.OpCode.READ
    for r in range(rounds):
        local[:] = tentenv.pattern(seed * 100 + r, size)
        rs = ranges(rng, size)
        st = tent_run(eng, [tent.Request(W, local_addr + o, h, peer.addr + o,
                                         n) for o, n in rs])
        assert st.state == tent.TransferStatusEnum.COMPLETED
        assert st.bytes == sum(n for _, n in rs)
        for o, n in rs:
            mirror[o:o + n] = local[o:o + n]
        assert peer.sha() == sha(mirror)
        local[:] = 0
        rs = ranges(rng, size)
        st = tent_run(eng, [tent.Request(R, local_addr + o, h, peer.addr + o,
                                         n) for o, n in rs])
        assert st.state == tent.TransferStatusEnum.COMPLETED
        for o, n in rs:
            assert np.array_equal(local[o:o + n], mirror[o:o + n])

"""Child of test_hostile.py: one attack per run, so that a crash (the bug
being tested for) is a failed test and not a dead test runner.

    hostile_child.py <attack>

Prints "ok <detail>" and exits 0 when the engine refused the attack the
way it should and still works afterwards; anything else is a failure.
Two engines in this process: `target` owns the registered buffer the
transfers go to, `eng` is the one attacked."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tentenv  # noqa: E402

N = 512  # list entries: large lists are freed to malloc when cleared


class EvilBuffer:
    """A data_ptr()/nbytes object (torch's protocol) whose data_ptr()
    empties `victim` (a list the call is iterating) first."""

    def __init__(self, arr, victim):
        self.arr = arr
        self.victim = victim

    def data_ptr(self):
        self.victim.clear()
        self.victim.extend([object()] * 3)
        return self.arr.ctypes.data

    @property
    def nbytes(self):
        return self.arr.nbytes


class EvilId(int):
    """An int whose hash and equality empty `victim` (were the batch ids
    looked up with the caller's objects as keys, this would run)."""

    victim = None
    calls = 0

    def __hash__(self):
        EvilId.calls += 1
        if EvilId.victim is not None:
            EvilId.victim.clear()
        return int.__hash__(self)

    def __eq__(self, other):
        EvilId.calls += 1
        if EvilId.victim is not None:
            EvilId.victim.clear()
        return int(self) == other


class EvilRequest:
    """A request whose `source` attribute empties the request list."""

    def __init__(self, req, victim):
        self._req = req
        self._victim = victim
        self.opcode = req.opcode
        self.target_id = req.target_id
        self.target_offset = req.target_offset
        self.length = req.length
        self.priority = req.priority
        self.transport_hint = req.transport_hint

    @property
    def source(self):
        self._victim.clear()
        return self._req.source


def say(*a):
    print(*a, flush=True)


def mooncake_pair():
    from tent.mooncake import TransferEngine
    target = TransferEngine()
    assert target.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    tbuf = np.zeros(N * 64, np.uint8)
    assert target.register_memory(tbuf, tbuf.nbytes) == 0
    eng = TransferEngine()
    assert eng.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    session = "127.0.0.1:%d" % target.get_rpc_port()
    return target, tbuf, eng, session


def expect_modified(call):
    try:
        r = call()
    except RuntimeError as e:
        assert "modified" in str(e), e
        return str(e)
    raise AssertionError("no error for a list modified during the call "
                         "(returned %r)" % (r,))


def mc_still_works(eng, session, tbuf):
    a = np.full(64, 9, np.uint8)
    assert eng.register_memory(a, 64) == 0, eng.last_error()
    rc = eng.transfer_sync_write(session, a, tbuf.ctypes.data, 64)
    assert rc == 0, eng.last_error()
    assert (tbuf[:64] == 9).all()


def attack_mc_batch_register():
    target, tbuf, eng, session = mooncake_pair()
    arrs = [np.zeros(4096, np.uint8) for _ in range(4)]
    addrs = [a.ctypes.data for a in arrs[1:]] * (N // 3)
    addrs.insert(0, None)
    addrs[0] = EvilBuffer(arrs[0], addrs)
    caps = [4096] * len(addrs)
    msg = expect_modified(lambda: eng.batch_register_memory(addrs, caps))
    # nothing stays registered: the engine refuses to unregister them
    assert eng.unregister_memory(arrs[1].ctypes.data) == -1
    mc_still_works(eng, session, tbuf)
    return msg


def attack_mc_batch_unregister():
    target, tbuf, eng, session = mooncake_pair()
    arrs = [np.zeros(4096, np.uint8) for _ in range(3)]
    for a in arrs:
        assert eng.register_memory(a, 4096) == 0
    addrs = [a.ctypes.data for a in arrs[1:]]
    addrs = [None] + addrs + [a for a in addrs for _ in range(N)]
    addrs[0] = EvilBuffer(arrs[0], addrs)
    msg = expect_modified(lambda: eng.batch_unregister_memory(addrs))
    mc_still_works(eng, session, tbuf)
    return msg


def attack_mc_batch_transfer(async_):
    target, tbuf, eng, session = mooncake_pair()
    src = np.arange(N * 64, dtype=np.uint32).astype(np.uint8)
    assert eng.register_memory(src, src.nbytes) == 0
    peers = [tbuf.ctypes.data + i * 64 for i in range(N)]
    bufs = [src.ctypes.data + i * 64 for i in range(N)]
    lens = [64] * N
    bufs[0] = EvilBuffer(src[:64], peers)
    if async_:
        msg = expect_modified(lambda: eng.batch_transfer_async_write(
            session, bufs, peers, lens))
    else:
        msg = expect_modified(lambda: eng.batch_transfer_sync_write(
            session, bufs, peers, lens))
    assert not tbuf.any(), "a refused batch moved bytes"
    mc_still_works(eng, session, tbuf)
    return msg


def attack_mc_batch_status():
    """The ids are read as plain integers: no Python code of theirs runs,
    so the list cannot change under the call."""
    target, tbuf, eng, session = mooncake_pair()
    src = np.ones(64, np.uint8)
    assert eng.register_memory(src, 64) == 0
    ids = []
    for _ in range(3):
        b = eng.batch_transfer_async_write(session, [src.ctypes.data],
                                           [tbuf.ctypes.data], [64])
        assert b, eng.last_error()
        ids.append(EvilId(b))
    ids += [EvilId(12345)] * N
    EvilId.victim = ids
    rc = eng.get_batch_transfer_status(ids)
    EvilId.victim = None
    assert rc == -1 and "12345" in eng.last_error(), (rc, eng.last_error())
    assert len(ids) == N + 3 and EvilId.calls == 0, EvilId.calls
    assert (tbuf[:64] == 1).all()
    mc_still_works(eng, session, tbuf)
    return "ids read as integers"


def attack_tent(kind):
    import tent
    cfg = tentenv.tent_config("tcp")
    target = tent.TransferEngine(cfg)
    eng = tent.TransferEngine(cfg)
    os.unlink(cfg)
    tbuf = np.zeros(N * 64, np.uint8)
    target.register_local_memory(tbuf)
    h = eng.open_segment(target.get_segment_name())
    src = np.arange(N * 64, dtype=np.uint32).astype(np.uint8)
    arrs = [np.zeros(4096, np.uint8) for _ in range(3)]
    if kind == "register":
        addrs = [None] + [a.ctypes.data for a in arrs[1:]] * (N // 2)
        addrs[0] = EvilBuffer(arrs[0], addrs)
        msg = expect_modified(lambda: eng.register_local_memory_batch(
            addrs, [4096] * len(addrs)))
        try:
            eng.unregister_local_memory(arrs[1].ctypes.data)
            raise AssertionError("a refused batch left a registration")
        except tent.AddressNotRegisteredError:
            pass
    elif kind == "unregister":
        for a in arrs:
            eng.register_local_memory(a)
        addrs = [None] + [a.ctypes.data for a in arrs[1:]] * (N // 2)
        addrs[0] = EvilBuffer(arrs[0], addrs)
        msg = expect_modified(lambda: eng.unregister_local_memory_batch(
            addrs))
    else:
        eng.register_local_memory(src)
        reqs = [tent.Request(tent.OpCode.WRITE, src.ctypes.data + i * 64, h,
                             tbuf.ctypes.data + i * 64, 64)
                for i in range(N)]
        reqs[0] = EvilRequest(reqs[0], reqs)
        bid = eng.allocate_transfer_batch(N)
        msg = expect_modified(lambda: eng.submit_transfer(bid, reqs))
        assert eng.get_transfer_status_list(bid) == [], \
            "a refused submission has tasks"
        eng.free_transfer_batch(bid)
    # the engine still works
    eng.register_local_memory(src)
    bid = eng.allocate_transfer_batch(1)
    eng.submit_transfer(bid, [tent.Request(tent.OpCode.WRITE,
                                           src.ctypes.data, h,
                                           tbuf.ctypes.data, 64)])
    while (eng.get_transfer_status(bid, 0).state ==
           tent.TransferStatusEnum.PENDING):
        pass
    assert eng.get_transfer_status(bid, 0).state == \
        tent.TransferStatusEnum.COMPLETED
    eng.free_transfer_batch(bid)
    assert (tbuf[:64] == src[:64]).all()
    return msg


def attack_mc_absurd_registration():
    """register_memory(0x10000, 2**63) is refused; a later local write to
    the range is refused too (instead of a segfault)."""
    target, tbuf, eng, session = mooncake_pair()
    assert eng.register_memory(0x10000, 1 << 63) == -1
    err = eng.last_error()
    assert "0x10000" in err, err
    assert eng.write_bytes_to_buffer(0x10000, b"x" * 16, 16) == -1
    assert eng.register_memory(0x10000, 4096) == -1
    mc_still_works(eng, session, tbuf)
    return err


class ClosingBuffer:
    """A data_ptr()/nbytes object whose data_ptr() closes the engine the
    call runs on (a call must not wait for itself)."""

    def __init__(self, arr, eng):
        self.arr = arr
        self.eng = eng

    def data_ptr(self):
        self.eng.close()
        return self.arr.ctypes.data

    @property
    def nbytes(self):
        return self.arr.nbytes


def attack_close_from_data_ptr():
    import tent
    outcomes = []
    for call in ("register", "batch_register", "sync", "async"):
        target, tbuf, eng, session = mooncake_pair()
        src = np.ones(64, np.uint8)
        evil = ClosingBuffer(src, eng)
        try:
            if call == "register":
                r = eng.register_memory(evil, 64)
            elif call == "batch_register":
                r = eng.batch_register_memory([evil], [64])
            elif call == "sync":
                r = eng.transfer_sync_write(session, evil, tbuf.ctypes.data,
                                            64)
            else:
                r = eng.batch_transfer_async_write(session, [evil],
                                                   [tbuf.ctypes.data], [64])
        except RuntimeError as e:
            assert "closed" in str(e), e
            r = "RuntimeError"
        outcomes.append("%s:%s" % (call, r))
        target.close()
    cfg = tentenv.tent_config("tcp")
    teng = tent.TransferEngine(cfg)
    os.unlink(cfg)
    try:
        teng.register_local_memory(ClosingBuffer(np.ones(64, np.uint8), teng))
        outcomes.append("tent:registered")
    except RuntimeError as e:
        assert "closed" in str(e), e
        outcomes.append("tent:RuntimeError")
    return " ".join(outcomes)


ATTACKS = {
    "close_from_data_ptr": attack_close_from_data_ptr,
    "mc_batch_register": attack_mc_batch_register,
    "mc_batch_unregister": attack_mc_batch_unregister,
    "mc_batch_transfer_sync": lambda: attack_mc_batch_transfer(False),
    "mc_batch_transfer_async": lambda: attack_mc_batch_transfer(True),
    "mc_batch_status": attack_mc_batch_status,
    "tent_register_batch": lambda: attack_tent("register"),
    "tent_unregister_batch": lambda: attack_tent("unregister"),
    "tent_submit": lambda: attack_tent("submit"),
    "mc_absurd_registration": attack_mc_absurd_registration,
}


if __name__ == "__main__":
    detail = ATTACKS[sys.argv[1]]()
    say("ok", detail)

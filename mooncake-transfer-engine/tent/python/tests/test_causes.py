"""Why a task failed, in Python: tent's task_error() gives the C API's
tent_task_error() cause, and mooncake.engine's failed transfers (sync,
batch sync, async with get_batch_transfer_status or
transfer_check_status) put that cause into last_error().

The failures are real ones, seen at the completion stage: the target
unregisters a buffer after the initiator fetched its descriptor, so the
initiator's request passes submission, the target refuses it, and the
descriptor fetched again no longer has the range."""
import time

import numpy as np
import pytest

import tent

from conftest import tent_engine
import tentenv

N = 1 << 16
ERANGE = -7  # TENT_ERANGE


def rng_text(addr, n):
    return "[%#x, +%d)" % (addr, n)


def check_cause(msg, addr, n):
    """The message says which task, what range, who refused it and why."""
    assert "task 0" in msg, msg
    assert rng_text(addr, n) in msg, msg
    assert "refused" in msg and "tcp: peer 127.0.0.1:" in msg, msg
    assert "TENT_ERANGE" in msg, msg
    assert "see the engine log" not in msg


# ---- mooncake.engine ------------------------------------------------------

@pytest.fixture
def pair():
    from tent.mooncake import TransferEngine
    a, b = TransferEngine(), TransferEngine()
    assert a.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    assert b.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    src = tentenv.pattern(3, N)
    assert a.register_memory(src, N) == 0, a.last_error()
    yield a, b, src
    a.close()
    b.close()


def stale(a, b, src):
    """A buffer of b that a has written to (so a holds b's descriptor with
    it), then unregistered by b: its address."""
    dst = np.zeros(N, dtype=np.uint8)
    assert b.register_memory(dst, N) == 0, b.last_error()
    assert a.transfer_sync_write(b.get_session_id(), src, dst.ctypes.data,
                                 N) == 0, a.last_error()
    assert (dst == src).all()
    addr = dst.ctypes.data
    assert b.unregister_memory(addr) == 0
    stale.keep.append(dst)  # the address stays unused by anything else
    return addr


stale.keep = []


@pytest.mark.parametrize("call", ["transfer_sync_write", "transfer_sync_read",
                                  "transfer_sync"])
def test_sync_failure_names_the_cause(pair, call):
    a, b, src = pair
    addr = stale(a, b, src)
    if call == "transfer_sync":
        rc = a.transfer_sync(b.get_session_id(), src, addr, 4096,
                             tent.mooncake.TransferOpcode.Write)
    else:
        rc = getattr(a, call)(b.get_session_id(), src, addr, 4096)
    assert rc == -1
    msg = a.last_error()
    assert msg.startswith(call + ": "), msg
    check_cause(msg, addr, 4096)
    assert ("write" if call != "transfer_sync_read" else "read") in msg


def test_batch_sync_failure_names_the_failed_task(pair):
    a, b, src = pair
    good = np.zeros(N, dtype=np.uint8)
    assert b.register_memory(good, N) == 0
    addr = stale(a, b, src)
    rc = a.batch_transfer_sync_write(
        b.get_session_id(), [src.ctypes.data, src.ctypes.data + 4096],
        [good.ctypes.data, addr], [4096, 4096])
    assert rc < 0
    msg = a.last_error()
    # the second request failed, the first completed
    assert "task 1: " in msg and "more)" not in msg, msg
    assert rng_text(addr, 4096) in msg and "TENT_ERANGE" in msg
    assert (good[:4096] == src[:4096]).all()


def test_async_failure_names_the_cause(pair):
    a, b, src = pair
    addr = stale(a, b, src)
    bid = a.batch_transfer_async_write(b.get_session_id(), [src], [addr],
                                       [4096])
    assert bid != 0, a.last_error()
    assert a.get_batch_transfer_status([bid]) == -1
    msg = a.last_error()
    assert msg.startswith("get_batch_transfer_status: batch %d: " % bid), msg
    check_cause(msg, addr, 4096)

    addr2 = stale(a, b, src)
    bid = a.transfer_submit_write(b.get_session_id(), src, addr2, 4096)
    assert bid != 0, a.last_error()
    deadline = time.monotonic() + 30
    while True:
        r = a.transfer_check_status(bid)
        if r != 0:
            break
        assert time.monotonic() < deadline
        time.sleep(0.001)
    assert r == -1
    msg = a.last_error()
    assert msg.startswith("transfer_check_status: batch %d: " % bid), msg
    check_cause(msg, addr2, 4096)


def test_many_failed_tasks_are_counted(pair):
    a, b, src = pair
    addr = stale(a, b, src)
    rc = a.batch_transfer_sync_write(
        b.get_session_id(), [src.ctypes.data + i * 1024 for i in range(4)],
        [addr + i * 1024 for i in range(4)], [1024] * 4)
    assert rc < 0
    msg = a.last_error()
    assert "task 0 (and 3 more): " in msg, msg
    assert "TENT_ERANGE" in msg


# ---- tent -----------------------------------------------------------------

def wait_terminal(eng, bid, task=0):
    deadline = time.monotonic() + 30
    while True:
        st = eng.get_transfer_status(bid, task)
        if st.state != tent.TransferStatusEnum.PENDING:
            return st
        assert time.monotonic() < deadline, "task did not end"
        time.sleep(0.001)


def test_tent_task_error():
    a, b = tent_engine("tcp"), tent_engine("tcp")
    try:
        src = tentenv.pattern(4, N)
        dst = np.zeros(N, dtype=np.uint8)
        a.register_local_memory(src, N)
        b.register_local_memory(dst, N)
        seg = a.open_segment(b.get_segment_name())
        addr = dst.ctypes.data

        bid = a.allocate_transfer_batch(1)
        a.submit_transfer(bid, [tent.Request(tent.OpCode.WRITE,
                                             src.ctypes.data, seg, addr, N)])
        assert wait_terminal(a, bid).state == tent.TransferStatusEnum.COMPLETED
        err = a.task_error(bid, 0)
        assert isinstance(err, tent.TaskError)
        assert tuple(err) == (0, 0, "")  # it has not failed
        assert err.code == 0 and err.native == 0 and err.message == ""
        a.free_transfer_batch(bid)
        assert (dst == src).all()

        b.unregister_local_memory(addr, N)
        bid = a.allocate_transfer_batch(2)
        a.submit_transfer(bid, [tent.Request(tent.OpCode.WRITE,
                                             src.ctypes.data, seg, addr,
                                             4096)])
        assert wait_terminal(a, bid).state == tent.TransferStatusEnum.FAILED
        code, native, message = a.task_error(bid, 0)
        assert code == ERANGE
        assert tent.strerror(code).startswith("TENT_ERANGE")
        assert isinstance(native, int)
        assert rng_text(addr, 4096) in message, message
        assert "refused the write" in message, message
        # unknown tasks and batches raise
        with pytest.raises(tent.InvalidEntryError, match="task 1"):
            a.task_error(bid, 1)
        a.free_transfer_batch(bid)
        with pytest.raises(tent.InvalidEntryError):
            a.task_error(bid, 0)
        with pytest.raises((TypeError, ValueError)):
            a.task_error(-1, 0)
    finally:
        a.close()
        b.close()
    with pytest.raises(RuntimeError):
        a.task_error(1, 0)

"""Blocking calls release the GIL: another Python thread makes progress
during a long transfer_sync_*; and one engine is safe to use from several
threads at once, including a close() racing with calls."""
import os
import signal
import threading
import time

import numpy as np
import pytest

from conftest import mooncake_engine, sha

BIG = 256 << 20


@pytest.fixture
def long_conf(quiet_engine_config, tmp_path, monkeypatch):
    """tcp peers may be silent for a minute without failing tasks."""
    p = tmp_path / "conf.json"
    p.write_text('{"log_level": "warning", '
                 '"transports": {"tcp": {"timeout_ms": 60000}}}')
    monkeypatch.setenv("MC_TENT_CONF", str(p))


def test_other_thread_runs_during_transfer_sync(peer_factory, long_conf):
    peer = peer_factory(proto="tcp", size=BIG)
    eng = mooncake_engine("tcp")
    local = np.ones(BIG, dtype=np.uint8)
    assert eng.register_memory(local, BIG) == 0
    count = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            count[0] += 1

    t = threading.Thread(target=spin)
    t.start()
    # The peer stops answering for 0.5 s: the call must block that long.
    os.kill(peer.pid, signal.SIGSTOP)
    resume = threading.Timer(0.5, os.kill, (peer.pid, signal.SIGCONT))
    try:
        resume.start()
        c0, t0 = count[0], time.monotonic()
        rc = eng.transfer_sync_write(peer.session, local, peer.addr, BIG)
        dt, progressed = time.monotonic() - t0, count[0] - c0
    finally:
        resume.join()
        os.kill(peer.pid, signal.SIGCONT)
        stop.set()
        t.join()
    assert rc == 0, eng.last_error()
    assert dt >= 0.4, "the transfer did not block (%.3f s)" % dt
    # With the GIL held for the whole call the thread would not move at all.
    assert progressed > 10_000, "other thread advanced %d times" % progressed
    eng.close()


def test_threads_share_one_engine(peer_factory):
    size = 8 << 20
    peer = peer_factory(proto="tcp", size=size)
    eng = mooncake_engine("tcp")
    local = np.zeros(size, dtype=np.uint8)
    assert eng.register_memory(local, size) == 0
    nthreads, part = 4, size // 4
    errors = []

    def worker(k):
        try:
            rng = np.random.default_rng(k)
            lo = local[k * part:(k + 1) * part]
            for it in range(30):
                data = rng.integers(0, 256, part, dtype=np.uint8)
                lo[:] = data
                assert eng.transfer_sync_write(
                    peer.session, lo, peer.addr + k * part, part) == 0
                lo[:] = 0
                assert eng.batch_transfer_sync_read(
                    peer.session, [lo.ctypes.data, lo.ctypes.data + part // 2],
                    [peer.addr + k * part, peer.addr + k * part + part // 2],
                    [part // 2, part - part // 2]) == 0
                assert np.array_equal(lo, data)
        except Exception as e:  # reported below
            errors.append(repr(e))

    def registrar():
        try:
            for _ in range(200):
                a = np.zeros(4096, np.uint8)
                assert eng.register_memory(a, 4096) == 0
                assert eng.unregister_memory(a) == 0
        except Exception as e:
            errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(k,))
               for k in range(nthreads)] + [threading.Thread(target=registrar)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    whole = local.copy()
    assert eng.transfer_sync_read(peer.session, local, peer.addr, size) == 0
    assert sha(local) == sha(whole)
    eng.close()


def test_close_races_with_calls(peer_factory):
    peer = peer_factory(proto="tcp", size=1 << 20)
    eng = mooncake_engine("tcp")
    local = np.zeros(1 << 20, dtype=np.uint8)
    assert eng.register_memory(local, local.nbytes) == 0
    outcomes = []
    go = threading.Event()

    def caller():
        go.wait()
        ok = closed = 0
        for _ in range(2000):
            try:
                assert eng.transfer_sync_write(peer.session, local, peer.addr,
                                               1 << 16) in (0, -1)
                ok += 1
            except RuntimeError:
                closed += 1
                break
        outcomes.append((ok, closed))

    threads = [threading.Thread(target=caller) for _ in range(3)]
    for t in threads:
        t.start()
    go.set()
    time.sleep(0.05)
    eng.close()
    for t in threads:
        t.join()
    assert len(outcomes) == 3
    with pytest.raises(RuntimeError):
        eng.get_rpc_port()



def _in_flight(eng):
    fam = {f["name"]: f for f in eng.metrics_json()["families"]}
    return sum(s["value"] for s in fam["tent_tasks_in_flight"]["series"])


def test_close_waits_for_a_call_inside_the_engine(peer_factory, long_conf):
    """close() from one thread while another is provably inside
    transfer_sync_write (its tasks in flight, the peer stopped): close()
    begins at once (new calls fail) but returns only after the call inside
    has returned, with every byte delivered; nothing crashes.  This is the
    Python layer serialising tent_destroy_engine, which the C API leaves to
    its caller (issue 43, item 6)."""
    size = 8 << 20
    peer = peer_factory(proto="tcp", size=size)
    eng = mooncake_engine("tcp")
    local = np.full(size, 0x5a, dtype=np.uint8)
    assert eng.register_memory(local, size) == 0
    # the peer's segment is known and connected before it stops
    assert eng.transfer_sync_write(peer.session, local, peer.addr,
                                   4096) == 0, eng.last_error()
    order, rcs = [], []
    lock = threading.Lock()

    def call():
        rc = eng.transfer_sync_write(peer.session, local, peer.addr, size)
        with lock:
            order.append("call")
            rcs.append(rc)

    def close():
        eng.close()
        with lock:
            order.append("close")

    os.kill(peer.pid, signal.SIGSTOP)
    try:
        a = threading.Thread(target=call)
        a.start()
        deadline = time.monotonic() + 30
        while _in_flight(eng) == 0:
            assert time.monotonic() < deadline, "the call never submitted"
            time.sleep(0.001)
        b = threading.Thread(target=close)
        b.start()
        # close() has begun once the engine refuses new calls
        deadline = time.monotonic() + 30
        while True:
            try:
                eng.get_rpc_port()
            except RuntimeError:
                break
            assert time.monotonic() < deadline, "close() never began"
            time.sleep(0.001)
        with lock:
            assert order == [], order  # both still waiting on the peer
    finally:
        os.kill(peer.pid, signal.SIGCONT)
    a.join(60)
    b.join(60)
    assert not a.is_alive() and not b.is_alive()
    assert order == ["call", "close"], order
    assert rcs == [0]
    assert peer.sha() == sha(local)
    with pytest.raises(RuntimeError):
        eng.get_rpc_port()


def test_docstrings_say_close_and_lazy_free_rules():
    """The rules are written where Python callers read them."""
    import tent
    from tent.mooncake import TransferEngine
    assert "close() may race" in TransferEngine.__doc__
    assert "lazily" in TransferEngine.__doc__
    assert "finish first" in TransferEngine.close.__doc__
    assert "finish first" in tent.TransferEngine.close.__doc__
    assert "tent_destroy_engine" in tent.TransferEngine.__doc__
    free_doc = tent.TransferEngine.free_transfer_batch.__doc__
    assert "lazy" in free_doc and "WRITE INTO" in free_doc

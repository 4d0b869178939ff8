"""Two processes, both APIs, over tcp, shm and memfabric (mf_host), with
numpy arrays as buffers; every byte checked."""
import numpy as np
import pytest

import tent

import xfer
from conftest import PROTOS, mooncake_engine, np_at, tent_engine


@pytest.mark.parametrize("proto", PROTOS)
@pytest.mark.parametrize("peer_api", ["mooncake", "tent"])
def test_mooncake_numpy(peer_factory, proto, peer_api):
    peer = peer_factory(api=peer_api, proto=proto)
    eng = mooncake_engine(proto)
    local = np.zeros(peer.size, dtype=np.uint8)
    assert eng.register_memory(local, local.nbytes) == 0, eng.last_error()
    xfer.mooncake_roundtrip(eng, peer, local, local.ctypes.data, seed=7)
    assert eng.unregister_memory(local) == 0
    eng.close()


@pytest.mark.parametrize("proto", PROTOS)
def test_mooncake_buffer_objects(peer_factory, proto):
    """Slices of a registered numpy array passed as the buffer itself."""
    peer = peer_factory(proto=proto)
    eng = mooncake_engine(proto)
    local = np.zeros(peer.size, dtype=np.uint8)
    assert eng.register_memory(local, local.nbytes) == 0
    xfer.mooncake_roundtrip(eng, peer, local, local.ctypes.data, seed=11,
                            rounds=1, use_objects=True)
    eng.close()


@pytest.mark.parametrize("proto", PROTOS)
def test_mooncake_managed_buffer(peer_factory, proto):
    peer = peer_factory(proto=proto, buf="managed")
    eng = mooncake_engine(proto)
    addr = eng.allocate_managed_buffer(peer.size)
    assert addr, eng.last_error()
    xfer.mooncake_roundtrip(eng, peer, np_at(addr, peer.size), addr, seed=3,
                            rounds=2)
    assert eng.free_managed_buffer(addr, peer.size) == 0, eng.last_error()
    eng.close()


@pytest.mark.parametrize("proto", PROTOS)
@pytest.mark.parametrize("peer_api", ["mooncake", "tent"])
def test_tent_numpy(peer_factory, proto, peer_api):
    peer = peer_factory(api=peer_api, proto=proto)
    eng = tent_engine(proto)
    assert eng.available()
    local = np.zeros(peer.size, dtype=np.uint8)
    eng.register_local_memory(local, local.nbytes)
    xfer.tent_roundtrip(eng, peer, local, local.ctypes.data, seed=5)
    eng.unregister_local_memory(local)
    eng.close()


@pytest.mark.parametrize("proto", PROTOS)
def test_tent_local_memory(peer_factory, proto):
    """allocate_local_memory only allocates; the program registers it
    (TENT's semantics)."""
    peer = peer_factory(api="tent", proto=proto, buf="local")
    eng = tent_engine(proto)
    addr = eng.allocate_local_memory(peer.size)
    eng.register_local_memory(addr, peer.size)
    # (on failure the memory stays allocated: the traceback still holds
    # the numpy view of it)
    xfer.tent_roundtrip(eng, peer, np_at(addr, peer.size), addr, seed=9,
                        rounds=2)
    eng.unregister_local_memory(addr, peer.size)
    eng.free_local_memory(addr)
    with eng.allocate_memory_guard(4096) as freed:  # TENT's: the address
        assert freed
    with pytest.raises(tent.TentException):  # the guard freed it on exit
        eng.free_local_memory(freed)
    eng.close()


def test_tent_segment_info_and_notifications(peer_factory):
    import tent
    peer = peer_factory(api="tent", proto="tcp")
    eng = tent_engine("tcp")
    h = eng.open_segment(peer.session)
    info = eng.get_segment_info(h)
    assert info.type == 0
    assert [(b.base, b.length) for b in info.buffers] == [(peer.addr,
                                                          peer.size)]
    eng.send_notifi(h, tent.Notification("hello", "world"))
    local = np.arange(4096, dtype=np.uint32).view(np.uint8)
    eng.register_local_memory(local)
    with eng.allocate_batch_guard(1) as bid:  # TENT's: the batch id
        eng.submit_transfer_notif(
            bid, [tent.Request(tent.OpCode.WRITE, local.ctypes.data, h,
                               peer.addr, local.nbytes)], "done", "b1")
        while (eng.get_transfer_status(bid, 0).state ==
               tent.TransferStatusEnum.PENDING):
            pass
        assert eng.get_transfer_status(bid, 0).state == \
            tent.TransferStatusEnum.COMPLETED
    deadline = 50
    got = []
    while deadline and len(got) < 2:
        got += peer.notifs()[len(got):]
        deadline -= 1
    assert ["hello", "world"] in got and ["done", "b1"] in got
    import hashlib
    assert peer.sha(0, local.nbytes) == hashlib.sha256(
        local.tobytes()).hexdigest()
    eng.close()

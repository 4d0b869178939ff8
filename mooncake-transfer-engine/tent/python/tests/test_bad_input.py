"""Bad input through both APIs: wrong types, negative or huge lengths,
unregistered addresses, a dead peer, a closed engine.  Each is an exception
or an error code as documented, never a crash, and the engine stays
usable."""
import time

import numpy as np
import pytest

import tent
from conftest import mooncake_engine, tent_engine
from tent.mooncake import TransferEngine, TransferOpcode

BIG = 1 << 64


@pytest.fixture
def pair(peer_factory):
    peer = peer_factory(proto="tcp", size=1 << 20)
    eng = mooncake_engine("tcp")
    local = np.zeros(1 << 20, dtype=np.uint8)
    assert eng.register_memory(local, local.nbytes) == 0
    yield eng, peer, local
    eng.close()


def still_works(eng, peer, local):
    local[:] = 7
    assert eng.transfer_sync_write(peer.session, local.ctypes.data, peer.addr,
                                   4096) == 0, eng.last_error()


def test_mooncake_initialize_errors():
    eng = TransferEngine()
    with pytest.raises(RuntimeError, match="not initialized"):
        eng.get_rpc_port()
    with pytest.raises(RuntimeError):
        eng.register_memory(1, 1)
    with pytest.raises(TypeError):
        eng.initialize(1, "P2PHANDSHAKE", "tcp", "")
    with pytest.raises(TypeError):
        eng.initialize("127.0.0.1")
    with pytest.raises(TypeError):
        eng.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "", bogus=1)
    assert eng.initialize("127.0.0.1", "P2PHANDSHAKE", "warp-drive", "") == -1
    assert "warp-drive" in eng.last_error()
    assert eng.initialize("127.0.0.1", "P2PHANDSHAKE", "xgmi", "") == -1
    assert "hip" in eng.last_error()
    assert eng.initialize("", "P2PHANDSHAKE", "tcp", "") == -1
    assert eng.initialize("127.0.0.1:99999", "P2PHANDSHAKE", "tcp", "") == -1
    assert eng.initialize("127.0.0.1:1:gpu_0", "P2PHANDSHAKE", "tcp", "") == -1
    assert eng.initialize("127.0.0.1", "nope://x", "tcp", "") == -1
    assert eng.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    assert eng.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == -1
    assert "already" in eng.last_error()
    eng.close()


def test_mooncake_registration_errors(pair):
    eng, peer, local = pair
    with pytest.raises(TypeError):
        eng.register_memory("0x1000", 10)
    with pytest.raises(TypeError):
        eng.register_memory(1.5, 10)
    with pytest.raises(ValueError):
        eng.register_memory(-4096, 10)
    with pytest.raises(ValueError):
        eng.register_memory(BIG, 10)
    with pytest.raises(ValueError):
        eng.register_memory(local.ctypes.data, -1)
    with pytest.raises(TypeError):
        eng.register_memory(local.ctypes.data, "10")
    with pytest.raises(ValueError):  # read-only buffer
        eng.register_memory(b"immutable", 9)
    with pytest.raises(ValueError):  # longer than the object
        eng.register_memory(np.zeros(16, np.uint8), 17)
    with pytest.raises(ValueError):  # not contiguous
        eng.register_memory(np.zeros((8, 8), np.uint8)[:, 0], 8)
    assert eng.register_memory(0, 4096) == -1
    assert eng.register_memory(4096, 0) == -1
    # the same range again raises its reference count (TENT's rule): one
    # more unregister brings it back to one registration
    assert eng.register_memory(local, local.nbytes) == 0
    assert eng.unregister_memory(local) == 0
    assert eng.unregister_memory(12345) == -1
    with pytest.raises(ValueError):
        eng.batch_register_memory([1, 2], [3])
    with pytest.raises(TypeError):
        eng.batch_register_memory(5, [3])
    # all or nothing: the second entry fails, the first is undone
    a = np.zeros(4096, np.uint8)
    assert eng.batch_register_memory([a.ctypes.data, 0], [4096, 4096]) == -1
    assert eng.register_memory(a, 4096) == 0
    assert eng.batch_unregister_memory([a.ctypes.data, 999]) == -1
    assert eng.unregister_memory(a) == -1  # was unregistered by the batch
    still_works(eng, peer, local)


def test_mooncake_transfer_errors(pair):
    eng, peer, local = pair
    s, base, pa = peer.session, local.ctypes.data, peer.addr
    with pytest.raises(TypeError):
        eng.transfer_sync_write(123, base, pa, 16)
    with pytest.raises(ValueError):
        eng.transfer_sync_write(s, base, pa, -1)
    with pytest.raises(ValueError):
        eng.transfer_sync_write(s, base, -pa, 16)
    with pytest.raises(ValueError):
        eng.transfer_sync_write(s, base, pa, BIG)
    with pytest.raises(TypeError):
        eng.transfer_sync_write(s, None, pa, 16)
    with pytest.raises(ValueError):
        eng.transfer_sync_write(s, base, pa, 16, "warp-drive")
    with pytest.raises(ValueError):
        eng.batch_transfer_sync_write(s, [base], [pa, pa], [16])
    with pytest.raises(TypeError):
        eng.batch_transfer_sync_write(s, base, [pa], [16])
    with pytest.raises(ValueError):
        eng.transfer_sync(s, base, pa, 16, 7)
    with pytest.raises(TypeError):
        eng.transfer_sync(s, base, pa, 16, TransferOpcode.Write, notify=5)
    with pytest.raises(ValueError):  # slice shorter than length
        eng.transfer_sync_write(s, local[:8], pa, 16)
    # engine-level failures: -1 with a message
    assert eng.transfer_sync_write(s, base, pa, 0) == -1
    assert eng.transfer_sync_write(s, base, pa, (1 << 63)) == -1
    unreg = np.zeros(4096, np.uint8)
    assert eng.transfer_sync_write(s, unreg.ctypes.data, pa, 16) == -1
    assert eng.last_error()
    assert eng.transfer_sync_write(s, base, pa + peer.size - 8, 16) == -1
    assert eng.transfer_sync_read(s, base, 4096, 16) == -1
    assert eng.transfer_sync_write("no-such-host-xyz:1", base, pa, 16) == -1
    assert eng.batch_transfer_sync_write(s, [], [], []) == 0
    assert eng.batch_transfer_async_write(s, [unreg.ctypes.data], [pa],
                                          [16]) == 0
    assert eng.transfer_submit_write(s, base, pa, 0) == 0
    assert eng.get_batch_transfer_status([12345]) == -1
    assert eng.transfer_check_status(12345) == -1
    with pytest.raises(ValueError):
        eng.get_batch_transfer_status([-1])
    # helpers on memory the engine does not know
    assert eng.write_bytes_to_buffer(unreg.ctypes.data, b"abc", 3) == -1
    assert eng.write_bytes_to_buffer(base + local.nbytes - 2, b"abc", 3) == -1
    with pytest.raises(ValueError):
        eng.write_bytes_to_buffer(base, b"abc", 4)
    with pytest.raises(ValueError):
        eng.read_bytes_from_buffer(0, 10)
    with pytest.raises(ValueError):
        eng.read_bytes_from_buffer(base, BIG - 1)
    assert eng.free_managed_buffer(base, 10) == -1
    assert eng.allocate_managed_buffer(0) == 0
    assert eng.get_first_buffer_address("no-such-host-xyz:1") == 0
    assert eng.send_probe("127.0.0.1:1") == -1
    still_works(eng, peer, local)


@pytest.mark.parametrize("proto", ["tcp", "shm"])
def test_dead_peer(peer_factory, proto):
    peer = peer_factory(proto=proto, size=1 << 20)
    eng = mooncake_engine(proto)
    local = np.ones(1 << 20, dtype=np.uint8)
    assert eng.register_memory(local, local.nbytes) == 0
    assert eng.transfer_sync_write(peer.session, local, peer.addr,
                                   4096) == 0
    assert eng.send_probe(peer.session) == 0
    peer.kill()
    t0 = time.monotonic()
    assert eng.transfer_sync_write(peer.session, local, peer.addr,
                                   1 << 20) == -1
    assert time.monotonic() - t0 < 15
    assert eng.send_probe(peer.session) == -1
    # a new peer still works with the same engine
    peer2 = peer_factory(proto=proto, size=1 << 20)
    assert eng.transfer_sync_write(peer2.session, local, peer2.addr,
                                   4096) == 0, eng.last_error()
    eng.close()


def test_closed_engines(peer_factory):
    eng = mooncake_engine("tcp")
    eng.close()
    eng.close()
    for call in (lambda: eng.get_rpc_port(),
                 lambda: eng.register_memory(1, 1),
                 lambda: eng.transfer_sync_write("a:1", 1, 1, 1),
                 lambda: eng.get_notifies()):
        with pytest.raises(RuntimeError, match="closed"):
            call()
    assert eng.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == -1
    t = tent_engine("tcp")
    t.close()
    with pytest.raises(RuntimeError, match="closed"):
        t.get_segment_name()
    with pytest.raises(RuntimeError, match="closed"):
        t.allocate_transfer_batch(1)
    with tent_engine("tcp") as t2:
        assert t2.available()
    with pytest.raises(RuntimeError):
        t2.available()


def test_tent_exceptions(peer_factory, tmp_path):
    peer = peer_factory(api="tent", proto="tcp", size=1 << 20)
    eng = tent_engine("tcp")
    assert issubclass(tent.InvalidArgumentError, tent.TentException)
    assert issubclass(tent.NotImplementedError, NotImplementedError)
    # A config file that is not there is a warning and the defaults, as in
    # TENT; one that does not parse is an error naming it.
    tent.TransferEngine("/nonexistent/tent.json").close()
    bad = tmp_path / "bad.json"
    bad.write_text('{"log_level": }')
    with pytest.raises(tent.TentException, match="bad.json"):
        tent.TransferEngine(str(bad))
    with pytest.raises(tent.MetadataError):
        eng.open_segment("127.0.0.1:1")
    with pytest.raises(TypeError):
        eng.open_segment(5)
    with pytest.raises(tent.InvalidEntryError):
        eng.get_segment_info(999)
    with pytest.raises(tent.InvalidEntryError):
        eng.get_transfer_status(12345, 0)
    with pytest.raises(tent.InvalidEntryError):
        eng.free_transfer_batch(12345)
    with pytest.raises(tent.InvalidArgumentError):
        eng.allocate_transfer_batch(0)
    with pytest.raises(ValueError):
        eng.allocate_transfer_batch(-1)
    with pytest.raises(tent.InvalidArgumentError):
        eng.register_local_memory(0, 4096)
    with pytest.raises(tent.TentException):
        eng.free_local_memory(12345)
    with pytest.raises(tent.AddressNotRegisteredError):
        eng.unregister_local_memory(12345)
    with pytest.raises(tent.InvalidArgumentError):
        eng.allocate_local_memory(0)
    with pytest.raises(ValueError):
        eng.allocate_local_memory(-5)
    h = eng.open_segment(peer.session)
    local = np.zeros(1 << 16, np.uint8)
    eng.register_local_memory(local)
    eng.register_local_memory(local)  # again: its reference count rises
    eng.unregister_local_memory(local)  # and falls; still registered once
    bid = eng.allocate_transfer_batch(2)
    R = tent.Request
    W = tent.OpCode.WRITE
    unreg = np.zeros(64, np.uint8)
    with pytest.raises(tent.AddressNotRegisteredError):
        eng.submit_transfer(bid, [R(W, unreg.ctypes.data, h, peer.addr, 64)])
    with pytest.raises(ValueError):
        eng.submit_transfer(bid, [R(9, local.ctypes.data, h, peer.addr, 64)])
    with pytest.raises(TypeError):
        eng.submit_transfer(bid, [R(W, "x", h, peer.addr, 64)])
    with pytest.raises(AttributeError):
        eng.submit_transfer(bid, [object()])
    with pytest.raises(tent.InvalidArgumentError):
        eng.submit_transfer(bid, [R(W, local.ctypes.data, h, 64, 64)])
    with pytest.raises(tent.InvalidArgumentError):  # beyond the capacity
        eng.submit_transfer(bid, [R(W, local.ctypes.data, h, peer.addr, 8)] *
                            3)
    with pytest.raises(tent.InvalidEntryError):
        eng.submit_transfer(bid, [R(W, local.ctypes.data, 77, peer.addr, 8)])
    with pytest.raises(tent.InvalidEntryError):
        eng.cancel_transfer(bid, 5)
    with pytest.raises(TypeError):
        eng.send_notifi(h, "not a notification")
    eng.submit_transfer(bid, [R(W, local.ctypes.data, h, peer.addr, 64)])
    while (eng.get_transfer_status(bid, 0).state ==
           tent.TransferStatusEnum.PENDING):
        pass
    assert eng.get_transfer_status(bid, 0).state == \
        tent.TransferStatusEnum.COMPLETED
    eng.free_transfer_batch(bid)
    eng.unregister_local_memory(local)
    eng.close()

"""Hostile or careless input from Python (issue 19, item 4).

- Python holders follow C's reference counts: an object registered by
  reference stays alive while any registration of its memory stands, in
  both APIs, whatever mix of object and integer registrations made them.
- A list mutated by Python code during a batch call is an error, never a
  crash (each attack runs in a child process: hostile_child.py).
- Integers out of range, names with NUL characters and absurd integer
  registrations are refused with a clear error, never truncated.
"""
import gc
import os
import subprocess
import sys
import weakref

import numpy as np
import pytest

import tent
import tentenv
from conftest import HERE, mooncake_engine, tent_engine

PAGE = 4096


def filled(seed, n=PAGE):
    return tentenv.pattern(seed, n)


# ---- holders follow C's reference counts --------------------------------


def test_mooncake_object_then_integer_registration(peer_factory):
    """register_memory(arr), register_memory(addr, n), unregister_memory
    (addr): C still has the range (count 1), so arr must stay alive and a
    transfer into the range must land in arr."""
    peer = peer_factory(proto="tcp", size=1 << 20)
    peer.fill(21)
    eng = mooncake_engine("tcp")
    arr = np.zeros(PAGE, np.uint8)
    ref = weakref.ref(arr)
    addr = arr.ctypes.data
    assert eng.register_memory(arr, PAGE) == 0
    assert eng.register_memory(addr, PAGE) == 0
    assert eng.unregister_memory(addr) == 0
    del arr
    gc.collect()
    assert ref() is not None, "array freed while C still registers it"
    junk = [np.full(PAGE, 0xEE, np.uint8) for _ in range(64)]
    assert eng.transfer_sync_read(peer.session, addr, peer.addr, PAGE) == 0, \
        eng.last_error()
    assert (ref() == filled(21, 1 << 20)[:PAGE]).all()
    assert all((j == 0xEE).all() for j in junk), "unrelated buffer written"
    assert eng.unregister_memory(addr) == 0
    gc.collect()
    assert ref() is None, "array kept after its last registration"
    assert eng.transfer_sync_read(peer.session, addr, peer.addr, PAGE) == -1
    assert eng.unregister_memory(addr) == -1
    eng.close()


def test_mooncake_integer_then_object_registration(peer_factory):
    eng = mooncake_engine("tcp")
    arr = np.zeros(PAGE, np.uint8)
    ref = weakref.ref(arr)
    addr = arr.ctypes.data
    assert eng.register_memory(addr, PAGE) == 0
    assert eng.register_memory(arr, PAGE) == 0
    del arr
    assert eng.unregister_memory(addr) == 0
    gc.collect()
    assert ref() is not None
    assert eng.unregister_memory(addr) == 0
    gc.collect()
    assert ref() is None
    eng.close()


def test_mooncake_overlapping_ranges_keep_the_object():
    """Different lengths at one address are separate entries; a size-0
    unregister takes the first one C registered (the whole array here).
    The half still registered lies inside the array: it stays alive."""
    eng = mooncake_engine("tcp")
    arr = np.zeros(2 * PAGE, np.uint8)
    ref = weakref.ref(arr)
    addr = arr.ctypes.data
    assert eng.register_memory(arr, 2 * PAGE) == 0
    assert eng.register_memory(addr, PAGE) == 0
    del arr
    assert eng.unregister_memory(addr) == 0
    gc.collect()
    assert ref() is not None, "array freed while half of it is registered"
    assert eng.write_bytes_to_buffer(addr, b"\x05" * PAGE, PAGE) == 0
    assert eng.write_bytes_to_buffer(addr + PAGE, b"\x05", 1) == -1
    assert (ref()[:PAGE] == 5).all()
    assert eng.unregister_memory(addr) == 0
    gc.collect()
    assert ref() is None
    eng.close()


def test_mooncake_batch_unregister_counts(peer_factory):
    eng = mooncake_engine("tcp")
    arrs = [np.zeros(PAGE, np.uint8) for _ in range(3)]
    refs = [weakref.ref(a) for a in arrs]
    addrs = [a.ctypes.data for a in arrs]
    assert eng.batch_register_memory(arrs, [PAGE] * 3) == 0
    assert eng.batch_register_memory(addrs, [PAGE] * 3) == 0
    del arrs
    assert eng.batch_unregister_memory(addrs) == 0
    gc.collect()
    assert all(r() is not None for r in refs)
    assert eng.batch_unregister_memory(addrs) == 0
    gc.collect()
    assert all(r() is None for r in refs)
    eng.close()


def test_mooncake_managed_buffer_counts():
    """A managed buffer is one registration: registering it once more by
    address and unregistering twice leaves it unregistered, and the free
    still works."""
    eng = mooncake_engine("tcp")
    m = eng.allocate_managed_buffer(PAGE)
    assert m
    assert eng.register_memory(m, PAGE) == 0
    assert eng.unregister_memory(m) == 0
    assert eng.write_bytes_to_buffer(m, b"ab", 2) == 0
    assert eng.free_managed_buffer(m, PAGE) == 0, eng.last_error()
    assert eng.write_bytes_to_buffer(m, b"ab", 2) == -1
    eng.close()


def test_tent_object_then_integer_registration(peer_factory):
    peer = peer_factory(api="tent", proto="tcp", size=1 << 20)
    peer.fill(22)
    eng = tent_engine("tcp")
    h = eng.open_segment(peer.session)
    arr = np.zeros(PAGE, np.uint8)
    ref = weakref.ref(arr)
    addr = arr.ctypes.data
    eng.register_local_memory(arr)
    eng.register_local_memory(addr, PAGE)
    eng.unregister_local_memory(addr)
    del arr
    gc.collect()
    assert ref() is not None, "array freed while C still registers it"
    import xfer
    st = xfer.tent_run(eng, [tent.Request(tent.OpCode.READ, addr, h,
                                          peer.addr, PAGE)])
    assert st.state == tent.TransferStatusEnum.COMPLETED
    assert (ref() == filled(22, 1 << 20)[:PAGE]).all()
    eng.unregister_local_memory(addr, PAGE)
    gc.collect()
    assert ref() is None
    with pytest.raises(tent.AddressNotRegisteredError):
        eng.unregister_local_memory(addr)
    eng.close()


def test_tent_exact_sizes_and_batches():
    eng = tent_engine("tcp")
    arr = np.zeros(2 * PAGE, np.uint8)
    ref = weakref.ref(arr)
    addr = arr.ctypes.data
    eng.register_local_memory(addr, PAGE)
    eng.register_local_memory(arr)  # 2 pages: a separate entry
    del arr
    with pytest.raises(tent.InvalidArgumentError):
        eng.unregister_local_memory(addr, 3 * PAGE)  # no such entry
    eng.unregister_local_memory(addr, 2 * PAGE)  # the array's entry
    gc.collect()
    # the one page still registered lies inside the array
    assert ref() is not None
    eng.unregister_local_memory_batch([addr], [PAGE])
    gc.collect()
    assert ref() is None
    arrs = [np.zeros(PAGE, np.uint8) for _ in range(2)]
    refs = [weakref.ref(a) for a in arrs]
    eng.register_local_memory_batch(arrs, [PAGE, PAGE])
    eng.register_local_memory_batch([a.ctypes.data for a in arrs],
                                    [PAGE, PAGE])
    addrs = [a.ctypes.data for a in arrs]
    del arrs
    eng.unregister_local_memory_batch(addrs)
    gc.collect()
    assert all(r() is not None for r in refs)
    eng.unregister_local_memory_batch(addrs, [PAGE, PAGE])
    gc.collect()
    assert all(r() is None for r in refs)
    eng.close()


def test_tent_free_drops_registrations_inside():
    """free_local_memory unregisters what lies inside the allocation (as
    C does): the objects registered there are released with it."""
    eng = tent_engine("tcp")
    base = eng.allocate_local_memory(4 * PAGE)
    view = memoryview((__import__("ctypes").c_uint8 * (4 * PAGE))
                      .from_address(base)).cast("B")
    keeper = view[PAGE:2 * PAGE]
    ref = weakref.ref(view.obj)
    eng.register_local_memory(keeper)
    eng.register_local_memory(base, 4 * PAGE)
    del keeper, view
    gc.collect()
    assert ref() is not None
    eng.free_local_memory(base)
    gc.collect()
    assert ref() is None
    eng.close()


# ---- lists mutated during a call ------------------------------------------


@pytest.mark.parametrize("attack", [
    "mc_batch_register", "mc_batch_unregister", "mc_batch_transfer_sync",
    "mc_batch_transfer_async", "mc_batch_status", "tent_register_batch",
    "tent_unregister_batch", "tent_submit", "mc_absurd_registration",
    "close_from_data_ptr"])
def test_attack_in_child(attack):
    r = subprocess.run([sys.executable, os.path.join(HERE, "hostile_child.py"),
                        attack], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("ok"), \
        "%s: exit %d\n%s\n%s" % (attack, r.returncode, r.stdout, r.stderr)
    print(r.stdout.strip())


# ---- out-of-range integers, NUL characters, absurd registrations ---------


def test_tent_out_of_range_integers(peer_factory):
    peer = peer_factory(api="tent", proto="tcp", size=1 << 20)
    eng = tent_engine("tcp")
    h = eng.open_segment(peer.session)
    local = np.zeros(PAGE, np.uint8)
    eng.register_local_memory(local)
    src = local.ctypes.data
    bid = eng.allocate_transfer_batch(4)
    R, W = tent.Request, tent.OpCode.WRITE
    for kw, what in ((dict(priority=1 << 40), "priority"),
                     (dict(priority=-(1 << 40)), "priority"),
                     (dict(transport_hint=1 << 40), "transport_hint"),
                     (dict(opcode=(1 << 32) + 1), "opcode"),
                     (dict(intent_type=1 << 40), "intent_type"),
                     (dict(deadline_ns=-1), "deadline_ns")):
        args = dict(opcode=W, source=src, target_id=h,
                    target_offset=peer.addr, length=64)
        args.update(kw)
        with pytest.raises((ValueError, OverflowError), match=what):
            eng.submit_transfer(bid, [R(**args)])
    with pytest.raises((ValueError, OverflowError), match="length"):
        eng.submit_transfer(bid, [R(W, src, h, peer.addr, 1 << 64)])
    with pytest.raises((ValueError, OverflowError)):
        eng.submit_transfer(bid, [R(W, -src, h, peer.addr, 64)])
    assert eng.get_transfer_status_list(bid) == []
    with pytest.raises((ValueError, OverflowError), match="permission"):
        eng.register_local_memory(local, PAGE, 1 << 33)
    opts = tent.MemoryOptions()
    opts.perm = 1 << 33
    with pytest.raises((ValueError, OverflowError), match="perm"):
        eng.register_local_memory_ex(local.ctypes.data, PAGE, opts)
    opts = tent.MemoryOptions()
    opts.type = (1 << 32) + tent.TransportType.TCP
    with pytest.raises((ValueError, OverflowError), match="type"):
        eng.register_local_memory_ex(local.ctypes.data, PAGE, opts)
    eng.free_transfer_batch(bid)
    eng.close()


def test_tent_absurd_registrations():
    eng = tent_engine("tcp")
    with pytest.raises(ValueError, match="0x10000"):
        eng.register_local_memory(0x10000, 1 << 63)
    with pytest.raises(ValueError, match="not mapped"):
        eng.register_local_memory(0x10000, PAGE)
    arr = np.zeros(PAGE, np.uint8)
    with pytest.raises(ValueError, match="not mapped"):
        eng.register_local_memory(arr.ctypes.data, 1 << 40)
    with pytest.raises(ValueError):
        eng.register_local_memory((1 << 64) - PAGE, 2 * PAGE)
    with pytest.raises(ValueError):
        eng.register_local_memory_batch([arr.ctypes.data, 0x10000],
                                        [PAGE, 1 << 63])
    # nothing stayed registered from the refused batch
    with pytest.raises(tent.AddressNotRegisteredError):
        eng.unregister_local_memory(arr.ctypes.data)
    eng.register_local_memory(arr.ctypes.data, PAGE)  # a real one works
    eng.unregister_local_memory(arr.ctypes.data)
    eng.close()


def test_tent_nul_characters(peer_factory):
    peer = peer_factory(api="tent", proto="tcp", size=1 << 20)
    eng = tent_engine("tcp")
    with pytest.raises(ValueError, match="NUL"):
        eng.open_segment(peer.session + "\x00junk")
    with pytest.raises(ValueError, match="NUL"):
        eng.allocate_local_memory(PAGE, "cpu\x00:1")
    h = eng.open_segment(peer.session)
    with pytest.raises(ValueError, match="NUL"):
        eng.send_notifi(h, tent.Notification("na\x00me", "msg"))
    with pytest.raises(ValueError, match="NUL"):
        eng.send_notifi(h, tent.Notification("name", "m\x00sg"))
    local = np.zeros(PAGE, np.uint8)
    opts = tent.MemoryOptions()
    opts.location = "cpu\x00:7"
    with pytest.raises(ValueError, match="NUL"):
        eng.register_local_memory_ex(local.ctypes.data, PAGE, opts)
    eng.register_local_memory(local)
    bid = eng.allocate_transfer_batch(1)
    req = tent.Request(tent.OpCode.WRITE, local.ctypes.data, h, peer.addr, 8)
    with pytest.raises(ValueError):
        eng.submit_transfer_notif(bid, [req], "a\x00b", "m")
    with pytest.raises(ValueError, match="NUL"):
        eng.submit_transfer(bid, [req], tent.Notification("a\x00b", "m"))
    req.policy_name = "p\x00"
    with pytest.raises(ValueError, match="NUL"):
        eng.submit_transfer(bid, [req])
    eng.free_transfer_batch(bid)
    eng.close()


def test_mooncake_nul_and_absurd_values(peer_factory):
    peer = peer_factory(proto="tcp", size=1 << 20)
    eng = mooncake_engine("tcp")
    local = np.zeros(PAGE, np.uint8)
    assert eng.register_memory(local, PAGE) == 0
    base = local.ctypes.data
    # a NUL in the peer's name would open another segment: refused
    assert eng.transfer_sync_write(peer.session + "\x00x", base, peer.addr,
                                   8) == -1
    assert "NUL" in eng.last_error()
    assert eng.get_first_buffer_address(peer.session + "\x00") == 0
    assert "NUL" in eng.last_error()
    assert eng.register_memory(base, PAGE, "cpu\x00:3") == -1
    assert "NUL" in eng.last_error()
    assert eng.transfer_sync_write(peer.session, base, peer.addr, 8,
                                   "tcp\x00") == -1
    assert "NUL" in eng.last_error()
    assert eng.transfer_sync(peer.session, base, peer.addr, 8, 1,
                             ("kv\x00", "m")) == -1
    assert "NUL" in eng.last_error()
    assert eng.send_probe(peer.session + "\x00") == -1
    assert "NUL" in eng.last_error()
    e2 = type(eng)()
    assert e2.initialize("127.0.0.1\x00evil", "P2PHANDSHAKE", "tcp", "") == -1
    assert "NUL" in e2.last_error()
    # absurd registrations: -1 with the range named
    assert eng.register_memory(0x10000, 1 << 63) == -1
    assert "0x10000" in eng.last_error()
    assert eng.register_memory(base, 1 << 40) == -1
    assert "not mapped" in eng.last_error()
    assert eng.batch_register_memory([base + 1, 0x10000], [8, PAGE]) == -1
    assert eng.unregister_memory(base + 1) == -1  # the batch left nothing
    # the engine still works
    assert eng.transfer_sync_write(peer.session, base, peer.addr, 8) == 0
    eng.close()


def test_read_bytes_error_names_address_and_length():
    eng = mooncake_engine("tcp")
    with pytest.raises(ValueError) as ei:
        eng.read_bytes_from_buffer(0x1234000, 77)
    text = str(ei.value)
    assert "0x1234000" in text and "77" in text, text
    assert "%" not in text, text
    eng.close()

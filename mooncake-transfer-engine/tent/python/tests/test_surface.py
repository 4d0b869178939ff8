"""The Python surface people call (issue 20, items 2 and 6): Mooncake's
protocol fallback and MC_FORCE_TCP, the names mooncake.engine has
(get_engine, get_engine_ptr, TransferEngine.TransferOpcode, Read/Write,
TransferNotify(), send_probe(peer_server_name=...)), a per-engine
last_error(), and TENT's module: guards that give the address or batch id,
the _ex methods, get_local_topology, SegmentInfoType, Request's fields,
TransportType's numbers."""
import json
import logging
import threading

import numpy as np
import pytest

import tent
import tentenv
import xfer
from conftest import mooncake_engine, need_proto, sha, tent_engine
from tent import _tent
from tent.mooncake import TransferEngine, TransferNotify, TransferOpcode

DEVICE_PROTOCOLS = ["rdma", "efa", "nvlink", "mnnvl", "barex", "cxl",
                    "nvlink_intra", "hip", "cxi"]


def installed(eng):
    """The memory transports the engine runs (its metrics label each one;
    the file transports, io_uring and bufio, serve file:// segments beside
    them and are left out)."""
    fam = {f["name"]: f for f in eng.metrics_json()["families"]}
    return {s["labels"]["transport"]
            for s in fam["tent_write_bytes_total"]["series"]} - \
        {"io_uring", "bufio"}


def warnings_of(caplog):
    return [r for r in caplog.records
            if r.name == "tent.mooncake" and r.levelno >= logging.WARNING]


# ---- protocol fallback (Mooncake on a host without the device) ----------


@pytest.mark.parametrize("proto", DEVICE_PROTOCOLS)
def test_device_protocol_falls_back_to_tcp(peer_factory, caplog, proto,
                                           monkeypatch):
    monkeypatch.delenv("MC_FORCE_TCP", raising=False)
    peer = peer_factory(proto="tcp", size=1 << 20,
                        extra_args=["--mc-protocol", proto])
    caplog.set_level(logging.INFO, logger="tent.mooncake")
    eng = TransferEngine()
    assert eng.initialize("127.0.0.1", "P2PHANDSHAKE", proto, "") == 0, \
        eng.last_error()
    warns = warnings_of(caplog)
    assert len(warns) == 1, [w.getMessage() for w in warns]
    text = warns[0].getMessage()
    assert "'%s'" % proto in text and "tcp" in text, text
    assert installed(eng) == {"tcp"}
    local = tentenv.pattern(31, 1 << 20)
    assert eng.register_memory(local, local.nbytes) == 0
    assert eng.transfer_sync_write(peer.session, local, peer.addr,
                                   local.nbytes) == 0, eng.last_error()
    assert peer.sha() == sha(local)
    eng.close()


def test_mc_force_tcp(peer_factory, caplog, monkeypatch):
    """MC_FORCE_TCP set (to anything: Mooncake only asks whether it is
    set) runs tcp whatever the protocol: shm is not installed, ascend needs
    no libmf_smem.so."""
    peer = peer_factory(proto="tcp", size=1 << 20)
    monkeypatch.setenv("MC_FORCE_TCP", "0")
    caplog.set_level(logging.INFO, logger="tent.mooncake")
    eng = TransferEngine()
    assert eng.initialize("127.0.0.1", "P2PHANDSHAKE", "shm", "") == 0
    assert not warnings_of(caplog)
    assert installed(eng) == {"tcp"}
    local = tentenv.pattern(32, 4096)
    assert eng.register_memory(local, local.nbytes) == 0
    assert eng.transfer_sync_write(peer.session, local, peer.addr, 4096,
                                   "shm") == 0, eng.last_error()
    assert peer.sha(0, 4096) == sha(local)
    eng.close()
    monkeypatch.setenv("MF_SMEM_LIBRARY", "/nonexistent/libmf_smem.so")
    e2 = TransferEngine()
    assert e2.initialize("127.0.0.1:%d:npu_0" % 0, "P2PHANDSHAKE", "ascend",
                         "") == 0, e2.last_error()
    assert installed(e2) == {"tcp"}
    e2.close()
    monkeypatch.delenv("MC_FORCE_TCP")
    e3 = TransferEngine()
    assert e3.initialize("127.0.0.1", "P2PHANDSHAKE", "ascend", "") == -1
    assert e3.last_error()


def test_ascend_still_means_memfabric(peer_factory, monkeypatch):
    need_proto("memfabric")
    monkeypatch.delenv("MC_FORCE_TCP", raising=False)
    peer = peer_factory(proto="memfabric", size=1 << 20)
    eng = TransferEngine()
    assert eng.initialize("127.0.0.1", "P2PHANDSHAKE", "ascend", "") == 0
    local = tentenv.pattern(33, 1 << 20)
    assert eng.register_memory(local, local.nbytes) == 0
    assert eng.transfer_sync_write(peer.session, local, peer.addr,
                                   local.nbytes, "ascend") == 0, \
        eng.last_error()
    assert peer.sha() == sha(local)
    eng.close()


# ---- mooncake.engine's names --------------------------------------------


def test_mooncake_names(peer_factory):
    from tent import mooncake as m
    assert TransferEngine.TransferOpcode is TransferOpcode
    assert m.Read == TransferOpcode.Read == 0
    assert m.Write == TransferOpcode.Write == 1
    n = TransferNotify()
    assert (n.name, n.msg) == ("", "")
    n.name, n.msg = "kv", "done"
    assert n == TransferNotify("kv", "done") == ("kv", "done")
    name, msg = n
    assert (name, msg) == ("kv", "done")
    assert not m.SUPPORT_CUDA and not m.SUPPORT_EFA
    eng = TransferEngine()
    assert eng.get_engine_ptr() == 0
    peer = peer_factory(proto="tcp", size=1 << 20)
    assert eng.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    ptr = eng.get_engine_ptr()
    assert isinstance(ptr, int) and ptr != 0
    inner = eng.get_engine()
    assert isinstance(inner, m.InnerTransferEngine) and inner.ptr == ptr
    assert eng.send_probe(peer_server_name=peer.session) == 0
    assert eng.send_probe(peer.session) == 0
    assert eng.send_probe(peer_server_name="127.0.0.1:1") == -1
    # a notification sent with a TransferNotify built field by field
    local = np.zeros(64, np.uint8)
    assert eng.register_memory(local, 64) == 0
    note = TransferNotify()
    note.name, note.msg = "ready", "r-1"
    assert eng.transfer_sync(peer.session, local, peer.addr, 64,
                             TransferEngine.TransferOpcode.Write, note) == 0
    got = []
    for _ in range(100):
        got = peer.notifs()
        if got:
            break
    assert got == [["ready", "r-1"]]
    eng.close()
    assert eng.get_engine_ptr() == 0


def test_last_error_is_per_engine():
    e1 = mooncake_engine("tcp")
    e2 = mooncake_engine("tcp")
    assert e1.register_memory(0, 4096) == -1
    first = e1.last_error()
    assert first
    assert e2.last_error() == "", "e2 reports e1's failure"
    assert e2.unregister_memory(12345) == -1
    assert "0x3039" in e2.last_error() or "12345" in e2.last_error()
    assert e1.last_error() == first, "e1's message replaced by e2's failure"
    # and per thread within one engine
    seen = []

    def other():
        seen.append(e1.last_error())
        e1.transfer_sync_write("127.0.0.1:1", 1, 1, 1)
        seen.append(e1.last_error())

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert seen[0] == "" and seen[1] and seen[1] != first
    assert e1.last_error() == first
    e1.close()
    e2.close()


# ---- TENT's module ------------------------------------------------------


def test_transport_type_numbers():
    want = dict(UNSPEC=0, RDMA=1, MNNVL=2, SHM=3, NVLINK=4, GDS=5, IOURING=6,
                TCP=7, AscendDirect=8, SUNRISE_LINK=9, TPU=10, UB=11,
                MPCOMM=12)
    for name, value in want.items():
        assert tent.TransportType[name] == value, name
        assert getattr(tent, name) == value, name
    assert tent.TransportType.MEMFABRIC == _tent.TRANSPORT_MEMFABRIC
    assert tent.TransportType.TCP == _tent.TRANSPORT_TCP


def test_module_level_enum_values():
    assert tent.READ == tent.OpCode.READ and tent.WRITE == 1
    assert tent.COMPLETED == tent.TransferStatusEnum.COMPLETED == 4
    assert tent.GlobalReadWrite == tent.Permission.GlobalReadWrite == 2
    assert tent.INTENT_UNSPEC == 0 and tent.WEIGHT_LOADING == 5
    assert tent.Memory == tent.SegmentInfoType.Memory == 0
    assert tent.File == tent.SegmentInfoType.File == 1


def test_request_fields():
    r = tent.Request()
    assert r.priority == tent.PRIO_HIGH
    assert r.transport_hint == tent.TransportType.UNSPEC
    assert r.policy_name is None and r.deadline_ns == 0
    assert r.intent_type == tent.IntentType.INTENT_UNSPEC
    r = tent.Request(tent.OpCode.READ, 1, 2, 3, 4, tent.PRIO_LOW,
                     tent.TransportType.TCP, "p", 99,
                     tent.IntentType.MIGRATION)
    assert (r.opcode, r.source, r.target_id, r.target_offset, r.length,
            r.priority, r.transport_hint, r.policy_name, r.deadline_ns,
            r.intent_type) == (0, 1, 2, 3, 4, 2, 7, "p", 99, 3)
    n = tent.Notification()
    n.name, n.msg = "a", "b"
    assert n == tent.Notification("a", "b")


def test_guards_and_ex_methods(peer_factory):
    peer = peer_factory(api="tent", proto="tcp", size=1 << 20)
    peer.fill(41)
    eng = tent_engine("tcp")
    h = eng.open_segment(peer.session)
    info = eng.get_segment_info(h)
    assert info.type is tent.SegmentInfoType.Memory
    with eng.allocate_memory_guard(1 << 16) as addr:
        assert isinstance(addr, int) and addr
        eng.register_local_memory(addr, 1 << 16)
        with eng.allocate_batch_guard(2) as bid:
            assert isinstance(bid, int) and bid
            eng.submit_transfer(bid, [tent.Request(
                tent.READ, addr, h, peer.addr, 4096, tent.PRIO_MEDIUM,
                tent.TCP, None, 1, tent.IntentType.FOREGROUND_GET)])
            while (eng.get_transfer_status(bid, 0).state ==
                   tent.TransferStatusEnum.PENDING):
                pass
            assert eng.get_transfer_status(bid, 0).state == tent.COMPLETED
        with pytest.raises(tent.InvalidEntryError):
            eng.free_transfer_batch(bid)  # the guard freed it
        got = np.frombuffer((__import__("ctypes").c_uint8 * 4096)
                            .from_address(addr), np.uint8).copy()
        assert (got == tentenv.pattern(41, 1 << 20)[:4096]).all()
        eng.unregister_local_memory(addr, 1 << 16)
    with pytest.raises(tent.TentException):
        eng.free_local_memory(addr)  # the guard freed it
    # an exception in the body goes through the guard unchanged
    boom = ValueError("from the body")
    for make in (lambda: eng.allocate_memory_guard(4096),
                 lambda: eng.allocate_batch_guard(1)):
        with pytest.raises(ValueError) as raised:
            with make():
                raise boom
        assert raised.value is boom
    g = eng.allocate_memory_guard(8192)
    assert g.size() == 8192 and g.address()
    a = g.address()
    del g  # collected: freed, as TENT's guard destructor does
    with pytest.raises(tent.TentException):
        eng.free_local_memory(a)
    bg = eng.allocate_batch_guard(1)
    b = bg.id()
    bg.release()
    with pytest.raises(tent.InvalidEntryError):
        eng.free_transfer_batch(b)
    # the _ex variants take MemoryOptions
    opts = tent.MemoryOptions()
    assert (opts.location, opts.perm, opts.type, opts.shm_path,
            opts.shm_offset, opts.internal) == (
        "*", tent.GlobalReadWrite, tent.UNSPEC, "", 0, False)
    p = eng.allocate_local_memory_ex(4096, opts)
    ro = tent.MemoryOptions(perm=tent.GlobalReadOnly)
    eng.register_local_memory_ex(p, 4096, ro)
    eng.unregister_local_memory(p)
    eng.register_local_memory_batch_ex([p, p + 2048], [2048, 2048], opts)
    eng.unregister_local_memory_batch([p, p + 2048], [2048, 2048])
    eng.free_local_memory(p)
    with eng.allocate_memory_guard_ex(4096, opts) as q:
        assert q
    eng.close()


def test_request_policy_name_reaches_the_engine(peer_factory):
    """policy_name selects a rule by name (a name no rule has fails the
    submit, naming it); intent_type is matched by rules that name one."""
    peer = peer_factory(api="tent", proto="tcp", size=1 << 20)
    peer.fill(43)
    eng = tent_engine("tcp", {"policy": [
        {"name": "tiny", "segment_type": "memory", "max_size": 1,
         "transports": ["tcp"]},
        {"name": "fg", "segment_type": "memory",
         "intent_type": "foreground_get", "transports": ["tcp"]}]})
    h = eng.open_segment(peer.session)
    with eng.allocate_memory_guard(1 << 16) as addr:
        eng.register_local_memory(addr, 1 << 16)
        for name, intent in (("tiny", tent.IntentType.INTENT_UNSPEC),
                             (None, tent.IntentType.FOREGROUND_GET)):
            with eng.allocate_batch_guard(1) as bid:
                eng.submit_transfer(bid, [tent.Request(
                    tent.READ, addr, h, peer.addr, 4096, tent.PRIO_HIGH,
                    tent.UNSPEC, name, 0, intent)])
                while (eng.get_transfer_status(bid, 0).state ==
                       tent.TransferStatusEnum.PENDING):
                    pass
                assert (eng.get_transfer_status(bid, 0).state ==
                        tent.COMPLETED)
        with eng.allocate_batch_guard(1) as bid:
            with pytest.raises(tent.TentException) as err:
                eng.submit_transfer(bid, [tent.Request(
                    tent.READ, addr, h, peer.addr, 4096, tent.PRIO_HIGH,
                    tent.UNSPEC, "nope")])
            assert "policy_name 'nope'" in str(err.value)
        with pytest.raises(ValueError):
            eng.submit_transfer(1, [tent.Request(
                tent.READ, addr, h, peer.addr, 4096, policy_name="x" * 64)])
        eng.unregister_local_memory(addr, 1 << 16)
    eng.close()


def test_local_topology():
    eng = tent_engine("tcp")
    topo = json.loads(eng.get_local_topology())
    assert topo["nics"] == []
    assert topo["mems"] and topo["mems"][0]["name"].startswith("cpu:")
    assert set(topo["mems"][0]["device_list"]) == {"rank0", "rank1", "rank2"}
    eng.close()
    with pytest.raises(RuntimeError):
        eng.get_local_topology()


# ---- one answer to a broken Ascend setup (issue 43, item 4) -------------

SEED_NO_PROTOCOL = "InvalidArgument: MF_PROTOCOL must be set"
SEED_NO_LIBRARY = ("DeviceNotFound: MemFabricUnderApi::LoadLibrary failed, "
                   "libmf_smem.so unavailable")


def _errors_of(caplog):
    return [r.getMessage() for r in caplog.records
            if r.name == "tent.mooncake" and r.levelno >= logging.ERROR]


@pytest.mark.parametrize("proto", ["ascend", "memfabric"])
def test_broken_ascend_setup_fails_initialize_in_seed_words(
        proto, caplog, monkeypatch, tmp_path):
    """Protocol ascend/memfabric without libmf_smem.so, or without
    MF_PROTOCOL: initialize returns -1 and last_error() and the
    application's log carry the seed's words, not only 'could not be
    installed (see the engine log)'."""
    monkeypatch.delenv("MC_FORCE_TCP", raising=False)
    monkeypatch.setenv("MF_SMEM_LIBRARY", str(tmp_path / "libmf_smem.so"))
    monkeypatch.setenv("MF_PROTOCOL", "host_tcp")
    caplog.set_level(logging.INFO, logger="tent.mooncake")
    eng = TransferEngine()
    assert eng.initialize("127.0.0.1", "P2PHANDSHAKE", proto, "") == -1
    assert SEED_NO_LIBRARY in eng.last_error(), eng.last_error()
    assert any(SEED_NO_LIBRARY in m for m in _errors_of(caplog))
    caplog.clear()

    monkeypatch.delenv("MF_PROTOCOL")
    monkeypatch.delenv("MF_DATA_OP_TYPE", raising=False)
    eng = TransferEngine()
    assert eng.initialize("127.0.0.1", "P2PHANDSHAKE", proto, "") == -1
    assert SEED_NO_PROTOCOL in eng.last_error(), eng.last_error()
    assert any(SEED_NO_PROTOCOL in m for m in _errors_of(caplog))


def test_broken_ascend_setup_fails_tent_engine_in_seed_words(
        monkeypatch, tmp_path):
    """The tent module: the seed's configuration (memfabric enabled, tcp
    left on by default) on a broken setup fails TransferEngine() with the
    same words, rather than running tcp alone."""
    conf = tmp_path / "mf.json"
    conf.write_text(json.dumps({"transports": {"memfabric": {
        "enable": True}}}))
    monkeypatch.setenv("MF_SMEM_LIBRARY", str(tmp_path / "libmf_smem.so"))
    monkeypatch.setenv("MF_PROTOCOL", "host_tcp")
    with pytest.raises(Exception) as exc:
        tent.TransferEngine(str(conf))
    assert SEED_NO_LIBRARY in str(exc.value)
    monkeypatch.delenv("MF_PROTOCOL")
    monkeypatch.delenv("MF_DATA_OP_TYPE", raising=False)
    with pytest.raises(Exception) as exc:
        tent.TransferEngine(str(conf))
    assert SEED_NO_PROTOCOL in str(exc.value)


@pytest.mark.parametrize("proto", ["gds", "nvmeof", "nccl", "io_uring",
                                   "tpu", "mpcomm"])
def test_protocol_names_are_the_classic_apis(proto, caplog, monkeypatch):
    """mooncake.engine takes the same protocol names as the classic C API
    (one table): each of these runs tcp here, with one warning."""
    monkeypatch.delenv("MC_FORCE_TCP", raising=False)
    caplog.set_level(logging.INFO, logger="tent.mooncake")
    eng = TransferEngine()
    assert eng.initialize("127.0.0.1", "P2PHANDSHAKE", proto, "") == 0, \
        eng.last_error()
    assert installed(eng) == {"tcp"}
    assert len([w for w in warnings_of(caplog)
                if proto in w.getMessage()]) == 1
    eng.close()


def test_mooncake_calls_take_tent_fields(peer_factory, monkeypatch):
    """tent.mooncake's transfer calls take TENT's deadline_ns, policy_name
    and intent_type by keyword: a name picks its rule ahead of the first
    matching one, an intent is matched by a rule naming it, and a deadline
    that cannot be met fails the call with the cause in last_error()."""
    import time
    peer = peer_factory(api="tent", proto="tcp", size=1 << 20)
    peer.fill(47)
    monkeypatch.setenv("MC_TENT_CONF", json.dumps({
        "log_level": "error",
        "policy": [
            {"name": "ckpt", "segment_type": "memory",
             "intent_type": "checkpoint", "transports": ["shm"]},
            {"name": "any", "segment_type": "memory",
             "transports": ["tcp"]},
            {"name": "shm_only", "segment_type": "memory",
             "transports": ["shm"]}],
        "enable_runtime_queue": True,
        "runtime_queue": {"deadline_aware": True,
                          "mlu_local_threshold": 1.0}}))
    eng = mooncake_engine("tcp")
    local = np.zeros(1 << 16, dtype=np.uint8)
    assert eng.register_memory(local, local.nbytes) == 0, eng.last_error()
    s = peer.session
    # defaults and explicit "none" values: rule "any", tcp
    assert eng.transfer_sync_read(s, local, peer.addr, 4096) == 0, \
        eng.last_error()
    assert eng.transfer_sync_read(s, local, peer.addr, 4096, deadline_ns=0,
                                  policy_name=None, intent_type=None) == 0
    assert eng.transfer_sync_read(s, local, peer.addr, 4096,
                                  policy_name="any") == 0
    # the named rule (shm, not running here) is the one used
    assert eng.transfer_sync_read(s, local, peer.addr, 4096,
                                  policy_name="shm_only") == -1
    assert eng.batch_transfer_sync_write(s, [local], [peer.addr], [4096],
                                         policy_name="shm_only") == -1
    assert eng.transfer_sync_read(s, local, peer.addr, 4096,
                                  policy_name="nope") == -1
    assert "policy_name 'nope'" in eng.last_error()
    # TENT's IntentType names and values, also at module level as pybind11's
    # export_values() gives them
    assert [(m.name, int(m)) for m in tent.IntentType] == [
        ("INTENT_UNSPEC", 0), ("FOREGROUND_GET", 1),
        ("BACKGROUND_PREFETCH", 2), ("MIGRATION", 3), ("CHECKPOINT", 4),
        ("WEIGHT_LOADING", 5), ("STAGING_INTERNAL", 6)]
    assert tent.CHECKPOINT is tent.IntentType.CHECKPOINT
    # an intent matched by the rule that names it
    assert eng.transfer_sync_read(
        s, local, peer.addr, 4096,
        intent_type=tent.IntentType.CHECKPOINT) == -1
    assert eng.transfer_sync_read(
        s, local, peer.addr, 4096,
        intent_type=tent.IntentType.FOREGROUND_GET) == 0
    # deadlines: one already past fails with its cause; a generous one is met
    assert eng.transfer_sync_read(s, local, peer.addr, 4096,
                                  deadline_ns=time.monotonic_ns() - 1) == -1
    assert "deadline" in eng.last_error(), eng.last_error()
    assert eng.transfer_sync(
        s, local, peer.addr, 4096, TransferOpcode.Read,
        deadline_ns=time.monotonic_ns() + 10**10) == 0
    bid = eng.batch_transfer_async_read(
        s, [local], [peer.addr], [4096], deadline_ns=time.monotonic_ns() - 1)
    assert bid != 0, eng.last_error()
    assert eng.get_batch_transfer_status([bid]) == -1
    assert "deadline" in eng.last_error(), eng.last_error()
    # bad values
    with pytest.raises(ValueError):
        eng.transfer_sync_read(s, local, peer.addr, 4096, intent_type=7)
    with pytest.raises(TypeError):
        eng.transfer_sync_read(s, local, peer.addr, 4096, deadline_ns="soon")
    with pytest.raises(ValueError):
        eng.transfer_sync_read(s, local, peer.addr, 4096, deadline_ns=-1)
    with pytest.raises(TypeError):
        eng.transfer_sync_read(s, local, peer.addr, 4096, policy_name=3)
    eng.close()

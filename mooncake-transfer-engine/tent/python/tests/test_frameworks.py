"""The call sequences of SGLang's and vLLM's Mooncake connectors against a
peer process, written for `mooncake.engine` with only the import changed."""
import socket

import numpy as np
import pytest

import tentenv
from conftest import PROTOS, Peer, need_proto, sha
from tent.mooncake import TransferEngine, TransferNotify, TransferOpcode

LAYERS = 4
PAGES = 64
PAGE = 4096


def kv_layers():
    return [np.zeros(PAGES * PAGE, dtype=np.uint8) for _ in range(LAYERS)]


def page_runs(pages):
    """Sorted page ids grouped into runs of adjacent pages (as SGLang's
    group_concurrent_contiguous does)."""
    runs = []
    for p in sorted(pages):
        if runs and runs[-1][0] + runs[-1][1] == p:
            runs[-1][1] += 1
        else:
            runs.append([p, 1])
    return runs


def expected_after(seed_peer, layers_local, src_pages, dst_pages):
    size = LAYERS * PAGES * PAGE
    model = tentenv.pattern(seed_peer, size)
    for li, layer in enumerate(layers_local):
        base = li * PAGES * PAGE
        for s, d in zip(src_pages, dst_pages):
            model[base + d * PAGE:base + (d + 1) * PAGE] = \
                layer[s * PAGE:(s + 1) * PAGE]
    return model


class SGLangMooncakeTransferEngine:
    """What sglang/srt/.../mooncake_transfer_engine.py does, verbatim in
    its calls."""

    def __init__(self, hostname, gpu_id, ib_device=None, protocol="rdma",
                 local_hostname=None):
        self.engine = TransferEngine()
        self.hostname = hostname
        self.gpu_id = gpu_id
        self.ib_device = ib_device
        ret = self.engine.initialize(local_hostname or hostname,
                                     "P2PHANDSHAKE", protocol,
                                     ib_device if ib_device is not None
                                     else "")
        if ret != 0:
            raise RuntimeError("Mooncake Transfer Engine initialization "
                               "failed: " + self.engine.last_error())
        self.session_id = f"{self.hostname}:{self.engine.get_rpc_port()}"

    def register(self, ptr, length):
        return self.engine.register_memory(ptr, length)

    def deregister(self, ptr):
        return self.engine.unregister_memory(ptr)

    def batch_register(self, ptrs, lengths):
        return self.engine.batch_register_memory(ptrs, lengths)

    def batch_deregister(self, ptrs):
        return self.engine.batch_unregister_memory(ptrs)

    def transfer_sync(self, session_id, buffer, peer_buffer_address, length):
        return self.engine.transfer_sync_write(session_id, buffer,
                                               peer_buffer_address, length)

    def batch_transfer_sync(self, session_id, buffers, peer_buffer_addresses,
                            lengths):
        return self.engine.batch_transfer_sync_write(
            session_id, buffers, peer_buffer_addresses, lengths)

    def get_session_id(self):
        return self.session_id


def sglang_send_kvcache(engine, session, src_layers, dst_ptrs, src_pages,
                        dst_pages):
    """conn.py's send_kvcache: per layer, contiguous page runs."""
    src_addrs, dst_addrs, lens = [], [], []
    pairs = dict(zip(src_pages, dst_pages))
    for li, layer in enumerate(src_layers):
        for start, n in page_runs(src_pages):
            # destination pages of a run are contiguous in this test
            src_addrs.append(layer.ctypes.data + start * PAGE)
            dst_addrs.append(dst_ptrs[li] + pairs[start] * PAGE)
            lens.append(n * PAGE)
    return engine.batch_transfer_sync(session, src_addrs, dst_addrs, lens)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("proto", PROTOS)
def test_sglang_sequence(peer_factory, proto):
    need_proto(proto)
    decode = peer_factory(proto=proto, size=LAYERS * PAGES * PAGE,
                          extra_args=["--layers", str(LAYERS)])
    prefill = SGLangMooncakeTransferEngine("127.0.0.1", 0, None, proto)
    assert prefill.get_session_id().startswith("127.0.0.1:")
    layers = kv_layers()
    for i, l in enumerate(layers):
        l[:] = tentenv.pattern(100 + i, l.nbytes)
    assert prefill.batch_register([l.ctypes.data for l in layers],
                                  [l.nbytes for l in layers]) == 0
    aux = np.frombuffer(b"metadata-of-the-request".ljust(64, b"\0"),
                        dtype=np.uint8).copy()
    assert prefill.register(aux.ctypes.data, aux.nbytes) == 0
    decode.fill(1)
    rng = np.random.default_rng(4)
    src_pages = sorted(rng.choice(PAGES, 24, replace=False).tolist())
    dst_start = 8
    dst_pages = list(range(dst_start, dst_start + len(src_pages)))
    # contiguous source runs map onto contiguous destination runs
    assert sglang_send_kvcache(prefill, decode.session, layers, decode.addr,
                               src_pages, dst_pages) == 0, \
        prefill.engine.last_error()
    # aux data goes into the last page of layer 0
    aux_dst = decode.addr[0] + (PAGES - 1) * PAGE
    assert prefill.transfer_sync(decode.session, aux.ctypes.data, aux_dst,
                                 aux.nbytes) == 0
    model = expected_after(1, layers, src_pages, dst_pages)
    model[(PAGES - 1) * PAGE:(PAGES - 1) * PAGE + aux.nbytes] = aux
    assert decode.sha() == sha(model)
    assert prefill.engine.send_probe(decode.session) == 0
    assert prefill.deregister(aux.ctypes.data) == 0
    assert prefill.batch_deregister([l.ctypes.data for l in layers]) == 0
    prefill.engine.close()


def test_sglang_ascend_hostname(peer_factory):
    """SGLang's Ascend mode: local_hostname host:port:npu_<id>, protocol
    'ascend' (= memfabric, here over mf_host)."""
    need_proto("memfabric")
    port = free_port()
    decode = peer_factory(proto="memfabric", size=1 << 20,
                          extra_args=["--mc-protocol", "ascend",
                                      "--local-hostname",
                                      "127.0.0.1:%d:npu_1" % free_port()])
    prefill = SGLangMooncakeTransferEngine(
        "127.0.0.1", 0, None, "ascend",
        local_hostname="127.0.0.1:%d:npu_0" % port)
    # as Mooncake's P2P handshake: the port is drawn from its range, not
    # the one of the name
    assert 15000 <= prefill.engine.get_rpc_port() <= 17000
    buf = tentenv.pattern(77, 1 << 20)
    assert prefill.register(buf.ctypes.data, buf.nbytes) == 0
    assert prefill.transfer_sync(decode.session, buf.ctypes.data,
                                 decode.addr, buf.nbytes) == 0, \
        prefill.engine.last_error()
    assert decode.sha() == sha(buf)
    prefill.engine.close()


@pytest.mark.parametrize("proto", PROTOS)
def test_vllm_sequence(peer_factory, proto):
    """vLLM's mooncake_connector: initialize, get_rpc_port, batch register
    of the KV caches, batch_transfer_sync_write per request."""
    need_proto(proto)
    decode = peer_factory(proto=proto, size=LAYERS * PAGES * PAGE,
                          extra_args=["--layers", str(LAYERS)])
    engine = TransferEngine()
    hostname = "127.0.0.1"
    assert engine.initialize(hostname, "P2PHANDSHAKE", proto, "") == 0
    rpc_port = engine.get_rpc_port()
    assert rpc_port > 0
    kv_caches = kv_layers()
    for i, l in enumerate(kv_caches):
        l[:] = tentenv.pattern(200 + i, l.nbytes)
    kv_data_ptrs = [c.ctypes.data for c in kv_caches]
    kv_data_lens = [c.nbytes for c in kv_caches]
    assert engine.batch_register_memory(kv_data_ptrs, kv_data_lens) == 0
    decode.fill(2)
    remote_session = decode.session
    src_pages = list(range(0, 32, 2))
    dst_pages = list(range(40, 56))
    src_ptrs, dst_ptrs, lengths = [], [], []
    for li in range(LAYERS):
        for s, d in zip(src_pages, dst_pages):
            src_ptrs.append(kv_data_ptrs[li] + s * PAGE)
            dst_ptrs.append(decode.addr[li] + d * PAGE)
            lengths.append(PAGE)
    ret = engine.batch_transfer_sync_write(remote_session, src_ptrs,
                                           dst_ptrs, lengths)
    assert ret == 0, engine.last_error()
    assert decode.sha() == sha(expected_after(2, kv_caches, src_pages,
                                              dst_pages))
    assert engine.batch_unregister_memory(kv_data_ptrs) == 0
    engine.close()


@pytest.mark.parametrize("proto", PROTOS)
def test_async_and_notify(peer_factory, proto):
    """batch_transfer_async_* + get_batch_transfer_status,
    transfer_submit_write + transfer_check_status, transfer_sync with a
    notification, read_bytes/write_bytes on a managed buffer."""
    need_proto(proto)
    peer = peer_factory(proto=proto, size=1 << 20)
    eng = TransferEngine()
    assert eng.initialize("127.0.0.1", "P2PHANDSHAKE", proto, "") == 0
    buf = eng.allocate_managed_buffer(1 << 20)
    assert buf
    data = tentenv.pattern(5, 1 << 20)
    assert eng.write_bytes_to_buffer(buf, data.tobytes(), data.nbytes) == 0
    assert eng.read_bytes_from_buffer(buf + 10, 6) == data[10:16].tobytes()
    half = 1 << 19
    ids = [eng.batch_transfer_async_write(peer.session, [buf], [peer.addr],
                                          [half]),
           eng.batch_transfer_async(peer.session, [buf + half],
                                    [peer.addr + half], [half],
                                    TransferOpcode.Write)]
    assert all(ids), eng.last_error()
    assert eng.get_batch_transfer_status(ids) == 0, eng.last_error()
    assert peer.sha() == sha(data)
    assert eng.get_batch_transfer_status(ids) == -1  # ids are freed
    # read back through the submit/check pair is write-only; read async
    assert eng.write_bytes_to_buffer(buf, bytes(1 << 20), 1 << 20) == 0
    rid = eng.batch_transfer_async_read(peer.session, [buf], [peer.addr],
                                        [1 << 20])
    assert rid and eng.get_batch_transfer_status([rid]) == 0
    assert eng.read_bytes_from_buffer(buf, 1 << 20) == data.tobytes()
    sid = eng.transfer_submit_write(peer.session, buf, peer.addr + 4096, 16)
    assert sid
    while (st := eng.transfer_check_status(sid)) == 0:
        pass
    assert st == 1
    assert eng.transfer_check_status(sid) == -1  # freed when done
    assert eng.transfer_sync(peer.session, buf, peer.addr, 64,
                             TransferOpcode.Write,
                             TransferNotify("kv-ready", "req-1")) == 0
    assert eng.batch_transfer_sync(peer.session, [buf], [peer.addr], [64],
                                   TransferOpcode.Read) == 0
    got = []
    for _ in range(100):
        got = peer.notifs()
        if got:
            break
    assert got == [["kv-ready", "req-1"]]
    assert eng.get_first_buffer_address(peer.session) == peer.addr
    topo = eng.get_local_topology()
    assert "cpu:0" in topo
    assert eng.free_managed_buffer(buf, 1 << 20) == 0
    eng.close()


def test_etcd_style_metadata_server_parsing():
    """metadata_server schemes: a service nobody runs fails initialize with
    -1 and a message naming it (the data path is tested with p2p)."""
    eng = TransferEngine()
    port = free_port()
    assert eng.initialize("127.0.0.1", "etcd://127.0.0.1:%d" % port, "tcp",
                          "") == -1
    assert "etcd" in eng.last_error()
    assert eng.initialize("127.0.0.1", "redis://127.0.0.1:%d" % port, "tcp",
                          "") == -1
    assert "redis" in eng.last_error()
    assert eng.initialize_ext("127.0.0.1", "127.0.0.1:%d" % port, "tcp", "",
                              "http") == -1
    assert eng.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    eng.close()

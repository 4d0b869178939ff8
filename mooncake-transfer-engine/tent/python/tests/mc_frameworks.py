"""The transfer-engine code of SGLang and vLLM, reduced to the calls they
make and in the order they make them, importing `mooncake.engine` as they
do (nothing here knows it is TENT in C).

SGLang: python/sglang/srt/distributed/device_communicators/
mooncake_transfer_engine.py (the wrapper) and disaggregation/mooncake/
conn.py (batch_register of the KV pool, _transfer_data with
batch_transfer_sync per layer or per batch from a thread pool, send_probe
for failed sessions).  vLLM: kv_connector/v1/mooncake/mooncake_connector.py
(MooncakeConnectorWorker: initialize with mooncake_protocol, get_rpc_port,
register_kv_caches with batch_register_memory, _send_blocks with
batch_transfer_sync_write from a ThreadPoolExecutor)."""
import os


class SGLangMooncakeTransferEngine:
    """SGLang's MooncakeTransferEngine (GPU id, IB device, protocol from
    MOONCAKE_PROTOCOL, default "rdma")."""

    def __init__(self, hostname, gpu_id=None, ib_device=None):
        try:
            from mooncake.engine import TransferEngine
        except ImportError as e:
            raise ImportError("Please install mooncake") from e
        self.engine = TransferEngine()
        self.hostname = hostname
        self.gpu_id = gpu_id if gpu_id is not None else 0
        if os.environ.get("MC_FORCE_TCP") == "1":
            self.ib_device = ""
        else:
            self.ib_device = ib_device
        self.initialize(hostname=self.hostname, device_name=self.ib_device)
        self.session_id = "%s:%d" % (self.hostname,
                                     self.engine.get_rpc_port())

    def register(self, ptr, length):
        try:
            ret_value = self.engine.register_memory(ptr, length)
        except Exception:
            ret_value = -1
        return ret_value

    def deregister(self, ptr):
        try:
            ret_value = self.engine.unregister_memory(ptr)
        except Exception:
            ret_value = -1
        return ret_value

    def batch_register(self, ptrs, lengths):
        try:
            ret_value = self.engine.batch_register_memory(ptrs, lengths)
        except Exception:
            ret_value = -1
        return ret_value

    def batch_deregister(self, ptrs):
        try:
            ret_value = self.engine.batch_unregister_memory(ptrs)
        except Exception:
            ret_value = -1
        return ret_value

    def initialize(self, hostname, device_name):
        protocol = os.environ.get("MOONCAKE_PROTOCOL", "rdma")
        ret_value = self.engine.initialize(
            hostname, "P2PHANDSHAKE", protocol,
            device_name if device_name is not None else "")
        if ret_value != 0:
            raise RuntimeError("Mooncake Transfer Engine initialization "
                               "failed.")

    def transfer_sync(self, session_id, buffer, peer_buffer_address, length):
        try:
            ret = self.engine.transfer_sync_write(session_id, buffer,
                                                  peer_buffer_address, length)
        except Exception:
            ret = -1
        return ret

    def batch_transfer_sync(self, session_id, buffers, peer_buffer_addresses,
                            lengths):
        try:
            ret = self.engine.batch_transfer_sync_write(
                session_id, buffers, peer_buffer_addresses, lengths)
        except Exception:
            ret = -1
        return ret

    def get_session_id(self):
        return self.session_id

    def send_probe(self, peer_session_id):
        return self.engine.send_probe(peer_session_id)

    def get_engine(self):
        return self.engine.get_engine()


def sglang_transfer_data(engine, session, transfer_blocks):
    """conn.py's _transfer_data."""
    if not transfer_blocks:
        return 0
    src_addrs, dst_addrs, lengths = zip(*transfer_blocks)
    return engine.batch_transfer_sync(session, list(src_addrs),
                                      list(dst_addrs), list(lengths))


class VLLMMooncakeWorker:
    """vLLM's MooncakeConnectorWorker, engine part."""

    def __init__(self, hostname, kv_connector_extra_config):
        from mooncake.engine import TransferEngine
        self.engine = TransferEngine()
        self.hostname = hostname
        protocol = kv_connector_extra_config.get("mooncake_protocol", "rdma")
        device_name = kv_connector_extra_config.get("device_name", "")
        ret_value = self.engine.initialize(self.hostname, "P2PHANDSHAKE",
                                           protocol, device_name)
        if ret_value != 0:
            raise RuntimeError("Mooncake Transfer Engine initialization "
                               "failed.")
        self.rpc_port = self.engine.get_rpc_port()

    def register_kv_caches(self, kv_data_ptrs, kv_data_lens):
        ret_value = self.engine.batch_register_memory(kv_data_ptrs,
                                                      kv_data_lens)
        if ret_value != 0:
            raise RuntimeError("Mooncake batch memory registration failed.")

    def send_blocks(self, remote_session, src_ptrs, dst_ptrs, lengths):
        return self.engine.batch_transfer_sync_write(remote_session, src_ptrs,
                                                     dst_ptrs, lengths)

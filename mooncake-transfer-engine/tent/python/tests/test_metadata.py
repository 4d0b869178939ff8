"""initialize() with a metadata service (etcd://, redis://, http://, and
initialize_ext's metadata_type), each server started by the test on a
loopback port of its own: a segment named only in the service is found
through it, and bytes move."""
import time

import numpy as np
import pytest

import metaservers
import tentenv
from conftest import sha
from metaservers import free_port, init_until_ready
from tent.mooncake import TransferEngine


@pytest.fixture(params=metaservers.KINDS)
def service(request, tmp_path):
    with metaservers.running(request.param, tmp_path) as url:
        yield request.param, url


def test_segment_found_through_the_service(service):
    kind, url = service
    target = TransferEngine()
    # named "127.0.0.1": not an address, so only the service can resolve it
    init_until_ready(target, "127.0.0.1", url)
    initiator = TransferEngine()
    init_until_ready(initiator, "127.0.0.1:%d" % free_port(), url)
    buf = np.zeros(1 << 20, dtype=np.uint8)
    assert target.register_memory(buf, buf.nbytes) == 0
    src = tentenv.pattern(31, 1 << 20)
    assert initiator.register_memory(src, src.nbytes) == 0
    addr = None
    for _ in range(50):  # the descriptor is re-published on registration
        addr = initiator.get_first_buffer_address("127.0.0.1")
        if addr:
            break
        time.sleep(0.1)
    assert addr == buf.ctypes.data, initiator.last_error()
    assert initiator.transfer_sync_write("127.0.0.1", src, addr,
                                         src.nbytes) == 0, \
        initiator.last_error()
    assert sha(buf) == sha(src)
    # the host:rpc_port session id works as well
    session = "127.0.0.1:%d" % target.get_rpc_port()
    assert initiator.transfer_sync_read(session, src, addr, 4096) == 0
    initiator.close()
    target.close()


def test_initialize_ext_metadata_type(service):
    kind, url = service
    servers = url.split("://", 1)[1] if kind != "http" else url
    eng = TransferEngine()
    t0 = time.monotonic()
    while eng.initialize_ext("127.0.0.1:%d" % free_port(), servers, "tcp", "",
                             kind) != 0:
        assert time.monotonic() - t0 < 20, eng.last_error()
        time.sleep(0.1)
    assert eng.get_rpc_port() > 0
    eng.close()

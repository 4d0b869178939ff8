"""initialize() with a metadata service (etcd://, redis://, http://, and
initialize_ext's metadata_type), each server started by the test on a
loopback port of its own: a segment named only in the service is found
through it, and bytes move."""
import os
import shutil
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

import tentenv
from conftest import HERE, sha
from tent.mooncake import TransferEngine

HTTP_SERVER = os.path.join(HERE, "..", "..", "tests", "meta",
                           "http_meta_server.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(params=["etcd", "redis", "http"])
def service(request, tmp_path):
    kind = request.param
    port = free_port()
    if kind == "etcd":
        if not shutil.which("etcd"):
            pytest.skip("etcd is not installed (etcd-server)")
        client = "http://127.0.0.1:%d" % port
        peer = "http://127.0.0.1:%d" % free_port()
        cmd = ["etcd", "--name", "py-test", "--data-dir", str(tmp_path / "d"),
               "--listen-client-urls", client, "--advertise-client-urls",
               client, "--listen-peer-urls", peer,
               "--initial-advertise-peer-urls", peer, "--initial-cluster",
               "py-test=" + peer]
        url = "etcd://127.0.0.1:%d" % port
    elif kind == "redis":
        if not shutil.which("redis-server"):
            pytest.skip("redis-server is not installed")
        cmd = ["redis-server", "--port", str(port), "--bind", "127.0.0.1",
               "--save", "", "--appendonly", "no", "--dir", str(tmp_path)]
        url = "redis://127.0.0.1:%d" % port
    else:
        cmd = [sys.executable, HTTP_SERVER, str(port)]
        url = "http://127.0.0.1:%d/metadata" % port
    log = open(tmp_path / "server.log", "wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=log)
    try:
        yield kind, url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def init_until_ready(eng, host, url, deadline_s=20):
    """The server needs a moment to start: retry initialize until then."""
    t0 = time.monotonic()
    while True:
        if eng.initialize(host, url, "tcp", "") == 0:
            return
        assert time.monotonic() - t0 < deadline_s, eng.last_error()
        time.sleep(0.1)


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

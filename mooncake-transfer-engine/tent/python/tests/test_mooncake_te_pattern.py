"""Mooncake's own transfer-engine test pattern (mooncake-wheel's target and
initiator tests, as Mooncake's CI runs them with MC_FORCE_TCP) through the
`mooncake` package: a target process and this process as the initiator,
with metadata over http, etcd, redis and P2PHANDSHAKE.  The initiator
writes random strings into a managed buffer, writes them to the target
and reads them back (one by one, in batches, and in async batches), and
the error cases the pattern checks return what Mooncake documents."""
import os
import random
import string
import subprocess
import sys

import pytest

import metaservers
from conftest import HERE

if os.environ.get("TENT_PY_MOONCAKE_SHIM", "ON").upper() in ("OFF", "0"):
    pytest.skip("built with TENT_PYTHON_MOONCAKE_SHIM=OFF: no mooncake "
                "package", allow_module_level=True)

from mooncake.engine import TransferEngine  # noqa: E402

CAPACITY = 64 * 1024 * 1024
CIRCLE = int(os.environ.get("CIRCLE", 300))
BATCH = 100
SLOT = 1024
CHARS = string.ascii_letters + string.digits + string.punctuation


@pytest.fixture(params=["http", "etcd", "redis", "P2PHANDSHAKE"])
def metadata(request, tmp_path):
    if request.param == "P2PHANDSHAKE":
        yield "P2PHANDSHAKE"
    else:
        with metaservers.running(request.param, tmp_path) as url:
            yield url


def random_bytes(rng, lo, hi):
    return "".join(rng.choices(CHARS, k=rng.randint(lo, hi))).encode()


def test_target_and_initiator(metadata, monkeypatch):
    monkeypatch.setenv("MC_FORCE_TCP", "true")
    port = metaservers.free_port()
    env = dict(os.environ, TARGET_SERVER_NAME="127.0.0.1:%d" % port,
               MC_METADATA_SERVER=metadata, PROTOCOL="tcp")
    target = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "te_pattern_target.py")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    try:
        line = target.stdout.readline().split()
        assert line and line[0] == "ready", line
        target_name, target_buf = line[1], int(line[2])
        run_initiator(metadata, target_name, target_buf)
    finally:
        target.stdin.close()
        try:
            target.wait(20)
        except subprocess.TimeoutExpired:
            target.kill()
            target.wait()
        target.stdout.close()
    assert target.returncode == 0


def run_initiator(metadata, target_name, target_buf):
    rng = random.Random(20)
    eng = TransferEngine()
    name = "127.0.0.1:%d" % metaservers.free_port()
    metaservers.init_until_ready(eng, name, metadata)
    if metadata == "P2PHANDSHAKE":
        name = "%s:%d" % (name.rpartition(":")[0], eng.get_rpc_port())
    src = eng.get_first_buffer_address(name)
    assert src == 0  # nothing registered yet: a managed buffer
    src = eng.allocate_managed_buffer(CAPACITY)
    assert src, eng.last_error()
    assert eng.get_first_buffer_address(name) == src
    dst = eng.get_first_buffer_address(target_name)
    assert dst == target_buf, eng.last_error()

    for i in range(CIRCLE):  # one string at a time
        data = random_bytes(rng, 16, 256)
        n = len(data)
        assert eng.write_bytes_to_buffer(src, data, n) == 0
        assert eng.transfer_sync_write(target_name, src, dst, n) == 0, \
            (i, eng.last_error())
        assert eng.write_bytes_to_buffer(src, bytes(n), n) == 0
        assert eng.transfer_sync_read(target_name, src, dst, n) == 0, \
            (i, eng.last_error())
        assert eng.read_bytes_from_buffer(src, n) == data, i

    srcs = [src + j * SLOT for j in range(BATCH)]
    dsts = [dst + j * SLOT for j in range(BATCH)]
    for mode in ("sync", "async"):
        for i in range(max(2, CIRCLE // 100)):
            datas = [random_bytes(rng, 32, 128) for _ in range(BATCH)]
            lens = [len(d) for d in datas]
            for a, d in zip(srcs, datas):
                assert eng.write_bytes_to_buffer(a, d, len(d)) == 0
            if mode == "sync":
                assert eng.batch_transfer_sync_write(target_name, srcs, dsts,
                                                     lens) == 0
            else:
                bid = eng.batch_transfer_async_write(target_name, srcs, dsts,
                                                     lens)
                assert bid != 0, eng.last_error()
                assert eng.get_batch_transfer_status([bid]) == 0
            for a, n in zip(srcs, lens):
                assert eng.write_bytes_to_buffer(a, bytes(n), n) == 0
            if mode == "sync":
                assert eng.batch_transfer_sync_read(target_name, srcs, dsts,
                                                    lens) == 0
            else:
                bid = eng.batch_transfer_async_read(target_name, srcs, dsts,
                                                    lens)
                assert bid != 0, eng.last_error()
                assert eng.get_batch_transfer_status([bid]) == 0
            for a, d in zip(srcs, datas):
                assert eng.read_bytes_from_buffer(a, len(d)) == d, (mode, i)

    # a peer the metadata does not know: the documented failure values
    assert eng.batch_transfer_async_write("unreachable_peer:9", [0], [0],
                                          [16]) == 0
    assert eng.transfer_submit_write("unreachable_peer:9", 0, 0, 16) == 0
    assert eng.send_probe(target_name) == 0
    assert eng.send_probe("unreachable_peer:9") != 0
    assert eng.free_managed_buffer(src, CAPACITY) == 0
    eng.close()

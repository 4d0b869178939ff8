"""File segments from Python: both APIs reach a file the same way, by a
segment name that starts with file:// (the target address is the file
offset), through io_uring or bufio.  No change to the extension was needed:
the names go to tent_open_segment as they are."""
import json
import os
import tempfile

import numpy as np
import pytest

import tentenv

XPORTS = ["io_uring", "bufio"]


def file_config(xport, tmp_path):
    """Only the file transport xport (and tcp, which the local memory does
    not need) enabled."""
    cfg = {"log_level": "warning",
           "transports": {p: {"enable": p in (xport, "tcp")}
                          for p in ("tcp", "shm", "memfabric", "io_uring",
                                    "bufio")}}
    path = tmp_path / f"tent-{xport}.json"
    path.write_text(json.dumps(cfg))
    return str(path)


def make_file(path, size):
    with open(path, "wb") as f:
        f.truncate(size)


def tent_engine_for(xport, tmp_path):
    import tent
    eng = tent.TransferEngine(file_config(xport, tmp_path))
    if xport == "io_uring" and not file_transport_built(eng, tmp_path):
        eng.close()
        pytest.skip("the io_uring transport is not built or not allowed "
                    "here")
    return eng


def file_transport_built(eng, tmp_path):
    """Whether a file segment finds a transport in this engine."""
    import tent
    probe = str(tmp_path / "probe")
    make_file(probe, 4096)
    h = eng.open_segment("file://" + probe)
    buf = np.zeros(4096, np.uint8)
    eng.register_local_memory(buf)
    try:
        with eng.allocate_batch_guard(1) as bid:
            eng.submit_transfer(bid, [tent.Request(
                tent.OpCode.READ, buf.ctypes.data, h, 0, 4096)])
            wait(eng, bid, 1)
        return True
    except tent.TentException:
        return False
    finally:
        eng.unregister_local_memory(buf)
        eng.close_segment(h)


def wait(eng, batch, n):
    import tent
    for i in range(n):
        while True:
            st = eng.get_transfer_status(batch, i)
            if st.state not in (tent.TransferStatusEnum.INITIAL,
                                tent.TransferStatusEnum.PENDING):
                break
        assert st.state == tent.TransferStatusEnum.COMPLETED, st


@pytest.mark.parametrize("xport", XPORTS)
def test_tent_file_segment(xport, tmp_path):
    import tent
    eng = tent_engine_for(xport, tmp_path)
    path = str(tmp_path / "kv.bin")
    size = 1 << 20
    make_file(path, size)
    h = eng.open_segment("file://" + path)
    info = eng.get_segment_info(h)
    assert info.type == 1  # TYPE_FILE
    assert [(b.base, b.length, b.location) for b in info.buffers] == \
        [(0, size, "*")]
    src = tentenv.pattern(5, 16 * 4096)
    dst = np.zeros_like(src)
    eng.register_local_memory(src)
    eng.register_local_memory(dst)
    # blocks in reverse order into the file, read back in place
    reqs = [tent.Request(tent.OpCode.WRITE, src.ctypes.data + i * 4096, h,
                         (15 - i) * 4096 + 8192, 4096) for i in range(16)]
    with eng.allocate_batch_guard(16) as bid:
        eng.submit_transfer(bid, reqs)
        wait(eng, bid, 16)
    with open(path, "rb") as f:
        f.seek(8192)
        disk = np.frombuffer(f.read(16 * 4096), np.uint8)
    want = np.concatenate([src[i * 4096:(i + 1) * 4096]
                           for i in reversed(range(16))])
    assert (disk == want).all()
    reqs = [tent.Request(tent.OpCode.READ, dst.ctypes.data + i * 4096, h,
                         (15 - i) * 4096 + 8192, 4096) for i in range(16)]
    with eng.allocate_batch_guard(16) as bid:
        eng.submit_transfer(bid, reqs)
        wait(eng, bid, 16)
    assert (dst == src).all()
    # past the end of the file: refused, naming it
    with pytest.raises(tent.TentException) as ei:
        with eng.allocate_batch_guard(1) as bid:
            eng.submit_transfer(bid, [tent.Request(
                tent.OpCode.READ, dst.ctypes.data, h, size - 16, 4096)])
    assert path in str(ei.value)
    eng.unregister_local_memory(src)
    eng.unregister_local_memory(dst)
    eng.close_segment(h)
    eng.close()


def test_tent_file_open_errors(tmp_path):
    import tent
    eng = tent.TransferEngine(file_config("bufio", tmp_path))
    missing = str(tmp_path / "missing")
    with pytest.raises(tent.TentException) as ei:
        eng.open_segment("file://" + missing)
    assert missing in str(ei.value)
    with pytest.raises(tent.TentException) as ei:
        eng.open_segment("file://" + str(tmp_path))
    assert "is a directory" in str(ei.value)
    eng.close()


@pytest.mark.parametrize("xport", XPORTS)
def test_mooncake_file_segment(xport, tmp_path):
    """Mooncake's engine API: target_hostname "file://<path>", the peer
    address is the file offset."""
    from tent.mooncake import TransferEngine
    cfg = file_config(xport, tmp_path)
    old = os.environ.get("MC_TENT_CONF")
    os.environ["MC_TENT_CONF"] = cfg
    try:
        eng = TransferEngine()
        assert eng.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0, \
            eng.last_error()
    finally:
        if old is None:
            os.environ.pop("MC_TENT_CONF", None)
        else:
            os.environ["MC_TENT_CONF"] = old
    path = str(tmp_path / "mc.bin")
    size = 256 << 10
    make_file(path, size)
    session = "file://" + path
    src = tentenv.pattern(7, 64 << 10)
    back = np.zeros_like(src)
    assert eng.register_memory(src.ctypes.data, src.nbytes) == 0
    assert eng.register_memory(back.ctypes.data, back.nbytes) == 0
    rc = eng.transfer_sync_write(session, src.ctypes.data, 4096, src.nbytes)
    if rc != 0 and xport == "io_uring" and "no installed transport" in \
            eng.last_error():
        pytest.skip("the io_uring transport is not built or not allowed here")
    assert rc == 0, eng.last_error()
    with open(path, "rb") as f:
        f.seek(4096)
        assert f.read(src.nbytes) == src.tobytes()
    assert eng.transfer_sync_read(session, back.ctypes.data, 4096,
                                  back.nbytes) == 0, eng.last_error()
    assert (back == src).all()
    half = src.nbytes // 2
    assert eng.batch_transfer_sync_write(
        session, [src.ctypes.data, src.ctypes.data + half],
        [size - half, size - 2 * half], [half, half]) == 0, eng.last_error()
    with open(path, "rb") as f:
        f.seek(size - 2 * half)
        disk = f.read(2 * half)
    assert disk == src.tobytes()[half:] + src.tobytes()[:half]
    # past the end: -1, and last_error() names the file
    assert eng.transfer_sync_read(session, back.ctypes.data, size - 8,
                                  4096) == -1
    assert path in eng.last_error()
    assert eng.unregister_memory(src.ctypes.data) == 0
    assert eng.unregister_memory(back.ctypes.data) == 0
    eng.close()

"""Framework code written for Mooncake runs unchanged (issue 20, items 1
and 2): `from mooncake.engine import TransferEngine` imports this engine,
and SGLang's and vLLM's defaults (protocol "rdma") initialize on a host
without RDMA devices: tcp runs, with one warning.  Both sides are the
frameworks' own call sequences (mc_frameworks.py), each in its process;
every byte is checked."""
import concurrent.futures
import hashlib
import json
import logging
import os
import subprocess
import sys

import numpy as np
import pytest

import tentenv
from conftest import HERE

# CTest says whether the build has the `mooncake` package (the wheel test
# runs with it); without it there is nothing here to test.
if os.environ.get("TENT_PY_MOONCAKE_SHIM", "ON").upper() in ("OFF", "0"):
    pytest.skip("built with TENT_PYTHON_MOONCAKE_SHIM=OFF: no mooncake "
                "package", allow_module_level=True)

import mooncake.engine as mooncake_engine  # noqa: E402
import tent.mooncake  # noqa: E402

import mc_frameworks  # noqa: E402

LAYERS = 4
PAGES = 64
PAGE = 4096


class Decode:
    """mc_decode_side.py: the decode instance."""

    def __init__(self, kind, env, tmp_path):
        self.err_path = tmp_path / ("%s-decode.stderr" % kind)
        self.err = open(self.err_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "mc_decode_side.py"), kind,
             str(LAYERS), str(PAGES * PAGE)], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self.err, text=True, env=env)
        line = self.proc.stdout.readline()
        assert line, "decode side exited: %s" % self.stderr()
        info = json.loads(line)
        self.session, self.ptrs = info["session"], info["ptrs"]

    def ask(self, cmd):
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def quit(self):
        self.proc.stdin.write("quit\n")
        self.proc.stdin.flush()
        assert self.proc.wait(30) == 0, self.stderr()
        self.err.close()

    def stderr(self):
        if not self.err.closed:
            self.err.flush()
        return self.err_path.read_text()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self.err):
            f.close()


def framework_env(force_tcp):
    env = dict(os.environ)
    env.pop("MOONCAKE_PROTOCOL", None)  # the frameworks' default: rdma
    env.pop("MC_FORCE_TCP", None)
    if force_tcp:
        env["MC_FORCE_TCP"] = "1"
    return env


def check_one_warning(text, force_tcp):
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if force_tcp:
        assert lines == [], lines
    else:
        assert len(lines) == 1, lines
        assert "'rdma'" in lines[0] and "tcp" in lines[0], lines


def model_of(seed_layers, moves):
    """The decode cache after `moves` (src layer data, dst layer, dst
    offset, bytes) on zeroed layers."""
    model = [np.zeros(PAGES * PAGE, np.uint8) for _ in range(LAYERS)]
    for data, li, off in moves:
        model[li][off:off + len(data)] = data
    h = hashlib.sha256()
    for m in model:
        h.update(m.tobytes())
    return h.hexdigest()


def test_import_path():
    from mooncake.engine import TransferEngine, TransferNotify, TransferOpcode
    assert TransferEngine is tent.mooncake.TransferEngine
    assert TransferOpcode is tent.mooncake.TransferOpcode
    assert TransferNotify is tent.mooncake.TransferNotify
    assert TransferEngine.TransferOpcode.Write == 1
    assert mooncake_engine.Read == 0 and mooncake_engine.Write == 1


@pytest.mark.parametrize("force_tcp", [False, True],
                         ids=["default-rdma", "MC_FORCE_TCP"])
def test_sglang_unchanged(tmp_path, monkeypatch, caplog, force_tcp):
    env = framework_env(force_tcp)
    for k in ("MOONCAKE_PROTOCOL", "MC_FORCE_TCP"):
        monkeypatch.delenv(k, raising=False)
    if force_tcp:
        monkeypatch.setenv("MC_FORCE_TCP", "1")
    decode = Decode("sglang", env, tmp_path)
    try:
        caplog.set_level(logging.WARNING, logger="tent.mooncake")
        prefill = mc_frameworks.SGLangMooncakeTransferEngine("127.0.0.1", 0)
        warns = [r.getMessage() for r in caplog.records
                 if r.name == "tent.mooncake"]
        check_one_warning("\n".join(warns), force_tcp)
        assert prefill.get_session_id().startswith("127.0.0.1:")
        layers = [tentenv.pattern(300 + i, PAGES * PAGE)
                  for i in range(LAYERS)]
        assert prefill.batch_register([l.ctypes.data for l in layers],
                                      [l.nbytes for l in layers]) == 0
        # Pages 2k of each layer go to pages 40+k of the peer's layer, in
        # contiguous runs of 2 pages (SGLang groups adjacent pages), sent by
        # one thread per layer (the custom memory pool path), then one
        # batch with every layer (the default path) for the tail pages.
        moves = []

        def layer_blocks(li, first, count):
            blocks = []
            for k in range(first, first + count, 2):
                src = layers[li].ctypes.data + 2 * k * PAGE
                dst = decode.ptrs[li] + (40 + k) * PAGE
                blocks.append((src, dst, 2 * PAGE))
                moves.append((layers[li][2 * k * PAGE:(2 * k + 2) * PAGE],
                              li, (40 + k) * PAGE))
            return blocks

        with concurrent.futures.ThreadPoolExecutor(LAYERS) as ex:
            futs = [ex.submit(mc_frameworks.sglang_transfer_data, prefill,
                              decode.session, layer_blocks(li, 0, 12))
                    for li in range(LAYERS)]
            assert [f.result() for f in futs] == [0] * LAYERS
        blocks = []
        for li in range(LAYERS):
            blocks += layer_blocks(li, 12, 8)
        assert mc_frameworks.sglang_transfer_data(prefill, decode.session,
                                                  blocks) == 0
        aux = np.frombuffer(b"aux-of-room-7".ljust(64, b"\0"), np.uint8)
        aux = aux.copy()
        assert prefill.register(aux.ctypes.data, aux.nbytes) == 0
        assert prefill.transfer_sync(decode.session, aux.ctypes.data,
                                     decode.ptrs[0], aux.nbytes) == 0
        moves.append((aux, 0, 0))
        assert decode.ask("hash") == model_of(layers, moves)
        assert prefill.send_probe(decode.session) == 0
        assert prefill.get_engine().ptr == prefill.engine.get_engine_ptr()
        decode.quit()
        check_one_warning(decode.stderr(), force_tcp)
        # the failed-session probe of conn.py: a gone peer does not answer
        assert prefill.send_probe(decode.session) != 0
        assert prefill.deregister(aux.ctypes.data) == 0
        assert prefill.batch_deregister([l.ctypes.data for l in layers]) == 0
        prefill.engine.close()
    finally:
        decode.kill()


@pytest.mark.parametrize("force_tcp", [False, True],
                         ids=["default-rdma", "MC_FORCE_TCP"])
def test_vllm_unchanged(tmp_path, monkeypatch, caplog, force_tcp):
    env = framework_env(force_tcp)
    for k in ("MOONCAKE_PROTOCOL", "MC_FORCE_TCP"):
        monkeypatch.delenv(k, raising=False)
    if force_tcp:
        monkeypatch.setenv("MC_FORCE_TCP", "1")
    decode = Decode("vllm", env, tmp_path)
    try:
        caplog.set_level(logging.WARNING, logger="tent.mooncake")
        worker = mc_frameworks.VLLMMooncakeWorker("127.0.0.1", {})
        warns = [r.getMessage() for r in caplog.records
                 if r.name == "tent.mooncake"]
        check_one_warning("\n".join(warns), force_tcp)
        assert worker.rpc_port > 0
        kv = [tentenv.pattern(400 + i, PAGES * PAGE) for i in range(LAYERS)]
        worker.register_kv_caches([k.ctypes.data for k in kv],
                                  [k.nbytes for k in kv])
        remote_session = decode.session
        # Four requests of 8 blocks each, every layer, sent from the sender
        # thread pool at once (one batch_transfer_sync_write per request).
        moves, requests = [], []
        for r in range(4):
            src_ptrs, dst_ptrs, lengths = [], [], []
            for li in range(LAYERS):
                for b in range(8):
                    s_blk, d_blk = r * 8 + b, 63 - (r * 8 + b)
                    src_ptrs.append(kv[li].ctypes.data + s_blk * PAGE)
                    dst_ptrs.append(decode.ptrs[li] + d_blk * PAGE)
                    lengths.append(PAGE)
                    moves.append((kv[li][s_blk * PAGE:(s_blk + 1) * PAGE],
                                  li, d_blk * PAGE))
            requests.append((src_ptrs, dst_ptrs, lengths))
        with concurrent.futures.ThreadPoolExecutor(10) as ex:
            futs = [ex.submit(worker.send_blocks, remote_session, *req)
                    for req in requests]
            assert [f.result() for f in futs] == [0] * 4, \
                worker.engine.last_error()
        assert decode.ask("hash") == model_of(kv, moves)
        decode.quit()
        check_one_warning(decode.stderr(), force_tcp)
        assert worker.engine.batch_unregister_memory(
            [k.ctypes.data for k in kv]) == 0
        worker.engine.close()
    finally:
        decode.kill()

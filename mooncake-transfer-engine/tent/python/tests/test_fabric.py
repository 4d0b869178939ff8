"""Mooncake's RDMA protocol names from Python (issue 44, item 4):
initialize(..., "rdma" | "efa" | "cxi", ...) runs the libfabric transport
with the protocol's provider when that provider has a device here, else tcp
with one warning.  This host has no verbs, EFA or CXI device, so the
"present" branch names tcp;ofi_rxm as the protocol's provider through
MC_FABRIC_PROVIDER_<PROTO> (documented in docs/transports/libfabric.md).
TENT's own module reaches the same transport with a TRANSPORT_RDMA hint.
Traffic on 127.0.0.1 only; skipped where the libfabric transport is not
built or libfabric's tcp;ofi_rxm provider is not usable."""
import json
import logging
import os
import shutil
import subprocess
import tempfile

import numpy as np
import pytest

import tent
import tentenv
import xfer
from conftest import sha
from tent.mooncake import TransferEngine

PROVIDER = "tcp;ofi_rxm"
SIZE = 4 << 20


def lf_config(extra_xports=None):
    """A tent config path: libfabric over tcp;ofi_rxm (plus extra_xports)."""
    xports = {p: {"enable": p in (extra_xports or ())}
              for p in ("tcp", "shm", "memfabric")}
    xports["libfabric"] = {"enable": True, "provider": PROVIDER}
    fd, path = tempfile.mkstemp(prefix="tent-py-fabric-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump({"log_level": "warning", "transports": xports}, f)
    return path


def libfabric_usable():
    path = lf_config()
    try:
        tent.TransferEngine(path).close()
        return True
    except Exception:
        return False
    finally:
        os.unlink(path)


pytestmark = pytest.mark.skipif(
    not libfabric_usable(),
    reason="the libfabric transport is not built or %s is not usable here"
    % PROVIDER)


def has_device(provider):
    """Whether fi_info lists the provider here (None: fi_info missing)."""
    if not shutil.which("fi_info"):
        return None
    r = subprocess.run(["fi_info", "-p", provider], capture_output=True,
                       text=True)
    return r.returncode == 0 and "provider:" in r.stdout


def installed(eng):
    fam = {f["name"]: f for f in eng.metrics_json()["families"]}
    return {s["labels"]["transport"]
            for s in fam["tent_write_bytes_total"]["series"]} - \
        {"io_uring", "bufio"}


def moved(eng, transport):
    """Bytes the engine wrote plus read through one transport."""
    fam = {f["name"]: f for f in eng.metrics_json()["families"]}
    n = 0
    for name in ("tent_write_bytes_total", "tent_read_bytes_total"):
        for s in fam[name]["series"]:
            if s["labels"]["transport"] == transport:
                n += s["value"]
    return n


def warnings_of(caplog):
    return [r.getMessage() for r in caplog.records
            if r.name == "tent.mooncake" and r.levelno >= logging.WARNING]


def env_name(proto):
    return "MC_FABRIC_PROVIDER_" + proto.upper()


@pytest.fixture
def clean_env(monkeypatch):
    monkeypatch.delenv("MC_FORCE_TCP", raising=False)
    for p in ("rdma", "efa", "cxi"):
        monkeypatch.delenv(env_name(p), raising=False)
    return monkeypatch


@pytest.mark.parametrize("proto", ["rdma", "efa", "cxi"])
def test_protocol_runs_on_libfabric_with_its_provider(peer_factory, caplog,
                                                      clean_env, proto):
    clean_env.setenv(env_name(proto), PROVIDER)
    # the peer (another process) initializes the same way
    peer = peer_factory(proto="tcp", size=SIZE,
                        extra_args=["--mc-protocol", proto])
    caplog.set_level(logging.INFO, logger="tent.mooncake")
    eng = TransferEngine()
    assert eng.initialize("127.0.0.1", "P2PHANDSHAKE", proto, "") == 0, \
        eng.last_error()
    try:
        assert warnings_of(caplog) == []
        assert installed(eng) == {"libfabric"}
        local = np.zeros(SIZE, dtype=np.uint8)
        assert eng.register_memory(local, local.nbytes) == 0
        xfer.mooncake_roundtrip(eng, peer, local, local.ctypes.data,
                                seed=41, rounds=2)
        assert moved(eng, "libfabric") >= SIZE
        assert moved(eng, "tcp") == 0
        assert eng.unregister_memory(local) == 0
    finally:
        eng.close()


def test_rdma_without_its_provider_falls_back_to_tcp(peer_factory, caplog,
                                                     clean_env):
    if has_device("verbs;ofi_rxm"):
        pytest.skip("this host has a verbs device")
    peer = peer_factory(proto="tcp", size=SIZE)
    caplog.set_level(logging.INFO, logger="tent.mooncake")
    eng = TransferEngine()
    assert eng.initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", "") == 0, \
        eng.last_error()
    try:
        warns = warnings_of(caplog)
        assert len(warns) == 1, warns
        assert "'rdma'" in warns[0] and "verbs;ofi_rxm" in warns[0], warns
        assert "runs tcp instead" in warns[0], warns
        assert installed(eng) == {"tcp"}
        local = tentenv.pattern(42, SIZE)
        assert eng.register_memory(local, local.nbytes) == 0
        assert eng.transfer_sync_write(peer.session, local, peer.addr,
                                       SIZE) == 0, eng.last_error()
        assert peer.sha() == sha(local)
        assert moved(eng, "tcp") >= SIZE
    finally:
        eng.close()


def test_a_provider_named_but_absent_falls_back_to_tcp(caplog, clean_env):
    clean_env.setenv(env_name("efa"), "no-such-provider")
    caplog.set_level(logging.INFO, logger="tent.mooncake")
    eng = TransferEngine()
    assert eng.initialize("127.0.0.1", "P2PHANDSHAKE", "efa", "") == 0, \
        eng.last_error()
    try:
        warns = warnings_of(caplog)
        assert len(warns) == 1, warns
        assert "'efa'" in warns[0] and "no-such-provider" in warns[0], warns
        assert installed(eng) == {"tcp"}
    finally:
        eng.close()


def test_absent_provider_with_shm_enabled_still_falls_back(caplog,
                                                           clean_env):
    """shm enabled by MC_TENT_CONF does not make a libfabric that did not
    install look like one that did: tcp with the warning."""
    fd, path = tempfile.mkstemp(prefix="tent-py-fabric-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump({"transports": {"shm": {"enable": True}}}, f)
    clean_env.setenv("MC_TENT_CONF", path)
    clean_env.setenv(env_name("efa"), "no-such-provider")
    caplog.set_level(logging.INFO, logger="tent.mooncake")
    eng = TransferEngine()
    try:
        assert eng.initialize("127.0.0.1", "P2PHANDSHAKE", "efa", "") == 0, \
            eng.last_error()
        warns = warnings_of(caplog)
        assert len(warns) == 1, warns
        assert "'efa'" in warns[0] and "no-such-provider" in warns[0], warns
        assert "tcp" in installed(eng), installed(eng)
        assert "libfabric" not in installed(eng), installed(eng)
    finally:
        eng.close()
        os.unlink(path)


def test_force_tcp_wins_over_the_provider(caplog, clean_env):
    clean_env.setenv(env_name("rdma"), PROVIDER)
    clean_env.setenv("MC_FORCE_TCP", "1")
    eng = TransferEngine()
    assert eng.initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", "") == 0
    try:
        assert installed(eng) == {"tcp"}
    finally:
        eng.close()


def test_tent_module_rdma_hint_runs_on_libfabric():
    """TENT's module: libfabric enabled beside tcp, a request hinted
    TRANSPORT_RDMA goes over libfabric, every byte checked."""
    cfg_a, cfg_b = lf_config(["tcp"]), lf_config(["tcp"])
    try:
        a, b = tent.TransferEngine(cfg_a), tent.TransferEngine(cfg_b)
    finally:
        os.unlink(cfg_a)
        os.unlink(cfg_b)
    try:
        assert installed(a) == {"tcp", "libfabric"}
        src = tentenv.pattern(43, SIZE)
        dst = np.zeros(SIZE, dtype=np.uint8)
        back = np.zeros(SIZE, dtype=np.uint8)
        for eng, buf in ((a, src), (a, back), (b, dst)):
            eng.register_local_memory(buf.ctypes.data, buf.nbytes)
        h = a.open_segment(b.get_segment_name())
        rdma = tent.TransportType.RDMA
        W, R = tent.OpCode.WRITE, tent.OpCode.READ
        st = xfer.tent_run(a, [tent.Request(W, src.ctypes.data, h,
                                            dst.ctypes.data, SIZE,
                                            transport_hint=rdma)])
        assert st.state == tent.TransferStatusEnum.COMPLETED
        assert sha(dst) == sha(src)
        st = xfer.tent_run(a, [tent.Request(R, back.ctypes.data, h,
                                            dst.ctypes.data, SIZE,
                                            transport_hint=rdma)])
        assert st.state == tent.TransferStatusEnum.COMPLETED
        assert sha(back) == sha(src)
        assert moved(a, "libfabric") >= 2 * SIZE
        assert moved(a, "tcp") == 0
    finally:
        a.close()
        b.close()

"""device_name chooses the NICs the tcp transport serves, and
get_nic_load_stats() shows which.

On loopback (always): engines started with device_name "lo", "", names of
no device here (an RDMA "mlx5_0" as SGLang and vLLM pass it) and mixes of
both start, transfer every byte to a peer process, warn about exactly the
names they could not use, and serve loopback.

In two network namespaces joined by three veth pairs (when the machine
allows it; else those tests skip): an initiator bound to its first link's
address serves the NICs device_name names plus its own, and moves every
byte over them.  When device_name names nothing usable it serves its own
address alone without a cluster secret (naming an address must not open the
others to anyone who reaches them), every NIC with one."""
import json
import logging
import os
import subprocess
import sys

import numpy as np
import pytest

import tent

from conftest import HERE, Peer, mooncake_engine, sha, tent_engine
import tentenv

SIZE = 1 << 20
LOGGER = "tent.mooncake"


def nic_names(eng):
    stats = eng.get_nic_load_stats()
    assert isinstance(stats, list)
    for s in stats:
        assert isinstance(s, tent.NicLoadStats)
        assert isinstance(s.device_name, str) and s.device_name
        assert isinstance(s.inflight_bytes, int) and s.inflight_bytes >= 0
        assert isinstance(s.ewma_bandwidth_bps, float)
        assert s.ewma_bandwidth_bps > 0
        assert tuple(s) == (s.device_name, s.inflight_bytes,
                            s.ewma_bandwidth_bps)
    return sorted(s.device_name for s in stats)


def device_warnings(caplog):
    return [r.getMessage() for r in caplog.records
            if r.name == LOGGER and r.levelno == logging.WARNING
            and "device_name" in r.getMessage()]


def start(caplog, device, protocol="tcp", ext=False):
    from tent.mooncake import TransferEngine
    eng = TransferEngine()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        if ext:
            rc = eng.initialize_ext("127.0.0.1", "P2PHANDSHAKE", protocol,
                                    device, "p2p")
        else:
            rc = eng.initialize("127.0.0.1", "P2PHANDSHAKE", protocol, device)
    assert rc == 0, eng.last_error()
    return eng, device_warnings(caplog)


def roundtrip(eng, peer, seed):
    """Writes pattern(seed) over the peer's whole buffer, checks the
    peer's bytes, reads them back and checks them here."""
    data = tentenv.pattern(seed, SIZE)
    back = np.zeros(SIZE, dtype=np.uint8)
    assert eng.register_memory(data, SIZE) == 0, eng.last_error()
    assert eng.register_memory(back, SIZE) == 0, eng.last_error()
    assert eng.transfer_sync_write(peer.session, data, peer.addr, SIZE) == 0, \
        eng.last_error()
    assert peer.sha() == sha(data)
    assert eng.transfer_sync_read(peer.session, back, peer.addr, SIZE) == 0, \
        eng.last_error()
    assert (back == data).all()
    assert eng.unregister_memory(data.ctypes.data) == 0
    assert eng.unregister_memory(back.ctypes.data) == 0


@pytest.fixture
def peer(peer_factory):
    return peer_factory(api="mooncake", proto="tcp", size=SIZE)


# ---- loopback -------------------------------------------------------------

@pytest.mark.parametrize("device", ["lo", "", "auto-discovery", "127.0.0.1",
                                    " lo , lo "])
def test_usable_or_auto_device_names_start_quietly(caplog, peer, device):
    eng, warned = start(caplog, device)
    try:
        assert warned == []
        assert nic_names(eng) == ["lo"]
        roundtrip(eng, peer, seed=7)
        assert nic_names(eng) == ["lo"]
    finally:
        eng.close()


@pytest.mark.parametrize("protocol", ["rdma", "tcp"])
def test_missing_device_warns_and_falls_back_to_every_nic(caplog, peer,
                                                          protocol):
    # SGLang/vLLM on a host without the RDMA NIC: initialize("rdma",
    # "mlx5_0") must start (tcp instead, on the default NICs).
    eng, warned = start(caplog, "mlx5_0", protocol)
    try:
        assert len(warned) == 1, warned
        assert "mlx5_0" in warned[0]
        assert "no such network interface" in warned[0]
        assert "default NICs" in warned[0]
        assert eng.last_error() == ""
        assert nic_names(eng) == ["lo"]
        roundtrip(eng, peer, seed=8)
    finally:
        eng.close()


def test_mixed_device_names_keep_the_usable_ones(caplog, peer):
    eng, warned = start(caplog, "mlx5_0,lo,erdma_1", ext=True)
    try:
        assert len(warned) == 1, warned
        assert "mlx5_0, erdma_1" in warned[0]
        assert "using the others" in warned[0]
        # "lo" was kept: only the missing ones are named
        why = warned[0].split("': ", 1)[1]
        assert "lo" not in why.replace("network", "")
        assert nic_names(eng) == ["lo"]
        roundtrip(eng, peer, seed=9)
    finally:
        eng.close()


def test_device_names_of_other_protocols_are_not_used(caplog):
    tentenv.setup_env("shm")
    eng, _ = start(caplog, "lo", protocol="shm")
    try:
        msgs = [r.getMessage() for r in caplog.records if r.name == LOGGER]
        assert any("device_name 'lo' is not used" in m and "shm" in m
                   for m in msgs), msgs
    finally:
        eng.close()


def test_too_long_device_name_is_refused():
    from tent.mooncake import TransferEngine
    eng = TransferEngine()
    try:
        assert eng.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp",
                              ",".join(["mlx5_0"] * 300)) == -1
        assert "device_name is longer than" in eng.last_error()
        # nothing was left behind: the same object initializes afterwards
        assert eng.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "lo") == 0
    finally:
        eng.close()


def test_nic_load_stats_of_both_apis_on_loopback(peer):
    eng = tent_engine("tcp")
    try:
        assert nic_names(eng) == ["lo"]
    finally:
        eng.close()
    with pytest.raises(RuntimeError):
        eng.get_nic_load_stats()
    mc = mooncake_engine("tcp")
    mc.close()
    with pytest.raises(RuntimeError):
        mc.get_nic_load_stats()


# ---- network namespaces ---------------------------------------------------

TAG = "%d" % (os.getpid() % 100000)
NS_T, NS_I = "tent-pynt-" + TAG, "tent-pyni-" + TAG
LINKS = 3  # initiator NIC r = "pi<r>_<tag>" 10.78.<r>.1 <-> 10.78.<r>.2


def ifname(side, r):
    return "p%s%d_%s" % (side, r, TAG)


def run(*cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


@pytest.fixture(scope="module")
def netns():
    if os.geteuid() != 0:
        pytest.skip("not root (ip netns needs CAP_SYS_ADMIN)")
    try:
        r = run("ip", "netns", "add", NS_T)
    except FileNotFoundError:
        pytest.skip("iproute2 (ip) is not installed")
    if r.returncode != 0:
        pytest.skip("'ip netns add' is not permitted here: " + r.stderr)
    try:
        steps = [("ip", "netns", "add", NS_I),
                 ("ip", "-n", NS_T, "link", "set", "lo", "up"),
                 ("ip", "-n", NS_I, "link", "set", "lo", "up")]
        for r_ in range(1, LINKS + 1):
            i, t = ifname("i", r_), ifname("t", r_)
            steps += [("ip", "link", "add", i, "type", "veth", "peer", "name",
                       t),
                      ("ip", "link", "set", i, "netns", NS_I),
                      ("ip", "link", "set", t, "netns", NS_T),
                      ("ip", "-n", NS_I, "addr", "add", "10.78.%d.1/24" % r_,
                       "dev", i),
                      ("ip", "-n", NS_T, "addr", "add", "10.78.%d.2/24" % r_,
                       "dev", t),
                      ("ip", "-n", NS_I, "link", "set", i, "up"),
                      ("ip", "-n", NS_T, "link", "set", t, "up")]
        for s in steps:
            r = run(*s)
            if r.returncode != 0:
                if s[:3] == ("ip", "link", "add"):
                    pytest.skip("veth pairs are not permitted here: " +
                                r.stderr)
                raise RuntimeError("%s: %s" % (" ".join(s), r.stderr))
        yield
    finally:
        run("ip", "netns", "del", NS_I)
        run("ip", "netns", "del", NS_T)


@pytest.fixture
def target(netns):
    p = Peer(api="mooncake", proto="tcp", size=SIZE,
             extra_args=("--local-hostname", "10.78.1.2"),
             prefix=("ip", "netns", "exec", NS_T))
    yield p
    p.close()


@pytest.fixture
def secret_target(netns, tmp_path, monkeypatch):
    """The target and every initiator started meanwhile share a cluster
    secret (MC_TENT_SECRET_FILE, inherited by the child processes)."""
    path = tmp_path / "secret"
    path.write_text("the netns test's cluster secret\n")
    path.chmod(0o600)
    monkeypatch.setenv("MC_TENT_SECRET_FILE", str(path))
    p = Peer(api="mooncake", proto="tcp", size=SIZE,
             extra_args=("--local-hostname", "10.78.1.2"),
             prefix=("ip", "netns", "exec", NS_T))
    yield p
    p.close()


def initiator(target, seed, api="mooncake", device="", protocol="tcp",
              tcp_nics=None):
    cmd = ["ip", "netns", "exec", NS_I, sys.executable,
           os.path.join(HERE, "nic_child.py"), "--api", api,
           "--host", "10.78.1.1", "--device-name", device,
           "--protocol", protocol, "--target", target.session,
           "--addr", str(target.addr), "--size", str(SIZE),
           "--seed", str(seed)]
    if tcp_nics is not None:
        cmd += ["--tcp-nics", json.dumps(tcp_nics)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    assert lines, (r.returncode, r.stdout, r.stderr[-3000:])
    out = json.loads(lines[-1])
    assert "error" not in out, out["error"]
    assert r.returncode == 0
    assert out["read_back"]
    assert target.sha() == sha(tentenv.pattern(seed, SIZE))
    out["nics"] = sorted(out["nics"])
    out["warnings"] = [w for w in out["warnings"] if "device_name" in w]
    return out


def names(*links):
    return sorted(ifname("i", r) for r in links)


def test_netns_empty_device_name_serves_its_own_nic(target):
    out = initiator(target, seed=11)
    assert out["nics"] == names(1)
    assert out["warnings"] == []


def test_netns_empty_device_name_with_secret_serves_every_nic(secret_target):
    out = initiator(secret_target, seed=19)
    assert out["nics"] == names(1, 2, 3)
    assert out["warnings"] == []


def test_netns_device_name_chooses_the_nics(target):
    out = initiator(target, seed=12, device=ifname("i", 2))
    assert out["nics"] == names(1, 2)  # its own NIC always serves
    assert out["warnings"] == []
    out = initiator(target, seed=13, device=ifname("i", 1))
    assert out["nics"] == names(1)
    # an address names its interface
    out = initiator(target, seed=14, device="10.78.3.1, " + ifname("i", 1))
    assert out["nics"] == names(1, 3)


def test_netns_rdma_device_names_fall_back_to_the_default(target):
    # the default without a secret: the engine's own address
    out = initiator(target, seed=15, device="mlx5_0,mlx5_1", protocol="rdma")
    assert out["nics"] == names(1)
    assert len(out["warnings"]) == 1
    assert "mlx5_0, mlx5_1" in out["warnings"][0]


def test_netns_unusable_names_are_dropped_with_a_warning(target):
    # loopback is not served by an engine bound to 10.78.1.1
    out = initiator(target, seed=16,
                    device="lo,%s,mlx5_0" % ifname("i", 3))
    assert out["nics"] == names(1, 3)
    assert len(out["warnings"]) == 1
    w = out["warnings"][0]
    assert "mlx5_0" in w and "not served by an engine bound to 10.78.1.1" in w
    assert "): lo" in w


def test_netns_tent_config_chooses_the_nics(target):
    # tent's module chooses NICs by config (TENT's Python has no argument
    # for it): transports/tcp/nics
    out = initiator(target, seed=17, api="tent", tcp_nics=[ifname("i", 3)])
    assert out["nics"] == names(1, 3)
    out = initiator(target, seed=18, api="tent")
    assert out["nics"] == names(1)

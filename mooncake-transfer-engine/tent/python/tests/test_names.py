"""initialize() takes Mooncake's names and ports as Mooncake does: a bare
IPv6 address (SGLang passes '::1'), P2PHANDSHAKE's port drawn from
MC_MIN_RPC_PORT..MC_MAX_RPC_PORT (so engines given the same host:port all
start), and MC_TENT_CONF as inline JSON.  Traffic on loopback only."""
import logging
import socket

import pytest

import tentenv
from conftest import sha
from tent.mooncake import TransferEngine

MIB = 1 << 20


def mc(name, proto="tcp"):
    eng = TransferEngine()
    assert eng.initialize(name, "P2PHANDSHAKE", proto, "") == 0, \
        eng.last_error()
    return eng


def installed(eng):
    """The memory transports the engine runs (its metrics label each one;
    the file transports, io_uring and bufio, serve file:// segments beside
    them and are left out)."""
    fam = {f["name"]: f for f in eng.metrics_json()["families"]}
    return {s["labels"]["transport"]
            for s in fam["tent_write_bytes_total"]["series"]} - \
        {"io_uring", "bufio"}


def write_and_check(src_eng, dst_eng, seed):
    """src_eng writes a pattern into a buffer of dst_eng, by dst_eng's
    session id, and reads it back."""
    src = tentenv.pattern(seed, MIB)
    back = src.copy()
    back[:] = 0
    dst = back.copy()
    assert src_eng.register_memory(src, MIB) == 0
    assert src_eng.register_memory(back, MIB) == 0
    assert dst_eng.register_memory(dst, MIB) == 0
    session = dst_eng.get_session_id()
    assert src_eng.transfer_sync_write(session, src, dst.ctypes.data,
                                       MIB) == 0, src_eng.last_error()
    assert sha(dst) == sha(src)
    assert src_eng.transfer_sync_read(session, back, dst.ctypes.data,
                                      MIB) == 0, src_eng.last_error()
    assert sha(back) == sha(src)
    for e, b in ((src_eng, src), (src_eng, back), (dst_eng, dst)):
        assert e.unregister_memory(b) == 0


def ipv6_loopback():
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def test_bare_ipv6(peer_factory):
    if not ipv6_loopback():
        pytest.skip("::1 cannot be bound here (no IPv6 loopback)")
    eng = mc("::1")
    session = eng.get_session_id()
    assert session == "[::1]:%d" % eng.get_rpc_port()
    assert 15000 <= eng.get_rpc_port() <= 17000
    # a peer in another process, on ::1 too: this engine writes into it
    peer = peer_factory(proto="tcp", size=MIB,
                        extra_args=["--local-hostname", "::1"])
    assert peer.session.startswith("[::1]:"), peer.session
    local = tentenv.pattern(41, MIB)
    assert eng.register_memory(local, MIB) == 0
    assert eng.transfer_sync_write(peer.session, local, peer.addr,
                                   MIB) == 0, eng.last_error()
    assert peer.sha() == sha(local)
    assert eng.send_probe(peer.session) == 0
    assert eng.unregister_memory(local) == 0
    # and an engine on 127.0.0.1 transfers to this one, by its [::1] name
    other = mc("127.0.0.1")
    write_and_check(other, eng, 42)
    other.close()
    eng.close()


def test_two_engines_given_one_host_port():
    """As Mooncake's P2P handshake: the port of local_hostname is not the
    RPC port; each engine takes a free one of 15000..17000."""
    a = mc("127.0.0.1:12345")
    b = mc("127.0.0.1:12345")
    pa, pb = a.get_rpc_port(), b.get_rpc_port()
    assert pa != pb
    assert 15000 <= pa <= 17000 and 15000 <= pb <= 17000, (pa, pb)
    assert a.get_session_id() == "127.0.0.1:%d" % pa
    write_and_check(a, b, 43)
    write_and_check(b, a, 44)
    a.close()
    b.close()


def test_port_range_from_the_environment(monkeypatch, caplog):
    monkeypatch.setenv("MC_MIN_RPC_PORT", "16200")
    monkeypatch.setenv("MC_MAX_RPC_PORT", "16219")
    engines = [mc("127.0.0.1:12345") for _ in range(3)]
    ports = [e.get_rpc_port() for e in engines]
    assert len(set(ports)) == 3, ports
    assert all(16200 <= p <= 16219 for p in ports), ports
    write_and_check(engines[0], engines[2], 45)
    for e in engines:
        e.close()
    # not a range by Mooncake's rule (inside the kernel's ephemeral
    # ports): one warning, and Mooncake's default range
    monkeypatch.setenv("MC_MIN_RPC_PORT", "40000")
    monkeypatch.setenv("MC_MAX_RPC_PORT", "40100")
    caplog.set_level(logging.WARNING, logger="tent.mooncake")
    e = mc("127.0.0.1")
    assert 15000 <= e.get_rpc_port() <= 17000
    warns = [r.getMessage() for r in caplog.records
             if r.name == "tent.mooncake" and r.levelno >= logging.WARNING]
    assert len(warns) == 1 and "MC_MIN_RPC_PORT" in warns[0], warns
    e.close()


def test_inline_mc_tent_conf(monkeypatch):
    """MC_TENT_CONF may be JSON text: the library reads it, and initialize
    only overrides the keys it sets."""
    monkeypatch.setenv(
        "MC_TENT_CONF",
        '{"log_level": "warning", "transports": {"shm": {"enable": true}}}')
    e = mc("127.0.0.1")
    assert installed(e) == {"tcp", "shm"}  # shm from the inline JSON
    e.close()
    monkeypatch.setenv("MC_TENT_CONF",
                       ' {"log_level": "warning", '
                       '"metrics": {"enabled": false}}')
    e = mc("127.0.0.1")
    with pytest.raises(RuntimeError, match="disabled"):
        e.metrics_json()
    peer = mc("127.0.0.1")
    write_and_check(peer, e, 46)
    peer.close()
    e.close()
    monkeypatch.setenv("MC_TENT_CONF", '{"log_level": }')
    e = TransferEngine()
    assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == -1
    assert "MC_TENT_CONF (inline JSON)" in e.last_error(), e.last_error()

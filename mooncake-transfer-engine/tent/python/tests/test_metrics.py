"""Metrics from both Python APIs: the Prometheus text, the JSON and the
HTTP endpoint agree with the bytes a tcp write to a peer process moved;
with metrics disabled the calls fail as documented."""
import threading
import urllib.request

import pytest

import tent

import tentenv
import xfer
from conftest import mooncake_engine, sha, tent_engine

# Not a multiple of anything the transport might round to.
NBYTES = (1 << 20) + 12345
NREQ = 3


def write_line(nbytes):
    return 'tent_write_bytes_total{transport="tcp"} %d' % nbytes


def json_series(doc, family, **labels):
    """The series of `family` whose labels include `labels` (one only)."""
    fams = [f for f in doc["families"] if f["name"] == family]
    assert len(fams) == 1, family
    found = [s for s in fams[0]["series"]
             if all(s["labels"].get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (family, labels, fams[0]["series"])
    return found[0]


def check_counters(eng, nbytes, nreq):
    """Text and JSON both say that nreq tcp writes moved nbytes."""
    text = eng.metrics_prometheus()
    assert isinstance(text, str)
    assert "# TYPE tent_write_bytes_total counter\n" in text
    assert "\n" + write_line(nbytes) + "\n" in text, text[:2000]
    assert '\ntent_write_requests_total{transport="tcp"} %d\n' % nreq in text
    doc = eng.metrics_json()
    assert isinstance(doc, dict)
    assert json_series(doc, "tent_write_bytes_total",
                       transport="tcp")["value"] == nbytes
    assert json_series(doc, "tent_write_requests_total",
                       transport="tcp")["value"] == nreq
    assert json_series(doc, "tent_write_size_bytes",
                       transport="tcp")["sum"] == nbytes
    assert doc["tent_write_bytes_total"] == nbytes
    assert doc["tent_write_failures_total"] == 0
    # Longer than the binding's first buffer (4 KiB): the TENT_EOVERFLOW
    # retry ran.
    assert len(text) > 4 << 10
    return text


def scrape(addr, path="/metrics"):
    host, port = addr
    with urllib.request.urlopen("http://%s:%d%s" % (host, port, path),
                                timeout=10) as r:
        assert r.status == 200
        return r.read().decode()


def tent_write(eng, peer, nreq, nbytes):
    """nreq writes of nbytes // nreq (the last one takes the rest)."""
    local = tentenv.pattern(21, nbytes)
    eng.register_local_memory(local, local.nbytes)
    h = eng.open_segment(peer.session)
    per = nbytes // nreq
    lens = [per] * (nreq - 1) + [nbytes - per * (nreq - 1)]
    offs = [sum(lens[:i]) for i in range(nreq)]
    st = xfer.tent_run(eng, [
        tent.Request(tent.OpCode.WRITE, local.ctypes.data + o, h,
                     peer.addr + o, n) for o, n in zip(offs, lens)])
    assert st.state == tent.TransferStatusEnum.COMPLETED
    assert peer.sha(0, nbytes) == sha(local)
    eng.unregister_local_memory(local)


def mooncake_write(eng, peer, nreq, nbytes):
    local = tentenv.pattern(22, nbytes)
    assert eng.register_memory(local, local.nbytes) == 0, eng.last_error()
    per = nbytes // nreq
    lens = [per] * (nreq - 1) + [nbytes - per * (nreq - 1)]
    offs = [sum(lens[:i]) for i in range(nreq)]
    assert eng.batch_transfer_sync_write(
        peer.session, [local.ctypes.data + o for o in offs],
        [peer.addr + o for o in offs], lens) == 0, eng.last_error()
    assert peer.sha(0, nbytes) == sha(local)
    assert eng.unregister_memory(local) == 0


def test_tent_counters_and_endpoint(peer_factory):
    peer = peer_factory(api="tent", proto="tcp")
    eng = tent_engine("tcp", {"metrics": {"http_port": 0}})
    check_counters(eng, 0, 0)
    tent_write(eng, peer, NREQ, NBYTES)
    text = check_counters(eng, NBYTES, NREQ)
    addr = eng.metrics_http_address()
    assert isinstance(addr, tuple) and len(addr) == 2
    assert addr[0] == "127.0.0.1" and 0 < addr[1] < 65536
    served = scrape(addr)
    assert "\n" + write_line(NBYTES) + "\n" in served
    # Same counters the call returned (nothing moved in between).
    assert [ln for ln in served.splitlines() if "_total{" in ln] == \
        [ln for ln in text.splitlines() if "_total{" in ln]
    import json
    served_doc = json.loads(scrape(addr, "/metrics/json"))
    assert served_doc["tent_write_bytes_total"] == NBYTES
    eng.close()
    with pytest.raises(RuntimeError):
        eng.metrics_prometheus()
    with pytest.raises(RuntimeError):
        eng.metrics_http_address()


def test_mooncake_counters_and_endpoint(peer_factory, monkeypatch):
    peer = peer_factory(api="mooncake", proto="tcp")
    monkeypatch.setenv("TENT_METRICS_HTTP_PORT", "0")
    eng = mooncake_engine("tcp")
    monkeypatch.delenv("TENT_METRICS_HTTP_PORT")
    check_counters(eng, 0, 0)
    mooncake_write(eng, peer, NREQ, NBYTES)
    mooncake_write(eng, peer, 1, 4096)
    check_counters(eng, NBYTES + 4096, NREQ + 1)
    addr = eng.metrics_http_address()
    assert addr is not None and addr[1] > 0
    assert "\n" + write_line(NBYTES + 4096) + "\n" in scrape(addr)
    eng.close()
    with pytest.raises(RuntimeError):
        eng.metrics_json()


def test_no_endpoint_without_port():
    eng = tent_engine("tcp")
    assert eng.metrics_http_address() is None
    assert write_line(0) in eng.metrics_prometheus()
    eng.close()
    mc = mooncake_engine("tcp")
    assert mc.metrics_http_address() is None
    assert mc.metrics_json()["tent_write_bytes_total"] == 0
    mc.close()


def test_disabled_tent():
    eng = tent_engine("tcp", {"metrics": {"enabled": False,
                                          "http_port": 0}})
    with pytest.raises(tent.NotImplementedError) as ei:
        eng.metrics_prometheus()
    assert isinstance(ei.value, tent.TentException)
    assert "metrics_prometheus" in str(ei.value)
    with pytest.raises(tent.NotImplementedError):
        eng.metrics_json()
    assert eng.metrics_http_address() is None
    assert eng.available()  # the engine itself still works
    eng.close()


def test_disabled_mooncake(monkeypatch):
    monkeypatch.setenv("TENT_METRICS_ENABLED", "0")
    eng = mooncake_engine("tcp")
    monkeypatch.delenv("TENT_METRICS_ENABLED")
    with pytest.raises(RuntimeError) as ei:
        eng.metrics_prometheus()
    assert not isinstance(ei.value, tent.TentException)
    assert "metrics_prometheus" in str(ei.value)
    assert eng.last_error() == str(ei.value)
    with pytest.raises(RuntimeError):
        eng.metrics_json()
    assert eng.metrics_http_address() is None
    eng.close()


def test_uninitialized_mooncake():
    from tent.mooncake import TransferEngine
    eng = TransferEngine()
    for call in (eng.metrics_prometheus, eng.metrics_json,
                 eng.metrics_http_address):
        with pytest.raises(RuntimeError):
            call()


def test_scrapes_from_threads(peer_factory):
    """The calls release the GIL and are safe from many threads while
    transfers run; every text parses and the counter never goes back."""
    peer = peer_factory(api="tent", proto="tcp")
    eng = tent_engine("tcp")
    stop = threading.Event()
    errors = []

    def scraper():
        last = 0
        try:
            while not stop.is_set():
                v = eng.metrics_json()["tent_write_bytes_total"]
                assert v >= last
                last = v
                assert "tent_write_bytes_total" in eng.metrics_prometheus()
        except Exception as e:  # reported below
            errors.append(e)

    ts = [threading.Thread(target=scraper) for _ in range(3)]
    for t in ts:
        t.start()
    try:
        for _ in range(4):
            tent_write(eng, peer, 2, 64 << 10)
    finally:
        stop.set()
        for t in ts:
            t.join(30)
    assert not errors, errors
    assert eng.metrics_json()["tent_write_bytes_total"] == 4 * (64 << 10)
    eng.close()


def test_calls_do_not_leak(monkeypatch):
    """20,000 calls, successes and failures on both classes: Python memory
    and RSS stay flat (the grown C buffer is freed on every path)."""
    import gc
    import os
    import tracemalloc
    from test_leak import rss_kib
    on = tent_engine("tcp", {"metrics": {"http_port": 0}})
    off = tent_engine("tcp", {"metrics": {"enabled": False}})
    monkeypatch.setenv("TENT_METRICS_ENABLED", "0")
    mc_off = mooncake_engine("tcp")
    monkeypatch.delenv("TENT_METRICS_ENABLED")

    def one(i):
        k = i % 6
        if k == 0:
            assert on.metrics_prometheus()
        elif k == 1:
            assert on.metrics_json()["tent_write_bytes_total"] == 0
        elif k == 2:
            assert on.metrics_http_address()[1] > 0
        elif k == 3:
            try:
                off.metrics_json()
            except tent.NotImplementedError:
                pass
        elif k == 4:
            try:
                mc_off.metrics_prometheus()
            except RuntimeError:
                pass
        else:
            assert off.metrics_http_address() is None

    for i in range(1200):
        one(i)
    gc.collect()
    tracemalloc.start()
    snap0 = tracemalloc.take_snapshot()
    rss0 = rss_kib()
    for i in range(20000):
        one(i)
    gc.collect()
    snap1 = tracemalloc.take_snapshot()
    rss1 = rss_kib()
    tracemalloc.stop()
    growth = sum(d.size_diff for d in snap1.compare_to(snap0, "filename"))
    assert growth < 64 * 1024, "Python memory grew by %d bytes" % growth
    if "asan" not in os.environ.get("LD_PRELOAD", ""):
        assert rss1 - rss0 < 8 * 1024, "RSS grew by %d KiB" % (rss1 - rss0)
    for e in (on, off, mc_off):
        e.close()


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))

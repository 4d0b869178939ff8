"""Metadata services for the tests, each started on a loopback port of its
own: etcd, redis, and the repository's http metadata server.  A kind whose
server is not installed skips the test."""
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
HTTP_SERVER = os.path.join(HERE, "..", "..", "tests", "meta",
                           "http_meta_server.py")
KINDS = ["etcd", "redis", "http"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port, proc, deadline_s=20):
    t0 = time.monotonic()
    while time.monotonic() - t0 < deadline_s:
        if proc.poll() is not None:
            raise RuntimeError("metadata server exited with %s" % proc.poll())
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError("metadata server not listening on %d" % port)


def command(kind, tmp_path, attempt):
    """The command line of a `kind` server on fresh ports, and its URL."""
    port = free_port()
    if kind == "etcd":
        if not shutil.which("etcd"):
            pytest.skip("etcd is not installed (etcd-server)")
        peer_port = free_port()
        while peer_port == port:
            peer_port = free_port()
        client = "http://127.0.0.1:%d" % port
        peer = "http://127.0.0.1:%d" % peer_port
        cmd = ["etcd", "--name", "py-test", "--data-dir",
               str(tmp_path / ("d%d" % attempt)),
               "--listen-client-urls", client, "--advertise-client-urls",
               client, "--listen-peer-urls", peer,
               "--initial-advertise-peer-urls", peer, "--initial-cluster",
               "py-test=" + peer]
        return port, cmd, "etcd://127.0.0.1:%d" % port
    if kind == "redis":
        if not shutil.which("redis-server"):
            pytest.skip("redis-server is not installed")
        cmd = ["redis-server", "--port", str(port), "--bind", "127.0.0.1",
               "--save", "", "--appendonly", "no", "--dir", str(tmp_path)]
        return port, cmd, "redis://127.0.0.1:%d" % port
    cmd = [sys.executable, HTTP_SERVER, str(port)]
    return port, cmd, "http://127.0.0.1:%d/metadata" % port


def stop(proc):
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def running(kind, tmp_path):
    """Starts a `kind` server; yields the URL initialize() takes.  A port
    free when asked may be taken before the server binds it (another test's
    server, an ephemeral connection): a server that exits at start is
    started again on other ports, three times at most; its log says why."""
    for attempt in range(3):
        port, cmd, url = command(kind, tmp_path, attempt)
        log = open(tmp_path / ("%s-server-%d.log" % (kind, attempt)), "wb")
        proc = subprocess.Popen(cmd, stdout=log, stderr=log)
        try:
            wait_listening(port, proc)
            break
        except RuntimeError:
            stop(proc)
            log.close()
            if attempt == 2:
                raise
    try:
        yield url
    finally:
        stop(proc)
        log.close()


def init_until_ready(eng, host, url, proto="tcp", deadline_s=20):
    """A server that listens may still be starting (etcd elects itself):
    retry initialize for a while."""
    t0 = time.monotonic()
    while True:
        if eng.initialize(host, url, proto, "") == 0:
            return
        assert time.monotonic() - t0 < deadline_s, eng.last_error()
        time.sleep(0.1)

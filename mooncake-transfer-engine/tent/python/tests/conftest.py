"""Fixtures of the tent Python tests: peer processes, engines on both APIs,
and the CTest skip convention (a file whose tests all skipped exits 77)."""
import ctypes
import hashlib
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import tentenv  # noqa: E402

SKIP_RETURN_CODE = 77
PROTOS = ["tcp", "shm", "memfabric"]

_outcomes = {"passed": 0, "failed": 0, "skipped": 0}


def pytest_configure(config):
    """Under scripts/python_wheel_test.sh the package must be the wheel's,
    installed in the venv's site directory, not a build tree's."""
    site = os.environ.get("TENT_PY_EXPECT_SITE")
    if site:
        import tent
        where = os.path.realpath(tent._tent.__file__)
        if not where.startswith(os.path.realpath(site) + os.sep):
            raise pytest.UsageError("tent imported from %s, not from %s"
                                    % (where, site))


def pytest_runtest_logreport(report):
    if report.when == "call" or report.outcome != "passed":
        _outcomes[report.outcome] = _outcomes.get(report.outcome, 0) + 1


def pytest_sessionfinish(session, exitstatus):
    if (exitstatus == 0 and _outcomes["skipped"] and not _outcomes["passed"]
            and not _outcomes["failed"]):
        session.exitstatus = SKIP_RETURN_CODE


@pytest.fixture(scope="session", autouse=True)
def quiet_engine_config():
    """Engines log warnings and errors only, and a tcp peer may stall for
    tentenv.TCP_TIMEOUT_MS (slow sanitizer builds on a loaded machine).
    MC_TENT_CONF is the base config of both APIs; the peers inherit it."""
    fd, path = tempfile.mkstemp(prefix="tent-py-base-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump({"log_level": "warning",
                   "transports": {"tcp": {"timeout_ms": tentenv.TCP_TIMEOUT_MS}}},
                  f)
    old = os.environ.get("MC_TENT_CONF")
    os.environ["MC_TENT_CONF"] = path
    yield path
    os.unlink(path)
    if old is None:
        os.environ.pop("MC_TENT_CONF", None)
    else:
        os.environ["MC_TENT_CONF"] = old


@pytest.fixture(scope="session", autouse=True)
def default_rpc_port_range():
    """The tests expect Mooncake's default RPC port range (15000..17000);
    those that set MC_MIN_RPC_PORT/MC_MAX_RPC_PORT do so themselves."""
    saved = {v: os.environ.pop(v) for v in
             ("MC_MIN_RPC_PORT", "MC_MAX_RPC_PORT", "MC_MIN_PRC_PORT",
              "MC_MAX_PRC_PORT") if v in os.environ}
    yield
    os.environ.update(saved)


def need_proto(proto):
    if proto == "memfabric" and not os.path.exists(tentenv.mf_host_lib()):
        pytest.skip("mf_host's libmf_smem.so is not built (TENT_MF_HOST_LIB)")
    tentenv.setup_env(proto)


class Peer:
    """A peer process (peer.py) with one registered buffer; prefix runs it
    under a command (["ip", "netns", "exec", ns])."""

    def __init__(self, api="mooncake", proto="tcp", size=8 << 20, buf="numpy",
                 env=None, extra_args=(), prefix=()):
        need_proto(proto)
        self.proc = subprocess.Popen(
            [*prefix, sys.executable, os.path.join(HERE, "peer.py"),
             "--api", api,
             "--proto", proto, "--size", str(size), "--buf", buf,
             *extra_args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            env=env)
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(10)
            raise RuntimeError("peer exited with %s" % self.proc.returncode)
        info = json.loads(line)
        if "error" in info:
            raise RuntimeError("peer: " + info["error"])
        self.session = info["session"]
        self.addr = info["addr"]
        self.size = info["size"]
        self.pid = info["pid"]

    def cmd(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        out = self.proc.stdout.readline().strip()
        assert out and not out.startswith("error"), (line, out)
        return out

    def fill(self, seed):
        self.cmd("fill %d" % seed)

    def sha(self, off=0, n=None):
        return self.cmd("hash %d %d" % (off, self.size if n is None else n))

    def notifs(self):
        return json.loads(self.cmd("notifs"))

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.wait(20)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except BrokenPipeError:
                pass

    def kill(self):
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def peer_factory():
    peers = []

    def make(**kw):
        p = Peer(**kw)
        peers.append(p)
        return p

    yield make
    for p in peers:
        p.close()


def sha(arr):
    return hashlib.sha256(np.ascontiguousarray(arr).tobytes()).hexdigest()


def np_at(addr, size):
    """A numpy view of raw memory (engine-allocated buffers)."""
    return np.frombuffer((ctypes.c_uint8 * size).from_address(addr),
                         dtype=np.uint8)


def mooncake_engine(proto, local_hostname="127.0.0.1"):
    from tent.mooncake import TransferEngine
    need_proto(proto)
    eng = TransferEngine()
    rc = eng.initialize(local_hostname, "P2PHANDSHAKE", proto, "")
    assert rc == 0, eng.last_error()
    return eng


def tent_engine(proto, extra=None):
    import tent
    need_proto(proto)
    cfg = tentenv.tent_config(proto, extra)
    try:
        return tent.TransferEngine(cfg)
    finally:
        os.unlink(cfg)

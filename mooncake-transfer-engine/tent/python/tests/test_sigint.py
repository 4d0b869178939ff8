"""Ctrl-C during a blocking wait (transfer_sync_write,
get_batch_transfer_status, and the segment open the first transfer to a
peer makes on the way) raises KeyboardInterrupt promptly, and the engine
stays usable afterwards."""
import os
import signal
import subprocess
import sys
import time

from conftest import HERE

BIG = 256 << 20


def test_ctrl_c_interrupts_blocking_waits(peer_factory, tmp_path):
    conf = tmp_path / "conf.json"
    conf.write_text('{"log_level": "warning", '
                    '"transports": {"tcp": {"timeout_ms": 60000}}}')
    env = dict(os.environ, MC_TENT_CONF=str(conf))
    peer = peer_factory(proto="tcp", size=BIG, env=env)
    child = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "sigint_child.py"), peer.session,
         str(peer.addr)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True, env=env)
    stopped = False

    def line():
        out = child.stdout.readline().strip()
        assert out, "child exited: %s" % child.poll()
        return out

    def send(s):
        child.stdin.write(s + "\n")
        child.stdin.flush()

    try:
        assert line() == "ready"
        for _ in range(2):
            os.kill(peer.pid, signal.SIGSTOP)
            stopped = True
            send("go")
            assert line() == "calling"
            time.sleep(0.5)  # well inside the blocking wait
            t_sig = time.monotonic()
            child.send_signal(signal.SIGINT)
            out = line()
            latency = time.monotonic() - t_sig
            assert out.startswith("interrupted"), out
            print("KeyboardInterrupt %.1f ms after SIGINT" % (latency * 1e3))
            assert latency < 1.0, "KeyboardInterrupt took %.3f s" % latency
            os.kill(peer.pid, signal.SIGCONT)
            stopped = False
            send("go")
            assert line() == "after 0", "engine unusable after Ctrl-C"
        assert line() == "closed"
        assert child.wait(30) == 0
    finally:
        if stopped:
            os.kill(peer.pid, signal.SIGCONT)
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdin.close()
        child.stdout.close()


def test_ctrl_c_interrupts_the_implicit_segment_open(peer_factory, tmp_path):
    """The peer is stopped before the child ever opened it: the first
    transfer's open waits for the peer's descriptor (for up to a minute
    here), and Ctrl-C ends that wait."""
    conf = tmp_path / "conf.json"
    conf.write_text('{"log_level": "warning", "rpc_timeout_ms": 60000, '
                    '"transports": {"tcp": {"timeout_ms": 60000}}}')
    env = dict(os.environ, MC_TENT_CONF=str(conf))
    peer = peer_factory(proto="tcp", size=1 << 20, env=env)
    child = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "sigint_open_child.py"),
         peer.session, str(peer.addr)], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True, env=env)
    stopped = False

    def line():
        out = child.stdout.readline().strip()
        assert out, "child exited: %s" % child.poll()
        return out

    def send(s):
        child.stdin.write(s + "\n")
        child.stdin.flush()

    try:
        assert line() == "ready"
        os.kill(peer.pid, signal.SIGSTOP)
        stopped = True
        send("go")
        assert line() == "calling"
        time.sleep(0.5)  # well inside the open's wait
        t_sig = time.monotonic()
        child.send_signal(signal.SIGINT)
        out = line()
        latency = time.monotonic() - t_sig
        assert out.startswith("interrupted"), out
        print("KeyboardInterrupt %.1f ms after SIGINT" % (latency * 1e3))
        assert latency < 1.0, "KeyboardInterrupt took %.3f s" % latency
        os.kill(peer.pid, signal.SIGCONT)
        stopped = False
        send("go")
        assert line() == "after 0", "engine unusable after Ctrl-C"
        assert line() == "closed"
        assert child.wait(30) == 0
    finally:
        if stopped:
            os.kill(peer.pid, signal.SIGCONT)
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdin.close()
        child.stdout.close()

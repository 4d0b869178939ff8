"""Child of test_sigint.py: the first transfer_sync_write to a peer opens
its segment on the way (as every framework's first transfer does); the
parent holds the peer stopped, so the open waits for an answer that does
not come (rpc_timeout_ms is a minute), and Ctrl-C must end that wait."""
import signal
import sys
import time

import numpy as np

from tent.mooncake import TransferEngine


def say(*a):
    print(*a, flush=True)


def main():
    # Ctrl-C raises KeyboardInterrupt even when this process was started
    # with SIGINT ignored (a background job of a non-interactive shell:
    # Python then leaves it ignored)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    session, peer_addr = sys.argv[1], int(sys.argv[2])
    eng = TransferEngine()
    assert eng.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    local = np.ones(1 << 20, dtype=np.uint8)
    assert eng.register_memory(local, local.nbytes) == 0
    say("ready")
    assert sys.stdin.readline().strip() == "go"  # the peer is stopped now
    say("calling")
    t0 = time.monotonic()
    try:
        rc = eng.transfer_sync_write(session, local, peer_addr, 4096)
        say("not-interrupted %d %s" % (rc, eng.last_error()))
        return 1
    except KeyboardInterrupt:
        say("interrupted %.3f" % (time.monotonic() - t0))
    assert sys.stdin.readline().strip() == "go"  # the peer runs again
    rc = eng.transfer_sync_write(session, local, peer_addr, 1 << 20)
    say("after %d %s" % (rc, eng.last_error() if rc else ""))
    eng.close()
    say("closed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

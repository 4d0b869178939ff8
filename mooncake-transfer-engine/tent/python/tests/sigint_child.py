"""Child of test_sigint.py: blocks in transfer_sync_write and in
get_batch_transfer_status while the parent holds the peer stopped, and
reports how Ctrl-C (SIGINT) ended each wait."""
import signal
import sys
import time

import numpy as np

from tent.mooncake import TransferEngine

BIG = 256 << 20


def say(*a):
    print(*a, flush=True)


def wait_line():
    assert sys.stdin.readline().strip() == "go"


def main():
    # Ctrl-C raises KeyboardInterrupt even when this process was started
    # with SIGINT ignored (a background job of a non-interactive shell:
    # Python then leaves it ignored)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    session, peer_addr = sys.argv[1], int(sys.argv[2])
    eng = TransferEngine()
    assert eng.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    local = np.ones(BIG, dtype=np.uint8)
    assert eng.register_memory(local, BIG) == 0
    assert eng.transfer_sync_write(session, local, peer_addr, 4096) == 0
    say("ready")
    for how in ("sync", "status"):
        wait_line()  # the peer is stopped now
        say("calling")
        t0 = time.monotonic()
        try:
            if how == "sync":
                eng.transfer_sync_write(session, local, peer_addr, BIG)
            else:
                bid = eng.batch_transfer_async_write(session, [local],
                                                     [peer_addr], [BIG])
                assert bid
                eng.get_batch_transfer_status([bid])
            say("not-interrupted")
            return 1
        except KeyboardInterrupt:
            say("interrupted %.3f" % (time.monotonic() - t0))
        wait_line()  # the peer runs again
        rc = eng.transfer_sync_write(session, local, peer_addr, 1 << 20)
        say("after %d %s" % (rc, eng.last_error() if rc else ""))
    eng.close()
    say("closed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Target of test_mooncake_te_pattern.py: Mooncake's transfer-engine test
target as its CI runs it (environment TARGET_SERVER_NAME,
MC_METADATA_SERVER, PROTOCOL), through `mooncake.engine`: initialize,
look for a registered buffer of its own, else allocate a managed one, and
serve.  Prints "ready <segment name> <buffer address>"; exits on EOF of
stdin."""
import os
import sys
import time

from mooncake.engine import TransferEngine

CAPACITY = 64 * 1024 * 1024


def main():
    name = os.environ["TARGET_SERVER_NAME"]
    metadata = os.environ["MC_METADATA_SERVER"]
    protocol = os.environ.get("PROTOCOL", "tcp")
    target = TransferEngine()
    t0 = time.monotonic()  # a service that listens may still be starting
    while target.initialize(name, metadata, protocol, "") != 0:
        if time.monotonic() - t0 > 20:
            print("error", target.last_error(), flush=True)
            return 1
        time.sleep(0.1)
    if metadata == "P2PHANDSHAKE":
        name = "%s:%d" % (name.rpartition(":")[0], target.get_rpc_port())
    addr = target.get_first_buffer_address(name)
    if addr == 0:
        addr = target.allocate_managed_buffer(CAPACITY)
        if addr == 0:
            print("error", target.last_error(), flush=True)
            return 1
    print("ready", name, addr, flush=True)
    sys.stdin.read()
    target.free_managed_buffer(addr, CAPACITY)
    target.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

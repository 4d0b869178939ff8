"""The initiator of test_nics.py's namespace tests: one engine bound to
--host (mooncake.engine's initialize with --device-name, or tent with
transports/tcp/nics from --tcp-nics), a write of pattern(--seed) to the
target's buffer and a read back, then one JSON line on stdout:
{"nics": [device names of get_nic_load_stats], "warnings": [...],
 "read_back": true} or {"error": "..."}."""
import argparse
import json
import logging
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tentenv  # noqa: E402


class Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def mooncake_side(args, src, back):
    from tent.mooncake import TransferEngine
    eng = TransferEngine()
    if eng.initialize(args.host, "P2PHANDSHAKE", args.protocol,
                      args.device_name) != 0:
        raise RuntimeError("initialize: " + eng.last_error())
    for buf in (src, back):
        if eng.register_memory(buf, buf.nbytes) != 0:
            raise RuntimeError(eng.last_error())
    if eng.transfer_sync_write(args.target, src, args.addr, src.nbytes) != 0:
        raise RuntimeError(eng.last_error())
    if eng.transfer_sync_read(args.target, back, args.addr, back.nbytes) != 0:
        raise RuntimeError(eng.last_error())
    return eng


def tent_side(args, src, back):
    import tent
    extra = {"rpc_server_hostname": args.host}
    cfg = tentenv.tent_config("tcp", extra)
    with open(cfg) as f:
        doc = json.load(f)
    if args.tcp_nics is not None:
        doc["transports"]["tcp"]["nics"] = json.loads(args.tcp_nics)
    with open(cfg, "w") as f:
        json.dump(doc, f)
    try:
        eng = tent.TransferEngine(cfg)
    finally:
        os.unlink(cfg)
    for buf in (src, back):
        eng.register_local_memory(buf, buf.nbytes)
    seg = eng.open_segment(args.target)
    for op, buf in ((tent.OpCode.WRITE, src), (tent.OpCode.READ, back)):
        bid = eng.allocate_transfer_batch(1)
        eng.submit_transfer(bid, [tent.Request(op, buf.ctypes.data, seg,
                                               args.addr, buf.nbytes)])
        deadline = time.monotonic() + 30
        while True:
            st = eng.get_transfer_status(bid, 0)
            if st.state != tent.TransferStatusEnum.PENDING:
                break
            if time.monotonic() > deadline:
                raise RuntimeError("transfer did not end in 30 s")
            time.sleep(0.001)
        if st.state != tent.TransferStatusEnum.COMPLETED:
            raise RuntimeError("task ended %r: %r" %
                               (st.state, eng.task_error(bid, 0)))
        eng.free_transfer_batch(bid)
    return eng


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--api", default="mooncake")
    ap.add_argument("--host", required=True)
    ap.add_argument("--device-name", default="")
    ap.add_argument("--protocol", default="tcp")
    ap.add_argument("--tcp-nics", default=None, help="JSON (tent API)")
    ap.add_argument("--target", required=True)
    ap.add_argument("--addr", type=int, required=True)
    ap.add_argument("--size", type=int, required=True)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    collect = Collect()
    logging.getLogger("tent.mooncake").addHandler(collect)
    src = tentenv.pattern(args.seed, args.size)
    back = np.zeros(args.size, dtype=np.uint8)
    try:
        side = mooncake_side if args.api == "mooncake" else tent_side
        eng = side(args, src, back)
        nics = [s.device_name for s in eng.get_nic_load_stats()]
        eng.close()
    except Exception as e:  # reported to the test, which fails on it
        print(json.dumps({"error": "%s: %s" % (type(e).__name__, e)}),
              flush=True)
        return 1
    print(json.dumps({"nics": nics, "warnings": collect.lines,
                      "read_back": bool((back == src).all())}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A peer process for the tent Python tests: one engine with one registered
buffer, driven over stdin/stdout (one command per line, one answer per
line).

    peer.py --api mooncake|tent --proto tcp|shm|memfabric --size N
            [--buf numpy|torch|managed|local]

First line printed: JSON {"session", "addr", "size", "pid"} ("addr" is a
list with --layers; the buffers then count as one, in order).  Commands:
    fill <seed>          fill the buffer with pattern(seed)      -> ok
    hash <off> <len>     sha256 of buffer[off:off+len]           -> hex
    notifs               notifications received so far           -> JSON
    quit                                                          (exits)
"""
import argparse
import ctypes
import hashlib
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tentenv  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--api", default="mooncake")
    ap.add_argument("--proto", default="tcp")
    ap.add_argument("--size", type=int, default=8 << 20)
    ap.add_argument("--buf", default="numpy")
    ap.add_argument("--local-hostname", default="127.0.0.1")
    ap.add_argument("--device-name", default="",
                    help="device_name passed to initialize")
    ap.add_argument("--mc-protocol", default=None,
                    help="protocol passed to initialize (default --proto)")
    ap.add_argument("--layers", type=int, default=1,
                    help="mooncake numpy: this many buffers of size/layers "
                         "bytes, registered with batch_register_memory")
    args = ap.parse_args()
    tentenv.setup_env(args.proto)
    size = args.size
    notifs = []
    keep = None
    if args.api == "mooncake":
        from tent.mooncake import TransferEngine
        eng = TransferEngine()
        rc = eng.initialize(args.local_hostname, "P2PHANDSHAKE",
                            args.mc_protocol or args.proto, args.device_name)
        if rc != 0:
            print(json.dumps({"error": eng.last_error()}), flush=True)
            return 1
        session = eng.get_session_id()  # "[::1]:<port>" for IPv6
        if args.buf == "managed":
            addr = eng.allocate_managed_buffer(size)
            assert addr, eng.last_error()
            view = np.frombuffer((ctypes.c_uint8 * size).from_address(addr),
                                 dtype=np.uint8)
        elif args.layers > 1:
            keep = [np.zeros(size // args.layers, dtype=np.uint8)
                    for _ in range(args.layers)]
            assert eng.batch_register_memory(
                [k.ctypes.data for k in keep],
                [k.nbytes for k in keep]) == 0, eng.last_error()
            addr = [k.ctypes.data for k in keep]
            size = sum(k.nbytes for k in keep)
            view = None
        else:
            if args.buf == "torch":
                import torch
                keep = torch.zeros(size, dtype=torch.uint8)
                view = keep.numpy()
            else:
                keep = view = np.zeros(size, dtype=np.uint8)
            assert eng.register_memory(keep, size) == 0, eng.last_error()
            addr = view.ctypes.data

        def get_notifs():
            return [[n.name, n.msg] for n in eng.get_notifies()]
    else:
        import tent
        cfg = tentenv.tent_config(args.proto)
        eng = tent.TransferEngine(cfg)
        os.unlink(cfg)
        session = eng.get_segment_name()
        if args.buf == "local":
            addr = eng.allocate_local_memory(size)
            eng.register_local_memory(addr, size)
            view = np.frombuffer((ctypes.c_uint8 * size).from_address(addr),
                                 dtype=np.uint8)
        else:
            keep = view = np.zeros(size, dtype=np.uint8)
            eng.register_local_memory(view, size)
            addr = view.ctypes.data

        def get_notifs():
            return [[n.name, n.msg] for n in eng.recv_notifi()]
    print(json.dumps({"session": session, "addr": addr, "size": size,
                      "pid": os.getpid()}), flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        if cmd[0] == "fill":
            data = tentenv.pattern(int(cmd[1]), size)
            if view is None:
                pos = 0
                for k in keep:
                    k[:] = data[pos:pos + k.nbytes]
                    pos += k.nbytes
            else:
                view[:] = data
            out = "ok"
        elif cmd[0] == "hash":
            off, n = int(cmd[1]), int(cmd[2])
            whole = view if view is not None else np.concatenate(keep)
            out = hashlib.sha256(whole[off:off + n].tobytes()).hexdigest()
        elif cmd[0] == "notifs":
            notifs.extend(get_notifs())
            out = json.dumps(notifs)
        elif cmd[0] == "quit":
            break
        else:
            out = "error unknown command"
        print(out, flush=True)
    del view
    eng.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Per-request cost of the Python binding: tent.mooncake's
batch_transfer_sync_write over shm (default 4 KiB x 128, and x 1 for the
per-call cost) against C for the same case, in one run: the C tebench
(its own two processes) and the same batches issued by a C loop inside this
process on the same engine and target (_c_reference_loop).

    PYTHONPATH=build/python /usr/bin/python3 \\
        mooncake-transfer-engine/tent/bench/python_bench.py [--seconds 2] \\
        [--rounds 3] [--block 4096] [--batch 128] [--tebench PATH]

Both sides run two processes on this host (a target with one registered
engine-allocated buffer, an initiator with another), one thread, the same
engine and transport.  The rounds alternate C and Python; medians are
printed.  "binding" is Python's time per call minus the in-process C
loop's (same engine, target and buffers; median of the chunk-pair
differences, and the difference of the minimums), per request that divided
by the batch size; tebench's Avg Lat (wall time per batch) is shown beside.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
BUF = 64 << 20


def import_tent():
    try:
        import tent.mooncake  # noqa: F401
    except ImportError:
        sys.path.insert(0, os.path.join(ROOT, "build", "python"))
        import tent.mooncake  # noqa: F401
    return sys.modules["tent.mooncake"]


def quiet_config():
    """Engines log warnings only, shm is the only transport."""
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"),
                        "tent-pybench-%d.json" % os.getpid())
    with open(path, "w") as f:
        json.dump({"log_level": "warning"}, f)
    return path


def target():
    mc = import_tent()
    eng = mc.TransferEngine()
    assert eng.initialize("127.0.0.1", "P2PHANDSHAKE", "shm", "") == 0, \
        eng.last_error()
    addr = eng.allocate_managed_buffer(BUF)
    assert addr, eng.last_error()
    print(json.dumps({"session": "127.0.0.1:%d" % eng.get_rpc_port(),
                      "addr": addr}), flush=True)
    sys.stdin.read()
    eng.close()
    return 0


def find_tebench(arg):
    for p in (arg, os.environ.get("TENT_TEBENCH"),
              os.path.join(ROOT, "build", "mooncake-transfer-engine", "tent",
                           "bench", "tebench")):
        if p and os.access(p, os.X_OK):
            return p
    sys.exit("python_bench: tebench not found (build it, or pass --tebench)")


def run_tebench(tebench, block, batches, seconds):
    out = subprocess.run(
        [tebench, "--loopback", "--xport_type=shm", "--op_type=write",
         "--block_size=%d" % block,
         "--batch_size=%s" % ",".join(str(b) for b in batches),
         "--threads=1", "--duration=%g" % seconds,
         "--total_buffer_size=%d" % BUF, "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        check=True).stdout
    res = {}
    for line in out.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            res[row["batch_size"]] = row["avg_lat_us"]
    return res


def run_python(eng, session, src, dst, block, batch, seconds, chunks=20):
    """Per-call microseconds of the Python loop and of the in-process C
    loop, as lists over `chunks` pairs run back to back (C, then Python),
    so that load from other processes hits both alike."""
    s = [src + i * block for i in range(batch)]
    d = [dst + i * block for i in range(batch)]
    n = [block] * batch
    f = eng.batch_transfer_sync_write
    # warm-up, and the number of calls that fills the time
    t0, calls = time.perf_counter(), 0
    while time.perf_counter() - t0 < min(1.0, seconds / 5):
        assert f(session, s, d, n) == 0, eng.last_error()
        calls += 1
    rate = calls / (time.perf_counter() - t0)
    iters = max(1, int(rate * seconds / 2 / chunks))
    py, cl = [], []
    for _ in range(chunks):
        cref = eng._c_reference_loop(session, src, dst, block, batch, iters)
        if cref < 0:
            sys.exit("python_bench: C loop failed: %s" % eng.last_error())
        failed = 0
        t0 = time.perf_counter()
        for _ in range(iters):
            if f(session, s, d, n):
                failed += 1
        dt = time.perf_counter() - t0
        if failed:
            sys.exit("python_bench: %d of %d calls failed: %s" %
                     (failed, iters, eng.last_error()))
        py.append(dt / iters * 1e6)
        cl.append(cref / iters * 1e6)
    return py, cl


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--block", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--tebench")
    ap.add_argument("--target", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.target:
        return target()
    if "MC_TENT_CONF" not in os.environ:
        os.environ["MC_TENT_CONF"] = quiet_config()
    tebench = find_tebench(args.tebench)
    mc = import_tent()
    batches = [args.batch, 1] if args.batch != 1 else [1]
    tgt = subprocess.Popen([sys.executable, os.path.abspath(__file__),
                            "--target"], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)
    info = json.loads(tgt.stdout.readline())
    eng = mc.TransferEngine()
    assert eng.initialize("127.0.0.1", "P2PHANDSHAKE", "shm", "") == 0, \
        eng.last_error()
    src = eng.allocate_managed_buffer(BUF)
    assert src, eng.last_error()
    c = {b: [] for b in batches}
    cl = {b: [] for b in batches}
    py = {b: [] for b in batches}
    try:
        for r in range(args.rounds):
            for b, us in run_tebench(tebench, args.block, batches,
                                     args.seconds).items():
                c[b].append(us)
            for b in batches:
                p, cr = run_python(eng, info["session"], src, info["addr"],
                                   args.block, b, args.seconds)
                py[b] += p
                cl[b] += cr
    finally:
        tgt.stdin.close()
        tgt.wait()
        eng.close()
        if os.environ["MC_TENT_CONF"].startswith(
                os.path.join(os.environ.get("TMPDIR", "/tmp"),
                             "tent-pybench-")):
            os.unlink(os.environ["MC_TENT_CONF"])
    print("python_bench: shm write, %d B blocks, 1 thread, %d rounds of "
          "%g s; C loop and python alternate in %d chunk pairs (us per call)"
          % (args.block, args.rounds, args.seconds, len(py[batches[0]])))
    print("%-14s %-7s %12s %12s %12s %13s %12s" % (
        "case", "stat", "tebench/call", "C loop/call", "python/call",
        "binding/call", "binding/req"))
    ok = True
    for b in batches:
        pairs = [p - q for p, q in zip(py[b], cl[b])]
        for stat, fn in (("median", statistics.median), ("min", min)):
            tm, cm, pm = fn(c[b]), fn(cl[b]), fn(py[b])
            add = fn(pairs) if stat == "median" else pm - cm
            print("%-14s %-7s %12.2f %12.2f %12.2f %13.2f %12.3f" %
                  ("%d B x %d" % (args.block, b), stat, tm, cm, pm, add,
                   add / b))
            if stat == "median" and b > 1 and add / b > 1.0:
                ok = False
            if stat == "median" and b == 1 and add > 5.0:
                ok = False
    print("tebench rounds:", {b: [round(x, 2) for x in v]
                              for b, v in c.items()})
    print("target (<= 1 us per request, <= 5 us per call):",
          "met" if ok else "NOT met")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""tent-admin against real engines: tent_admin_test.py PART TENT_ADMIN RAILS_TOOL

PART is one of: args, describe, ping, rails, http, list_redis, list_etcd.  Targets
are tent_rails_tool engines on loopback; redis-server and etcd are started
here on free ports (as tests/common/meta_server.h starts them) and stopped
at the end.  Exit 0 pass, 1 fail."""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

PART, ADMIN, RAILS = sys.argv[1], sys.argv[2], sys.argv[3]
CHILDREN = []
MIB4 = 4 << 20


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def admin(*args, expect=0):
    r = subprocess.run([ADMIN, *args], capture_output=True, text=True,
                       timeout=60)
    if expect is not None and r.returncode != expect:
        sys.exit(f"FAIL: tent-admin {' '.join(args)}: exit {r.returncode}, "
                 f"want {expect}\nstdout: {r.stdout}\nstderr: {r.stderr}")
    return r


def admin_json(*args):
    return json.loads(admin("--json", *args).stdout)


def check(cond, what):
    if not cond:
        sys.exit(f"FAIL: {what}")


def start_target(*sets):
    """A tent_rails_tool target with 4 MiB registered; (name, addr, proc)."""
    cmd = [RAILS, "target", "--host", "127.0.0.1", "--mib", "4"]
    for s in sets:
        cmd += ["--set", s]
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    CHILDREN.append(p)
    line = p.stdout.readline().split()
    check(len(line) == 3 and line[0] == "segment", f"target said {line}")
    return line[1], int(line[2]), p


def start_server(kind, tmp):
    port, peer = free_port(), free_port()
    if kind == "redis":
        exe = "redis-server"
        cmd = [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--dir", tmp, "--protected-mode", "no",
               "--daemonize", "no"]
        ep = f"redis://127.0.0.1:{port}"
    else:
        exe = "etcd"
        c, pu = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{peer}"
        cmd = [exe, "--name", "admin-test", "--data-dir", tmp + "/etcd",
               "--listen-client-urls", c, "--advertise-client-urls", c,
               "--listen-peer-urls", pu, "--initial-advertise-peer-urls", pu,
               "--initial-cluster", f"admin-test={pu}"]
        ep = f"etcd://127.0.0.1:{port}"
    if not shutil.which(exe):
        sys.exit(f"FAIL: {exe} is not installed")
    log = open(os.path.join(tmp, "server.log"), "w")
    p = subprocess.Popen(cmd, stdout=log, stderr=log)
    CHILDREN.append(p)
    # ready once tent-admin can list (an empty store lists nothing)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if admin("list", "--metadata", ep, expect=None).returncode == 0:
            return ep
        check(p.poll() is None, f"{exe} exited; see {tmp}/server.log")
        time.sleep(0.1)
    sys.exit(f"FAIL: {exe} did not answer within 30 s")


def part_args():
    r = admin(expect=2)
    check("no command" in r.stderr, r.stderr)
    r = admin("frobnicate", expect=2)
    check("'frobnicate'" in r.stderr, r.stderr)
    r = admin("ping", "127.0.0.1:1", "--count", "abc", expect=2)
    check("--count" in r.stderr and "abc" in r.stderr, r.stderr)
    r = admin("ping", "127.0.0.1:1", "--size", "0", expect=2)
    check("--size" in r.stderr, r.stderr)
    r = admin("list", "--bogus", expect=2)
    check("--bogus" in r.stderr, r.stderr)
    r = admin("describe", expect=2)
    check("SEGMENT" in r.stderr, r.stderr)
    r = admin("rails", expect=2)
    check("--metrics" in r.stderr, r.stderr)
    r = admin("rails", "--metrics", "http://nowhere", expect=2)
    check("--metrics" in r.stderr, r.stderr)
    r = admin("list", "--metadata", "zookeeper://h:1", expect=2)
    check("zookeeper" in r.stderr, r.stderr)
    r = admin("list", "--metadata", "localhost:2379", expect=2)
    check("--metadata" in r.stderr, r.stderr)
    env_r = subprocess.run([ADMIN, "list"], capture_output=True, text=True,
                           env={k: v for k, v in os.environ.items()
                                if k != "MC_METADATA_SERVER"})
    check(env_r.returncode == 2 and "metadata store" in env_r.stderr,
          env_r.stderr)
    r = admin("list", "--metadata", "p2p", expect=3)
    check("p2p" in r.stderr, r.stderr)
    r = admin("list", "--metadata", "http://127.0.0.1:1/metadata", expect=3)
    check("http" in r.stderr, r.stderr)
    r = admin("describe", "not-an-address", expect=2)
    check("not-an-address" in r.stderr, r.stderr)
    r = admin("--help")
    check("usage:" in r.stdout, r.stdout)


def part_describe():
    name, addr, _ = start_target()
    d = admin_json("describe", name)
    check(d["segment"] == name, d)
    check(d["attrs"]["rpc_addr"] == name, d)
    check(len(d["buffers"]) == 1, d)
    b = d["buffers"][0]
    check(b["base"] == addr and b["length"] == MIB4, b)
    check(b["permission"] == "global-rw" and b["location"] == "cpu", b)
    check("tcp" in b["transports"] and "tcp" in d["transports"], d)
    check(d["fields"].get("version") == 1, d)
    check({"transport": "tcp", "nic": "lo", "addr": name} in d["nics"], d)
    t = admin("describe", name).stdout
    check(f"0x{addr:016x}" in t and "global-rw" in t and "rpc_addr" in t, t)
    dead = f"127.0.0.1:{free_port()}"
    r = admin("describe", dead, expect=1)
    check(dead in r.stderr, r.stderr)


def part_ping():
    name, addr, _ = start_target()
    p = json.loads(admin("ping", name, "--count", "10", "--size", "4096",
                         "--json").stdout)
    check(p["verified"] is True and p["verify_differing"] == 0, p)
    check(p["count"] == 10 and p["size"] == 4096, p)
    check(p["buffer_base"] == addr and p["verify_bytes"] == 65536, p)
    check(0 < p["min_us"] <= p["avg_us"] <= p["max_us"], p)
    check(p["min_us"] <= p["p99_us"] <= p["max_us"], p)
    check(p["transport"] == "tcp", p)
    t = admin("ping", name, "--count", "3").stdout
    check("verify     ok" in t and "min" in t, t)
    r = admin("ping", name, "--size", str(8 << 20), expect=2)
    check("--size" in r.stderr, r.stderr)
    dead = f"127.0.0.1:{free_port()}"
    r = admin("ping", dead, expect=1)
    check(dead in r.stderr, r.stderr)


def part_rails():
    name, addr, _ = start_target()
    port = free_port()
    run = subprocess.Popen(
        [RAILS, "run", "--host", "127.0.0.1", "--target", name, "--addr",
         str(addr), "--seconds", "30", "--block", "65536", "--batch", "4",
         "--interval-ms", "100", "--set", f"metrics/http_port={port}"],
        stdout=subprocess.PIPE, text=True)
    CHILDREN.append(run)
    for line in run.stdout:  # the first tick: data has moved
        if line.startswith("tick"):
            break
    url = f"http://127.0.0.1:{port}"
    j = admin_json("rails", "--metrics", url)
    rails = [r for r in j["rails"]
             if r["transport"] == "tcp" and r["nic"] == "lo"]
    check(len(rails) == 1, j)
    r = rails[0]
    check(r["peer"].startswith(name + "/"), r)
    check(r["state"] == "up", r)
    v = r["values"]
    check(v["bytes_total"] > 0 and v["bandwidth_bytes_per_second"] > 0, v)
    check("capacity_bytes_per_second" in v and v["paused"] == 0, v)
    t = admin("rails", "--metrics", url).stdout
    check("EWMA" in t and " lo " in t and name in t, t)
    run.kill()
    run.wait()
    r = admin("rails", "--metrics", url, expect=1)
    check(url in r.stderr, r.stderr)


def part_http():
    """TENT's HTTP metadata server: describe reads a key, list says why it
    cannot enumerate (exit 3)."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                          "..", "meta", "http_meta_server.py")
    port = free_port()
    srv = subprocess.Popen([sys.executable, script, str(port)],
                           stdout=subprocess.PIPE, text=True)
    CHILDREN.append(srv)
    check(srv.stdout.readline().strip() == "ready", "http server not ready")
    ep = f"http://127.0.0.1:{port}/metadata"
    seg = f"admin-http-{os.getpid()}"
    name, addr, _ = start_target("metadata_type=http",
                                 f"metadata_servers={ep}",
                                 f"local_segment_name={seg}")
    d = admin_json("describe", seg, "--metadata", ep)
    check(d["segment"] == seg and d["buffers"][0]["base"] == addr, d)
    check(d["source"] == f"http {ep}", d)
    r = admin("list", "--metadata", ep, expect=3)
    check("http" in r.stderr and "describe" in r.stderr, r.stderr)


def redis_set(ep, key, val):
    host, port = ep.split("://", 1)[1].split(":")
    parts = [b"SET", key.encode(), val.encode()]
    cmd = b"*%d\r\n" % len(parts) + b"".join(
        b"$%d\r\n%s\r\n" % (len(p), p) for p in parts)
    with socket.create_connection((host, int(port))) as c:
        c.sendall(cmd)
        check(c.recv(64).startswith(b"+OK"), "redis SET refused")


def generic_fields(ep, d):
    """A descriptor with fields and attributes this tent-admin has never
    heard of (as a newer engine publishes): describe shows them all."""
    raw = {"version": 1, "name": "future", "host_id": d["host_id"],
           "incarnation": "7", "future_field": 7, "buffers": [],
           "attrs": {"rpc_addr": "127.0.0.1:1", "rdma_nics": "mlx5_0=x,mlx5_1=y"}}
    redis_set(ep, "mooncake/tent/future", json.dumps(raw))
    j = admin_json("describe", "future", "--metadata", ep)
    check(j["fields"]["future_field"] == 7, j)
    check(j["fields"]["incarnation"] == "7", j)
    check(j["attrs"]["rdma_nics"] == "mlx5_0=x,mlx5_1=y", j)
    check({"transport": "rdma", "nic": "mlx5_1", "addr": "y"} in j["nics"], j)
    t = admin("describe", "future", "--metadata", ep).stdout
    check("future_field" in t and "incarnation" in t and " 7" in t, t)
    lst = admin_json("list", "--metadata", ep)
    check(any(s["segment"] == "future" and s["buffers"] == 0
              for s in lst["segments"]), lst)


def part_list(kind):
    tmp = tempfile.mkdtemp(prefix="tent-admin-")
    try:
        ep = start_server(kind, tmp)
        servers = ep.split("://", 1)[1]
        if kind == "etcd":
            servers = "http://" + servers
        seg = f"admin-test-{os.getpid()}"
        name, addr, tgt = start_target(
            f"metadata_type={kind}", f"metadata_servers={servers}",
            f"local_segment_name={seg}")
        check(name == seg, name)
        j = admin_json("list", "--metadata", ep)
        check(j["metadata_type"] == kind and j["prefix"] == "mooncake/tent/",
              j)
        mine = [s for s in j["segments"] if s["segment"] == seg]
        check(len(mine) == 1, j)
        check(mine[0]["buffers"] == 1 and mine[0]["bytes"] == MIB4, mine)
        check(mine[0]["key"] == "mooncake/tent/" + seg, mine)
        check(":" in mine[0]["rpc_addr"], mine)
        t = admin("list", "--metadata", ep).stdout
        check(seg in t and "SEGMENT" in t, t)
        d = admin_json("describe", seg, "--metadata", ep)
        check(d["buffers"][0]["base"] == addr, d)
        # the tebench-style flags name the same store
        j2 = admin_json("list", "--metadata_type", kind,
                        "--metadata_servers", servers)
        check(any(s["segment"] == seg for s in j2["segments"]), j2)
        # another prefix holds nothing
        j3 = admin_json("list", "--metadata", ep, "--prefix", "elsewhere/")
        check(j3["segments"] == [], j3)
        if kind == "redis":
            generic_fields(ep, d)
        r = admin("describe", "nobody-here", "--metadata", ep, expect=1)
        check("nobody-here" in r.stderr, r.stderr)
        # a clean shutdown withdraws the key
        tgt.stdin.close()
        tgt.wait(timeout=30)
        j4 = admin_json("list", "--metadata", ep)
        check(not any(s["segment"] == seg for s in j4["segments"]), j4)
    finally:
        for p in CHILDREN:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    try:
        {"args": part_args, "describe": part_describe, "ping": part_ping,
         "rails": part_rails, "http": part_http, "list_redis": lambda: part_list("redis"),
         "list_etcd": lambda: part_list("etcd")}[PART]()
    finally:
        for p in CHILDREN:
            if p.poll() is None:
                p.kill()
                p.wait()
    print(f"ok: {PART}")


if __name__ == "__main__":
    main()

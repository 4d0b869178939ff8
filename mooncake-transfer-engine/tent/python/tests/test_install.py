"""What `cmake --install` lays out works as installed, with no
LD_LIBRARY_PATH or PYTHONPATH into the build tree (issue 20, item 7):
<prefix>/bin/tebench finds libtent through its RPATH, and the Python
packages (tent, mooncake.engine) import from <prefix> and move bytes."""
import glob
import os
import subprocess
import sys

import pytest

BUILD = os.environ.get("TENT_BUILD_DIR", "")


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    if not BUILD:
        pytest.skip("TENT_BUILD_DIR is not set (CTest sets it): no build "
                    "tree to install from")
    p = tmp_path_factory.mktemp("prefix")
    r = subprocess.run(["cmake", "--install", BUILD, "--prefix", str(p)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    return p


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("LD_LIBRARY_PATH", "PYTHONPATH")}
    env.update(extra)
    return env


def test_installed_tebench_runs(prefix):
    tebench = prefix / "bin" / "tebench"
    if not tebench.exists():
        pytest.skip("tebench is not built (TENT_BUILD_BENCH=OFF)")
    r = subprocess.run([str(tebench), "--help"], env=clean_env(),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "--log_level" in r.stdout


def test_installed_python_packages(prefix):
    inits = glob.glob(str(prefix / "**" / "tent" / "__init__.py"),
                      recursive=True)
    assert len(inits) == 1, inits
    site = os.path.dirname(os.path.dirname(inits[0]))
    code = r'''
import numpy as np, tent
from mooncake.engine import TransferEngine
assert tent.__file__.startswith(%r), tent.__file__
e = TransferEngine()
assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
src, dst = np.arange(4096, dtype=np.uint8), np.zeros(4096, np.uint8)
assert e.register_memory(src, src.nbytes) == 0
assert e.register_memory(dst, dst.nbytes) == 0
s = "127.0.0.1:%%d" %% e.get_rpc_port()
assert e.transfer_sync_write(s, src, dst.ctypes.data, 4096) == 0
assert (src == dst).all()
e.close()
print("ok")
''' % site
    if os.environ.get("TENT_PY_MOONCAKE_SHIM", "ON").upper() in ("OFF", "0"):
        code = code.replace("from mooncake.engine import",
                            "from tent.mooncake import")
    r = subprocess.run([sys.executable, "-c", code], cwd=str(prefix),
                       env=clean_env(PYTHONPATH=site), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr

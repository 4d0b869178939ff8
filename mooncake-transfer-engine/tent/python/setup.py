"""The `tent` wheel: the C extension tent._tent (built by the project's
CMake, with libtent linked in statically so the wheel needs no libtent.so
beside it), the pure-Python modules, and the `mooncake` package
(mooncake.engine) unless TENT_PYTHON_MOONCAKE_SHIM=OFF.

Environment:
  TENT_SOURCE_DIR            repository root (default: three levels up)
  TENT_WHEEL_WORK_DIR        where CMake and setuptools build (default:
                             <root>/build-wheel); nothing is written into
                             the source tree
  TENT_PYTHON_MOONCAKE_SHIM  ON (default) or OFF: ship `mooncake` or not
  TENT_WHEEL_JOBS            parallel build jobs (default: CPU count)
"""
import os
import re
import shutil
import subprocess
import sys

from setuptools import Distribution, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.environ.get("TENT_SOURCE_DIR") or
                       os.path.join(HERE, "..", "..", ".."))
WORK = os.path.abspath(os.environ.get("TENT_WHEEL_WORK_DIR") or
                       os.path.join(ROOT, "build-wheel"))
SHIM = os.environ.get("TENT_PYTHON_MOONCAKE_SHIM", "ON").upper()


def project_version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        m = re.search(r"project\(\s*tent\s+VERSION\s+([0-9.]+)", f.read())
    if not m:
        raise RuntimeError("no project(tent VERSION ...) in %s" % ROOT)
    return m.group(1)


class BinaryDistribution(Distribution):
    """A C extension inside: the wheel is tagged for this interpreter and
    platform."""

    def has_ext_modules(self):
        return True


class CMakeBuild(build_ext):
    """Builds tent._tent with CMake and copies the packages CMake laid out
    in <build>/python (extension and pure-Python modules alike) into the
    wheel's build directory.  (build_ext, which setuptools runs for a
    distribution with extension modules.)"""

    def run(self):
        build = os.path.join(WORK, "cmake")
        gen = ["-G", "Ninja"] if shutil.which("ninja") else []
        subprocess.check_call(
            ["cmake", "-S", ROOT, "-B", build, *gen,
             "-DCMAKE_BUILD_TYPE=Release",
             "-DBUILD_SHARED_LIBS=OFF",
             "-DBUILD_UNIT_TESTS=OFF",
             "-DTENT_BUILD_BENCH=OFF",
             "-DTENT_BUILD_PYTHON=ON",
             "-DPython3_EXECUTABLE=" + sys.executable,
             "-DTENT_PYTHON_MOONCAKE_SHIM=" + SHIM])
        jobs = os.environ.get("TENT_WHEEL_JOBS") or str(os.cpu_count() or 1)
        subprocess.check_call(["cmake", "--build", build, "--target",
                               "tent_python", "mf_smem", "--parallel", jobs])
        src = os.path.join(build, "python")
        for pkg in ("tent", "mooncake"):
            dst = os.path.join(self.build_lib, pkg)
            if os.path.isdir(dst):
                shutil.rmtree(dst)
            if os.path.isdir(os.path.join(src, pkg)):
                shutil.copytree(os.path.join(src, pkg), dst,
                                ignore=shutil.ignore_patterns("__pycache__"))
        if not os.path.isdir(os.path.join(self.build_lib, "tent")):
            raise RuntimeError("CMake built no tent package in " + src)
        # mf_host's host-memory libmf_smem.so, so that a pip-only user can
        # run the memfabric transport without an NPU (tent.mf_host_library)
        mf = os.path.join(build, "mf_host", "libmf_smem.so")
        if not os.path.exists(mf):
            raise RuntimeError("CMake built no mf_host library at " + mf)
        os.makedirs(os.path.join(self.build_lib, "tent", "mf_host"),
                    exist_ok=True)
        shutil.copy2(mf, os.path.join(self.build_lib, "tent", "mf_host",
                                      "libmf_smem.so"))


os.makedirs(WORK, exist_ok=True)
setup(
    name="tent",
    version=project_version(),
    description="TENT in C: a transfer engine (Mooncake TENT's API) with "
                "Python bindings for TENT's and Mooncake's engine APIs",
    long_description=open(os.path.join(HERE, "README.md")).read(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.8",
    packages=[],
    distclass=BinaryDistribution,
    cmdclass={"build_ext": CMakeBuild},
    zip_safe=False,
    options={"build": {"build_base": os.path.join(WORK, "setuptools")},
             "egg_info": {"egg_base": WORK}},
)

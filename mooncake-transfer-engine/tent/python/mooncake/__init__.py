"""Mooncake's import path over TENT in C.

Programs written for Mooncake's transfer engine import
``from mooncake.engine import TransferEngine``; this package gives them
tent's implementation (``tent.mooncake``) under that name, so they run
unchanged.  Only ``mooncake.engine`` is provided: Mooncake Store and the
other parts of Mooncake's package are not part of this project.  Where a
real Mooncake is installed, build with -DTENT_PYTHON_MOONCAKE_SHIM=OFF
(or install the wheel without it) to leave this package out.
"""

"""Mooncake's classic engine API (``mooncake.engine``) over TENT in C.

Programs written for ``from mooncake.engine import TransferEngine`` run
unchanged: the ``mooncake`` package installed next to ``tent`` re-exports
this module as ``mooncake.engine``.
"""
import enum as _enum

from ._tent import MooncakeTransferEngine as _Engine


class TransferOpcode(_enum.IntEnum):
    Read = 0
    Write = 1


# pybind11's export_values(), as Mooncake's module has them
Read = TransferOpcode.Read
Write = TransferOpcode.Write


class TransferNotify:
    """A notification: name and message (str), settable; TransferNotify()
    is empty.  Unpacks and compares like a (name, msg) pair."""

    __slots__ = ("name", "msg")

    def __init__(self, name="", msg=""):
        self.name = name
        self.msg = msg

    def __iter__(self):
        return iter((self.name, self.msg))

    def __eq__(self, other):
        try:
            return tuple(self) == tuple(other)
        except TypeError:
            return NotImplemented

    __hash__ = None

    def __repr__(self):
        return "TransferNotify(name=%r, msg=%r)" % (self.name, self.msg)


class InnerTransferEngine:
    """What get_engine() returns: the engine underneath (opaque in
    Mooncake; here ``ptr`` is its tent_engine_t address for the C API)."""

    __slots__ = ("_outer",)

    def __init__(self, outer):
        self._outer = outer

    @property
    def ptr(self):
        return self._outer.get_engine_ptr()

    def __repr__(self):
        return "<InnerTransferEngine tent_engine_t at %#x>" % self.ptr


class TransferEngine(_Engine):
    """Mooncake's classic TransferEngine over TENT in C.

    Threads: every method may be called from several threads at once, and
    close() may race the others: it waits for the calls already inside the
    engine, and later calls raise RuntimeError.

    Batches: a batch whose tasks are still in flight is released lazily
    (TENT's rule): its tasks may keep reading the source and writing into
    the destination memory after the call that gave the batch up returned.
    Keep registered memory alive until every task is done.

    A protocol that cannot run (ascend/memfabric without libmf_smem.so or
    MF_PROTOCOL) makes initialize() return -1 with the cause, in the seed's
    words, in last_error() and in the "tent.mooncake" log."""

    TransferOpcode = TransferOpcode

    def get_engine(self):
        return InnerTransferEngine(self)


# Mooncake's build flags: none of these device paths exist in this engine.
SUPPORT_EFA = False
SUPPORT_HIP = False
SUPPORT_MNNVL = False
SUPPORT_MUSA = False
SUPPORT_INTRA_NVLINK = False
SUPPORT_CUDA = False

__all__ = ["TransferEngine", "TransferNotify", "TransferOpcode",
           "InnerTransferEngine", "Read", "Write", "SUPPORT_EFA",
           "SUPPORT_HIP", "SUPPORT_MNNVL", "SUPPORT_MUSA",
           "SUPPORT_INTRA_NVLINK", "SUPPORT_CUDA"]

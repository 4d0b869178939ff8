"""Mooncake's classic engine API (``mooncake.engine``) over TENT in C.

A program written for ``from mooncake.engine import TransferEngine`` works
after changing only its import line to ``from tent.mooncake import
TransferEngine``.
"""
import collections as _collections
import enum as _enum

from ._tent import MooncakeTransferEngine as TransferEngine  # noqa: F401

TransferNotify = _collections.namedtuple("TransferNotify", "name msg")
TransferNotify.__doc__ = "A notification: name and message (str)."


class TransferOpcode(_enum.IntEnum):
    Read = 0
    Write = 1


__all__ = ["TransferEngine", "TransferNotify", "TransferOpcode"]

"""tent: TENT in C from Python.

``import tent`` gives TENT's own API (TransferEngine, Request, enums,
exceptions); ``from tent.mooncake import TransferEngine`` gives Mooncake's
classic engine API used by SGLang and vLLM.  Both are a C extension
(tent._tent) over the public C API.
"""
import collections as _collections
import enum as _enum

from . import _tent
from ._tent import (  # noqa: F401
    LOCAL_SEGMENT_ID,
    PRIO_HIGH,
    PRIO_LOW,
    PRIO_MEDIUM,
    AddressNotRegisteredError,
    CudaError,
    DeviceNotFoundError,
    InternalError,
    InvalidArgumentError,
    InvalidEntryError,
    MetadataError,
    NotImplementedError,
    RdmaError,
    RpcServiceError,
    SegmentInfo,
    SegmentInfoBuffer,
    TentException,
    TransferStatus,
    kWildcardLocation,
    strerror,
)


Notification = _collections.namedtuple("Notification", "name msg")
Notification.__doc__ = "A notification: name and message (str)."


class OpCode(_enum.IntEnum):
    READ = 0
    WRITE = 1


class TransferStatusEnum(_enum.IntEnum):
    INITIAL = 0
    PENDING = 1
    INVALID = 2
    CANCELED = 3
    COMPLETED = 4
    TIMEOUT = 5
    FAILED = 6


class Permission(_enum.IntEnum):
    LocalReadWrite = 0
    GlobalReadOnly = 1
    GlobalReadWrite = 2


class TransportType(_enum.IntEnum):
    UNSPEC = 0
    RDMA = 1
    MNNVL = 2
    SHM = 3
    NVLINK = 4
    GDS = 5
    IOURING = 6
    TCP = 7
    AscendDirect = 8
    SUNRISE_LINK = 9
    MEMFABRIC = 10
    # Known upstream, not built here: the engine rejects them.
    TPU = 11
    UB = 12
    MPCOMM = 13


class Request:
    """One transfer: ``source`` is a local registered address (or an
    object with the buffer protocol / data_ptr()), ``target_offset`` an
    address inside the target segment's buffers."""

    __slots__ = ("opcode", "source", "target_id", "target_offset", "length",
                 "priority", "transport_hint")

    def __init__(self, opcode=OpCode.WRITE, source=0, target_id=0,
                 target_offset=0, length=0, priority=PRIO_HIGH,
                 transport_hint=TransportType.UNSPEC):
        self.opcode = opcode
        self.source = source
        self.target_id = target_id
        self.target_offset = target_offset
        self.length = length
        self.priority = priority
        self.transport_hint = transport_hint

    def __repr__(self):
        return ("Request(opcode=%r, source=%#x, target_id=%r, "
                "target_offset=%#x, length=%r)" %
                (self.opcode, int(self.source) if isinstance(self.source, int)
                 else 0, self.target_id, self.target_offset, self.length))


class MemoryOptions:
    """Options of allocate_local_memory / register_local_memory."""

    __slots__ = ("location", "perm", "type")

    def __init__(self, location=kWildcardLocation,
                 perm=Permission.GlobalReadWrite, type=TransportType.UNSPEC):
        self.location = location
        self.perm = perm
        self.type = type


class MemoryGuard:
    """Memory from allocate_local_memory, freed when the block exits."""

    def __init__(self, engine, size, location=kWildcardLocation):
        self.engine = engine
        self.size = size
        self.addr = engine.allocate_local_memory(size, location)

    def get(self):
        return self.addr

    def release(self):
        if self.addr:
            addr, self.addr = self.addr, 0
            self.engine.free_local_memory(addr)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()
        return False


class BatchGuard:
    """A transfer batch, freed when the block exits."""

    def __init__(self, engine, batch_size):
        self.engine = engine
        self.batch_id = engine.allocate_transfer_batch(batch_size)

    def get(self):
        return self.batch_id

    def release(self):
        if self.batch_id:
            bid, self.batch_id = self.batch_id, 0
            self.engine.free_transfer_batch(bid)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()
        return False


class TransferEngine(_tent.TransferEngine):
    """TransferEngine(config_path=None): TENT's transfer engine.

    config_path names a JSON config for this engine; without it the engine
    reads MC_TENT_CONF (or runs on defaults)."""

    def allocate_memory_guard(self, size, location=kWildcardLocation):
        return MemoryGuard(self, size, location)

    def allocate_batch_guard(self, batch_size):
        return BatchGuard(self, batch_size)


from . import mooncake as _mooncake  # noqa: E402

_tent._set_notification_types(Notification, _mooncake.TransferNotify)

__all__ = [n for n in dir() if not n.startswith("_")]

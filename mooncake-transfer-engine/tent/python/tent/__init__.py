"""tent: TENT in C from Python.

``import tent`` gives TENT's own API (TransferEngine, Request, enums,
exceptions); ``from mooncake.engine import TransferEngine`` (or
``tent.mooncake``) gives Mooncake's classic engine API used by SGLang and
vLLM.  Both are a C extension (tent._tent) over the public C API.
"""
import enum as _enum
import glob as _glob
import json as _json
import re as _re

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
    NicLoadStats,
    NotImplementedError,
    RdmaError,
    RpcServiceError,
    SegmentInfoBuffer,
    TaskError,
    TentException,
    TransferStatus,
    kWildcardLocation,
    strerror,
)


class Notification:
    """A notification: name and message (str), settable; Notification()
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
        return "%s(name=%r, msg=%r)" % (type(self).__name__, self.name,
                                        self.msg)


def _export(cls):
    """pybind11's export_values(): the members also at module level, as
    TENT's module has them (tent.READ, tent.COMPLETED, tent.TCP, ...)."""
    globals().update(cls.__members__)
    return cls


@_export
class OpCode(_enum.IntEnum):
    READ = 0
    WRITE = 1


@_export
class TransferStatusEnum(_enum.IntEnum):
    INITIAL = 0
    PENDING = 1
    INVALID = 2
    CANCELED = 3
    COMPLETED = 4
    TIMEOUT = 5
    FAILED = 6


@_export
class Permission(_enum.IntEnum):
    LocalReadWrite = 0
    GlobalReadOnly = 1
    GlobalReadWrite = 2


# TENT's numbers, from the engine's one transport list (the C header's
# TRANSPORT_* values; MEMFABRIC and BUFIO are this engine's own).
TransportType = _export(_enum.IntEnum("TransportType", [
    (pyname, value) for pyname, value, _name in _tent._transport_types
], module=__name__))


@_export
class IntentType(_enum.IntEnum):
    INTENT_UNSPEC = 0
    FOREGROUND_GET = 1
    BACKGROUND_PREFETCH = 2
    MIGRATION = 3
    CHECKPOINT = 4
    WEIGHT_LOADING = 5
    STAGING_INTERNAL = 6


@_export
class SegmentInfoType(_enum.IntEnum):
    Memory = 0
    File = 1


def _segment_info(info):
    return _tent.SegmentInfo((SegmentInfoType(info.type), info.buffers))


SegmentInfo = _tent.SegmentInfo


class Request:
    """One transfer, with TENT's fields and defaults: ``source`` is a local
    registered address (or an object with the buffer protocol or
    data_ptr()), ``target_offset`` an address inside the target segment's
    buffers.  ``policy_name`` picks the configured policy rule of that
    name ahead of every filter (a name no rule has fails the submit);
    ``intent_type`` (an IntentType) is matched by rules that name an
    intent; ``deadline_ns`` (an absolute time.monotonic_ns() value, 0 for
    none) is carried to the engine."""

    __slots__ = ("opcode", "source", "target_id", "target_offset", "length",
                 "priority", "transport_hint", "policy_name", "deadline_ns",
                 "intent_type")

    def __init__(self, opcode=OpCode.WRITE, source=0, target_id=0,
                 target_offset=0, length=0, priority=PRIO_HIGH,
                 transport_hint=TransportType.UNSPEC, policy_name=None,
                 deadline_ns=0, intent_type=IntentType.INTENT_UNSPEC):
        self.opcode = opcode
        self.source = source
        self.target_id = target_id
        self.target_offset = target_offset
        self.length = length
        self.priority = priority
        self.transport_hint = transport_hint
        self.policy_name = policy_name
        self.deadline_ns = deadline_ns
        self.intent_type = intent_type

    def __repr__(self):
        return ("Request(opcode=%r, source=%#x, target_id=%r, "
                "target_offset=%#x, length=%r)" %
                (self.opcode, int(self.source) if isinstance(self.source, int)
                 else 0, self.target_id, self.target_offset, self.length))


class MemoryOptions:
    """Options of the _ex allocation and registration calls (TENT's
    fields and defaults)."""

    __slots__ = ("location", "perm", "type", "shm_path", "shm_offset",
                 "internal")

    def __init__(self, location=kWildcardLocation,
                 perm=Permission.GlobalReadWrite, type=TransportType.UNSPEC,
                 shm_path="", shm_offset=0, internal=False):
        self.location = location
        self.perm = perm
        self.type = type
        self.shm_path = shm_path
        self.shm_offset = shm_offset
        self.internal = internal


class MemoryGuard:
    """Memory from allocate_local_memory, freed when the guard is released
    or collected; ``with engine.allocate_memory_guard(n) as addr:`` gives
    the address, as in TENT."""

    def __init__(self, engine, size, location=kWildcardLocation, ex=False):
        self._engine = engine
        self._size = size
        alloc = (engine.allocate_local_memory_ex if ex
                 else engine.allocate_local_memory)
        self._addr = alloc(size, location)

    def address(self):
        return self._addr

    def size(self):
        return self._size

    def get(self):
        return self._addr

    def release(self):
        if self._addr:
            addr, self._addr = self._addr, 0
            self._engine.free_local_memory(addr)

    def __enter__(self):
        return self._addr

    def __exit__(self, *exc):
        self.release()
        return False

    def __del__(self):
        try:
            self.release()
        except Exception:  # the engine is closed: its memory went with it
            pass


class BatchGuard:
    """A transfer batch, freed when the guard is released or collected;
    ``with engine.allocate_batch_guard(n) as bid:`` gives the batch id, as
    in TENT."""

    def __init__(self, engine, batch_size):
        self._engine = engine
        self._id = engine.allocate_transfer_batch(batch_size)

    def id(self):
        return self._id

    def get(self):
        return self._id

    def release(self):
        if self._id:
            bid, self._id = self._id, 0
            self._engine.free_transfer_batch(bid)

    def __enter__(self):
        return self._id

    def __exit__(self, *exc):
        self.release()
        return False

    def __del__(self):
        try:
            self.release()
        except Exception:  # the engine is closed: its batches went with it
            pass


def _numa_nodes():
    nodes = []
    for path in _glob.glob("/sys/devices/system/node/node[0-9]*"):
        m = _re.search(r"node(\d+)$", path)
        if m:
            nodes.append(int(m.group(1)))
    return sorted(nodes) or [0]


def _local_topology():
    """TENT's native topology JSON ({"nics", "mems"}, device lists by rank
    0/1/2): no RDMA NICs here (the tcp transport's NICs are in
    get_nic_load_stats()), one host memory entry per NUMA node."""
    mems = [{"name": "cpu:%d" % n, "pci_bus_id": "", "type": 0,
             "numa_node": n,
             "device_list": {"rank0": [], "rank1": [], "rank2": []}}
            for n in _numa_nodes()]
    return _json.dumps({"nics": [], "mems": mems}, indent=4)


def _memfabric_asked(config_path):
    """The configuration (config_path, else MC_TENT_CONF: the only ways
    this module enables a transport) and whether it enables memfabric."""
    import os
    path = config_path or os.environ.get("MC_TENT_CONF")
    try:
        with open(path) as f:
            conf = _json.load(f)
        asked = conf["transports"]["memfabric"]["enable"] is True
    except (TypeError, OSError, ValueError, KeyError):
        return None, False
    return conf, asked


def _require_memfabric(eng, config_path):
    """A configuration that enables memfabric fails the constructor when
    memfabric did not install (tcp running beside it hid that), with the
    transport's own error (the seed's words), as mooncake.engine's
    initialize and the classic API do.  The cause comes from an engine
    with memfabric alone (p2p, an ephemeral port, no metrics endpoint);
    with metrics disabled the engine's log is the only word."""
    import os
    import tempfile
    conf, asked = _memfabric_asked(config_path)
    if not asked:
        return
    try:
        fam = {f["name"]: f for f in eng.metrics_json()["families"]}
        have = {s["labels"]["transport"]
                for s in fam["tent_tasks_in_flight"]["series"]}
    except Exception:
        return  # metrics disabled: nothing tells which transports run
    if "memfabric" in have:
        return
    probe = dict(conf)
    xports = dict(probe.get("transports") or {})
    for name in ("tcp", "shm"):
        xports[name] = dict(xports.get(name) or {}, enable=False)
    probe["transports"] = xports
    probe["metadata_type"] = "p2p"
    probe["rpc_server_port"] = 0
    probe["metrics"] = {"enabled": False}
    for key in ("metadata_servers", "local_segment_name",
                "rpc_server_port_range"):
        probe.pop(key, None)
    why = "transport 'memfabric' could not be installed (see the engine log)"
    fd, tmp = tempfile.mkstemp(suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            _json.dump(probe, f)
        try:
            _tent.TransferEngine(tmp).close()
        except Exception as e:  # the transport's error
            why = str(e)
    finally:
        os.unlink(tmp)
    eng.close()
    raise InternalError("TransferEngine(): " + why)


class TransferEngine(_tent.TransferEngine):
    """TransferEngine(config_path=None): TENT's transfer engine.

    config_path names a JSON config for this engine; without it the engine
    reads MC_TENT_CONF (or runs on defaults).  A transport the config
    enables that cannot install (memfabric without libmf_smem.so or
    MF_PROTOCOL) makes the constructor raise with its cause.

    Threads: methods may be called from several threads at once, and
    close() may race them: calls already inside the engine finish first,
    later ones raise RuntimeError.  (The C API's tent_destroy_engine has
    no such guard.)

    free_transfer_batch() is TENT's lazy free: it succeeds while tasks are
    still in flight, and they may still write into the destination memory
    after it returns; wait for every task to finish before reusing or
    releasing that memory."""

    def __init__(self, config_path=None):
        super().__init__(config_path)
        _require_memfabric(self, config_path)

    def allocate_memory_guard(self, size, location=kWildcardLocation):
        return MemoryGuard(self, size, location)

    def allocate_memory_guard_ex(self, size, options):
        return MemoryGuard(self, size, options, ex=True)

    def allocate_batch_guard(self, batch_size):
        return BatchGuard(self, batch_size)

    def get_segment_info(self, handle):
        return _segment_info(super().get_segment_info(handle))

    def get_local_topology(self):
        """Local topology as TENT's native JSON (nics/mems with
        rank0/1/2)."""
        self.available()  # raises on a closed engine
        return _local_topology()


def mf_host_library():
    """Path of the host-memory libmf_smem.so (mf_host) shipped with this
    package, or None.  It runs the memfabric transport without an NPU:
    ``MF_SMEM_LIBRARY=<this path> MF_PROTOCOL=host_tcp``."""
    import os
    p = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mf_host",
                     "libmf_smem.so")
    return p if os.path.exists(p) else None


from . import mooncake as _mooncake  # noqa: E402

_tent._set_notification_types(Notification, _mooncake.TransferNotify)

__all__ = [n for n in dir() if not n.startswith("_")]

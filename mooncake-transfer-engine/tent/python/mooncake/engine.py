"""``mooncake.engine`` over TENT in C: TransferEngine, TransferOpcode,
TransferNotify and the rest of Mooncake's engine module, from
``tent.mooncake``."""
from tent.mooncake import *  # noqa: F401,F403
from tent.mooncake import __all__  # noqa: F401

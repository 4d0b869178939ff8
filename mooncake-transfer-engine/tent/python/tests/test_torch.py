"""Two processes with torch tensors as buffers (registered through
data_ptr()/nbytes, passed whole or as slices to transfer calls); every byte
checked.  Skipped, with the reason, when torch is not installed."""
import numpy as np
import pytest

import xfer
from conftest import PROTOS, mooncake_engine, tent_engine

torch = pytest.importorskip("torch", reason="python3-torch is not installed")


def nbytes(t):
    return t.numel() * t.element_size()  # Tensor.nbytes is torch >= 2.1


@pytest.mark.parametrize("proto", PROTOS)
def test_mooncake_torch(peer_factory, proto):
    peer = peer_factory(proto=proto, buf="torch")
    eng = mooncake_engine(proto)
    t = torch.zeros(peer.size, dtype=torch.uint8)
    assert eng.register_memory(t, nbytes(t)) == 0, eng.last_error()
    xfer.mooncake_roundtrip(eng, peer, t.numpy(), t.data_ptr(), seed=21)
    assert eng.unregister_memory(t) == 0
    eng.close()


@pytest.mark.parametrize("proto", PROTOS)
def test_mooncake_torch_slices(peer_factory, proto):
    """Tensor slices (data_ptr() inside the registered tensor) as buffers."""
    peer = peer_factory(proto=proto, buf="torch")
    eng = mooncake_engine(proto)
    t = torch.zeros(peer.size, dtype=torch.uint8)
    assert eng.batch_register_memory([t], [nbytes(t)]) == 0
    peer.fill(1)
    src = torch.from_numpy(xfer.tentenv.pattern(2, peer.size))
    t.copy_(src)
    half = peer.size // 2
    assert eng.transfer_sync_write(peer.session, t[:half], peer.addr,
                                   half) == 0, eng.last_error()
    assert eng.batch_transfer_sync_write(
        peer.session, [t[half:half + 4096], t[half + 8192:]],
        [peer.addr + half, peer.addr + half + 8192],
        [4096, peer.size - half - 8192]) == 0, eng.last_error()
    mirror = xfer.tentenv.pattern(2, peer.size)
    mirror[half + 4096:half + 8192] = xfer.tentenv.pattern(1, peer.size)[
        half + 4096:half + 8192]
    assert peer.sha() == xfer.sha(mirror)
    t.zero_()
    assert eng.transfer_sync_read(peer.session, t, peer.addr,
                                  peer.size) == 0, eng.last_error()
    assert np.array_equal(t.numpy(), mirror)
    # A non-contiguous tensor is refused before anything moves.
    with pytest.raises(ValueError):
        eng.transfer_sync_write(peer.session, t.view(-1, 2)[:, 0],
                                peer.addr, 16)
    assert eng.batch_unregister_memory([t]) == 0
    eng.close()


@pytest.mark.parametrize("proto", PROTOS)
def test_tent_torch(peer_factory, proto):
    peer = peer_factory(api="tent", proto=proto)
    eng = tent_engine(proto)
    t = torch.zeros(peer.size, dtype=torch.uint8)
    eng.register_local_memory(t, nbytes(t))
    xfer.tent_roundtrip(eng, peer, t.numpy(), t.data_ptr(), seed=23)
    eng.unregister_local_memory(t)
    eng.close()


def test_registration_keeps_tensor_alive(peer_factory):
    """A tensor dropped by the program stays valid while registered."""
    import gc
    import weakref
    eng = mooncake_engine("tcp")
    t = torch.ones(1 << 16, dtype=torch.uint8)
    addr = t.data_ptr()
    ref = weakref.ref(t)
    assert eng.register_memory(t, nbytes(t)) == 0
    del t
    gc.collect()
    assert ref() is not None
    assert eng.unregister_memory(addr) == 0
    gc.collect()
    assert ref() is None
    eng.close()

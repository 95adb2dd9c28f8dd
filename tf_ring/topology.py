"""Where this process sits in the job: rank, size and the host layout,
read from the running engine. The lowest Python layer above the library:
basics, process sets and the ops all read it, and it imports none of them."""
import ctypes

from tf_ring._library import C_API


class NotInitializedError(ValueError):
    """Raised by topology queries made before tf_ring.init()."""


def is_initialized():
    return bool(C_API.tf_ring_is_initialized())


def _topology():
    values = (ctypes.c_int * 7)()
    if C_API.tf_ring_topology(values) != 0:
        raise NotInitializedError("tf_ring is not initialized: call tf_ring.init() first.")
    return list(values)


def rank():
    """This process's rank, 0 to size()-1."""
    return _topology()[0]


def size():
    """Number of ranks in the job."""
    return _topology()[1]


def local_rank():
    """Rank among the processes on this node."""
    return _topology()[2]


def local_size():
    """Number of ranks on this node."""
    return _topology()[3]


def cross_rank():
    """Index of this node among nodes (ranks with this local rank)."""
    return _topology()[4]


def cross_size():
    """Number of nodes (ranks with this local rank)."""
    return _topology()[5]


def is_homogeneous():
    """True when every node runs the same number of ranks."""
    return bool(_topology()[6])

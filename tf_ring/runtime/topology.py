"""Where this process sits in the job: rank, size and the host layout,
read from the running engine. The lowest Python layer above the library:
basics, process sets and the ops all read it, and it imports none of them."""
from tf_ring.runtime._library import ENGINE


class NotInitializedError(ValueError):
    """Raised by topology queries made before tf_ring.init()."""


def is_initialized():
    return ENGINE.is_initialized()


def _topology():
    """{rank, size, local_rank, local_size, cross_rank, cross_size, homogeneous}."""
    topology = ENGINE.topology()
    if topology is None:
        raise NotInitializedError("tf_ring is not initialized: call tf_ring.init() first.")
    return topology


def rank():
    """This process's rank, 0 to size()-1."""
    return _topology()["rank"]


def size():
    """Number of ranks in the job."""
    return _topology()["size"]


def local_rank():
    """Rank among the processes on this node."""
    return _topology()["local_rank"]


def local_size():
    """Number of ranks on this node."""
    return _topology()["local_size"]


def cross_rank():
    """Index of this node among nodes (ranks with this local rank)."""
    return _topology()["cross_rank"]


def cross_size():
    """Number of nodes (ranks with this local rank)."""
    return _topology()["cross_size"]


def is_homogeneous():
    """True when every node runs the same number of ranks."""
    return _topology()["homogeneous"]

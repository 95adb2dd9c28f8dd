"""broadcast_object and allgather_object: any picklable Python object.

Objects are pickled (with cloudpickle when installed, so lambdas and local
classes work) into uint8 tensors; a length goes first so receivers can size
their buffers.
"""
import pickle

import numpy as np
import tensorflow as tf

from tf_ring.collectives._eager_names import eager_name
from tf_ring.runtime.basics import rank
from tf_ring.collectives.ops import allgather, broadcast
from tf_ring.runtime.process_set import global_process_set

try:
    import cloudpickle as _pickler
except ImportError:  # plain pickle covers everything but lambdas and local classes
    _pickler = pickle


def _to_bytes(obj):
    return np.frombuffer(_pickler.dumps(obj), dtype=np.uint8)


def _from_bytes(array):
    return pickle.loads(np.asarray(array, dtype=np.uint8).tobytes())


def _run_eagerly(fn):
    """Runs `fn` now and returns NumPy results, also from inside graphs or
    with eager execution disabled (v1), where it uses a private session."""
    with tf.init_scope():
        if tf.executing_eagerly():
            return tf.nest.map_structure(lambda t: t.numpy(), fn())
    with tf.Graph().as_default() as graph:
        outputs = fn()
        with tf.compat.v1.Session(graph=graph) as session:
            return session.run(outputs)


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Returns root_rank's `obj` on every rank (the root gets its own object
    back); with `process_set`, on that set's ranks (root_rank a global rank)."""
    name = name or eager_name("broadcast_object", "")
    is_root = rank() == root_rank
    payload = _to_bytes(obj) if is_root else None

    length = _run_eagerly(lambda: broadcast(
        tf.constant([payload.size if is_root else 0], tf.int64), root_rank, name=name + ".length",
        process_set=process_set))
    received = _run_eagerly(lambda: broadcast(
        tf.constant(payload if is_root else np.zeros(int(length[0]), np.uint8)), root_rank,
        name=name + ".data", process_set=process_set))
    return obj if is_root else _from_bytes(received)


def allgather_object(obj, name=None, process_set=global_process_set):
    """Returns a list with every rank's `obj`, in rank order (of the ranks of
    `process_set`, when given)."""
    name = name or eager_name("allgather_object", "")
    payload = _to_bytes(obj)
    lengths = _run_eagerly(lambda: allgather(tf.constant([payload.size], tf.int64),
                                             name=name + ".lengths", process_set=process_set))
    data = _run_eagerly(lambda: allgather(tf.constant(payload), name=name + ".data",
                                          process_set=process_set))
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    return [_from_bytes(data[offsets[r]:offsets[r + 1]]) for r in range(len(lengths))]


def broadcast_object_fn(root_rank=0, session=None, name=None, process_set=global_process_set):
    """Returns a function `bcast(obj)` that returns root_rank's `obj` on every
    rank, for broadcasting objects repeatedly (e.g. once per epoch).

    Every rank calls the returned function the same number of times. `session`
    is accepted for Horovod's v1 code and not needed: the broadcast runs at
    once, also from inside graphs, like broadcast_object.
    """
    del session

    def bcast(obj):  # unnamed, named after the thread each call runs in
        return broadcast_object(obj, root_rank=root_rank,
                                name=name or eager_name("broadcast_object_fn", ""),
                                process_set=process_set)

    return bcast

"""Inputs the XLA rank files share (xla_cases.py, xla_agreement_cases.py):
each rank's tensor, every rank's as NumPy, and the engine's reducescatter split."""
import numpy as np
import tensorflow as tf

import tf_ring as hvd


def rank_input(dtype, rank, shape=(3, 4)):
    base = np.arange(np.prod(shape)).reshape(shape) % 7 + 1
    return tf.constant(base * (rank + 1), dtype=dtype)


def all_inputs(dtype):
    return [rank_input(dtype, r).numpy().astype(np.float64) for r in range(hvd.size())]


def block_of(rows, rank, size):
    """The engine's reducescatter split: the first rows % size ranks get one more row."""
    sizes = [rows // size + (1 if r < rows % size else 0) for r in range(size)]
    start = sum(sizes[:rank])
    return slice(start, start + sizes[rank])

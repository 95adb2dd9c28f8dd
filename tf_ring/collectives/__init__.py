"""The collectives as TensorFlow ops (allreduce, allgather, broadcast,
alltoall, reducescatter, their grouped forms, join, barrier) and what is
built on them alone: variables' and objects' broadcasts, compression, the
ops' gradients. Built on tf_ring.runtime; knows nothing of training.

Nothing is imported here: `import tf_ring` loads these modules on first use.
"""

"""tf_ring.Compression: the collectives' casts (none, fp16, bf16) and
powersgd, which compresses the gradients of variables with state of its own
and so is taken by the gradient reducer only (see docs/compression.md)."""
from tf_ring.collectives import compression
from tf_ring.training.powersgd import PowerSGD


class Compression(compression.Compression):
    """The compression choices, with Horovod's names; bf16 and powersgd are tf_ring's.

    powersgd(rank=1, start_powerSGD_iter=1000, ...) returns a PowerSGD
    settings object (tf_ring/training/powersgd.py) for DistributedOptimizer
    and DistributedGradientTape.
    """
    powersgd = PowerSGD

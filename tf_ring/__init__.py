"""tf_ring: Horovod-style ring-allreduce data-parallel training for TensorFlow.

Migration from Horovod is one line: ``import tf_ring as hvd``.
"""
from tf_ring.basics import (NotInitializedError, build_info, cross_rank, cross_size, init,
                            is_initialized, local_rank, local_size, mpi_built,
                            mpi_threads_supported, nccl_built, rank, reset_stats, shutdown, size,
                            stats, engine_params)
from tf_ring.ops import Average, Max, Min, Product, Sum, allgather, allreduce, broadcast
from tf_ring.compression import Compression
from tf_ring.distributed_optimizer import DistributedOptimizer
from tf_ring.exchange import alltoall, reducescatter
from tf_ring.grouped import grouped_allreduce
from tf_ring.hooks import BroadcastGlobalVariablesHook
from tf_ring.join import join
from tf_ring.timeline_control import start_timeline, stop_timeline
from tf_ring.objects import allgather_object, broadcast_object
from tf_ring.tape import DistributedGradientTape
from tf_ring.variables import broadcast_variables
from tf_ring import _gradients  # noqa: F401  (registers the gradients)

__version__ = build_info().get("tf_ring_version", "unknown")

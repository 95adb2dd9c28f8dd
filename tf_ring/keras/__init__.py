"""tf_ring for Keras 3 and tf_keras, with Horovod's names: `import tf_ring.keras as hvd`.

The Keras flavour follows tf.keras: legacy tf_keras when TF_USE_LEGACY_KERAS=1,
Keras 3 otherwise. DistributedOptimizer picks its behaviour from the optimizer
it is given.
"""
# The collectives' gradients (SyncBatchNormalization and user code differentiate
# through allreduce); `import tf_ring.keras` alone must register them too.
import tf_ring.collectives._gradients  # noqa: F401
from tf_ring.runtime.basics import (cross_rank, cross_size, init, is_initialized, local_rank,
                                    local_size, mpi_built, mpi_threads_supported, nccl_built, rank,
                                    shutdown, size)
from tf_ring.collectives.ops import Average, Max, Min, Product, Sum, allgather, allreduce, broadcast
from tf_ring.training.compression import Compression
from tf_ring.collectives.joining import join
from tf_ring.collectives.exchange import reducescatter
from tf_ring.collectives.variables import broadcast_global_variables
from tf_ring.collectives.objects import allgather_object, broadcast_object
from tf_ring.keras import callbacks
from tf_ring.keras import elastic
from tf_ring.keras._optimizer import DistributedOptimizer, PartialDistributedOptimizer
from tf_ring.keras._load import load_model
from tf_ring.keras._sync_batch_norm import SyncBatchNormalization

__all__ = ["Compression", "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
           "cross_rank", "cross_size", "mpi_built", "nccl_built", "mpi_threads_supported",
           "Average", "Sum", "Min", "Max", "Product", "allreduce", "allgather", "broadcast",
           "broadcast_object", "allgather_object", "join", "reducescatter", "broadcast_global_variables",
           "DistributedOptimizer", "PartialDistributedOptimizer", "SyncBatchNormalization", "load_model", "callbacks",
           "elastic"]

# Horovod's Adasum op and build queries, as horovod.tensorflow.keras has them.
from tf_ring.collectives.ops import Adasum  # noqa: E402
from tf_ring.runtime.basics import (ccl_built, cuda_built, ddl_built, gloo_built, gloo_enabled,  # noqa: E402
                                    mpi_enabled, rocm_built)

__all__ += ["Adasum", "ccl_built", "cuda_built", "ddl_built", "gloo_built", "gloo_enabled",
            "mpi_enabled", "rocm_built"]

# Process sets, as horovod.tensorflow.keras has them (see docs/process-sets.md).
from tf_ring.runtime.process_set import (ProcessSet, add_process_set, global_process_set,  # noqa: E402
                                         remove_process_set)

__all__ += ["ProcessSet", "add_process_set", "global_process_set", "remove_process_set"]

# What scripts moving from horovod.tensorflow.keras reach for in custom loops:
# the same objects as tf_ring's (one engine, one barrier).
from tf_ring.collectives.runtime_ops import barrier  # noqa: E402
from tf_ring.collectives.variables import broadcast_variables  # noqa: E402
from tf_ring.training.tape import DistributedGradientTape, PartialDistributedGradientTape  # noqa: E402

__all__ += ["barrier", "broadcast_variables", "DistributedGradientTape",
            "PartialDistributedGradientTape"]

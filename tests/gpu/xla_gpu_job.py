"""Under tfringrun --share-gpu: tf_ring collectives inside a
jit_compile=True step on a GPU, through the "CUDA" XLA handler and the
engine's NCCL path, checked against NumPy on every rank."""
import numpy as np
import tensorflow as tf

import tf_ring as hvd

hvd.init()
rank, size = hvd.rank(), hvd.size()
inputs = [np.random.default_rng(r).standard_normal((1000, 3)).astype(np.float32) for r in range(size)]


@tf.function(jit_compile=True)
def step(x):
    summed = hvd.allreduce(x, op=hvd.Sum, name="xla_gpu.sum")
    grouped = hvd.grouped_allreduce([x, 2.0 * x], op=hvd.Average, name="xla_gpu.group")
    gathered = hvd.allgather(x[:2], name="xla_gpu.gather")
    return summed, grouped, gathered


with tf.device("/GPU:0"):
    x = tf.constant(inputs[rank])
    hlo = step.experimental_get_compiler_ir(x)(stage="hlo")
    assert "tf_ring_collective" in hlo, "the step did not compile the collectives"
    for _ in range(3):  # the response cache's path too
        summed, grouped, gathered = step(x)
assert "GPU" in summed.device, summed.device
total = sum(inputs)
np.testing.assert_allclose(summed.numpy(), total, rtol=1e-5, atol=1e-5)
np.testing.assert_allclose(grouped[0].numpy(), total / size, rtol=1e-5, atol=1e-5)
np.testing.assert_allclose(grouped[1].numpy(), 2 * total / size, rtol=1e-5, atol=1e-5)
np.testing.assert_array_equal(gathered.numpy(), np.concatenate([a[:2] for a in inputs]))
print("XLA_GPU_OK rank=%d" % rank, flush=True)

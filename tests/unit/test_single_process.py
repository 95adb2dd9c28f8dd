"""Behaviour without the launcher and before init, each in a fresh process."""
import subprocess
import sys
import textwrap

import pytest

from conftest import REPO


def run_python(code, timeout=120):
    env_code = "import os; os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')\n"
    return subprocess.run([sys.executable, "-c", env_code + textwrap.dedent(code)], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


def test_plain_python_is_one_rank():
    result = run_python("""
        import tensorflow as tf, tf_ring as hvd
        hvd.init()
        assert (hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size()) == (0, 1, 0, 1)
        print(hvd.allreduce(tf.constant([2.0, 4.0])).numpy().tolist(),
              hvd.allgather(tf.constant([[1, 2]])).numpy().tolist(),
              hvd.broadcast(tf.constant(3), 0).numpy(), hvd.join())
    """)
    assert result.returncode == 0, result.stderr
    assert "[2.0, 4.0] [[1, 2]] 3 0" in result.stdout


def test_op_before_init_says_to_call_init():
    result = run_python("""
        import tensorflow as tf, tf_ring as hvd
        try:
            hvd.allreduce(tf.constant([1.0]))
        except tf.errors.FailedPreconditionError as e:
            print("ERROR:", e)
        try:
            hvd.rank()
        except hvd.NotInitializedError as e:
            print("RANK:", e)
    """)
    assert result.returncode == 0, result.stderr
    assert "ERROR:" in result.stdout and "call tf_ring.init()" in result.stdout
    assert "RANK:" in result.stdout and "call tf_ring.init()" in result.stdout


def test_op_after_shutdown_fails_clearly_and_init_twice_is_noop():
    result = run_python("""
        import tensorflow as tf, tf_ring as hvd
        hvd.init(); hvd.init()
        assert hvd.is_initialized()
        hvd.shutdown()
        assert not hvd.is_initialized()
        try:
            hvd.allreduce(tf.constant([1.0]))
        except tf.errors.FailedPreconditionError as e:
            print("ERROR:", e)
    """)
    assert result.returncode == 0, result.stderr
    assert "has been shut down" in result.stdout


def test_mpi4py_first_and_communicator_argument():
    result = run_python("""
        from mpi4py import MPI
        import tensorflow as tf, tf_ring as hvd
        hvd.init(comm=MPI.COMM_WORLD)
        print("size", hvd.size(), hvd.allreduce(tf.constant([5.0]), op=hvd.Sum).numpy().tolist())
    """)
    assert result.returncode == 0, result.stderr
    assert "size 1 [5.0]" in result.stdout


def test_the_ops_and_the_python_module_share_one_engine():
    """tf_ring/_tf_ring.so is both TensorFlow's op library and the pybind11
    module: init() through the module starts the engine the ops submit to."""
    result = run_python("""
        import os, tensorflow as tf, tf_ring as hvd
        from tf_ring.runtime import _library
        engine = _library.ENGINE
        assert engine.__name__ == "tf_ring._tf_ring", engine.__name__
        assert os.path.samefile(engine.__file__, _library.LIBRARY_PATH)
        assert not engine.is_initialized()
        engine.init(None)
        assert hvd.is_initialized() and engine.topology()["size"] == 1
        before = engine.stats()["tensors"]
        for i in range(3):
            hvd.allreduce(tf.ones([4]), name="one.engine.%d" % i)
        print("counted", engine.stats()["tensors"] - before, hvd.stats()["bytes"])
        engine.shutdown()
        assert not hvd.is_initialized()
    """)
    assert result.returncode == 0, result.stderr
    assert "counted 3 48" in result.stdout


def test_version_mismatch_refuses_with_rebuild_hint():
    from tf_ring.runtime import _library
    with pytest.raises(ImportError) as info:
        _library._check_tensorflow_version({"tf_version": "0.0.1"})
    message = str(info.value)
    assert "built against TensorFlow 0.0.1" in message
    assert "pip install --no-build-isolation --force-reinstall" in message


@pytest.mark.parametrize("legacy", ["0", "1"], ids=["keras3", "tf_keras"])
def test_sync_batch_norm_at_top_level_loads_keras_only_when_asked(legacy):
    """Horovod has SyncBatchNormalization in horovod.tensorflow too; here it is
    tf_ring.keras's class (of the Keras flavour in use), and the collectives
    alone never import the Keras side."""
    result = run_python("""
        import os, sys
        os.environ["TF_USE_LEGACY_KERAS"] = "%s"
        import tensorflow as tf, tf_ring as hvd
        hvd.allreduce, hvd.DistributedGradientTape
        print("before:", "tf_ring.keras" in sys.modules)
        import tf_ring.keras
        assert hvd.SyncBatchNormalization is tf_ring.keras.SyncBatchNormalization
        assert isinstance(hvd.SyncBatchNormalization(axis=1), tf.keras.layers.BatchNormalization)
        assert "SyncBatchNormalization" in hvd.__all__
        print("ok")
    """ % legacy)
    assert result.returncode == 0, result.stderr
    assert "before: False" in result.stdout and "ok" in result.stdout


def test_one_process_sparse_adam_follows_plain_keras():
    """Without the launcher (one rank), an Embedding's IndexedSlices reach the
    wrapped Adam as they reach plain Keras's: the same weights after 30 steps
    (tests/parallel/ranks/keras_sparse_cases.py; 2 and 3 ranks in the Keras groups)."""
    result = run_python("""
        import sys
        sys.path.insert(0, "tests/parallel/ranks")
        import keras, tf_ring as hvd
        import keras_sparse_cases as cases
        hvd.init()
        adam = lambda: keras.optimizers.Adam(cases.LR)
        for mode in ("fit", "loop"):
            cases.check_sparse_adam_trajectory(keras, adam, mode, dense_differs=True)
        cases.check_sparse_adam_under_loss_scaling(keras, adam)
        print("sparse trajectories match")
    """, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "sparse trajectories match" in result.stdout


def test_collectives_of_eager_tensors_captured_by_a_tf_function():
    """An eager tensor made outside a tf.function and used in it has no
    Tensor.name under eager execution; the automatic name must not read it."""
    result = run_python("""
        import tensorflow as tf, tf_ring as hvd
        hvd.init()
        x, y = tf.constant([1.0, 2.0]), tf.constant([[3, 4]])

        @tf.function
        def step():
            return (hvd.allreduce(x), hvd.allreduce(x, op=hvd.Sum), hvd.broadcast(x, 0),
                    hvd.allgather(y), hvd.reducescatter(x))

        print("OUT", [t.numpy().tolist() for t in step()])
    """)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "OUT [[1.0, 2.0], [1.0, 2.0], [1.0, 2.0], [[3, 4]], [1.0, 2.0]]" in result.stdout


def test_one_process_sharded_state_follows_plain_keras():
    """DistributedOptimizer(shard_state=True) without the launcher: one rank
    owns every row; the step (reduce-scatter, sparse rows, allgather) still
    runs and ends where plain Keras does
    (tests/parallel/ranks/mpi_keras_sharded.py runs on 2 and 3 ranks)."""
    result = run_python("""
        import sys
        sys.path.insert(0, "tests/parallel/ranks")
        import tf_ring as hvd
        import mpi_keras_sharded as cases
        hvd.init()
        cases.test_sharded_adam_follows_plain_keras("embedding", "loop")
        cases.test_sharded_adam_follows_plain_keras("mlp", "fit")
        cases.test_sharded_state_is_this_ranks_share()
        print("sharded trajectories match")
    """, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "sharded trajectories match" in result.stdout

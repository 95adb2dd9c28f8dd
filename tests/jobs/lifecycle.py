"""Job for test_reliability: the engine's lifecycle on every rank of a real
job. Each check prints one "rank R: CHECK: text" line that the test reads;
a check that goes wrong raises, which fails the job."""
import tensorflow as tf

import tf_ring as hvd

me = "rank ?"


def report(check, text):
    print("%s: %s: %s" % (me, check, text), flush=True)


# Before init(): a collective and a topology query both say what to do.
try:
    hvd.allreduce(tf.ones(2), name="too_early")
    raise SystemExit("allreduce before init() did not fail")
except tf.errors.FailedPreconditionError as e:
    early_op = e.message
try:
    hvd.size()
    raise SystemExit("size() before init() did not fail")
except hvd.NotInitializedError as e:
    early_topology = str(e)

hvd.init()
hvd.init()  # a no-op: same engine, same topology
me = "rank %d" % hvd.rank()
report("BEFORE_INIT_OP", early_op)
report("BEFORE_INIT_TOPOLOGY", early_topology)
total = hvd.allreduce(tf.constant(float(hvd.rank())), op=hvd.Sum, name="after_double_init")
report("DOUBLE_INIT_SUM", "%g" % total.numpy())


# Unsupported dtypes are rejected while the graph is built, before anything
# reaches the engine.
@tf.function
def reduce_complex(x):
    return hvd.allreduce(x, name="complex_grads")


for dtype, fn in ((tf.complex64, lambda: reduce_complex.get_concrete_function(
        tf.TensorSpec([2], tf.complex64))),
                  (tf.string, lambda: hvd.allgather(tf.constant(["a", "b"]), name="strings"))):
    try:
        fn()
        raise SystemExit("%s was accepted" % dtype.name)
    except TypeError as e:
        # Inside tf.function TensorFlow prefixes the traceback of user code.
        report("BAD_DTYPE_" + dtype.name.upper(),
               next(line.strip() for line in str(e).splitlines() if "tf_ring." in line))

hvd.shutdown()
try:
    hvd.allreduce(tf.ones(2), name="too_late")
    raise SystemExit("allreduce after shutdown() did not fail")
except tf.errors.FailedPreconditionError as e:
    report("AFTER_SHUTDOWN", e.message)

# A fresh engine on every rank works like the first.
hvd.init()
total = hvd.allreduce(tf.constant(1.0), op=hvd.Sum, name="after_reinit")
report("REINIT_SUM", "%g" % total.numpy())

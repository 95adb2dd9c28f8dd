"""Ranks that disagree about a tensor get an error on every rank that names
the tensor, what differs and on which ranks; nobody hangs, and the engine
keeps working afterwards. Disagreements raise FailedPreconditionError (as in
Horovod); one rank's bad argument raises InvalidArgumentError."""
import re

import numpy as np
import pytest
import tensorflow as tf

import tf_ring as hvd


def last_rank_differs():
    return hvd.rank() == hvd.size() - 1


def expect_error(fn, *fragments, error=tf.errors.FailedPreconditionError):
    with pytest.raises(error) as info:
        fn()
    message = str(info.value)
    for fragment in fragments:
        assert re.search(fragment, message), "%r not in %r" % (fragment, message)
    return message


def others():
    return ", ".join(str(r) for r in range(hvd.size() - 1))


def split(common, odd):
    """The text naming which ranks had which value, when the last rank alone
    differs: "<common> on rank(s) 0[, 1]; <odd> on rank N"."""
    return r"%s on ranks? %s; %s on rank %d" % (common, others(), odd, hvd.size() - 1)


def test_shape_mismatch_names_tensor_shapes_and_ranks():
    shape = (3,) if last_rank_differs() else (2,)
    last = hvd.size() - 1
    msg = expect_error(lambda: hvd.allreduce(tf.ones(shape), name="bad_shape"),
                       "bad_shape", "shape differs", r"\[2\] on ranks? %s" % others(),
                       r"\[3\] on rank %d" % last)
    assert "allreduce" in msg


def test_dtype_mismatch():
    dtype = tf.float64 if last_rank_differs() else tf.float32
    expect_error(lambda: hvd.allreduce(tf.ones(2, dtype), name="bad_dtype"),
                 "bad_dtype", "dtype differs", split("float32", "float64"))


def test_reduce_op_mismatch():
    op = hvd.Max if last_rank_differs() else hvd.Sum
    expect_error(lambda: hvd.allreduce(tf.ones(2), op=op, name="bad_op"),
                 "bad_op", "reduce op differs", split("Sum", "Max"))


def test_operation_mismatch():
    def call():
        if last_rank_differs():
            return hvd.broadcast(tf.ones(2), root_rank=0, name="bad_kind")
        return hvd.allreduce(tf.ones(2), name="bad_kind")
    expect_error(call, "bad_kind", "operation differs", split("allreduce", "broadcast"))


def test_scale_factor_mismatch():
    factor = 2.0 if last_rank_differs() else 1.0
    expect_error(lambda: hvd.allreduce(tf.ones(2), prescale_factor=factor, name="bad_scale"),
                 "bad_scale", "prescale factor differs", split("1", "2"))
    expect_error(lambda: hvd.allreduce(tf.ones(2), postscale_factor=factor, name="bad_post"),
                 "bad_post", "postscale factor differs", split("1", "2"))


def test_root_rank_mismatch_and_out_of_range():
    root = 1 if last_rank_differs() else 0
    expect_error(lambda: hvd.broadcast(tf.ones(2), root_rank=root, name="bad_root"),
                 "bad_root", "root rank differs", split("0", "1"))
    expect_error(lambda: hvd.broadcast(tf.ones(2), root_rank=hvd.size(), name="root_range"),
                 "root_range", "root rank %d is out of range" % hvd.size(),
                 error=tf.errors.InvalidArgumentError)


def test_allgather_trailing_dimension_mismatch():
    cols = 4 if last_rank_differs() else 3
    expect_error(lambda: hvd.allgather(tf.ones((2, cols)), name="bad_gather"),
                 "bad_gather", "shape after the first dimension differs", split(r"\[3\]", r"\[4\]"))


def test_engine_still_works_after_errors():
    out = hvd.allreduce(tf.constant([1.0, 2.0]), op=hvd.Sum, name="after_errors")
    np.testing.assert_allclose(out.numpy(), [hvd.size(), 2.0 * hvd.size()])


def test_error_inside_tf_function_raises_on_every_rank():
    @tf.function
    def step(x):
        return hvd.allreduce(x, name="fn_bad_shape")
    shape = (5,) if last_rank_differs() else (4,)
    expect_error(lambda: step(tf.ones(shape)), "fn_bad_shape", "shape differs",
                 split(r"\[4\]", r"\[5\]"))


def test_unsupported_dtype_is_rejected_before_running():
    with pytest.raises(TypeError, match="complex64 is not supported"):
        hvd.allreduce(tf.constant([1 + 2j], tf.complex64), name="complex")
    with pytest.raises(TypeError, match="string is not supported"):
        hvd.broadcast(tf.constant(["a"]), root_rank=0, name="strings")


def test_same_name_twice_in_flight_fails_on_the_ranks_that_repeat_it():
    # The last rank submits 'twice' only after the others have submitted it
    # twice ('twice.ready' waits for them), which holds the first 'twice' in
    # flight on every other rank while they submit it again.
    import threading
    import time
    results = {}
    if last_rank_differs():
        hvd.allreduce(tf.ones(1), name="twice.ready")
        results["first"] = hvd.allreduce(tf.ones(3), op=hvd.Sum, name="twice")
    else:
        taken = lambda: hvd.stats()["cache_hits"] + hvd.stats()["cache_misses"]  # noqa: E731
        before = taken()
        first = threading.Thread(
            target=lambda: results.update(first=hvd.allreduce(tf.ones(3), op=hvd.Sum, name="twice")))
        first.start()
        deadline = time.monotonic() + 60  # until the engine has taken the first 'twice'
        while taken() == before and time.monotonic() < deadline:
            time.sleep(0.005)
        with pytest.raises(tf.errors.InvalidArgumentError, match="'twice'.*already in flight"):
            hvd.allreduce(tf.ones(3), op=hvd.Sum, name="twice")
        hvd.allreduce(tf.ones(1), name="twice.ready")
        first.join()
    # The first submission was untouched by the rejected copy.
    np.testing.assert_allclose(results["first"].numpy(), np.full(3, hvd.size()))


def test_empty_and_scalar_tensors_everywhere():
    assert hvd.allreduce(tf.constant(2.0), op=hvd.Sum, name="scalar_sum").numpy() == 2.0 * hvd.size()
    assert hvd.broadcast(tf.constant(hvd.rank()), root_rank=0, name="scalar_bc").numpy() == 0
    assert hvd.allgather(tf.zeros((0, 5)), name="empty_ag").shape == (0, 5)
    assert hvd.broadcast(tf.zeros((0,)), root_rank=0, name="empty_bc").shape == (0,)

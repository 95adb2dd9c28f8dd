"""Static process sets: every collective restricted to a set, in eager,
tf.function and v1 graphs; each set's own cache and fusion; one set training
while another waits on a withheld tensor (the errors:
mpi_process_sets_errors.py). Expected values come from NumPy over the
members' known inputs. The sets of each world size: process_sets_cases.py.
"""
import threading

import numpy as np
import pytest
import tensorflow as tf

import tf_ring as hvd
from helpers import check_on_root, rank_input, timeline_events

# The sets, the engine restart and the per-test barrier: process_sets_cases.py,
# shared with mpi_process_sets_errors.py.
from process_sets_cases import SET_RANKS, STALL, in_step, mine, restart, sets  # noqa: E402,F401 - fixtures


def test_registration_ids_and_queries(sets):
    size, rank = hvd.size(), hvd.rank()
    assert [ps.process_set_id for ps in sets] == [1, 2, 3]
    assert hvd.process_sets() == [hvd.global_process_set] + sets
    assert hvd.global_process_set.ranks == list(range(size))
    assert repr(hvd.global_process_set) == \
        "ProcessSet(process_set_id=0, ranks=%s, mpi_comm=None)" % list(range(size))
    for ps, ranks in zip(sets, SET_RANKS[size]):
        assert ps.ranks == ranks and ps.size() == len(ranks)
        assert ps.included() is (rank in ranks)
        assert ps.rank() == (ranks.index(rank) if rank in ranks else -1)
        assert hvd.process_set_by_id(ps.process_set_id) is ps
        assert repr(ps) == "ProcessSet(process_set_id=%d, ranks=%s, mpi_comm=None)" % (
            ps.process_set_id, ranks)
        assert int(hvd.size_op(process_set_id=ps.process_set_id)) == len(ranks)
        included = tf.function(lambda i=ps.process_set_id: hvd.process_set_included_op(i))
        assert int(included()) == (rank in ranks)
    assert sets[0] != sets[1] and sets[0] == sets[0]


def test_process_set_from_an_mpi4py_communicator(sets):
    from mpi4py import MPI
    for ranks in SET_RANKS[hvd.size()]:
        member = hvd.rank() in ranks
        comm = MPI.COMM_WORLD.Split(0 if member else MPI.UNDEFINED, hvd.rank())
        if member:
            from_comm = hvd.ProcessSet(comm)
            assert from_comm.ranks == ranks and from_comm.mpi_comm is comm
            comm.Free()
        else:
            with pytest.raises(ValueError, match="not in the communicator"):
                hvd.ProcessSet(comm)


def expected_for(ps, shape, dtype, seed):
    return [rank_input(r, shape, dtype, seed) for r in ps.ranks]


def run_collectives(ps, seed):
    """Every collective on `ps`; returns (results, expected) as NumPy."""
    rank, members = hvd.rank(), ps.ranks
    me = rank_input(rank, (3, 4), tf.float32, seed)
    inputs = expected_for(ps, (3, 4), tf.float32, seed)
    root = members[-1]
    n = len(members)
    rows = [r % 3 + 1 for r in members]  # allgather: first dimension differs by rank
    # alltoall: member i sends i + j + 1 rows to member j
    splits = [ps.rank() + j + 1 for j in range(n)]
    a2a_in = np.full((sum(splits), 2), rank, np.int32)
    rs_rows = 2 * n + 1  # reducescatter: not divisible, the first members get the extra row
    rs_in = [rank_input(r, (rs_rows, 2), tf.float64, seed + 1) for r in members]
    counts = [rs_rows // n + (1 if i < rs_rows % n else 0) for i in range(n)]
    start = sum(counts[:ps.rank()])

    def body(me, a2a_in, rs_me):
        return [hvd.allreduce(me, op=hvd.Sum, process_set=ps, name="ps.sum"),
                hvd.allreduce(me, op=hvd.Average, process_set=ps, name="ps.avg"),
                hvd.allgather(tf.fill((rank % 3 + 1, 2), rank), process_set=ps, name="ps.ag"),
                hvd.broadcast(me, root_rank=root, process_set=ps, name="ps.bc"),
                hvd.alltoall(a2a_in, splits=splits, process_set=ps, name="ps.a2a")[0],
                hvd.reducescatter(rs_me, op=hvd.Sum, process_set=ps, name="ps.rs"),
                hvd.grouped_allreduce([me, 2 * me], op=hvd.Max, process_set=ps, name="ps.gar"),
                hvd.grouped_allgather([me[:1]], process_set=ps, name="ps.gag")[0],
                hvd.grouped_reducescatter([rs_me], op=hvd.Sum, process_set=ps, name="ps.grs")[0]]

    expected = [np.sum(inputs, 0), np.mean(inputs, 0),
                np.concatenate([np.full((k, 2), r, np.int32) for r, k in zip(members, rows)]),
                inputs[members.index(root)],
                np.concatenate([np.full((i + ps.rank() + 1, 2), r, np.int32)
                                for i, r in enumerate(members)]),
                np.sum(rs_in, 0)[start:start + counts[ps.rank()]],
                [np.max(inputs, 0), np.max(inputs, 0) * 2],
                np.concatenate([x[:1] for x in inputs]),
                np.sum(rs_in, 0)[start:start + counts[ps.rank()]]]
    rs_me = rank_input(rank, (rs_rows, 2), tf.float64, seed + 1)
    return body, (me, a2a_in, rs_me), expected


def check(results, expected):
    for got, want in zip(results, expected):
        if isinstance(want, list):
            check(got, want)
        else:
            np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5)


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_every_collective_per_set(sets, mode):
    for ps in mine(sets):
        body, args, expected = run_collectives(ps, seed=10 * ps.process_set_id)
        fn = tf.function(body) if mode == "function" else body
        check(fn(*args), expected)
        hvd.barrier(process_set=ps)


def test_v1_graph_per_set(sets):
    for ps in mine(sets):
        body, args, expected = run_collectives(ps, seed=7 + ps.process_set_id)
        with tf.Graph().as_default():
            outputs = body(*[tf.constant(a) for a in args])
            barrier = hvd.barrier(process_set=ps)
            with tf.compat.v1.Session() as session:
                check(session.run(outputs), expected)
                session.run(barrier)


def test_objects_and_variables_per_set(sets):
    rank = hvd.rank()
    for ps in mine(sets):
        root = ps.ranks[0]
        assert hvd.allgather_object({"r": rank}, process_set=ps) == [{"r": r} for r in ps.ranks]
        assert hvd.broadcast_object("from %d" % rank, root_rank=root, process_set=ps) == \
            "from %d" % root
        v = tf.Variable([float(rank), 1.0])
        hvd.broadcast_variables([v], root_rank=root, process_set=ps)
        np.testing.assert_array_equal(v.numpy(), [root, 1.0])
        w = tf.Variable([float(rank)])
        out = hvd.broadcast_([w], root_rank=ps.ranks[-1], process_set=ps)
        np.testing.assert_array_equal(out[0].numpy(), [ps.ranks[-1]])


def test_indexed_slices_average_over_the_set(sets):
    for ps in mine(sets):
        values = tf.constant(np.full((2, 3), hvd.rank() + 1.0, np.float32))
        slices = tf.IndexedSlices(values, tf.constant([hvd.rank(), 0]), tf.constant([4, 3]))
        out = hvd.allreduce(slices, op=hvd.Average, process_set=ps, name="ps.sparse")
        np.testing.assert_array_equal(out.indices.numpy(), [i for r in ps.ranks for i in (r, 0)])
        np.testing.assert_allclose(out.values.numpy(), np.concatenate(
            [np.full((2, 3), (r + 1.0) / ps.size()) for r in ps.ranks]))


@pytest.mark.parametrize("dtype", [tf.int8, tf.uint8, tf.int16, tf.uint16])
def test_small_integer_sums_and_products_wrap_like_numpy(sets, dtype):
    """A set reduces through MPI ops; Open MPI's AVX component saturates 8/16-bit
    Sum and Product past 16 elements (open-mpi/ompi#8045): results must wrap,
    as TensorFlow and NumPy do. 40 elements, values that overflow."""
    np_dtype = dtype.as_numpy_dtype
    inputs = {r: (np.arange(40) * 37 + 101 * r + 90).astype(np_dtype) for r in range(hvd.size())}
    for ps in mine(sets):
        mine_in = tf.constant(inputs[hvd.rank()])
        members = [inputs[r] for r in ps.ranks]
        with np.errstate(over="ignore"):
            want_sum = np.sum(members, axis=0, dtype=np_dtype)
            want_prod = np.prod(members, axis=0, dtype=np_dtype)
        got = hvd.allreduce(mine_in, op=hvd.Sum, process_set=ps, name="wrap.sum")
        np.testing.assert_array_equal(got.numpy(), want_sum)
        got = hvd.allreduce(mine_in, op=hvd.Product, process_set=ps, name="wrap.prod")
        np.testing.assert_array_equal(got.numpy(), want_prod)
        block = np.array_split(np.arange(40), ps.size())[ps.rank()]
        got = hvd.reducescatter(mine_in, op=hvd.Sum, process_set=ps, name="wrap.rs")
        np.testing.assert_array_equal(got.numpy(), want_sum[block])


def test_gradients_use_the_same_set(sets):
    for ps in mine(sets):
        x = tf.Variable(rank_input(hvd.rank(), (4,), tf.float32, 3))
        with tf.GradientTape(persistent=True) as tape:
            summed = hvd.allreduce(x, op=hvd.Sum, process_set=ps, name="grad.sum")
            gathered = hvd.allgather(x, process_set=ps, name="grad.ag")
            weights = tf.range(tf.shape(gathered)[0], dtype=tf.float32)
            gathered_loss = tf.reduce_sum(gathered * weights)
        # d(sum over the set)/dx with upstream ones is the set's size.
        np.testing.assert_allclose(tape.gradient(summed, x).numpy(), np.full(4, ps.size()))
        # allgather: this member's slice of the set-averaged upstream gradient.
        i = ps.rank()
        np.testing.assert_allclose(tape.gradient(gathered_loss, x).numpy(),
                                   np.arange(4 * i, 4 * i + 4, dtype=np.float32))


def test_tape_keeps_local_sources_local_scaled_by_the_set_size(sets):
    for ps in mine(sets):
        a = [rank_input(r, (3,), tf.float32, 40) for r in ps.ranks]
        b = rank_input(hvd.rank(), (2,), tf.float32, 41)
        w, v = tf.Variable(np.zeros(3, np.float32)), tf.Variable(np.zeros(2, np.float32))
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(w * a[ps.rank()]) + tf.reduce_sum(v * b)
        tape = hvd.DistributedGradientTape(tape, process_set=ps)
        tape.register_local_source(v)
        grad_w, grad_v = tape.gradient(loss, [w, v])
        np.testing.assert_allclose(grad_w.numpy(), np.mean(a, 0), rtol=1e-6)
        np.testing.assert_allclose(grad_v.numpy(), b / ps.size(), rtol=1e-6)


def test_tape_and_optimizers_of_a_set_keep_a_non_members_own_gradient(sets):
    """Horovod's tape and optimizers run on every rank: members average over
    the set, others keep their own gradient (Horovod's test_distributed_
    gradient_tape_process_sets and test_legacy_DistributedOptimizer_process_sets)."""
    import keras
    a = {r: rank_input(r, (3,), tf.float32, 50) for r in range(hvd.size())}
    for ps in sets:  # ascending ids: the order every member calls them in
        expected = np.mean([a[r] for r in ps.ranks], 0) if ps.included() else a[hvd.rank()]
        w = tf.Variable(np.zeros(3, np.float32))
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(w * a[hvd.rank()])
        tape = hvd.DistributedGradientTape(tape, process_set=ps, gradient_predivide_factor=2.0)
        (grad,) = tape.gradient(loss, [w])
        np.testing.assert_allclose(grad.numpy(), expected, rtol=1e-6, atol=1e-6)

        kernel = keras.Variable(np.zeros(3, np.float32))
        opt = hvd.DistributedOptimizer(keras.optimizers.SGD(1.0), process_set=ps)
        opt.apply([tf.constant(a[hvd.rank()])], [kernel])
        np.testing.assert_allclose(np.asarray(kernel.numpy()), -expected, rtol=1e-6, atol=1e-6)

        with tf.Graph().as_default():
            v = tf.compat.v1.get_variable("v", initializer=np.zeros(3, np.float32))
            opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(1.0),
                                           process_set=ps)
            train = opt.minimize(tf.reduce_sum(v * a[hvd.rank()]))
            with tf.compat.v1.Session() as session:
                session.run(tf.compat.v1.global_variables_initializer())
                session.run(train)
                np.testing.assert_allclose(session.run(v), -expected, rtol=1e-6, atol=1e-6)


def test_each_set_caches_and_fuses_on_its_own(sets):
    for ps in mine(sets):
        members = ps.ranks

        @tf.function
        def step(xs):
            single = [hvd.allreduce(x, op=hvd.Sum, process_set=ps, name="cf.%d" % i)
                      for i, x in enumerate(xs)]
            grouped = hvd.grouped_allreduce(xs, op=hvd.Sum, process_set=ps, name="cf.group")
            return single, grouped

        xs = [tf.constant(rank_input(hvd.rank(), (8,), tf.float32, 20 + i)) for i in range(4)]
        want = [np.sum([rank_input(r, (8,), tf.float32, 20 + i) for r in members], 0)
                for i in range(4)]
        before, global_before = hvd.stats(process_set=ps), hvd.stats()
        for _ in range(3):
            single, grouped = step(xs)
            check(single, want)
            check(grouped, want)
        after, global_after = hvd.stats(process_set=ps), hvd.stats()
        delta = {k: after[k] - before[k] for k in before}
        # 8 tensors a step; steps 2 and 3 find all of them in the set's cache.
        assert delta["tensors"] == 24, delta
        assert delta["cache_hits"] >= 16, delta
        assert delta["fused_batches"] >= 3, delta  # the grouped four, fused each step
        assert delta["bytes"] == 24 * 8 * 4, delta  # each input's bytes, counted once
        # None ran on the global set: its counters stay where they were.
        for key in ("tensors", "bytes", "fused_batches", "cache_hits"):
            assert global_after[key] == global_before[key], (key, global_before, global_after)
        hvd.barrier(process_set=ps)


def test_timeline_records_a_sets_collectives_with_its_id(sets):
    """Rank 0 writes the timeline; a set holding rank 0 records its tensors
    there (QUEUE and the collective), each event tagged with the set's id,
    and the collective's transport shows the set's shared-memory path."""
    import os
    import tempfile
    folder = hvd.broadcast_object(tempfile.mkdtemp() if hvd.rank() == 0 else None, root_rank=0,
                                  name="ps_timeline_dir")
    path = os.path.join(folder, "sets.json")
    with_zero = [ps for ps in sets if 0 in ps.ranks and len(ps.ranks) > 1][0]
    hvd.start_timeline(path)
    if hvd.rank() in with_zero.ranks:
        got = hvd.allreduce(tf.ones([4]), op=hvd.Sum, process_set=with_zero, name="ps_tl.sum")
        np.testing.assert_allclose(got.numpy(), np.full(4, len(with_zero.ranks)))
    hvd.allreduce(tf.ones([2]), op=hvd.Sum, name="ps_tl.global")
    hvd.stop_timeline()

    def check_file():
        _, phases = timeline_events(path)
        mine = phases["ps_tl.sum"]
        assert {"QUEUE", "ALLREDUCE"} <= {e["name"] for e in mine}, mine
        assert all(e["args"]["process_set"] == with_zero.process_set_id for e in mine), mine
        coll = [e for e in mine if e["name"] == "ALLREDUCE"][0]
        # Every member runs on this one host: the set reduces through its own
        # shared memory, as the global set does (TF_RING_SHM=0: plain MPI).
        want = "mpi" if os.environ.get("TF_RING_SHM") == "0" else "shm"
        assert coll["args"]["bytes"] == 16 and coll["args"]["transport"] == want, coll
        assert all("process_set" not in e.get("args", {}) for e in phases["ps_tl.global"])

    check_on_root(check_file, "ps_timeline_check")




def test_one_set_trains_while_another_waits_on_a_withheld_tensor(sets):
    """B's member `late` holds back B's tensor until A has trained; B's other
    members have it pending all that time, and A's steps still complete."""
    a_ranks, b_ranks, late = STALL[hvd.size()]
    a = next(ps for ps in sets if ps.ranks == a_ranks)
    b = next(ps for ps in sets if ps.ranks == b_ranks)
    rank = hvd.rank()
    b_value = [float(r + 1) for r in b.ranks]
    pending, result = None, {}
    if b.included() and rank != late:
        def submit_b():
            result["b"] = hvd.allreduce(tf.constant([float(rank + 1)]), op=hvd.Sum,
                                        process_set=b, name="stall.b").numpy()
        pending = threading.Thread(target=submit_b, daemon=True)
        pending.start()
    if a.included():
        w = tf.Variable(np.zeros(3, np.float32))
        for step in range(5):
            grad = tf.constant(np.full(3, rank + step, np.float32))
            w.assign_sub(0.1 * hvd.allreduce(grad, op=hvd.Average, process_set=a,
                                             name="stall.a"))
        want = -0.1 * sum(np.mean([r + s for r in a.ranks]) for s in range(5))
        np.testing.assert_allclose(w.numpy(), np.full(3, want), rtol=1e-5)
    if pending is not None:
        assert pending.is_alive() and "b" not in result  # B still waits for `late`
    hvd.barrier(name="stall.release")  # `late` waits here until A has trained
    if rank == late:
        got = hvd.allreduce(tf.constant([float(rank + 1)]), op=hvd.Sum, process_set=b,
                            name="stall.b").numpy()
        np.testing.assert_allclose(got, [sum(b_value)])
    if pending is not None:
        pending.join(timeout=60)
        assert not pending.is_alive(), "set B did not complete after its tensor was released"
        np.testing.assert_allclose(result["b"], [sum(b_value)])


def test_tape_and_keras_training_on_a_set_match_one_process(sets):
    """The set's members train on their shares of each batch; the weights
    equal one process's full-batch SGD (NumPy). Others do not take part."""
    ps = max(sets, key=lambda s: s.size())
    if not ps.included():
        return
    n, i = ps.size(), ps.rank()
    rng = np.random.default_rng(5)
    x = rng.normal(size=(6 * n, 3)).astype(np.float32)
    y = rng.normal(size=(6 * n, 1)).astype(np.float32)
    w0 = rng.normal(size=(3, 1)).astype(np.float32)
    share = slice(6 * i, 6 * (i + 1))
    w_ref = w0.copy()
    for _ in range(3):  # full-batch SGD on the mean squared error
        w_ref -= 0.1 * 2 * x.T @ (x @ w_ref - y) / len(x)

    w = tf.Variable(w0 + hvd.rank())  # the broadcast below makes every member start from w0
    hvd.broadcast_variables([w], root_rank=ps.ranks[0], process_set=ps)
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x[share], w) - y[share]))
        tape = hvd.DistributedGradientTape(tape, process_set=ps)
        (grad,) = tape.gradient(loss, [w])
        w.assign_sub(0.1 * grad)
    np.testing.assert_allclose(w.numpy(), w_ref, rtol=1e-4, atol=1e-6)

    import keras
    import tf_ring.keras as hvd_keras
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1, use_bias=False)])
    model.layers[0].kernel.assign(w0 + ps.rank())  # the callback broadcasts the first member's
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), process_set=ps)
    model.compile(optimizer=opt, loss="mse")
    callback = hvd_keras.callbacks.BroadcastGlobalVariablesCallback(ps.ranks[0], process_set=ps)
    model.fit(x[share], y[share], batch_size=6, epochs=3, shuffle=False, verbose=0,
              callbacks=[callback])
    np.testing.assert_allclose(model.layers[0].kernel.numpy(), w_ref, rtol=1e-4, atol=1e-6)

    logs = {"value": float(hvd.rank())}
    hvd_keras.callbacks.MetricAverageCallback(process_set=ps).on_epoch_end(0, logs)
    assert logs["value"] == pytest.approx(np.mean(ps.ranks))


def test_v1_optimizer_and_hook_on_a_set(sets):
    ps = max(sets, key=lambda s: s.size())
    if not ps.included():
        return
    with tf.Graph().as_default():
        v = tf.compat.v1.get_variable("v", initializer=np.float32(hvd.rank() + 1.0))
        opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(1.0),
                                       process_set=ps)
        train = opt.minimize(v * float(hvd.rank()))  # gradient: this rank's number
        hook = hvd.BroadcastGlobalVariablesHook(root_rank=ps.ranks[-1], process_set=ps)
        hook.begin()
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            hook.after_create_session(session, None)
            assert session.run(v) == ps.ranks[-1] + 1.0
            session.run(train)
            assert session.run(v) == pytest.approx(ps.ranks[-1] + 1.0 - np.mean(ps.ranks))

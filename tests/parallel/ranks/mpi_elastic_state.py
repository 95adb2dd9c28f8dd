"""tf_ring.elastic on 2 and 3 ranks: the State classes (commit, restore,
sync), run()'s recovery rules, host-change notices, and the Keras 3
callbacks in model.fit (tf_keras: mpi_elastic_tf_keras.py)."""
import keras
import numpy as np
import pytest
import tensorflow as tf

import elastic_keras_cases as cases
import tf_ring as hvd
from tf_ring import elastic


@pytest.fixture
def counted_resets():
    """Replaces the engine reset by a counter (the real one is tested in the
    fit checks and in test_run_restores_after_lost_rank)."""
    calls = []
    elastic.set_reset_hook(lambda: calls.append(1))
    yield calls
    elastic.set_reset_hook(None)
    elastic.set_reset_limit(None)


def test_names_match_horovod():
    assert issubclass(hvd.HorovodInternalError, RuntimeError)
    assert issubclass(hvd.HostsUpdatedInterrupt, RuntimeError)
    assert hvd.HorovodInternalError is hvd.elastic.HorovodInternalError
    assert hvd.HostsUpdatedInterrupt(True).skip_sync is True
    import tf_ring.keras as hk
    assert hk.elastic.run is elastic.run
    assert issubclass(hk.elastic.KerasState, elastic.TensorFlowKerasState)


def _rank_values(value):
    return [np.full((2, 2), value), np.full(2, value), np.array(int(value) * 3, np.int64)]


def test_tensorflow_state_sync_restore_commit():
    variables = [tf.Variable(a) for a in _rank_values(1.0 + hvd.rank())]
    state = elastic.TensorFlowState(variables, batch=20 + hvd.rank(), epoch=10 + hvd.rank())
    state.sync()
    rows = cases.gathered([v.numpy() for v in variables] + [state.batch, state.epoch], "tf_state")
    for row in rows:  # every rank holds rank 0's values
        np.testing.assert_array_equal(row, [1.0] * 6 + [3, 20, 10])

    for var, value in zip(variables, _rank_values(9.0)):
        var.assign(value)
    state.batch, state.epoch = 21, 11
    state.restore()
    for var, value in zip(variables, _rank_values(1.0)):
        np.testing.assert_array_equal(var.numpy(), value)
    assert (state.batch, state.epoch) == (20, 10)

    for var, value in zip(variables, _rank_values(5.0)):
        var.assign(value)
    state.batch, state.epoch = 21, 11
    state.commit()
    for _ in range(2):  # the commit survives a restore and later changes
        for var in variables:
            var.assign_add(tf.ones_like(var))
        state.batch = 99
        state.restore()
        for var, value in zip(variables, _rank_values(5.0)):
            np.testing.assert_array_equal(var.numpy(), value)
        assert (state.batch, state.epoch) == (21, 11)


def test_tensorflow_state_in_v1_session():
    with tf.Graph().as_default():
        variables = [tf.compat.v1.Variable(a) for a in _rank_values(1.0 + hvd.rank())]
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            with session.as_default():
                state = elastic.TensorFlowState(epoch=hvd.rank())  # all global variables
                state.sync()
                np.testing.assert_array_equal(session.run(variables[0]), np.ones((2, 2)))
                assert state.epoch == 0
                set_values = [v.assign(a) for v, a in zip(variables, _rank_values(4.0))]
                session.run(set_values)
                state.commit()
                session.run([v.assign(a) for v, a in zip(variables, _rank_values(8.0))])
                state.restore()
                for got, want in zip(session.run(variables), _rank_values(4.0)):
                    np.testing.assert_array_equal(got, want)


def test_tensorflow_state_needs_variables_eagerly():
    with pytest.raises(ValueError, match="pass the variables to keep"):
        elastic.TensorFlowState()


def test_object_state():
    state = elastic.ObjectState(history=[hvd.rank()], step=hvd.rank())
    state.sync()
    assert (state.history, state.step) == ([0], 0)
    state.history.append(5)  # changed in place: the commit keeps its own copy
    state.step = 1
    state.commit()
    state.history.append(6)
    state.step = 2
    state.restore()
    assert (state.history, state.step) == ([0, 5], 1)
    state.history.append(7)
    state.restore()
    assert state.history == [0, 5]
    with pytest.raises(ValueError, match="'commit' is taken by the state itself"):
        elastic.ObjectState(commit=1)


def test_reset_callbacks_run_in_order():
    state = elastic.ObjectState(step=0)
    calls = []
    state.register_reset_callbacks([lambda: calls.append("a"), lambda: calls.append("b")])
    state.on_reset()
    state.on_reset()
    assert calls == ["a", "b", "a", "b"]


def test_run_restores_after_lost_rank():
    """Restores the last commit, resets, syncs and calls again. The reset is
    the default one (engine shutdown + init): collectives work after it."""
    variable = tf.Variable([float(hvd.rank())])
    state = elastic.TensorFlowState([variable], step=hvd.rank())
    before = elastic.reset_count()
    seen = []

    @elastic.run
    def train(state, scale):
        seen.append((state.step, variable.numpy()[0]))
        if len(seen) == 1:
            state.step = 5
            variable.assign([3.0])
            state.commit()
            state.step = 50 + hvd.rank()
            variable.assign([7.0 + hvd.rank()])
            raise hvd.HorovodInternalError("injected on every rank")
        total = hvd.allreduce(variable + 1.0, op=hvd.Sum, name="elastic.after_reset")
        return scale * total.numpy()[0]

    assert train(state, 10) == 10 * 4.0 * hvd.size()
    assert seen == [(0, 0.0), (5, 3.0)]  # rank 0's values, then the commit
    assert elastic.reset_count() == before + 1


@pytest.mark.parametrize("skip_sync", [False, True])
def test_run_resets_without_restore_on_hosts_updated(counted_resets, skip_sync):
    state = elastic.ObjectState(value=hvd.rank())
    seen = []
    on_reset = []
    state.register_reset_callbacks([lambda: on_reset.append(1)])

    @elastic.run
    def train(state):
        seen.append(state.value)
        if len(seen) == 1:
            state.value = 100 + hvd.rank()  # not committed
            raise hvd.HostsUpdatedInterrupt(skip_sync)
        return state.value

    result = train(state)
    # No restore: the change stays; the sync (unless skipped) makes it rank 0's.
    assert seen[0] == 0
    assert result == (100 + hvd.rank() if skip_sync else 100)
    assert counted_resets == [1] and on_reset == [1]


@pytest.mark.parametrize("error", [ValueError("user bug"),
                                   tf.errors.UnknownError(None, None, "not a lost rank")],
                         ids=["ValueError", "UnknownError"])
def test_run_lets_other_exceptions_through(counted_resets, error):
    state = elastic.ObjectState(value=0)
    before = elastic.reset_count()

    @elastic.run
    def train(state):
        state.value = 5
        raise error

    with pytest.raises(type(error)) as caught:
        train(state)
    assert caught.value is error
    assert state.value == 5  # not restored
    assert counted_resets == [] and elastic.reset_count() == before


def test_reset_limit(counted_resets, monkeypatch):
    state = elastic.ObjectState(value=0)

    @elastic.run
    def always_fails(state):
        raise hvd.HorovodInternalError("lost again")

    elastic.set_reset_limit(elastic.reset_count() + 2)
    with pytest.raises(elastic.ResetLimitError, match="reset limit is") as caught:
        always_fails(state)
    assert isinstance(caught.value.__cause__, hvd.HorovodInternalError)
    assert counted_resets == [1, 1]

    elastic.set_reset_limit(None)
    monkeypatch.setenv("TF_RING_ELASTIC_RESET_LIMIT", str(elastic.reset_count()))
    with pytest.raises(elastic.ResetLimitError, match="TF_RING_ELASTIC_RESET_LIMIT"):
        always_fails(state)
    assert counted_resets == [1, 1]
    monkeypatch.setenv("TF_RING_ELASTIC_RESET_LIMIT", "many")
    with pytest.raises(ValueError, match="expected a count"):
        always_fails(state)


@pytest.mark.parametrize("where", ["hook", "callback"])
def test_a_rank_lost_during_the_reset_resets_again(where):
    """A lost-rank error from the reset hook or a reset callback (their
    collectives met a rank lost meanwhile) makes run() reset again, counted,
    instead of ending the job."""
    lost = tf.errors.UnavailableError(None, None, "tf_ring lost a rank (rank 9 of the old world)")
    resets, callbacks, calls = [], [], []

    def hook():
        resets.append(1)
        if where == "hook" and len(resets) == 1:
            raise lost

    def callback():
        callbacks.append(1)
        if where == "callback" and len(callbacks) == 1:
            raise lost

    state = elastic.ObjectState(value=0)
    state.register_reset_callbacks([callback])
    before = elastic.reset_count()

    @elastic.run
    def train(state):
        calls.append(1)
        if len(calls) == 1:
            raise hvd.HorovodInternalError("injected on every rank")
        return len(calls)

    elastic.set_reset_hook(hook)
    try:
        assert train(state) == 2
    finally:
        elastic.set_reset_hook(None)
    assert resets == [1, 1] and elastic.reset_count() == before + 2
    assert callbacks == ([1] if where == "hook" else [1, 1])


# --- host-change notices: rank 0 decides, every rank raises -------------------------------

@pytest.fixture
def host_source():
    yield elastic.set_host_update_source
    elastic.set_host_update_source(None)


def test_check_host_updates_is_a_collective_without_notices():
    state = elastic.ObjectState(step=0)
    hvd.reset_stats()
    state.commit()
    state.check_host_updates()
    assert hvd.stats()["tensors"] == 2  # one broadcast each, on every rank


@pytest.mark.parametrize("notices,skip_sync", [
    (["added"], False), (["removed"], True), (["removed", "added"], False)],
    ids=["added", "removed", "mixed"])
def test_commit_raises_on_every_rank_when_rank_0_has_a_notice(notices, skip_sync):
    variable = tf.Variable([1.0])
    state = elastic.TensorFlowState([variable], step=0)
    if hvd.rank() == 0:
        for offset, result in enumerate(notices):
            state.on_hosts_updated(10.0 + offset, elastic.HostUpdateResult[result])
    variable.assign([2.0])
    state.step = 1
    with pytest.raises(hvd.HostsUpdatedInterrupt) as caught:
        state.commit()
    assert caught.value.skip_sync is skip_sync
    variable.assign([9.0])
    state.restore()  # commit saved before it checked
    assert (variable.numpy()[0], state.step) == (2.0, 1)
    state.commit()  # acted on once
    if hvd.rank() == 0:  # older than the one acted on: ignored
        state.on_hosts_updated(5.0, elastic.HostUpdateResult.added)
    state.commit()


def test_notices_on_other_ranks_do_not_count():
    state = elastic.ObjectState(step=0)
    if hvd.rank() == 1:
        state.on_hosts_updated(10.0, elastic.HostUpdateResult.added)
    state.step = 1
    state.commit()  # no rank raises: only rank 0's view counts
    state.step = 2
    state.restore()
    assert state.step == 1  # that commit was made, not interrupted before its save
    # The same notice on rank 0 interrupts every rank's commit: the quiet
    # commit above was rank 0's view, not a notice gone unseen.
    if hvd.rank() == 0:
        state.on_hosts_updated(10.0, elastic.HostUpdateResult.added)
    with pytest.raises(hvd.HostsUpdatedInterrupt) as caught:
        state.commit()
    assert caught.value.skip_sync is False  # an added host: the sync still runs


def test_a_reset_drops_notices_that_were_waiting():
    state = elastic.ObjectState(step=0)
    if hvd.rank() == 0:
        state.on_hosts_updated(10.0, elastic.HostUpdateResult.added)
    state.on_reset()  # the reset has answered the notice
    state.commit()  # so no rank raises for it
    if hvd.rank() == 0:  # while a newer notice still interrupts every rank
        state.on_hosts_updated(11.0, elastic.HostUpdateResult.removed)
    with pytest.raises(hvd.HostsUpdatedInterrupt) as caught:
        state.commit()
    assert caught.value.skip_sync is True


def test_host_update_source(host_source):
    with pytest.raises(TypeError, match="takes a function or None"):
        host_source(42)
    pending = [[(20.0, elastic.HostUpdateResult.removed)]]
    if hvd.rank() == 0:  # the launcher's role, later
        host_source(lambda: pending.pop() if pending else [])
    state = elastic.ObjectState(step=0)
    with pytest.raises(hvd.HostsUpdatedInterrupt) as caught:
        state.check_host_updates()
    assert caught.value.skip_sync is True
    state.check_host_updates()


# --- Keras 3 ------------------------------------------------------------------------------

def test_keras_state():
    cases.check_keras_state(keras)


@pytest.mark.parametrize("failure,relative_epochs", [("lost_rank", False),
                                                     ("hosts_updated", True)])
def test_fit_resumes_where_the_commit_was(failure, relative_epochs):
    cases.check_fit_resumes(keras, failure, relative_epochs)

"""A training loop for the elastic launcher tests: 30 committed steps of
an ObjectState counter, one allreduce each. Prints START (where this world
began, after the state's sync), BOOT (when the process began and when
init() returned) and END lines; the final total is sum(range(30)) however often the
job was relaunched, if every relaunch resumed from the last commit.
COUNTER_KILL_RANK_AT / COUNTER_MARKER kill ranks (kill_plan.py); COUNTER_RAISE_RANK_AT=k
makes the last rank raise an ordinary ValueError at step k; COUNTER_STEP_S: the pause
between steps (0.15 s). COUNTER_HOLD_AT_STEP=k with COUNTER_HOLD_UNTIL_SIZE=n: at step k
the job waits for a world of n ranks, committing every pause (where a host
update is noticed) and printing HOLD lines, for at most 240 pauses: a test
that grows the job then does not race the job's end on a slow machine."""
import os
import time

BOOTED = time.time()  # before TensorFlow's import: when the process began

import tensorflow as tf  # noqa: E402

import kill_plan  # noqa: E402
import tf_ring as hvd  # noqa: E402
from tf_ring import elastic  # noqa: E402

STEPS = 30
# COUNTER_SETS=1: every pair of the first 3 ranks is a process set, and each
# step also sums a 1 over every set this rank is in (which must give the
# set's size, also after a shrink renumbered the sets).
pairs = [hvd.ProcessSet(p) for p in ([0, 1], [0, 2], [1, 2])] \
    if os.environ.get("COUNTER_SETS") == "1" else []
hvd.init(process_sets=pairs or None)
# warm=1: this rank began as a warm spare (tfringrun --warm-spares), TensorFlow imported ahead
print("BOOT rank=%d size=%d booted=%.3f initialized=%.3f warm=%s"
      % (hvd.rank(), hvd.size(), BOOTED, time.time(), os.environ.get("TF_RING_WARM_SPARE", "0")),
      flush=True)
state = elastic.ObjectState(step=0, total=0)
raise_at = int(os.environ.get("COUNTER_RAISE_RANK_AT", "-1"))
step_pause = float(os.environ.get("COUNTER_STEP_S", "0.15"))
hold_at = int(os.environ.get("COUNTER_HOLD_AT_STEP", "-1"))
hold_until_size = int(os.environ.get("COUNTER_HOLD_UNTIL_SIZE", "0"))


def hold(state):
    """Commits (no step) until the world has hold_until_size ranks. Every
    rank sees the same size and counts the same pauses, so all commit alike."""
    for _ in range(240):
        if hvd.size() >= hold_until_size:
            return
        print("HOLD rank=%d size=%d step=%d t=%.3f" % (hvd.rank(), hvd.size(), state.step,
                                                       time.time()), flush=True)
        time.sleep(step_pause)
        state.commit()


@elastic.run
def train(state):
    print("START rank=%d size=%d step=%d pid=%d t=%.3f" % (hvd.rank(), hvd.size(), state.step,
                                                           os.getpid(), time.time()), flush=True)
    while state.step < STEPS:
        if state.step == hold_at:
            hold(state)
        size = int(hvd.allreduce(tf.constant(1.0), op=hvd.Sum, name="count").numpy())
        assert size == hvd.size()
        for i, ps in enumerate(pairs):
            if ps.process_set_id is not None and ps.included():
                got = int(hvd.allreduce(tf.constant(1.0), op=hvd.Sum, process_set=ps,
                                        name="pair%d" % i).numpy())
                assert got == ps.size(), (ps, got)
        state.total += state.step
        state.step += 1
        print("STEP rank=%d size=%d step=%d t=%.3f" % (hvd.rank(), size, state.step, time.time()),
              flush=True)
        kill_plan.maybe_kill(state.step, hvd.rank(), hvd.size())  # SIGKILL: nothing cleaned up
        if hvd.rank() == hvd.size() - 1 and state.step == raise_at:
            raise ValueError("counter_job: an ordinary bug at step %d" % raise_at)
        time.sleep(step_pause)
        state.commit()


train(state)
if pairs:
    print("SETS rank=%d %s" % (hvd.rank(), [ps.ranks if ps.process_set_id is not None else None
                                          for ps in pairs]), flush=True)
print("END rank=%d size=%d step=%d total=%d" % (hvd.rank(), hvd.size(), state.step, state.total),
      flush=True)

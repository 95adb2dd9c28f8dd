"""In-process recovery from a lost rank (MPI ULFM; docs/elastic.md).

Under tfringrun's elastic mode with `--recovery in-process` (or any
`mpirun --with-ft ulfm` job with TF_RING_ULFM=1), the engine does not let
MPI abort the job when a rank dies: every survivor's pending collectives
fail together with an error that says "tf_ring lost a rank". `run` reads
that as HorovodInternalError, restores the last commit and resets with
`shrink_and_restart()`: the engine stops, the survivors shrink the
communicator to the ranks left (MPIX_Comm_shrink, collective over them) and
start a new engine on it, with the registered process sets renumbered to
it. The processes, their graphs and memory stay.
"""
import os
import sys

from tf_ring import basics

ULFM_ENV = "TF_RING_ULFM"
MIN_NP_ENV = "TF_RING_ELASTIC_MIN_NP"  # tfringrun --min-np
LOST_RANK_TEXT = "tf_ring lost a rank"


def fault_tolerant():
    """True when this job runs in fault-tolerant mode (TF_RING_ULFM=1)."""
    return os.environ.get(ULFM_ENV, "") == "1"


def is_lost_rank_error(error):
    """True for the error a collective raises when a rank was lost: a
    TensorFlow error (or the engine binding's RuntimeError) whose text says
    so. Eagerly it is an UnavailableError; inside a tf.function TensorFlow
    turns an op's UnavailableError into an InternalError ("to avoid invoking
    TF network error handling logic"), so the text decides, not the class.
    Other errors are the program's own and must propagate."""
    if LOST_RANK_TEXT not in str(error):
        return False
    import tensorflow as tf
    return isinstance(error, (tf.errors.OpError, RuntimeError))


def shrink_and_restart():
    """Every survivor calls this together: stops the engine, shrinks its
    communicator to the ranks still alive and starts a new engine on it."""
    from mpi4py import MPI
    from tf_ring import process_set as sets
    old = basics._engine_comm if basics._engine_comm is not None else MPI.COMM_WORLD
    # The engine has stopped, so it lists no sets: take the Python registry.
    registered = [objects[0] for _, objects in sorted(sets._registered.items())]
    dynamic = sets._dynamic
    basics.shutdown()
    shrunk = old.Shrink()  # fault-tolerant collective over the survivors
    kept = _renumber(registered, old, shrunk)
    basics.init(comm=shrunk, process_sets="dynamic" if dynamic else kept)
    for ps in kept if dynamic else ():
        sets.add_process_set(ps)
    if old is not MPI.COMM_WORLD:
        try:
            old.Free()
        except MPI.Exception:
            pass  # a revoked communicator may refuse; it is unused from here on
    _tell_driver(basics.size())
    minimum = int(os.environ.get(MIN_NP_ENV, "0") or 0)
    if basics.size() < minimum:
        # Too few ranks to go on: the driver's coordinated restart waits for
        # hosts (--elastic-timeout) from the mirrored commit, or fails.
        from tf_ring.elastic import restart
        print("tf_ring: %d rank(s) left after the shrink, fewer than --min-np %d: leaving for "
              "tfringrun's restart from the last commit" % (basics.size(), minimum),
              file=sys.stderr, flush=True)
        restart.exit_for_relaunch()


def _renumber(registered, old, shrunk):
    """The user's ProcessSet objects, their ranks renumbered to the shrunk
    communicator (shrinking keeps the order) and the lost ranks left out;
    a set with no rank left is dropped (its object stays unregistered, so
    using it says so)."""
    from mpi4py import MPI
    old_group, new_group = old.Get_group(), shrunk.Get_group()
    kept = []
    for ps in registered:
        ranks = MPI.Group.Translate_ranks(old_group, list(ps.ranks), new_group)
        ps._ranks = [r for r in ranks if r != MPI.UNDEFINED]
        ps.mpi_comm = None  # built on the old communicator
        if ps._ranks:
            kept.append(ps)
    old_group.Free()
    new_group.Free()
    return kept


def _tell_driver(size):
    """Rank 0 tells tfringrun the new world size over the control channel:
    how many ranks must end before the launcher may stop mpirun (which under
    ULFM can wait for a lost host forever)."""
    from tf_ring.elastic import control_client
    client = control_client.from_environment()
    if client is not None and basics.rank() == 0:
        client.report_world_size(size)

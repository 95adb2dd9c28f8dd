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

from tf_ring.runtime import basics
from tf_ring.plumbing import env_names

LOST_RANK_TEXT = "tf_ring lost a rank"


def fault_tolerant():
    """True when this job runs in fault-tolerant mode (TF_RING_ULFM=1)."""
    return os.environ.get(env_names.ULFM, "") == "1"


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
    communicator to the ranks still alive and starts a new engine on it.
    A rank lost while the survivors re-initialise makes them shrink again;
    what cannot be recovered in-process leaves for tfringrun's restart."""
    from mpi4py import MPI
    from tf_ring.runtime import process_set as sets
    from tf_ring.elastic import restart
    global _next_set_id
    old = basics._engine_comm if basics._engine_comm is not None else MPI.COMM_WORLD
    # The engine has stopped, so it lists no sets: take the Python registry,
    # with each set's ranks in `old`'s numbering (every attempt starts there).
    registered = {ps_id: (list(objects), list(objects[0].ranks))
                  for ps_id, objects in sets._registered.items()}
    _next_set_id = max([_next_set_id] + [ps_id + 1 for ps_id in registered])
    dynamic = sets._dynamic
    basics.shutdown()
    comm, attempt, failure = old, 0, None
    while True:
        try:
            shrunk = comm.Shrink()  # fault-tolerant collective over the survivors
        except MPI.Exception as error:
            _leave_for_restart("shrinking the communicator failed (%s)" % error)
        if attempt and shrunk.Get_size() == comm.Get_size():
            # The last start failed, yet no rank was lost since: not a loss to recover from.
            _leave_for_restart("restarting the engine failed with no rank lost (%s)"
                               % (failure or "on another rank"))
        failure = _start_engine(shrunk, old, registered, dynamic)
        if _everyone_started(shrunk, failure is None):
            break
        print("tf_ring: a rank was lost while the %d survivors re-initialised (%s): shrinking "
              "again" % (shrunk.Get_size(), failure or "seen on another survivor"),
              file=sys.stderr, flush=True)
        basics.shutdown()
        _revoke(shrunk)  # frees survivors still waiting in it
        if comm is not old:
            _free(comm)
        comm, attempt = shrunk, attempt + 1
    if comm is not old:
        _free(comm)
    _free(old)
    _tell_driver(basics.size())
    minimum = int(os.environ.get(env_names.ELASTIC_MIN_NP, "0") or 0)
    if basics.size() < minimum:
        # Too few ranks to go on: the driver's coordinated restart waits for
        # hosts (--elastic-timeout) from the mirrored commit, or fails.
        print("tf_ring: %d rank(s) left after the shrink, fewer than --min-np %d: leaving for "
              "tfringrun's restart from the last commit" % (basics.size(), minimum),
              file=sys.stderr, flush=True)
        restart.exit_for_relaunch()


_next_set_id = 1  # no set restored after a shrink gets an id below this


def _start_engine(shrunk, old, registered, dynamic):
    """Starts the engine on `shrunk`, then registers the sets renumbered to
    it under their old ids (traced functions hold those); returns the error
    that stopped this rank, or None. The survivors agree after each half:
    the sets' registration is a collective of the new engine, which a rank
    whose engine did not start would never join."""
    from tf_ring.runtime import process_set as sets
    failure = _attempt(lambda: basics.init(comm=shrunk,
                                           process_sets="dynamic" if dynamic else None))
    if not _everyone_started(shrunk, failure is None):
        return failure or RuntimeError("a survivor's engine did not start, or a rank was lost")
    return _attempt(lambda: sets._restore(_renumber(registered, old, shrunk), _next_set_id))


def _attempt(step):
    try:
        step()
    except Exception as error:  # noqa: BLE001 - judged together with the other survivors
        return error
    return None


def _everyone_started(comm, ok):
    """True on every survivor when every survivor started its engine
    (MPIX_Comm_agree: fault tolerant, one answer everywhere); False when one
    failed or a rank was lost meanwhile."""
    from mpi4py import MPI
    try:
        return bool(comm.Agree(1 if ok else 0))
    except MPI.Exception:
        return False  # a process of `comm` failed: shrink again


def _revoke(comm):
    try:
        comm.Revoke()
    except Exception:  # noqa: BLE001 - best effort: the next shrink works on it either way
        pass


def _free(comm):
    from mpi4py import MPI
    if comm == MPI.COMM_WORLD:
        return
    try:
        comm.Free()
    except MPI.Exception:
        pass  # a revoked communicator may refuse; it is unused from here on


def _leave_for_restart(why):
    from tf_ring.elastic import restart
    print("tf_ring: in-process recovery cannot go on: %s; leaving for tfringrun's restart from "
          "the last commit" % why, file=sys.stderr, flush=True)
    restart.exit_for_relaunch()


def _renumber(registered, old, shrunk):
    """{id: the user's ProcessSet objects} for the sets that keep a rank;
    `registered` holds {id: (objects, ranks in `old`)}. The objects' ranks
    become the shrunk communicator's (shrinking keeps the order) without the
    lost ones; a set with no rank left is dropped (its objects stay
    unregistered, so using one says so, and its id names no set anywhere)."""
    from mpi4py import MPI
    old_group, new_group = old.Get_group(), shrunk.Get_group()
    kept = {}
    for ps_id, (objects, old_ranks) in sorted(registered.items()):
        ranks = MPI.Group.Translate_ranks(old_group, old_ranks, new_group)
        ranks = [r for r in ranks if r != MPI.UNDEFINED]
        for ps in objects:
            ps._ranks = list(ranks)
            ps.mpi_comm = None  # built on the old communicator
            ps._emptied_by_shrink = not ranks
        if ranks:
            kept[ps_id] = objects
    old_group.Free()
    new_group.Free()
    return kept


def _tell_driver(size):
    """Rank 0 tells tfringrun the new world size and who is in it (ranks of
    the world mpirun started) over the control channel: how many ranks must
    end before the launcher may stop mpirun (which under ULFM can wait for a
    lost host forever), and which ranks, so a rank left out is known lost."""
    from tf_ring.elastic import control_client
    client = control_client.from_environment()
    if client is not None and basics.rank() == 0:
        client.report_world_size(size, _world_ranks(basics._engine_comm))


def _world_ranks(comm):
    """`comm`'s ranks as MPI_COMM_WORLD numbers them; None if unknown."""
    from mpi4py import MPI
    if comm is None:
        return None
    try:
        group, world = comm.Get_group(), MPI.COMM_WORLD.Get_group()
        try:
            return MPI.Group.Translate_ranks(group, list(range(group.Get_size())), world)
        finally:
            group.Free()
            world.Free()
    except MPI.Exception:
        return None

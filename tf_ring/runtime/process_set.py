"""Process sets: collectives among a subset of the ranks (Horovod's API).

A set negotiates and runs on its own (its own communicator, coordinator,
response cache and fusion batches), so sets whose members differ work
independently; see docs/process-sets.md.
"""

from tf_ring.runtime._library import ENGINE
from tf_ring.plumbing import env_names
from tf_ring.runtime.topology import rank, size

_dynamic = False          # set by init(process_sets="dynamic") or rank 0's variable
_registered = {}          # id -> ProcessSet objects registered under it


class ProcessSet:
    """A set of ranks that run collectives together.

    Build it from a list of (global) ranks, or an mpi4py communicator (its
    members only), then register it: init(process_sets=[...]) or, with
    dynamic process sets on, add_process_set(). Pass it to any collective
    as process_set=. process_set_id is None until it is registered.
    """

    def __init__(self, ranks_or_comm):
        self.process_set_id = None
        self._ranks = _ranks_from(ranks_or_comm)
        self.mpi_comm = None if isinstance(ranks_or_comm, (list, tuple, range, type(None))) \
            else ranks_or_comm

    @property
    def ranks(self):
        """The member ranks, ascending (every rank, for global_process_set)."""
        if self.process_set_id == 0:
            return list(range(size()))
        return None if self._ranks is None else list(self._ranks)

    def size(self):
        """Number of ranks in the set."""
        return len(self.ranks)

    def rank(self):
        """This process's rank within the set (its index in ranks), or -1
        when it is not a member."""
        ranks = self.ranks
        return ranks.index(rank()) if rank() in ranks else -1

    def included(self):
        """Whether this process belongs to the set."""
        return rank() in self.ranks

    def _invalidate(self):
        # The ranks stay, so a removed set can be added again (as in Horovod).
        self.process_set_id = None

    def __eq__(self, other):
        return (isinstance(other, ProcessSet) and self.process_set_id == other.process_set_id
                and self._ranks == other._ranks)

    def __hash__(self):
        return hash((self.process_set_id, tuple(self._ranks or ())))

    def __repr__(self):
        # Horovod's format; the global set lists every rank once init() ran.
        shown = self._ranks
        if self.process_set_id == 0:
            try:
                shown = list(range(size()))
            except Exception:  # before init(): the size is not known yet
                shown = "all"
        return "ProcessSet(process_set_id=%s, ranks=%s, mpi_comm=%s)" % (
            self.process_set_id, shown, self.mpi_comm)


def _ranks_from(ranks_or_comm):
    if ranks_or_comm is None:  # the global set: every rank
        return None
    try:
        from mpi4py import MPI
        is_comm = isinstance(ranks_or_comm, MPI.Comm)
    except ImportError:
        is_comm = False
    if is_comm:
        from mpi4py import MPI
        if ranks_or_comm == MPI.COMM_NULL:
            raise ValueError("ProcessSet(comm): this rank is not in the communicator, so it "
                             "cannot know its members; build the set from a list of ranks.")
        group = ranks_or_comm.Get_group()
        ranks = MPI.Group.Translate_ranks(group, list(range(group.Get_size())),
                                          MPI.COMM_WORLD.Get_group())
        return sorted(int(r) for r in ranks)
    try:
        ranks = list(ranks_or_comm)
    except TypeError:
        raise TypeError("ProcessSet takes a list of ranks or an mpi4py communicator, got %r"
                        % type(ranks_or_comm).__name__) from None
    if any(isinstance(r, bool) or not isinstance(r, int) for r in ranks):
        raise ValueError("ProcessSet(%r): ranks must be ints" % (ranks,))
    if not ranks:
        raise ValueError("ProcessSet([]): a process set needs at least one rank")
    repeated = sorted({r for r in ranks if ranks.count(r) > 1})
    if repeated:
        raise ValueError("ProcessSet(%r): rank(s) %s appear more than once; list each rank once"
                         % (ranks, ", ".join(map(str, repeated))))
    return sorted(ranks)


global_process_set = ProcessSet(None)
global_process_set.process_set_id = 0


def _engine_ranks(process_set_id):
    return ENGINE.process_set_ranks(process_set_id)


def _check_ranks(process_set):
    for r in process_set.ranks:
        if r < 0 or r >= size():
            raise ValueError("%r: rank %d is out of range; this job has ranks 0 to %d"
                             % (process_set, r, size() - 1))


def process_set_id_of(process_set, what):
    """The registered id of `process_set` (None: the global set, 0), or a
    ValueError saying how to register it."""
    if process_set is None or process_set is global_process_set:
        return 0
    if isinstance(process_set, int) and not isinstance(process_set, bool):
        process_set = process_set_by_id(process_set)
    if not isinstance(process_set, ProcessSet):
        raise TypeError("tf_ring.%s: process_set must be a tf_ring.ProcessSet, got %r"
                        % (what, type(process_set).__name__))
    ps_id = process_set.process_set_id
    if ps_id == 0:
        return 0
    if ps_id is None and getattr(process_set, "_emptied_by_shrink", False):
        raise ValueError("tf_ring.%s: %r lost every member when in-process recovery shrank the "
                         "world; it no longer exists on any rank." % (what, process_set))
    if any(ps is process_set for ps in _registered.get(ps_id, ())):
        return ps_id  # registered through this module, which also forgets removed sets
    registered = None if ps_id is None else _engine_ranks(ps_id)
    if registered is None or registered != process_set.ranks:
        raise ValueError(
            "tf_ring.%s: %r is not registered (never added, or removed). Register it on every "
            "rank with tf_ring.init(process_sets=[...]) or tf_ring.add_process_set()."
            % (what, process_set))
    return ps_id


def process_set_by_id(process_set_id):
    """The registered ProcessSet with this id."""
    if process_set_id == 0:
        return global_process_set
    if process_set_id in _registered:
        return _registered[process_set_id][0]
    ranks = _engine_ranks(process_set_id)
    if ranks is None:
        raise ValueError("no registered process set has id %r" % (process_set_id,))
    ps = ProcessSet(ranks)
    ps.process_set_id = process_set_id
    _registered[process_set_id] = [ps]
    return ps


def process_sets():
    """Every registered process set, global_process_set first, by id."""
    return [global_process_set] + [process_set_by_id(i) for i in ENGINE.process_set_ids()]


def _register(sets):
    """Registers `sets` on every rank (collective); raises ValueError when
    the ranks disagree or a set is invalid."""
    for ps in sets:
        if ps.process_set_id is not None:
            raise ValueError("%r is already registered" % (ps,))
        _check_ranks(ps)
    try:
        ids = ENGINE.add_process_sets([ps.ranks for ps in sets])
    except ValueError as e:
        raise ValueError("tf_ring: registering process sets failed: %s" % e) from None
    for ps, ps_id in zip(sets, ids):
        ps.process_set_id = ps_id
        _registered[ps.process_set_id] = [ps]


def _on_init(process_sets_arg, settings):
    """Called by init(): forgets the ids of an earlier engine's sets (the
    objects keep their ranks and may be registered again), then registers
    the static sets (or turns dynamic sets on with "dynamic"). `settings`
    holds rank 0's variables: whether add_process_set is allowed must be the
    same on every rank, or the ranks that may call it wait for the others."""
    global _dynamic
    for objects in _registered.values():
        for ps in objects:
            ps.process_set_id = None
    _registered.clear()
    _dynamic = settings.get(env_names.DYNAMIC_PROCESS_SETS) not in (None, "", "0")
    if process_sets_arg is None:
        return
    if isinstance(process_sets_arg, str):
        if process_sets_arg != "dynamic":
            raise ValueError('init(process_sets=...) takes a list of ProcessSet objects or '
                             '"dynamic", got %r' % (process_sets_arg,))
        _dynamic = True
        return
    sets = [ps if isinstance(ps, ProcessSet) else ProcessSet(ps) for ps in process_sets_arg]
    sets = [ps for ps in sets if ps is not global_process_set]
    _register(sets)


def _restore(kept, next_id):
    """In-process recovery, after init() on the shrunk world: registers each
    set in `kept` ({old id: [objects]}, ranks already renumbered) under its
    old id, so the ids that traced functions hold still name the same sets;
    no later set gets an id below `next_id`, so a dropped set's id fails
    wherever it is used (collective)."""
    ids = sorted(kept)
    ENGINE.restore_process_sets([kept[i][0].ranks for i in ids], ids, next_id)
    for ps_id in ids:
        for ps in kept[ps_id]:
            ps.process_set_id = ps_id
        _registered[ps_id] = list(kept[ps_id])


def runtime_size(process_set, dtype):
    """The set's size as a `dtype` scalar tensor, read when the graph runs,
    not when it is traced: a function traced before an in-process shrink
    divides by the size after it. Eagerly, the size now. Under XLA (which
    cannot compile the topology op) the traced size; a compiled collective
    whose size changed fails with a clear error anyway."""
    import tensorflow as tf
    from tensorflow.python.ops import control_flow_util
    process_set = process_set or global_process_set
    if tf.executing_eagerly() or control_flow_util.GraphOrParentsInXlaContext(
            tf.compat.v1.get_default_graph()):
        return tf.cast(process_set.size(), dtype)
    from tf_ring.runtime._library import OPS
    size = OPS.tf_ring_topology(which="size",
                                process_set_id=process_set_id_of(process_set, "size"))
    return tf.cast(size, dtype)


def _require_dynamic(what):
    if not _dynamic:
        raise RuntimeError(
            "tf_ring.%s needs dynamic process sets: set %s=1 before init() (rank 0's value "
            "counts for every rank; or call "
            "init(process_sets=\"dynamic\")), or register the sets once with "
            "init(process_sets=[...])." % (what, env_names.DYNAMIC_PROCESS_SETS))


def add_process_set(process_set):
    """Registers a new process set (a ProcessSet or a list of ranks) and
    returns it. Collective: every rank calls it with the same set, in the
    same order. Needs dynamic process sets (TF_RING_DYNAMIC_PROCESS_SETS=1)."""
    _require_dynamic("add_process_set")
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    _register([process_set])
    return process_set


def remove_process_set(process_set):
    """Unregisters `process_set` on every rank (collective) and returns True.
    Its pending collectives fail; the object (and equal ones) become
    unregistered. The global set cannot be removed (ValueError)."""
    ps_id = process_set.process_set_id if isinstance(process_set, ProcessSet) else process_set
    if ps_id == 0:
        raise ValueError("tf_ring.remove_process_set: the global process set (id 0) cannot be "
                         "removed; remove only sets you added.")
    _require_dynamic("remove_process_set")
    process_set_id_of(process_set, "remove_process_set")
    try:
        ENGINE.remove_process_set(ps_id)
    except ValueError as e:
        raise ValueError("tf_ring.remove_process_set: %s" % e) from None
    for ps in _registered.pop(ps_id, []) + [process_set]:
        if isinstance(ps, ProcessSet):
            ps._invalidate()
    return True

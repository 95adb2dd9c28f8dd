"""The ranks' half of tfringrun's coordinated restart (docs/elastic.md).

Under the elastic driver (TF_RING_ELASTIC_STATE_DIR set) one rank per host
mirrors every commit to that host-local tmpfs directory; the first sync() of
a relaunched process has the lowest rank that finds a mirror load it and
broadcast it, so the new world resumes from the last commit. After a
HostsUpdatedInterrupt the ranks exit with EXIT_HOSTS_UPDATED and the driver
relaunches at the new size. Outside the driver every function here is a
no-op, so in-memory elastic training is unchanged."""
import os
import sys

from tf_ring.elastic.mirror import MirrorWriter, load_mirror

EXIT_HOSTS_UPDATED = 75  # tf_ring.run.elastic_plan uses the same code
_writer = None
_mirror_taken = False


def state_dir():
    return os.environ.get("TF_RING_ELASTIC_STATE_DIR")


def under_driver():
    return bool(os.environ.get("TF_RING_ELASTIC_DIR"))


def mirror_commit(snapshot_fn):
    """Queues snapshot_fn() (called only here) for the host's mirror; only
    local rank 0 writes."""
    global _writer
    directory = state_dir()
    if not directory or os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0") != "0":
        return
    if _writer is None:
        _writer = MirrorWriter(directory)
    _writer.submit(snapshot_fn())


def take_mirror_once():
    """Collective, in the first sync() of the process only: the mirrored
    commit from the lowest rank that has one, on every rank; or None."""
    global _mirror_taken
    if _mirror_taken or not state_dir():
        return None
    _mirror_taken = True
    from tf_ring.basics import rank
    from tf_ring.objects import allgather_object, broadcast_object
    found = load_mirror(state_dir())
    holders = [r for r, has in enumerate(allgather_object(found is not None,
                                                          name="elastic.mirror_found")) if has]
    if not holders:
        return None
    return broadcast_object(found if rank() == holders[0] else None, root_rank=holders[0],
                            name="elastic.mirror")


def exit_for_relaunch():
    """Writes the pending mirror, then leaves with the code the driver reads
    as 'relaunch at the new size'."""
    if _writer is not None:
        _writer.flush(timeout=60)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(EXIT_HOSTS_UPDATED)  # all ranks leave together; nothing collective after this

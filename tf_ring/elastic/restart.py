"""The ranks' half of tfringrun's coordinated restart (docs/elastic.md).

Under the elastic driver (TF_RING_ELASTIC_STATE_DIR set) the first local
rank of every host mirrors every commit to that host's own tmpfs directory
(each host keeps the last commit: any host that survives a loss can resume
the job). The first sync() of a relaunched process takes the newest commit
any rank finds, from the lowest rank holding it, and broadcasts it, so the
new world resumes from the last commit. Commits are numbered; rank 0 tells
the launcher each number once it is on disk, and a new world that finds no
commit while the launcher knows of one stops with an error instead of
silently training from the start. After a HostsUpdatedInterrupt the ranks
exit with EXIT_HOSTS_UPDATED and the driver relaunches at the new size.
Outside the driver every function here is a no-op, so in-memory elastic
training is unchanged."""
import os
import shutil
import sys

from tf_ring.elastic import control_client
from tf_ring.elastic.mirror import MirrorWriter, load_mirror
from tf_ring.plumbing import env_names

_writer = None
_mirror_taken = False
_commits = 0  # this job's commits so far, the same number on every rank


class CommitLost(RuntimeError):
    """The job committed before, and no host of the new world kept it."""


def state_dir():
    return os.environ.get(env_names.ELASTIC_STATE_DIR)


def _secret():
    return os.environ.get(env_names.ELASTIC_SECRET, "")


def under_driver():
    return bool(state_dir())


def mirror_commit(snapshot_fn):
    """Numbers this commit and queues snapshot_fn() (called only here) for
    the host's mirror. The first local rank of the current world writes, so
    after an in-process shrink a surviving rank takes over on its host."""
    global _writer, _commits
    directory = state_dir()
    if not directory:
        return
    _commits += 1
    from tf_ring.runtime.basics import local_rank
    if local_rank() != 0:
        return
    if _writer is None:
        _writer = MirrorWriter(directory, _secret(), on_written=_tell_launcher)
    _writer.submit({"commit": _commits, "state": snapshot_fn()})


def _tell_launcher(snapshot):
    """Rank 0 reports each commit on disk (the launcher passes the newest
    number to the next world, which must find it or say so)."""
    from tf_ring.runtime.basics import rank
    client = control_client.from_environment()
    if client is not None and rank() == 0:
        client.report_commit(snapshot["commit"])


def take_mirror_once():
    """Collective, in the first sync() of the process only: the newest
    mirrored commit any rank holds, on every rank; or None."""
    global _mirror_taken, _commits
    if _mirror_taken or not state_dir():
        return None
    _mirror_taken = True
    from tf_ring.runtime.basics import rank
    from tf_ring.collectives.objects import allgather_object, broadcast_object
    found, problem = None, None
    try:
        found = load_mirror(state_dir(), _secret())
    except Exception as e:  # noqa: BLE001 (decided below, on every rank together)
        problem = str(e)
    have = found["commit"] if found is not None else 0
    everyone = allgather_object((have, problem), name="elastic.mirror_found")
    problems = ["rank %d: %s" % (r, p) for r, (_, p) in enumerate(everyone) if p]
    if problems:
        raise CommitLost("tf_ring: the mirror of the last commit cannot be read, so the job "
                         "stops instead of training from an unknown state: "
                         + "; ".join(problems))
    newest = max(n for n, _ in everyone)
    expected = int(os.environ.get(env_names.ELASTIC_COMMITTED, "0") or 0)
    if newest == 0:
        if expected:
            raise CommitLost(
                "tf_ring: the job committed its state %d times before this restart, but no host "
                "of the new world holds a mirror of it (the hosts that did were lost): stopping "
                "rather than silently training again from the start; restart the job from your "
                "own checkpoint" % expected)
        return None
    if newest < expected and rank() == 0:
        print("tf_ring: resuming from commit %d; commit %d was mirrored only on hosts that were "
              "lost" % (newest, expected), file=sys.stderr, flush=True)
    holder = min(r for r, (n, _) in enumerate(everyone) if n == newest)
    snapshot = broadcast_object(found if rank() == holder else None, root_rank=holder,
                                name="elastic.mirror")
    _commits = snapshot["commit"]
    return snapshot["state"]


def exit_for_relaunch():
    """Writes the pending mirror, then leaves with the code the driver reads
    as 'relaunch at the new size'."""
    if _writer is not None:
        _writer.flush(timeout=60)
    sys.stdout.flush()
    sys.stderr.flush()
    # All ranks leave together; nothing collective after this.
    os._exit(env_names.EXIT_HOSTS_UPDATED)


def finish():
    """The job's training returned on every rank: write nothing more and
    remove this host's job directory (the mirror and any spares' sockets),
    so no state is left on the host after the job."""
    global _writer
    if _writer is not None:
        _writer.close()
        _writer = None
    directory = state_dir()
    from tf_ring.runtime.basics import local_rank
    if directory and local_rank() == 0:
        shutil.rmtree(directory, ignore_errors=True)

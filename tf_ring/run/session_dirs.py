"""One base directory per job for Open MPI's session directories.

PRRTE names each daemon's session directory after its pid: /tmp/ompi.<pid>
for mpirun, /tmp/prted.<pid> on the other hosts. A daemon killed outright
(a lost host, a stopped elastic world) leaves its directory behind, PMIx
rendezvous files included. A later daemon that gets the same pid finds
them, and its PMIx server cannot start: mpirun says "The PMIx server's
listener thread failed to start", a remote daemon exits with status 213
and mpirun "failed to report back". Pids repeat within 32768 on many
machines, so the more a machine's /tmp gathers, the likelier a start fails:
with 576 leftovers here, 5 of 300 tfringrun jobs on three simulated hosts
hit one on the shared default base, none of 300 on a base of their own;
with copies of a leftover planted at the next pids, every plain mpirun
start fails (docs/launching.md, tests/unit/test_session_dirs.py).

So each job's daemons keep their directories under /tmp/tfringrun-<token>,
which no other job's leftovers can share. /tmp rather than $TMPDIR: the
same path must work on every host. tfringrun removes this host's base when
the job ends; a remote host keeps an empty one (its daemons remove their
own directories when they exit cleanly).

The base is named on world-readable command lines, so another user could
make it first and PRRTE would use theirs. tfringrun makes this machine's
base itself (mode 0700, checked with private_dirs: a squatted one is
refused, naming it) before mpirun starts. On the other hosts the base is
made by their prted, which tf_ring runs no code before: there the random
token is the only protection (docs/security.md).
"""
import shlex
import shutil
import sys

from tf_ring.plumbing import private_dirs

_PARAM = "prte_tmpdir_base"
_PREFIX = "/tmp/tfringrun-"


def base_for(token):
    return _PREFIX + token


def user_chose_one(mpi_args, environ):
    """The user set PRRTE's base themselves (in --mpi-args or as an MCA
    environment variable): theirs wins."""
    return any(_PARAM in a for a in shlex.split(mpi_args or "")) or any(
        k.endswith("MCA_" + _PARAM) for k in environ)


def mpirun_arguments(token, mpi_args, environ):
    if user_chose_one(mpi_args, environ):
        return []
    return ["--prtemca", _PARAM, base_for(token)]


def make(token, mpi_args, environ):
    """Makes this machine's base of the job `token` before mpirun uses it;
    False (having said why, naming it) when another user's is in the way."""
    if user_chose_one(mpi_args, environ):
        return True
    try:
        private_dirs.make_private_dir(base_for(token))
    except private_dirs.UnsafeDirectory as e:
        print(e, file=sys.stderr, flush=True)
        return False
    return True


def remove(token):
    """Removes this host's base of the job `token` (its daemons have ended),
    only if it is this job's own: never another user's squatted one."""
    try:
        private_dirs.check_private(base_for(token))
    except private_dirs.UnsafeDirectory:
        return
    shutil.rmtree(base_for(token), ignore_errors=True)

"""Each job's Open MPI session directories live under a base of its own: the
mpirun command names it, unless the user chose one. Stale directories
failing a real start: tests/launcher/test_session_dirs_jobs.py."""
from tf_ring.run import arguments, launcher


def command(argv, environ=None):
    return launcher.build_command(arguments.parse_args(argv), is_root=False, cores=2,
                                  environ=environ or {}, token="abc123")


def test_the_command_names_the_jobs_own_base():
    cmd = command(["-np", "2", "python", "t.py"])
    at = cmd.index("prte_tmpdir_base")
    assert cmd[at - 1] == "--prtemca" and cmd[at + 1] == "/tmp/tfringrun-abc123"
    assert cmd.index("prte_tmpdir_base") < cmd.index("sh")  # an mpirun option, not the rank's


def test_a_base_the_user_chose_wins(monkeypatch):
    cmd = command(["-np", "2", "--mpi-args=--prtemca prte_tmpdir_base /scratch/me", "python", "t.py"])
    assert cmd.count("prte_tmpdir_base") == 1 and "/scratch/me" in cmd
    monkeypatch.setenv("PRTE_MCA_prte_tmpdir_base", "/scratch/me")
    assert "prte_tmpdir_base" not in command(["-np", "2", "python", "t.py"])

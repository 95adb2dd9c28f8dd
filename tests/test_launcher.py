"""tfringrun: command construction, exit codes, and naming the failed rank."""
import subprocess
import sys
import time

from conftest import REPO, run_under_launcher
from tf_ring.run import launcher


def build(argv, **kw):
    return launcher.build_command(launcher.parse_args(argv), **kw)


def test_root_and_oversubscribe_flags():
    cmd = build(["-np", "3", "python", "x.py"], is_root=True, cores=2)
    assert "--allow-run-as-root" in cmd and "--oversubscribe" in cmd
    assert cmd[cmd.index("-np") + 1] == "3"
    assert cmd[-2:] == ["python", "x.py"]
    cmd = build(["-np", "2", "python", "x.py"], is_root=False, cores=2)
    assert "--allow-run-as-root" not in cmd and "--oversubscribe" not in cmd


def test_hosts_and_passthrough_arguments():
    cmd = build(["-np", "4", "-H", "a:2,b:2", "--mpi-args", "--mca btl self,tcp", "python", "t.py"],
                is_root=False, cores=1)
    assert cmd[cmd.index("--host") + 1] == "a:2,b:2"
    assert "--oversubscribe" not in cmd  # 4 slots for 4 ranks
    i = cmd.index("--mca")
    assert cmd[i:i + 3] == ["--mca", "btl", "self,tcp"]


def test_missing_command_is_a_usage_error():
    result = subprocess.run([sys.executable, "-m", "tf_ring.run", "-np", "2"], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2 and "no command given" in result.stderr


def test_success_on_three_ranks():
    result = run_under_launcher(3, [sys.executable, "-c",
                                    "import os; print('hello from', os.environ['OMPI_COMM_WORLD_RANK'])"],
                                timeout=120)
    assert result.returncode == 0, result.stderr
    assert sorted(l for l in result.stdout.splitlines() if l.startswith("hello")) == \
        ["hello from 0", "hello from 1", "hello from 2"]


def test_failing_rank_is_named_and_exit_code_forwarded():
    script = "import os, sys, time; r = int(os.environ['OMPI_COMM_WORLD_RANK']); " \
             "sys.exit(7) if r == 1 else time.sleep(60)"
    start = time.time()
    result = run_under_launcher(2, [sys.executable, "-c", script], timeout=120)
    assert result.returncode == 7
    assert "tfringrun: rank 1 exited with code 7" in result.stderr
    # The surviving rank is torn down; nobody waits out its 60 s sleep.
    assert time.time() - start < 45


def test_verbose_prints_command_and_layout():
    result = run_under_launcher(2, ["--verbose", sys.executable, "-c", "pass"], timeout=120)
    assert result.returncode == 0
    assert "tfringrun: 2 ranks on localhost" in result.stderr
    assert "mpirun" in result.stderr and "-np 2" in result.stderr

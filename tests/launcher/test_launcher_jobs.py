"""tfringrun jobs on this host: exit codes, naming the failed rank, engine
flags reaching every rank, signals to the launcher. How it builds the
command and the ranks' environment: tests/unit/test_launcher.py."""
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import (MARKER_VAR, REPO, job_marker, marked_processes_left, processes_marked,
                      run_under_launcher)


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
             "sys.exit(7) if r == 1 else (time.sleep(60), print('survivor slept', flush=True))"
    result = run_under_launcher(2, [sys.executable, "-c", script], timeout=120)
    assert result.returncode == 7
    assert "tfringrun: rank 1 exited with code 7" in result.stderr
    # The surviving rank is torn down; nobody waits out its 60 s sleep.
    assert "survivor slept" not in result.stdout


def test_verbose_prints_command_and_layout():
    result = run_under_launcher(3, ["--verbose", sys.executable, "-c", "pass"], timeout=120)
    assert result.returncode == 0, result.stderr
    assert "tfringrun: 3 ranks on localhost" in result.stderr
    assert "mpirun" in result.stderr and "-np 3" in result.stderr
    table = [line.split()[1:] for line in result.stderr.splitlines()
             if line.startswith("tfringrun:   ")]
    assert table == [["rank", "host", "local", "rank"], ["0", "localhost", "0"],
                     ["1", "localhost", "1"], ["2", "localhost", "2"]]


def test_engine_flags_reach_every_rank():
    script = ("import os; r = os.environ['OMPI_COMM_WORLD_RANK']; "
              "print('env', r, os.environ['TF_RING_FUSION_THRESHOLD'], "
              "os.environ['TF_RING_CYCLE_TIME'])")
    result = run_under_launcher(2, ["--fusion-threshold-mb", "2", "--cycle-time-ms", "1.5",
                                    sys.executable, "-c", script],
                                env={"TF_RING_CYCLE_TIME": "99"}, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = sorted(l for l in result.stdout.splitlines() if l.startswith("env "))
    assert lines == ["env 0 2097152 1.5", "env 1 2097152 1.5"]


@pytest.mark.parametrize("np", [2, 3])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_to_launcher_stops_every_rank(sig, np):
    """Ctrl-C (SIGINT) or kill (SIGTERM) on tfringrun ends the whole job: the
    launcher passes the signal to mpirun instead of dying alone and leaving
    the ranks running."""
    marker = job_marker()
    script = "import time; print('running', flush=True); time.sleep(300)"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tf_ring.run", "-np", str(np), sys.executable, "-c", script],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        env=dict(os.environ, **{MARKER_VAR: marker}),
        # A background child of a non-interactive shell inherits SIGINT ignored.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        started = 0
        while started < np:
            line = proc.stdout.readline()
            assert line, proc.stderr.read()[-3000:]
            started += line.strip() == "running"
        # The marker reaches the ranks (so the check below can see them).
        assert len(processes_marked(marker)) >= np + 1
        start = time.time()
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
        elapsed = time.time() - start
    finally:
        subprocess.run(["pkill", "-KILL", "-s", str(proc.pid)], check=False)
    assert proc.returncode == 128 + sig, (proc.returncode, err[-3000:])
    assert "tfringrun: %s received; the job was stopped on all %d ranks" % (
        signal.Signals(sig).name, np) in err, err[-3000:]
    assert elapsed < 30, elapsed
    assert marked_processes_left(marker) == []


def test_share_gpu_gives_every_rank_its_own_nccl_host_id():
    result = subprocess.run(
        [sys.executable, "-m", "tf_ring.run", "-np", "3", "--share-gpu", "sh", "-c",
         'echo "rank=$OMPI_COMM_WORLD_RANK id=$NCCL_HOSTID ifname=$NCCL_SOCKET_IFNAME"'],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = sorted(l for l in result.stdout.splitlines() if l.startswith("rank="))
    assert lines == ["rank=%d id=tfringrun-share-gpu-rank-%d ifname=lo" % (r, r) for r in range(3)], lines


def test_without_share_gpu_no_nccl_host_id_is_set():
    env = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
    result = subprocess.run(
        [sys.executable, "-m", "tf_ring.run", "-np", "2", "sh", "-c", 'echo "id=[$NCCL_HOSTID]"'],
        capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("id=[]") == 2, result.stdout


def test_the_ranks_start_without_the_libfabric_btl():
    """Open MPI's ofi BTL costs every process 1 s of MPI_Init here; the ranks
    start without it (the environment's rule: tests/unit/test_launcher.py)."""
    code = "import os; from mpi4py import MPI; print('INIT', os.environ['OMPI_MCA_btl'], flush=True)"
    env = {k: v for k, v in os.environ.items() if k != "OMPI_MCA_btl"}
    result = subprocess.run([sys.executable, "-m", "tf_ring.run", "-np", "2", sys.executable,
                             "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    lines = [l.split() for l in result.stdout.splitlines() if l.startswith("INIT")]
    assert len(lines) == 2 and all(l[1] == "^ofi" for l in lines), result.stdout

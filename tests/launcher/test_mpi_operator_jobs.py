"""tfringrun jobs in a Kubeflow MPI Operator launcher pod's environment
(MPIJob v2beta1), its worker pods stood in for by an agent that runs the
daemon here as that pod: the ranks land on the listed pods, and an elastic
job takes its pods from the operator's discovery script. How the operator's
settings are read: tests/unit/test_mpi_operator.py."""
import os
import subprocess
import sys

from conftest import REPO
from unit.test_mpi_operator import operator_env


def pod_agent(tmp_path):
    """An agent standing in for ssh into a worker pod: it logs how it was
    called and runs the daemon here with POD set, which the ranks inherit."""
    log, agent = tmp_path / "agent.log", tmp_path / "pod_agent"
    agent.write_text('#!/bin/sh\necho "$*" | cut -c1-80 >> %s\n'
                     'while [ $# -gt 0 ]; do case "$1" in *.svc) POD=$1; shift; break ;; '
                     '*) shift ;; esac; done\nexport POD\nexec /bin/sh -c "$*"\n' % log)
    agent.chmod(0o755)
    return agent, log


PRINT_RANK = ("import os; e = os.environ; print('rank', e['OMPI_COMM_WORLD_RANK'], 'of', "
              "e['OMPI_COMM_WORLD_SIZE'], 'in', e.get('POD'))")


def run_in_launcher_pod(tmp_path, argv):
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""),
               **operator_env(tmp_path / "hostfile"))
    done = subprocess.run([sys.executable, "-m", "tf_ring.run"] + argv, cwd=REPO, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    out, err = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 0, err[-3000:]
    return sorted(out.split("\n")[:-1]), err


def test_a_launcher_pod_job_runs_its_ranks_on_the_listed_pods(tmp_path):
    """A real tfringrun job in a launcher pod's environment, the worker
    pods reached through pod_agent."""
    (tmp_path / "hostfile").write_text("w-0.job.ns.svc slots=1\nw-1.job.ns.svc slots=1\n")
    agent, log = pod_agent(tmp_path)
    out, err = run_in_launcher_pod(tmp_path, ["--rsh-agent", str(agent), sys.executable, "-c",
                                              PRINT_RANK])
    assert out == ["rank 0 of 2 in w-0.job.ns.svc", "rank 1 of 2 in w-1.job.ns.svc"], out
    # The operator's ssh options reached the agent under PRRTE's name.
    calls = sorted(line.split(" PRTE_PREFIX=")[0] for line in log.read_text().splitlines())
    assert calls == ["-o ConnectionAttempts=10 w-0.job.ns.svc",
                     "-o ConnectionAttempts=10 w-1.job.ns.svc"], calls
    assert err.count("Open MPI 5 ignores") == 1, err


def test_an_elastic_launcher_pod_job_takes_its_pods_from_the_discovery_script(tmp_path):
    """The operator's discover_hosts.sh lists pods without slots; with
    --slots-per-host 2 the first world fills both pods' two slots."""
    (tmp_path / "hostfile").write_text("w-0.job.ns.svc slots=1\n")
    script = tmp_path / "discover_hosts.sh"
    script.write_text("#!/bin/sh\necho w-0.job.ns.svc\necho w-1.job.ns.svc\n")
    script.chmod(0o755)
    agent, _ = pod_agent(tmp_path)
    out, err = run_in_launcher_pod(tmp_path, [
        "--rsh-agent", str(agent), "--min-np", "2", "--max-np", "4", "--host-discovery-script",
        str(script), "--slots-per-host", "2", sys.executable, "-c", PRINT_RANK])
    assert out == ["rank %d of 4 in w-%d.job.ns.svc" % (r, r // 2) for r in range(4)], out
    assert "4 ranks on w-0.job.ns.svc:2,w-1.job.ns.svc:2" in err, err
    assert err.count("Open MPI 5 ignores") == 1, err  # once, not once a world

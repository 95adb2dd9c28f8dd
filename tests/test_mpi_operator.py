"""tfringrun in a Kubeflow MPI Operator launcher pod (MPIJob v2beta1): the
operator's host file and its Open MPI 4 (ORTE) variables, which Open MPI 5
ignores, become hosts and PRRTE settings; then one real job whose
environment looks like a launcher pod's, its worker pods stood in for by an
agent that runs the daemon here as that pod."""
import os
import subprocess
import sys

import pytest

from tf_ring.run import arguments, cluster_hosts, launcher, mpi_operator
from tf_ring.elastic_driver.discovery import parse_hosts, run_discovery

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PODS = "tf-ring-digits-worker-0.tf-ring-digits.default.svc"


def operator_env(hostfile, **more):
    """What the operator sets in an OpenMPI launcher pod."""
    return dict({"K_MPI_JOB_ROLE": "launcher", "OMPI_MCA_orte_default_hostfile": str(hostfile),
                 "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
                 "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10"}, **more)


def hostfile(tmp_path, pods=2, slots=2):
    path = tmp_path / "hostfile"
    path.write_text("".join("tf-ring-digits-worker-%d.tf-ring-digits.default.svc slots=%d\n"
                            % (i, slots) for i in range(pods)))
    return path


def parse(argv, environ):
    return arguments.parse_args(argv + ["python", "x.py"], environ=environ)


def mpirun(argv, environ):
    return launcher.build_command(parse(argv, environ), is_root=False, cores=2, environ={})


def prtemca(cmd):
    return {cmd[i + 1]: cmd[i + 2] for i, word in enumerate(cmd) if word == "--prtemca"}


def test_the_host_file_is_found_from_either_variable(tmp_path):
    assert mpi_operator.hostfile({}) == (None, None)
    assert mpi_operator.hostfile({"K_MPI_JOB_ROLE": "worker"}) == (None, None)
    assert mpi_operator.hostfile({"K_MPI_JOB_ROLE": "launcher"}) == (
        "/etc/mpi/hostfile", "K_MPI_JOB_ROLE=launcher")
    assert mpi_operator.hostfile({"OMPI_MCA_orte_default_hostfile": "/x/h"}) == (
        "/x/h", "OMPI_MCA_orte_default_hostfile")


def test_a_launcher_pod_runs_on_the_workers_of_the_host_file(tmp_path):
    args = parse([], operator_env(hostfile(tmp_path)))
    assert args.host_list == [(PODS, 2), (PODS.replace("-0.", "-1."), 2)]
    assert args.np == 4 and "MPI Operator host file" in args.hosts_source
    cmd = mpirun([], operator_env(hostfile(tmp_path)))
    assert cmd[cmd.index("--host") + 1] == "%s:2,%s:2" % (PODS, PODS.replace("-0.", "-1."))
    assert prtemca(cmd)["plm_ssh_args"] == "-o ConnectionAttempts=10"
    assert prtemca(cmd)["prte_keep_fqdn_hostnames"] == "true"


def test_the_default_path_is_read_when_only_the_role_is_set(tmp_path, monkeypatch):
    monkeypatch.setattr(mpi_operator, "DEFAULT_HOSTFILE", str(hostfile(tmp_path, pods=1)))
    args = parse([], {"K_MPI_JOB_ROLE": "launcher"})
    assert args.host_list == [(PODS, 2)] and "K_MPI_JOB_ROLE=launcher" in args.hosts_source


def test_explicit_hosts_and_slurm_win_and_workers_are_left_alone(tmp_path):
    env = operator_env(hostfile(tmp_path))
    assert parse(["-H", "a:2"], env).host_list == [("a", 2)]
    slurm = dict(env, SLURM_JOB_NODELIST="c1", SLURM_TASKS_PER_NODE="3")
    assert parse([], slurm).host_list == [("c1", 3)]
    assert parse(["-np", "1"], {"K_MPI_JOB_ROLE": "worker"}).host_list is None


def test_a_missing_or_bad_operator_host_file_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit):
        parse([], operator_env(tmp_path / "absent"))
    assert "does not exist" in capsys.readouterr().err
    bad = tmp_path / "bad"
    bad.write_text("-oProxyCommand=x slots=1\n")
    with pytest.raises(cluster_hosts.HostsError, match="line 1.*not a host name"):
        cluster_hosts.resolve(None, None, operator_env(bad))


def test_ssh_port_joins_the_operators_ssh_options_in_one_setting(tmp_path):
    cmd = mpirun(["--ssh-port", "2222"], operator_env(hostfile(tmp_path)))
    assert prtemca(cmd)["plm_ssh_args"] == "-o ConnectionAttempts=10 -p 2222"
    assert cmd.count("plm_ssh_args") == 1


def test_the_users_own_prrte_settings_win(tmp_path):
    env = operator_env(hostfile(tmp_path), PRTE_MCA_plm_ssh_args="-o Theirs=1")
    assert "plm_ssh_args" not in prtemca(mpirun([], env))
    env = operator_env(hostfile(tmp_path))
    cmd = mpirun(["--mpi-args", "--prtemca prte_keep_fqdn_hostnames false"], env)
    assert cmd[cmd.index("prte_keep_fqdn_hostnames") + 1] == "false"
    assert cmd.count("prte_keep_fqdn_hostnames") == 1


def test_the_warning_names_each_orte_variable_and_what_was_done(tmp_path):
    env = operator_env(hostfile(tmp_path), OMPI_MCA_orte_base_help_aggregate="0")
    args = parse([], env)
    text = args.orte_warning
    assert text.startswith("tfringrun: Open MPI 5 ignores") and "\n" not in text
    assert "OMPI_MCA_orte_default_hostfile (read by tfringrun as the host file)" in text
    assert "OMPI_MCA_plm_rsh_args (passed on as --prtemca plm_ssh_args)" in text
    assert "OMPI_MCA_orte_keep_fqdn_hostnames (passed on as --prtemca prte_keep_fqdn_hostnames)" \
        in text
    assert "OMPI_MCA_orte_base_help_aggregate (ignored; PRRTE's name is usually " \
           "prte_base_help_aggregate" in text
    assert "not used: the hosts came from elsewhere" in parse(["-H", "a"], env).orte_warning
    assert parse(["-np", "1"], {}).orte_warning is None


def test_the_operators_discovery_script_lists_pods_without_slots(tmp_path):
    script = tmp_path / "discover_hosts.sh"
    script.write_text("#!/bin/sh\necho %s\necho %s\n" % (PODS, PODS.replace("-0.", "-1.")))
    script.chmod(0o755)
    assert run_discovery(str(script), default_slots=2) == [(PODS, 2),
                                                           (PODS.replace("-0.", "-1."), 2)]
    assert parse_hosts(PODS + "\n") == [(PODS, 1)]


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

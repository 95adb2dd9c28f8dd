"""tfringrun in a Kubeflow MPI Operator launcher pod (MPIJob v2beta1): the
operator's host file and its Open MPI 4 (ORTE) variables, which Open MPI 5
ignores, become hosts and PRRTE settings. Real jobs in a launcher pod's
environment: tests/launcher/test_mpi_operator_jobs.py."""
import pytest

from tf_ring.run import arguments, cluster_hosts, launcher, mpi_operator
from tf_ring.elastic_driver.discovery import parse_hosts, run_discovery

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



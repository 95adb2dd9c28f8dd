"""tfringrun on clusters: host files, Slurm's compressed host lists, slot
checks and the network flags, as parsed before anything starts."""

import pytest

from tf_ring.run import arguments, cluster_hosts, launcher
from tf_ring.run.cluster_hosts import HostsError, expand_nodelist, expand_tasks_per_node


def write(tmp_path, text, name="hosts"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# --- host files ---------------------------------------------------------------

def test_hostfile_with_comments_blank_lines_and_default_slots(tmp_path):
    path = write(tmp_path, "# two big nodes\nnode1 slots=4\n\n  node2   slots=2  # spare\nnode3\n")
    assert cluster_hosts.read_hostfile(path) == [("node1", 4), ("node2", 2), ("node3", 1)]


@pytest.mark.parametrize("line", ["node1 slots=0", "node1 slots=x", "node1 slots=", "node1 cpus=2",
                                  "node1 slots=-2"])
def test_hostfile_bad_slots_names_the_line(tmp_path, line):
    path = write(tmp_path, "node0 slots=1\n" + line + "\n")
    with pytest.raises(HostsError) as e:
        cluster_hosts.read_hostfile(path)
    assert "line 2" in str(e.value) and line in str(e.value) and "slots=N" in str(e.value)


def test_hostfile_missing_or_empty(tmp_path):
    with pytest.raises(HostsError, match="does not exist"):
        cluster_hosts.read_hostfile(str(tmp_path / "nope"))
    with pytest.raises(HostsError, match="names no hosts"):
        cluster_hosts.read_hostfile(write(tmp_path, "# nothing\n\n"))


# --- Slurm --------------------------------------------------------------------

@pytest.mark.parametrize("nodelist,expected", [
    ("node[01-03,07]", ["node01", "node02", "node03", "node07"]),
    ("a[1-2],b3", ["a1", "a2", "b3"]),
    ("single", ["single"]),
    ("gpu[8-11]", ["gpu8", "gpu9", "gpu10", "gpu11"]),
    ("n[098-101]", ["n098", "n099", "n100", "n101"]),
    ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
    ("x[5],y[001-002].ib", ["x5", "y001.ib", "y002.ib"]),
])
def test_expand_nodelist(nodelist, expected):
    assert expand_nodelist(nodelist) == expected


@pytest.mark.parametrize("nodelist", ["node[01-", "node[3-1]", "node[a-b]", "a,,b", "node]1["])
def test_bad_nodelist(nodelist):
    with pytest.raises(HostsError, match="SLURM_JOB_NODELIST"):
        expand_nodelist(nodelist)


@pytest.mark.parametrize("tasks,expected", [
    ("2(x3),1", [2, 2, 2, 1]), ("4", [4]), ("1,2,3", [1, 2, 3]), ("8(x2)", [8, 8])])
def test_expand_tasks_per_node(tasks, expected):
    assert expand_tasks_per_node(tasks) == expected


@pytest.mark.parametrize("tasks", ["2(3)", "x", "0", "2(x3", ""])
def test_bad_tasks_per_node(tasks):
    with pytest.raises(HostsError, match="SLURM_TASKS_PER_NODE"):
        expand_tasks_per_node(tasks)


def test_slurm_hosts_pairs_nodes_with_tasks():
    env = {"SLURM_JOB_NODELIST": "node[01-03,07]", "SLURM_TASKS_PER_NODE": "2(x3),1"}
    assert cluster_hosts.slurm_hosts(env) == [("node01", 2), ("node02", 2), ("node03", 2),
                                              ("node07", 1)]
    assert cluster_hosts.slurm_hosts({}) is None
    with pytest.raises(HostsError, match="gives 2 nodes but .* has 4"):
        cluster_hosts.slurm_hosts(dict(env, SLURM_TASKS_PER_NODE="2(x2)"))


# --- the launcher: where hosts come from, and the slot check -----------------------

SLURM = {"SLURM_JOB_NODELIST": "c[1-2]", "SLURM_TASKS_PER_NODE": "2(x2)"}


def parse(argv, environ=None):
    return arguments.parse_args(argv + ["python", "x.py"], environ={} if environ is None else environ)


def mpirun_cmd(argv, environ=None):
    return launcher.build_command(parse(argv, environ), is_root=False, cores=2, environ={})


def usage_error(argv, capsys, environ=None):
    with pytest.raises(SystemExit) as e:
        parse(argv, environ)
    assert e.value.code == 2
    return capsys.readouterr().err


def test_slurm_allocation_is_used_when_no_hosts_are_given():
    cmd = mpirun_cmd([], environ=SLURM)
    assert cmd[cmd.index("--host") + 1] == "c1:2,c2:2"
    assert cmd[cmd.index("-np") + 1] == "4"  # -np defaults to the allocation's slots
    # Explicit hosts win over the allocation.
    cmd = mpirun_cmd(["-np", "2", "-H", "z:2"], environ=SLURM)
    assert cmd[cmd.index("--host") + 1] == "z:2"


def test_hostfile_becomes_the_host_list(tmp_path):
    path = write(tmp_path, "big slots=3\nsmall\n")
    args = parse(["-np", "4", "--hostfile", path], environ=SLURM)
    assert args.hosts == "big:3,small:1" and args.hosts_source == "--hostfile " + path
    cmd = launcher.build_command(args, is_root=False, cores=1, environ={"TF_RING_SHM": "0"})
    assert cmd[cmd.index("--host") + 1] == "big:3,small:1" and "--oversubscribe" not in cmd
    assert cmd[cmd.index("-x") + 1] == "TF_RING_SHM"  # remote hosts get the environment


def test_host_errors_are_usage_errors(tmp_path, capsys):
    assert "does not exist" in usage_error(["-np", "2", "--hostfile", str(tmp_path / "no")], capsys)
    bad = write(tmp_path, "a slots=two\n")
    assert "line 1" in usage_error(["-np", "2", "--hostfile", bad], capsys)
    assert "not both" in usage_error(["-np", "2", "-H", "a", "--hostfile", bad], capsys)
    assert "SLURM_TASKS_PER_NODE" in usage_error(
        ["-np", "2"], capsys, environ=dict(SLURM, SLURM_TASKS_PER_NODE="2(x3)"))
    assert "-np is required" in usage_error([], capsys)


def test_more_ranks_than_slots_needs_oversubscribe(tmp_path, capsys):
    err = usage_error(["-np", "5", "-H", "a:2,b:2"], capsys)
    assert "-np 5 is more ranks than the 4 slots of a:2,b:2" in err and "--oversubscribe" in err
    path = write(tmp_path, "a slots=1\n")
    assert "from --hostfile" in usage_error(["-np", "2", "--hostfile", path], capsys)
    assert "from Slurm" in usage_error(["-np", "9"], capsys, environ=SLURM)
    cmd = mpirun_cmd(["-np", "5", "-H", "a:2,b:2", "--oversubscribe"])
    assert "--oversubscribe" in cmd
    # This machine alone: cores are no promise, so more ranks just oversubscribe.
    assert "--oversubscribe" in mpirun_cmd(["-np", "3"])


def test_network_interface_pins_control_and_data_traffic():
    cmd = " ".join(mpirun_cmd(["-np", "2", "-H", "a,b", "--network-interface", "10.1.2.0/24"]))
    assert "--prtemca oob_tcp_if_include 10.1.2.0/24" in cmd
    assert "--mca btl_tcp_if_include 10.1.2.0/24" in cmd
    assert "if_include" not in " ".join(mpirun_cmd(["-np", "2", "-H", "a,b"]))


def test_ssh_port_and_rsh_agent_pass_through(tmp_path, capsys, monkeypatch):
    cmd = mpirun_cmd(["-np", "2", "-H", "a,b", "--ssh-port", "2222"])
    i = cmd.index("plm_ssh_args")
    assert cmd[i - 1:i + 2] == ["--prtemca", "plm_ssh_args", "-p 2222"]
    agent = write(tmp_path, "#!/bin/sh\n", name="agent.sh")
    monkeypatch.chdir(tmp_path)
    cmd = " ".join(mpirun_cmd(["-np", "2", "-H", "a,b", "--rsh-agent", "agent.sh"]))
    assert "--mca plm_rsh_agent %s" % agent in cmd and "--prtemca plm_rsh_agent %s" % agent in cmd
    assert "not a port" in usage_error(["-np", "2", "-H", "a,b", "--ssh-port", "0"], capsys)


def test_verbose_layout_shows_the_hosts(tmp_path, capsys):
    path = write(tmp_path, "n1 slots=2\nn2 slots=1\n")
    args = parse(["-np", "3", "--hostfile", path, "--verbose"])
    launcher._print_plan(args, ["mpirun"])
    err = capsys.readouterr().err
    assert "tfringrun: 3 ranks on n1:2,n2:1 (from --hostfile %s)" % path in err
    table = [line.split()[1:] for line in err.splitlines() if line.startswith("tfringrun:   ")]
    assert table == [["rank", "host", "local", "rank"], ["0", "n1", "0"], ["1", "n1", "1"],
                     ["2", "n2", "0"]]

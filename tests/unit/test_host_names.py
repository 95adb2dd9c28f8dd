"""Host names from every source (-H, host files, Slurm, discovery scripts)
are checked before they reach ssh or mpirun's --host list: a name that
ssh would read as an option, or that adds hosts or slots, is refused
with a message naming where it came from."""
import pytest

from tf_ring.run import arguments, cluster_hosts
from tf_ring.plumbing import host_agent, host_names
from tf_ring.elastic_driver import spare_seeding
from tf_ring.elastic_driver.discovery import DiscoveryError, parse_hosts

EVIL = ["-oProxyCommand=touch /tmp/pwned", "a,b", "a b", "a;b", "a$(id)", "-", "[not-ipv6]",
        "a:b", "a/b", ""]


@pytest.mark.parametrize("name", ["node01", "n-1.cluster.local", "NODE_7", "10.0.0.5",
                                  "[fe80::1]", "[::1]", "[fe80::1%eth0]",
                                  "w-0.job.ns.svc"])
def test_ordinary_names_and_bracketed_ipv6_are_accepted(name):
    assert host_names.check(name, "here") == name


@pytest.mark.parametrize("name", EVIL)
def test_option_like_and_list_like_names_are_refused(name):
    with pytest.raises(ValueError) as e:
        host_names.check(name, "somewhere line 3")
    assert "somewhere line 3" in str(e.value) and "not a host name" in str(e.value)


def test_slots_split_off_ipv6_addresses_correctly():
    assert host_names.split_slots("[fe80::1]:2") == ("[fe80::1]", "2")
    assert host_names.split_slots("[::1]") == ("[::1]", "")
    assert host_names.split_slots("node:4") == ("node", "4")


def test_the_h_flag_refuses_an_ssh_option_as_a_host(capsys):
    with pytest.raises(SystemExit):
        arguments.parse_args(["-np", "1", "-H", "a:1,-oProxyCommand=sh:1", "true"], environ={})
    err = capsys.readouterr().err
    assert "-H" in err and "'-oProxyCommand=sh' is not a host name" in err
    args = arguments.parse_args(["-np", "2", "-H", "[fe80::1]:2", "true"], environ={})
    assert args.host_list == [("[fe80::1]", 2)]


def test_a_host_file_line_with_a_bad_name_is_refused_naming_the_line(tmp_path):
    path = tmp_path / "hosts"
    path.write_text("good slots=2\na,b slots=1\n")
    with pytest.raises(cluster_hosts.HostsError) as e:
        cluster_hosts.read_hostfile(str(path))
    assert "%s line 2" % path in str(e.value) and "'a,b'" in str(e.value)
    path.write_text("-oProxyCommand=x slots=1\n")
    with pytest.raises(cluster_hosts.HostsError, match="line 1"):
        cluster_hosts.read_hostfile(str(path))


def test_slurm_names_are_checked_too():
    with pytest.raises(cluster_hosts.HostsError, match="not a host name"):
        cluster_hosts.expand_nodelist("-oProxyCommand=x")


@pytest.mark.parametrize("line", ["-oProxyCommand=touch /tmp/x", "-oProxyCommand=x:1", "a,b:1",
                                  "a;reboot", "[fe80::1]:"])
def test_discovery_output_with_a_bad_name_is_refused_naming_the_line(line):
    with pytest.raises(DiscoveryError) as e:
        parse_hosts("ok:1\n" + line + "\n", script="discover.sh")
    assert "discover.sh" in str(e.value) and "line 2" in str(e.value)


def test_discovery_takes_bracketed_ipv6_with_and_without_slots():
    assert parse_hosts("[fe80::1]:2\n[fe80::2]\n", default_slots=3) == [("[fe80::1]", 2),
                                                                       ("[fe80::2]", 3)]


def test_every_ssh_argv_tf_ring_builds_ends_its_options_before_the_host():
    class Args:
        rsh_agent, ssh_port = None, 22
    seed = spare_seeding.remote_argv(Args, "node7", "cmd")
    assert seed[0] == "ssh" and seed[-3:] == ["--", "node7", "cmd"]
    stop = host_agent.agent_argv("node7", "cmd", ssh_port=22)
    assert stop[0] == "ssh" and stop[-3:] == ["--", "node7", "cmd"]
    # An ssh given as the agent gets it too; another program is called as
    # mpirun calls it (AGENT HOST COMMAND): names never start with '-'.
    ssh_agent = host_agent.agent_argv("n", "c", rsh_agent="/usr/bin/ssh -i k")
    assert ssh_agent[-3:] == ["--", "n", "c"]
    assert host_agent.agent_argv("n", "c", rsh_agent="/x/agent") == ["/x/agent", "n", "c"]

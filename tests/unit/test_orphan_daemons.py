"""The launcher's cleanup of daemons a failed start left on other hosts:
which processes its pattern selects, and how it reaches a host."""
import re
import time

from conftest import MARKER_VAR, job_marker, marked_processes_left
from tf_ring.plumbing import host_agent
from tf_ring.run import orphan_daemons

DAEMON_ARGS = ("/venv/bin/prted --allow-run-as-root --prtemca ess env --prtemca ess_base_nspace "
               "prterun-node7-29417@0 --prtemca ess_base_vpid 1")


def test_the_pattern_selects_this_jobs_daemons_only():
    pattern = re.compile(orphan_daemons.daemon_pattern(29417))
    assert pattern.search(DAEMON_ARGS)
    assert pattern.search(DAEMON_ARGS.replace("node7", "a-b.example.com"))
    for other_job in ("29418", "2941", "129417"):
        assert not pattern.search(DAEMON_ARGS.replace("29417", other_job)), other_job


def test_the_pattern_does_not_select_the_shell_that_runs_pkill():
    pattern = orphan_daemons.daemon_pattern(29417)
    remote_shell = "/bin/sh -c pkill -KILL -f '%s'" % pattern
    assert not re.search(pattern, remote_shell)


def test_agent_argv_uses_the_jobs_agent_or_batch_mode_ssh():
    assert host_agent.agent_argv("h1", "cmd", rsh_agent="/x/agent -q") == \
        ["/x/agent", "-q", "h1", "cmd"]
    argv = host_agent.agent_argv("h1", "cmd", ssh_port=2222)
    assert argv[0] == "ssh" and "BatchMode=yes" in argv
    assert argv[argv.index("-p") + 1] == "2222" and argv[-2:] == ["h1", "cmd"]


def test_a_hanging_agent_is_given_up_on_within_the_timeout(tmp_path):
    agent = tmp_path / "agent"
    marker = job_marker()  # this test's sleeps only, not another run's
    agent.write_text("#!/bin/sh\nexport %s=%s\nexec sleep 613\n" % (MARKER_VAR, marker))
    agent.chmod(0o755)
    start = time.time()
    orphan_daemons.stop_orphaned_daemons(["h1", "h2"], 123, rsh_agent=str(agent), timeout=1.0)
    assert time.time() - start < 30  # given up after 1 s, not the agent's 613 (a busy machine is slow)
    assert marked_processes_left(marker, within=0) == []


def test_the_agent_runs_pkill_with_the_pattern_on_each_remote_host(tmp_path):
    log = tmp_path / "log"
    agent = tmp_path / "agent"
    agent.write_text('#!/bin/sh\necho "$@" >> %s\n' % log)
    agent.chmod(0o755)
    orphan_daemons.stop_orphaned_daemons(["h1", "localhost", "h2"], 4242, rsh_agent=str(agent))
    lines = sorted(log.read_text().splitlines())
    assert lines == ["h1 pkill -KILL -f 'prterun-.*-424[2]@'",
                     "h2 pkill -KILL -f 'prterun-.*-424[2]@'"], lines

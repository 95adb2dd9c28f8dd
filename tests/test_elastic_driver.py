"""tfringrun's elastic driver: the restart loop with a fake launch (no
processes), and real tfringrun runs for the cases that end before or without
a restart (below --min-np, a failing discovery script, an ordinary rank
error that must not count as a host loss)."""
import argparse
import os
import subprocess
import sys

import pytest

from tf_ring.run import elastic_driver, launcher
from tf_ring.run.elastic_plan import EXIT_HOSTS_UPDATED

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def script(tmp_path, text, name="discover.sh"):
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + text)
    path.chmod(0o755)
    return str(path)


def driver_args(tmp_path, lines, **over):
    values = dict(min_np=2, max_np=None, host_discovery_script=script(tmp_path, lines),
                  slots_per_host=1, elastic_timeout=0.0, reset_limit=None,
                  blacklist_cooldown_range=None, host_list=None)
    values.update(over)
    return argparse.Namespace(**values)


def test_loss_blacklists_the_host_and_restarts_smaller(tmp_path, capsys):
    args = driver_args(tmp_path, "echo a:2\necho b:1\n")
    worlds, results = [], [(1, {"b"}), (0, set())]

    def launch(world, env):
        worlds.append((world.np, world.hosts))
        assert os.environ.get("TF_RING_ELASTIC_SECRET") is None and env["TF_RING_ELASTIC_SECRET"]
        return results.pop(0)

    assert elastic_driver.Driver(args, {}, launch, sleep=lambda s: None).run() == 0
    assert worlds == [(3, "a:2,b:1"), (2, "a:2")]


def test_hosts_updated_exit_relaunches_and_reset_limit_caps(tmp_path, capsys):
    args = driver_args(tmp_path, "echo a:3\n", max_np=2, reset_limit=1)
    calls = []

    def launch(world, env):
        calls.append(world.np)
        return EXIT_HOSTS_UPDATED, set()

    rc = elastic_driver.Driver(args, {}, launch, sleep=lambda s: None).run()
    assert rc == EXIT_HOSTS_UPDATED and calls == [2, 2]
    assert "--reset-limit 1" in capsys.readouterr().err


def test_ordinary_failure_is_not_a_host_loss(tmp_path):
    args = driver_args(tmp_path, "echo a:2\n")
    calls = []

    def launch(world, env):
        calls.append(world.np)
        return 1, set()

    assert elastic_driver.Driver(args, {}, launch).run() == 1 and calls == [2]


def tfringrun(*argv, timeout=120):
    env = dict(os.environ, PYTHONPATH=REPO)
    return subprocess.run([sys.executable, "-m", "tf_ring.run"] + list(argv), cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_below_min_np_waits_then_names_the_minimum(tmp_path):
    found = script(tmp_path, "echo localhost:1\n")
    done = tfringrun("-np", "2", "--min-np", "2", "--host-discovery-script", found,
                     "--elastic-timeout", "1.5", sys.executable, "-c", "pass")
    assert done.returncode != 0
    assert "--min-np needs at least 2" in done.stderr and "--elastic-timeout" in done.stderr


def test_discovery_script_failure_is_clear(tmp_path):
    bad = script(tmp_path, "echo cannot reach inventory >&2\nexit 4\n")
    done = tfringrun("-np", "2", "--min-np", "1", "--host-discovery-script", bad,
                     sys.executable, "-c", "pass")
    assert done.returncode != 0 and "exited 4" in done.stderr and "cannot reach inventory" in done.stderr
    garbled = script(tmp_path, "echo 'localhost:two'\n", "garbled.sh")
    done = tfringrun("-np", "2", "--min-np", "1", "--host-discovery-script", garbled,
                     sys.executable, "-c", "pass")
    assert done.returncode != 0 and "localhost:two" in done.stderr and "line 1" in done.stderr


def test_real_rank_exception_fails_without_restart(tmp_path):
    found = script(tmp_path, "echo localhost:2\n")
    code = ("import os, sys\n"
            "if os.environ.get('OMPI_COMM_WORLD_RANK') == '1': raise ValueError('boom')\n")
    done = tfringrun("-np", "2", "--min-np", "2", "--host-discovery-script", found,
                     sys.executable, "-c", code)
    assert done.returncode != 0, done.stderr
    assert "ValueError: boom" in done.stderr and "restarting" not in done.stderr
    assert "job failed with exit code" in done.stderr  # said once the driver knows it is final
    assert done.stderr.count("elastic world") == 1


def test_elastic_flags_need_a_host_source_and_sane_bounds():
    with pytest.raises(SystemExit):
        launcher.parse_args(["-np", "2", "--min-np", "2", "python", "x.py"], environ={})
    with pytest.raises(SystemExit):
        launcher.parse_args(["-np", "2", "--min-np", "3", "--max-np", "2",
                             "--host-discovery-script", "true", "python", "x.py"], environ={})
    plain = launcher.parse_args(["-np", "2", "python", "x.py"], environ={})
    assert not elastic_driver.is_elastic(plain)


@pytest.mark.parametrize("lost, rc, says_failed", [(["simhost2"], 14, False),
                                                   ([], EXIT_HOSTS_UPDATED, False),
                                                   ([], 1, True)])
def test_only_a_world_that_is_not_restarted_says_the_job_failed(monkeypatch, capsys, lost, rc,
                                                                says_failed):
    """A world ending in a restart (ranks lost, hosts added) must not print
    "job failed" before the driver's "restarting"; an ordinary failure must."""
    monkeypatch.setattr(launcher, "build_command", lambda *a, **k: ["mpirun"])
    monkeypatch.setattr(launcher, "_run_job", lambda *a, **k: rc)
    monkeypatch.setattr(launcher.elastic_plan, "judge_world", lambda *a, **k: (rc, set(lost)))
    world = argparse.Namespace(np=2, hosts="localhost:2", start_timeout=None)
    assert launcher._run_world(world, {}, "token", None) == (rc, set(lost))
    said = "job failed with exit code %d" % rc in capsys.readouterr().err
    assert said == says_failed

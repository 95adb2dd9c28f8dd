"""tfringrun in this process: command construction, engine flags, the ranks'
environment, --check-build and --help. Jobs it runs (exit codes, naming the
failed rank, signals): tests/launcher/test_launcher_jobs.py."""
import io
import json
import os
import subprocess
import sys

import pytest

from tf_ring.plumbing.job_settings import ElasticSettings, JobSettings, launcher_argv
from tf_ring.run import arguments, check_build, engine_flags, launcher, layout


def build(argv, **kw):
    return launcher.build_command(arguments.parse_args(argv), **kw)


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


def test_layout_fills_hosts_in_order():
    assert layout.rank_layout(5, "a:2,b:2") == [
        (0, "a", 0), (1, "a", 1), (2, "b", 0), (3, "b", 1), (4, "a", 2)]
    assert layout.rank_layout(2, "a,b") == [(0, "a", 0), (1, "b", 0)]
    assert layout.rank_layout(3, None, local_slots=2) == [
        (0, "localhost", 0), (1, "localhost", 1), (2, "localhost", 2)]


@pytest.mark.parametrize("hosts", ["a:0", "a:x", ":2", "a:2,,b"])
def test_bad_host_list_is_a_usage_error(hosts, capsys):
    with pytest.raises(SystemExit) as e:
        arguments.parse_args(["-np", "2", "-H", hosts, "python", "x.py"])
    assert e.value.code == 2
    assert "bad host entry" in capsys.readouterr().err


# --- engine flags -----------------------------------------------------------

def child_env(argv, base=None):
    args = arguments.parse_args(argv + ["python", "x.py"])
    return launcher.child_environment(args, base={} if base is None else base)


# One example per flag: (argv, variable, expected text).
FLAG_EXAMPLES = [
    (["--fusion-threshold-mb", "2"], "TF_RING_FUSION_THRESHOLD", str(2 * 1024 * 1024)),
    (["--fusion-threshold-mb", "0.5"], "TF_RING_FUSION_THRESHOLD", str(512 * 1024)),
    (["--fusion-threshold-mb", "0"], "TF_RING_FUSION_THRESHOLD", "0"),
    (["--cycle-time-ms", "1.5"], "TF_RING_CYCLE_TIME", "1.5"),
    (["--cycle-time-ms", "5"], "TF_RING_CYCLE_TIME", "5"),
    (["--cache-capacity", "0"], "TF_RING_CACHE_CAPACITY", "0"),
    (["--cache-capacity", "256"], "TF_RING_CACHE_CAPACITY", "256"),
    (["--no-shm"], "TF_RING_SHM", "0"),
    (["--timeline-filename", "t.json"], "TF_RING_TIMELINE", os.path.join(os.getcwd(), "t.json")),
    (["--timeline-mark-cycles"], "TF_RING_TIMELINE_MARK_CYCLES", "1"),
    (["--autotune"], "TF_RING_AUTOTUNE", "1"),
    (["--autotune-log-file", "/tmp/at.csv"], "TF_RING_AUTOTUNE_LOG", "/tmp/at.csv"),
    (["--stall-check-time", "30"], "TF_RING_STALL_CHECK_TIME_SECONDS", "30"),
    (["--no-stall-check"], "TF_RING_STALL_CHECK_TIME_SECONDS", "0"),
    (["--stall-shutdown-time", "120.5"], "TF_RING_STALL_SHUTDOWN_TIME_SECONDS", "120.5"),
    (["--log-level", "debug"], "TF_RING_LOG_LEVEL", "debug"),
    (["--log-level", "TRACE"], "TF_RING_LOG_LEVEL", "trace"),
]


@pytest.mark.parametrize("argv,variable,expected", FLAG_EXAMPLES)
def test_engine_flag_lands_in_child_environment(argv, variable, expected):
    assert child_env(["-np", "2"] + argv)[variable] == expected


def test_every_table_flag_has_an_example():
    assert {f.flag for f in engine_flags.ENGINE_FLAGS} == {argv[0] for argv, _, _ in FLAG_EXAMPLES}


def test_flag_overrides_environment_and_absent_flag_keeps_it():
    base = {"TF_RING_CYCLE_TIME": "9", "TF_RING_CACHE_CAPACITY": "7"}
    env = child_env(["-np", "2", "--cycle-time-ms", "2"], base=base)
    assert env["TF_RING_CYCLE_TIME"] == "2"
    assert env["TF_RING_CACHE_CAPACITY"] == "7"
    assert not any(k.startswith("TF_RING_") and k not in base for k in child_env(["-np", "2"]))


def test_engine_flags_are_forwarded_to_remote_hosts():
    args = arguments.parse_args(["-np", "2", "-H", "a:1,b:1", "--cycle-time-ms", "3", "python", "x.py"])
    cmd = launcher.build_command(args, is_root=False, cores=1)
    forwarded = {cmd[i + 1] for i, c in enumerate(cmd) if c == "-x"}
    assert "TF_RING_CYCLE_TIME" in forwarded


@pytest.mark.parametrize("argv,message", [
    (["--fusion-threshold-mb", "-1"], "'-1' is negative"),
    (["--cycle-time-ms", "fast"], "'fast' is not a number"),
    (["--cycle-time-ms", "nan"], "not a finite number"),
    (["--cache-capacity", "1.5"], "'1.5' is not a whole number"),
    (["--stall-shutdown-time", "-3"], "'-3' is negative"),
    (["--log-level", "loud"], "invalid choice"),
    (["--no-stall-check", "--stall-check-time", "5"], "not allowed with"),
])
def test_bad_engine_flag_values_are_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        arguments.parse_args(["-np", "2"] + argv + ["python", "x.py"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert message in err and argv[0] in err


def test_job_settings_go_through_tfringrun_s_command_line_unchanged():
    """A hosted job hands tfringrun a JobSettings as flags (launcher_argv);
    the launcher must parse back exactly what the caller built."""
    elastic = ElasticSettings(min_np=2, max_np=4, discovery_script="/x/discover",
                              slots_per_host=2, elastic_timeout=30.0, reset_limit=3,
                              blacklist_cooldown_range=(1.0, 5.0), warm_spares=True)
    jobs = [JobSettings(command=["python", "t.py"], np=2),
            JobSettings(command=["sh", "-c", "echo $0"], np=5, host_list=[("a", 2), ("b", 2)],
                        hosts_source="-H", oversubscribe=True, network_interface="eth1",
                        ssh_port=2222, rsh_agent="/opt/agent --fast", start_timeout=30.5,
                        bind_to="core", mpi_args="--mca btl self,tcp", detection_timeout=7.0,
                        verbose=True, tf_logs=True, share_gpu=True),
            JobSettings(command=["python", "t.py"], np=3, detection_timeout=120.0,
                        elastic=elastic)]
    for job in jobs:
        assert arguments.parse_args(launcher_argv(job), environ={}) == job
    with pytest.raises(ValueError, match="TF_RING_CYCLE_TIME"):
        launcher_argv(JobSettings(command=["x"], np=1, engine_env={"TF_RING_CYCLE_TIME": "1"}))


def test_help_documents_every_flag_and_its_variable():
    parser = arguments.make_parser()
    text = " ".join(parser.format_help().split())  # argparse wraps lines anywhere
    for flag in engine_flags.ENGINE_FLAGS:
        assert flag.flag in text
        assert "Sets %s (default: %s)" % (flag.env, flag.default) in text
    # Every option argparse knows, the table's or not, must be documented.
    for action in parser._actions:
        assert action.help and action.help != "==SUPPRESS==", action
        for option in action.option_strings:
            assert option in text
    titles = [g.title for g in parser._action_groups]
    for title in ("job layout", "engine tuning", "timeline & autotune", "diagnostics"):
        assert title in titles


def test_help_from_the_command_line():
    result = subprocess.run([sys.executable, "-m", "tf_ring.run", "--help"], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0
    assert "TF_RING_TIMELINE_MARK_CYCLES" in result.stdout and "--check-build" in result.stdout


# --- --check-build ----------------------------------------------------------

def write_build_info(tmp_path, **info):
    path = tmp_path / "_build_info.json"
    path.write_text(json.dumps(info))
    return str(path)


def run_check(info_path, package_dir=check_build.PACKAGE_DIR):
    out, err = io.StringIO(), io.StringIO()
    rc = check_build.check_build(info_path=info_path, package_dir=package_dir, out=out, err=err)
    return rc, out.getvalue(), err.getvalue()


def installed_tensorflow():
    import tensorflow as tf  # the test process may import it; the launcher never does
    return tf.__version__


def test_check_build_reports_a_usable_build(tmp_path):
    (tmp_path / "_tf_ring.so").write_text("")
    info = write_build_info(tmp_path, tf_version=installed_tensorflow(), tf_ring_version="9.8.7",
                            mpi_version="mpirun (Open MPI) 5.0.11")
    rc, out, err = run_check(info, package_dir=str(tmp_path))
    assert rc == 0, err
    assert out.startswith("tf_ring 9.8.7\n")
    assert "versions match:         yes" in out
    for line in ("[X] MPI", "[X] shared-memory allreduce (ranks on one node)",
                 "[ ] NCCL (CPU build)", "[ ] Gloo", "[X] TensorFlow", "[X] Keras 3",
                 "[X] tf_keras", "build OK"):
        assert line in out
    assert "Open MPI" in out.split("MPI library:")[1].splitlines()[0]


def test_check_build_reports_a_tensorflow_mismatch(tmp_path):
    (tmp_path / "_tf_ring.so").write_text("")
    info = write_build_info(tmp_path, tf_version="2.0.0", tf_ring_version="0.1.0")
    rc, out, err = run_check(info, package_dir=str(tmp_path))
    assert rc == 1
    assert "versions match:         NO" in out
    assert "built against TensorFlow 2.0.0 but TensorFlow %s is installed" % installed_tensorflow() in err
    assert "pip install --no-build-isolation --force-reinstall --no-deps ." in err


def test_check_build_reports_a_missing_build(tmp_path):
    rc, out, err = run_check(str(tmp_path / "_build_info.json"), package_dir=str(tmp_path))
    assert rc == 1
    assert "not built" in err and "--no-build-isolation" in err


def test_check_build_from_the_command_line(tmp_path):
    cmd = [sys.executable, "-m", "tf_ring.run", "--check-build"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[X] MPI" in result.stdout and "build OK" in result.stdout
    fake = write_build_info(tmp_path, tf_version="2.0.0", tf_ring_version="0.1.0")
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, TF_RING_BUILD_INFO=fake))
    assert result.returncode == 1
    assert "built against TensorFlow 2.0.0" in result.stderr


# --- signals to the launcher ------------------------------------------------


def test_tensorflow_logs_are_quieted_unless_the_user_asks_for_them():
    assert child_env(["-np", "2"])["TF_CPP_MIN_LOG_LEVEL"] == "2"
    assert child_env(["-np", "2"],
                     base={"TF_CPP_MIN_LOG_LEVEL": "0"})["TF_CPP_MIN_LOG_LEVEL"] == "0"
    assert "TF_CPP_MIN_LOG_LEVEL" not in child_env(["-np", "2", "--tf-logs"])
    args = arguments.parse_args(["-np", "2", "python", "t.py"])
    assert launcher._quiets_tf(args, environ={})
    assert not launcher._quiets_tf(args, environ={"TF_CPP_MIN_LOG_LEVEL": "0"})
    assert not launcher._quiets_tf(
        arguments.parse_args(["-np", "2", "--tf-logs", "python", "t.py"]), environ={})


def test_the_libfabric_btl_is_left_out_unless_the_user_picks_btls():
    """Open MPI's ofi BTL costs every process 1 s of MPI_Init here; ranks
    start without it, unless the user's own OMPI_MCA_btl says otherwise."""
    assert child_env(["-np", "2"])["OMPI_MCA_btl"] == "^ofi"
    assert child_env(["-np", "2"], base={"OMPI_MCA_btl": "self,tcp,ofi"})["OMPI_MCA_btl"] == \
        "self,tcp,ofi"

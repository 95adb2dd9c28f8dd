"""The hosted-job layer on real ranks: a function run through the task
service and its rsh agent on 2 and 3 ranks of this host, and a function the
ranks cannot load failing the job by name. The service, agent and driver on
their own: tests/unit/test_hosted.py."""
import os
import sys

import cloudpickle
import pytest

from tf_ring.hosted import job

from unit.test_hosted import service  # noqa: F401 (the task service fixture)

# The ranks cannot import this test module: its functions travel by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _ranks_report(offset):
    import tensorflow as tf
    import tf_ring as hvd
    hvd.init()
    total = hvd.allreduce(tf.constant([float(hvd.rank() + offset)]), op=hvd.Sum)
    return hvd.rank(), hvd.size(), hvd.local_size(), float(total.numpy()[0]), os.getppid()


def test_a_function_the_ranks_cannot_load_fails_naming_them(service, tmp_path, monkeypatch):
    (tmp_path / "only_the_driver_has_it.py").write_text("def train():\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))  # the driver's path; the ranks' lacks it
    from only_the_driver_has_it import train
    with pytest.raises(job.JobFailed, match="(?s)rank 0, 1 failed.*ModuleNotFoundError: No "
                                            "module named 'only_the_driver_has_it'"):
        job.run_function(train, (), {}, [(service.endpoint(["127.0.0.1"]), 2)], service.secret,
                         cloudpickle.dumps, "cloudpickle", start_timeout=120)


@pytest.mark.parametrize("ranks", [2, 3])
def test_function_runs_on_every_rank_through_the_task_service(service, ranks, capsys):
    hosts = [(service.endpoint(["127.0.0.1"]), ranks)]
    results = job.run_function(_ranks_report, (10,), {}, hosts, service.secret,
                               cloudpickle.dumps, "cloudpickle", start_timeout=120)
    expected_total = sum(r + 10 for r in range(ranks))
    assert [r[:4] for r in results] == [(r, ranks, ranks, expected_total) for r in range(ranks)]
    assert service.commands_run == 1  # one daemon for the host, started through its service


def _quiet_then_report(seconds):
    import time
    time.sleep(seconds)  # nothing on any channel but heartbeats meanwhile
    return _ranks_report(0)


@pytest.mark.parametrize("ranks", [2, 3])
def test_ranks_quiet_for_three_channel_timeouts_are_not_cut(service, ranks, monkeypatch):
    """Issue 58: with a 1 s channel timeout here and in every process of the
    job (tfringrun forwards it), ranks whose function says nothing for 3.5 s
    and a daemon that prints nothing meanwhile keep their connections: the
    heartbeats come from threads of their own. Nothing is dropped."""
    monkeypatch.setenv("TF_RING_CHANNEL_TIMEOUT_S", "1")
    hosts = [(service.endpoint(["127.0.0.1"]), ranks)]
    functions, targets = job.serve(_quiet_then_report, (3.5,), {}, ranks, service.secret,
                                   cloudpickle.dumps, "cloudpickle")
    results = job.launch(functions, targets, hosts, service.secret, start_timeout=120)
    assert [r[:4] for r in results] == [(r, ranks, ranks, sum(range(ranks))) for r in range(ranks)]
    assert functions.refused == 0, functions._server.refusals.reasons
    assert service._server.refused == 0, service._server.refusals.reasons

"""Heartbeats in whole tfringrun jobs on this host: with --detection-timeout
every rank's UDP beats reach the launcher, and with --network-interface they
reach the address of that network. The sender, listener and address choice
on their own: tests/unit/test_beats.py, tests/unit/test_listener_binding.py."""
import os
import subprocess
import sys

import pytest

from tf_ring.plumbing import interface_addresses

from conftest import REPO


def test_a_job_with_a_detection_timeout_hears_udp_beats_from_every_rank():
    done = subprocess.run(
        [sys.executable, "-m", "tf_ring.run", "-np", "2", "--detection-timeout", "20",
         sys.executable, "-c", "import time; time.sleep(4)"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120,
        env=dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", "")))
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    line = [text for text in done.stderr.decode().splitlines() if "heartbeats:" in text]
    assert line, done.stderr.decode()[-3000:]
    # Beats every 0.5 s over UDP: the longest silence is well under the
    # output path's beat interval (20 / 3.5 = 5.7 s, longer than the job).
    udp_gap = float(line[0].split(" s over UDP")[0].rsplit(" ", 1)[1])
    assert 0.3 < udp_gap < 2.5, line[0]


def test_a_job_on_one_interface_beats_to_that_address():
    other = [(name, a) for name, a in interface_addresses.all_addresses().items()
             if not a.startswith("127.")]
    if not other:
        # Open MPI does not run over loopback alone. Never a silent pass: a
        # skip, which a whole run refuses (tests/allowed_skips.py).
        pytest.skip("this machine has no network interface but loopback")
    name, address = other[0]
    done = subprocess.run(
        [sys.executable, "-m", "tf_ring.run", "-np", "2", "--network-interface", name,
         "--detection-timeout", "20", sys.executable, "-c",
         "import os, time; print(os.environ['TF_RING_BEAT_TO']); time.sleep(2)"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120,
        env=dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", "")))
    err = done.stderr.decode()
    assert done.returncode == 0, err[-3000:]
    targets = set(done.stdout.decode().split())
    assert len(targets) == 1 and targets.pop().startswith(address + ":")
    line = [text for text in err.splitlines() if "heartbeats:" in text]
    assert line, err[-3000:]
    udp_gap = float(line[0].split(" s over UDP")[0].rsplit(" ", 1)[1])
    assert udp_gap < 2.5, line[0]  # every 0.5 s: the beats reached the bound address

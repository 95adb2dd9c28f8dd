"""Heartbeats over UDP (tf_ring.run.beats): signed datagrams from the rank
wrappers to the launcher, beside the status lines on mpirun's output. Real
sockets on this machine and a wrapper run under sh without mpirun. A whole
tfringrun job with --detection-timeout: tests/launcher/test_heartbeat_jobs.py."""
import os
import socket
import subprocess
import sys
import threading
import time

from tf_ring.plumbing import env_names
from tf_ring.run import beats, job_watch


def wait_for(predicate, timeout=10.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def send(datagram, listener):
    port = int(listener.environment()[env_names.BEAT_TO].rpartition(":")[2])
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.sendto(datagram, ("127.0.0.1", port))


def test_a_signature_checks_out_only_with_the_same_secret():
    datagram = beats.sign("s3cret", ["job", "2", "ab", "7"])
    assert beats.verify("s3cret", datagram) == ["job", "2", "ab", "7"]
    assert beats.verify("other", datagram) is None
    assert beats.verify("s3cret", datagram.replace(b" 2 ", b" 3 ")) is None  # tampered


def test_the_listener_takes_valid_beats_and_refuses_the_rest_changing_nothing():
    heard = []
    listener = beats.Listener("tok1", heard.append)
    try:
        send(beats.sign(listener.secret, ["tok1", "1", "s", "0"]), listener)
        assert wait_for(lambda: heard == [1])
        # A wrong secret, another job's token, a replay, a malformed rank:
        # each refused, and no rank counts as heard.
        send(beats.sign("not-the-secret", ["tok1", "2", "s", "0"]), listener)
        send(beats.sign(listener.secret, ["tok2", "2", "s", "0"]), listener)
        send(beats.sign(listener.secret, ["tok1", "1", "s", "0"]), listener)
        send(beats.sign(listener.secret, ["tok1", "x", "s", "1"]), listener)
        send(b"garbage", listener)
        assert wait_for(lambda: listener.refused == 5)
        assert heard == [1]
        # The next number from the same sender, and a new sender from 0.
        send(beats.sign(listener.secret, ["tok1", "1", "s", "1"]), listener)
        send(beats.sign(listener.secret, ["tok1", "1", "t", "0"]), listener)
        assert wait_for(lambda: heard == [1, 1, 1])
    finally:
        listener.close()


def test_the_sender_beats_while_its_wrapper_lives_then_stops():
    heard = []
    listener = beats.Listener("tok", heard.append)
    wrapper = subprocess.Popen(["sleep", "1"])
    try:
        sender = threading.Thread(target=beats.send_while_alive,
                                  args=(4, wrapper.pid, listener.environment(), 0.05))
        sender.start()
        wrapper.wait()
        sender.join(timeout=5)
        assert not sender.is_alive()
        assert len(heard) >= 5 and set(heard) == {4}
    finally:
        listener.close()


def test_udp_beats_count_for_running_ranks_and_their_gaps_are_kept():
    watch = job_watch.JobWatch("tok", 2)
    watch.heard_over_udp(0)  # not started yet: ignored
    assert watch.heard == {}
    watch._record("start", "0", "hostA")
    first = watch.heard[0]
    time.sleep(0.2)
    watch.heard_over_udp(0)
    time.sleep(0.3)
    watch.heard_over_udp(0)
    assert watch.heard[0] > first
    assert 0.25 <= watch.longest_gap["udp"] < 2.0
    watch._record("exit", "0", "0")
    before = dict(watch.heard)
    watch.heard_over_udp(0)  # ended: ignored
    assert watch.heard == before


def test_a_wrapper_started_without_mpirun_beats_over_udp_and_leaves_nothing():
    heard = []
    listener = beats.Listener("tok", heard.append)
    try:
        wrapper = job_watch.rank_wrapper("tok", beat_s=30, udp_beats_python=sys.executable)
        env = dict(os.environ, OMPI_COMM_WORLD_RANK="3", **listener.environment())
        done = subprocess.run(["sh", "-c", wrapper, "tfringrun-rank", "sleep", "1.5"], env=env,
                              stderr=subprocess.PIPE, timeout=30)
        assert done.returncode == 0
        assert b"tfringrun-status tok exit 3 0" in done.stderr
        assert heard and set(heard) == {3}
        time.sleep(1.0)
        count = len(heard)
        time.sleep(1.0)
        assert len(heard) == count  # the sender ended with its wrapper
    finally:
        listener.close()


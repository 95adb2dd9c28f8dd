"""tfringrun's rank status lines: the sh wrapper that writes them, the
filter that takes them out of mpirun's output, and the verdict on a job
whose ranks did not all finish (a lost host)."""
import io
import os
import signal
import subprocess
import threading
import time


from tf_ring.plumbing.job_settings import WorldSettings
from tf_ring.run import arguments, job_watch
from tf_ring.run.job_watch import JobWatch
from tf_ring.run.supervision import Ended, Supervision

TOKEN = "ab12"


def status(kind, rank, value):
    return ("%s %s %s %d %s\n" % (job_watch.STATUS, TOKEN, kind, rank, value)).encode()


def pump(watch, chunks, pause=0.0, idle_flush=0.05):
    """Feeds `chunks` through a real pipe into watch.pump; returns what passed."""
    read_fd, write_fd = os.pipe()
    out = io.BytesIO()
    thread = threading.Thread(target=watch.pump, args=(read_fd, out),
                              kwargs={"idle_flush": idle_flush})
    thread.start()
    for chunk in chunks:
        os.write(write_fd, chunk)
        time.sleep(pause)
    os.close(write_fd)
    thread.join(timeout=10)
    os.close(read_fd)
    return out.getvalue()


def test_status_lines_are_taken_out_and_everything_else_passes_unchanged():
    watch = JobWatch(TOKEN, 2, {0: "a", 1: "b"})
    text = [b"hello\n", status("start", 0, "a"), b"progress 10%\r", status("start", 1, "b"),
            b"progress 20%\rdone\n", status("exit", 0, "0"), b"no newline at the end"]
    assert pump(watch, text) == (b"hello\nprogress 10%\rprogress 20%\rdone\n"
                                 b"no newline at the end")
    assert watch.started == {0: "a", 1: "b"} and watch.ended == {0: ("exit", 0)}


def test_a_status_line_split_across_reads_is_still_recognized():
    watch = JobWatch(TOKEN, 1)
    line = status("exit", 0, "3")
    # The pauses make each piece its own read; the long idle_flush keeps the
    # held-back start from being flushed as plain text in between.
    passed = pump(watch, [b"before tfring", b"run-st" + line[len(b"tfringrun-st"):-5], line[-5:]],
                  pause=0.05, idle_flush=5.0)
    assert passed == b"before " and watch.ended == {0: ("exit", 3)}


def test_text_that_only_looks_like_a_status_start_is_flushed_when_idle():
    watch = JobWatch(TOKEN, 1)
    assert pump(watch, [b"count: tfringrun-s"], pause=0.3) == b"count: tfringrun-s"
    # Another job's token is not ours: passed through.
    other = b"tfringrun-status zz99 exit 0 0\n"
    assert pump(JobWatch(TOKEN, 1), [other]) == other


def run_wrapper(command, rank="5", stop_when_ready=False, die_like_the_rank=False, beat_s=None):
    """stop_when_ready: SIGTERM once the program printed "ready" (so the
    wrapper's trap is set and the program runs)."""
    wrapper = job_watch.rank_wrapper(TOKEN, die_like_the_rank=die_like_the_rank, beat_s=beat_s)
    proc = subprocess.Popen(["sh", "-c", wrapper, "rank"] + command,
                            env=dict(os.environ, OMPI_COMM_WORLD_RANK=rank),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    if stop_when_ready:
        assert proc.stdout.readline() == b"ready\n"
        os.killpg(proc.pid, signal.SIGTERM)  # what Open MPI's teardown does
    out, err = proc.communicate(timeout=30)
    return proc.returncode, out.decode(), err.decode()


def test_wrapper_reports_start_exit_code_and_failure():
    host = os.uname().nodename
    rc, out, err = run_wrapper(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (rc, out) == (3, "out\n")
    assert err == ("%s %s start 5 %s\nerr\ntfringrun: rank 5 exited with code 3\n"
                   "%s %s exit 5 3\n" % (job_watch.STATUS, TOKEN, host, job_watch.STATUS, TOKEN))
    rc, _, err = run_wrapper(["true"])
    assert rc == 0 and err.endswith("%s exit 5 0\n" % TOKEN) and "exited with code" not in err


def test_wrapper_reports_a_teardown_signal_as_stopped_not_as_a_failure():
    rc, _, err = run_wrapper(["sh", "-c", "echo ready; exec sleep 30"], stop_when_ready=True)
    assert rc == 128 + signal.SIGTERM
    assert err.splitlines()[-1] == "%s %s stopped 5 %d" % (job_watch.STATUS, TOKEN, rc)
    assert "exited with code" not in err and "Terminated" not in err


def test_wrapper_keeps_the_programs_own_errors():
    rc, _, err = run_wrapper(["no-such-program-tfring"])
    assert rc == 127 and "no-such-program-tfring" in err and "not found" in err


def test_wrapper_beats_while_its_rank_runs_and_not_after():
    """Restart mode's heartbeat: a "beat" line every beat_s seconds while the
    rank runs; the loop ends with the wrapper, holding none of its pipes
    (communicate() reads to EOF, so a lingering loop would delay it)."""
    started = time.time()
    rc, _, err = run_wrapper(["sh", "-c", "sleep 1"], beat_s=0.1)
    took = time.time() - started
    lines = err.splitlines()
    beats = [l for l in lines if l == "%s %s beat 5" % (job_watch.STATUS, TOKEN)]
    assert rc == 0 and 4 <= len(beats) <= 11, err
    assert lines[-1] == "%s %s exit 5 0" % (job_watch.STATUS, TOKEN), err
    assert took < 1.0 + 1.5, took
    # Stopped by the teardown: the loop goes too.
    rc, _, err = run_wrapper(["sh", "-c", "echo ready; exec sleep 30"], stop_when_ready=True,
                             beat_s=0.1)
    assert rc == 128 + signal.SIGTERM and err.splitlines()[-1].startswith(
        "%s %s stopped 5" % (job_watch.STATUS, TOKEN)), err
    # Without beat_s, no loop and no beat.
    _, _, err = run_wrapper(["sh", "-c", "sleep 0.3"])
    assert " beat " not in err


def test_a_host_is_silent_when_none_of_its_running_ranks_was_heard_from():
    watch = JobWatch(TOKEN, 4, PLANNED)
    pump(watch, [status("start", r, h) for r, h in PLANNED.items()] +
         [status("beat", 0, ""), status("exit", 1, "0")])
    assert watch.silent_hosts(time.time(), 5) == []
    watch.heard.update({0: 100.0, 1: 50.0, 2: 90.0, 3: 93.0})  # rank 1 has ended: not counted
    assert watch.silent_hosts(97.0, 5) == []  # rank 3 heard 4 s ago
    assert watch.silent_hosts(99.0, 5) == ["h1"]  # 9 and 6 s since ranks 2 and 3 were heard
    assert watch.silent_hosts(106.0, 5) == ["h0", "h1"]
    # A host the launcher declared lost is named in the verdict like one mpirun lost.
    watch.declared_lost.append("h1")
    rc, message = watch.verdict(1)
    assert rc == 1 and "host h1 (ranks 2, 3) was lost" in message, message


def test_a_blocked_output_is_no_silence_of_the_hosts():
    """The launcher's own reader stalls (its stderr pipe full): while the
    pump is stuck writing it hears no beat, so no host is declared silent
    then, and the stalled time does not count against them afterwards."""
    class SlowOut(object):
        def __init__(self):
            self.writing = threading.Event()

        def write(self, data):
            self.writing.set()
            time.sleep(1.5)

        def flush(self):
            pass

    watch = JobWatch(TOKEN, 4, PLANNED)
    pump(watch, [status("start", r, h) for r, h in PLANNED.items()])
    watch.heard.update({r: time.time() - 1.0 for r in PLANNED})
    out = SlowOut()
    thread = threading.Thread(target=watch._emit, args=(b"some output\n", out))
    thread.start()
    assert out.writing.wait(5)
    assert watch.silent_hosts(time.time(), 0.5) == []  # blocked: nothing could be heard
    thread.join()
    assert watch.silent_hosts(time.time(), 1.2) == []  # 2.5 s since heard, 1.5 of them stalled
    assert watch.silent_hosts(time.time() + 1.0, 1.2) == ["h0", "h1"]


# --- verdicts -------------------------------------------------------------------

PLANNED = {0: "h0", 1: "h0", 2: "h1", 3: "h1"}


def watch_with(started, ended, mpirun_says=b""):
    watch = JobWatch(TOKEN, 4, PLANNED)
    lines = [status("start", r, h) for r, h in started.items()]
    lines += [status(kind, r, str(code)) for r, (kind, code) in ended.items()]
    pump(watch, lines + [mpirun_says])
    return watch


def test_verdict_all_clean_and_a_failed_rank():
    clean = {r: ("exit", 0) for r in range(4)}
    assert watch_with(PLANNED, clean).verdict(0) == (0, None)
    failed = {1: ("exit", 7), 0: ("stopped", 143), 2: ("stopped", 143)}  # 3 never said
    assert watch_with(PLANNED, failed).verdict(7) == (7, None)


def test_verdict_names_the_host_mpirun_lost_even_when_mpirun_exits_0():
    said = b"A daemon failed to report back\n  Local host:    vm\n  Remote host:   h1\n"
    rc, message = watch_with(PLANNED, {}, said).verdict(0)
    assert rc == 1
    assert "host h1 (ranks 2, 3) was lost" in message and "h0" not in message
    assert "0 of 4 ranks finished cleanly" in message
    said = b"PRTE has lost communication with a remote daemon.\n\n  HNP daemon   : [p@0,0] on node vm\n" \
           b"  Remote daemon: [p@0,2] on node h1\n"
    assert "host h1 (ranks 2, 3) was lost" in watch_with(PLANNED, {}, said).verdict(0)[1]


def test_verdict_without_mpirun_naming_a_host():
    # Survivors report being stopped, so the silent ranks' host is the lost one.
    rc, message = watch_with(PLANNED, {0: ("stopped", 143), 1: ("stopped", 143)}).verdict(0)
    assert rc == 1 and "host h1 (ranks 2, 3) was lost" in message
    # Everyone silent and mpirun mute: say honestly that it is one of them.
    message = watch_with(PLANNED, {}).verdict(0)[1]
    assert "ranks 0, 1, 2, 3 on h0, h1" in message and "one of these hosts" in message


def test_verdict_for_a_daemon_that_never_started():
    said = b"  Remote host:   h1\n  Daemon exit status: 255\n"
    rc, message = watch_with({}, {}, said).verdict(255)
    assert rc == 255
    assert "host h1 (ranks 2, 3): mpirun could not start or reach its daemon" in message
    assert "ssh h1" in message


def test_a_pmix_start_failure_before_any_rank_is_retried_once(monkeypatch, capsys):
    """mpirun's own PMIx server failing to start (no rank ran) makes the
    launcher start the job once more; any other failure is final."""
    from tf_ring.run import launcher
    said = (b"-----\nThe PMIx server's listener thread failed to start. We cannot\n"
            b"continue.\n-----\n")
    runs = []

    def fake_run_mpirun(cmd, env, supervision):
        runs.append(supervision.watch)
        if len(runs) == 1:
            pump(supervision.watch, [said])
            return Ended(213, None, False)
        # Every rank ran and ended cleanly, as the watch would have heard.
        supervision.watch.started.update({r: "localhost" for r in range(2)})
        supervision.watch.ended.update({r: ("exit", 0) for r in range(2)})
        return Ended(0, None, False)

    monkeypatch.setattr(launcher, "run_mpirun", fake_run_mpirun)
    assert launcher.main(["-np", "2", "true"]) == 0
    assert len(runs) == 2 and runs[0] is not runs[1]  # a fresh watch for the second start
    err = capsys.readouterr().err
    assert "starting the job once more" in err
    # The failed first start is not the job's failure: nothing says the job failed.
    assert "failed with exit code" not in err and "the job failed" not in err

    runs.clear()

    def fails_otherwise(cmd, env, supervision):
        runs.append(supervision.watch)
        pump(supervision.watch, [b"some other mpirun error\n"])
        return Ended(1, None, False)

    monkeypatch.setattr(launcher, "run_mpirun", fails_otherwise)
    assert launcher.main(["-np", "2", "true"]) == 1
    assert len(runs) == 1
    assert "tfringrun: the job failed" in capsys.readouterr().err  # a final failure is reported


def fake_elastic_worlds(monkeypatch, said_when_not_started):
    """Stands in for mpirun under launcher._run_world: each start pops an
    outcome from the returned list, "no start" (mpirun prints
    `said_when_not_started`, exits 213) or "runs" (every rank ends cleanly)."""
    from tf_ring.run import launcher
    outcomes = []

    def fake_run_job(cmd, env, np, supervision, say_failed=True):
        watch = supervision.watch
        if outcomes.pop(0) == "no start":
            pump(watch, [said_when_not_started])
            return 213
        pump(watch, [status("start", r, 0) for r in range(np)] + [status("exit", r, 0) for r in range(np)])
        return 0

    monkeypatch.setattr(launcher, "_run_job", fake_run_job)
    job = arguments.parse_args(["-np", "2", "-H", "h0:1,h1:1", "true"])
    return WorldSettings.whole(job), outcomes


def test_an_elastic_world_whose_mpirun_did_not_start_is_started_again_not_judged(monkeypatch, capsys):
    """The same start-up failure in an elastic world: started once more
    instead of judged, which would call every host lost, blacklist them all
    and end the job (seen in CI after a restart). Twice in a row, it is an
    ordinary failure that blames no host."""
    from tf_ring.run import launcher
    said = b"The PMIx server's listener thread failed to start. We cannot\ncontinue.\n"
    world, outcomes = fake_elastic_worlds(monkeypatch, said)
    outcomes[:] = ["no start", "runs"]
    assert launcher._run_world(world, {}, TOKEN, cleanup=None) == (0, set())
    assert "starting this world once more" in capsys.readouterr().err

    outcomes[:] = ["no start", "no start"]
    rc, lost = launcher._run_world(world, {}, TOKEN, cleanup=None)
    assert rc != 0 and not lost
    assert outcomes == []


def test_an_elastic_world_whose_daemon_did_not_start_is_started_again_before_blaming_the_host(
        monkeypatch, capsys):
    """A daemon exiting during its start-up, before any rank ran (exit 213,
    seen in CI on a restart): the world starts once more instead of losing
    that host to the blacklist. A host whose daemon fails both starts is lost;
    a plain job does not retry, it names the host at once."""
    from tf_ring.run import launcher
    said = (b"A daemon failed to report back after being spawned.\n  Local host:    vm\n"
            b"  Remote host:   h0\n  Daemon exit status: 213\n")
    world, outcomes = fake_elastic_worlds(monkeypatch, said)
    outcomes[:] = ["no start", "runs"]
    assert launcher._run_world(world, {}, TOKEN, cleanup=None) == (0, set())
    err = capsys.readouterr().err
    assert "daemon on h0 exited while starting" in err and "starting this world once more" in err

    outcomes[:] = ["no start", "no start"]
    rc, lost = launcher._run_world(world, {}, TOKEN, cleanup=None)
    assert rc != 0 and lost == {"h0"}
    assert outcomes == []

    runs = []

    def plain_run_mpirun(cmd, env, supervision):
        runs.append(supervision.watch)
        pump(supervision.watch, [said])
        return Ended(213, None, False)

    monkeypatch.setattr(launcher, "run_mpirun", plain_run_mpirun)
    assert launcher.main(["-np", "2", "-H", "h0:1,h1:1", "true"]) == 213
    assert len(runs) == 1


TF_NOISE = (
    b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
    b"I0000 00:00:1795529305.062178    7328 cudart_stub.cc:31] Could not find cuda drivers on "
    b"your machine, GPU will not be used.\n"
    b"I0000 00:00:1796229437.017307    6558 cpu_feature_guard.cc:227] This TensorFlow binary is "
    b"optimized to use available CPU instructions in performance-critical operations.\n"
    b"To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow "
    b"with the appropriate compiler flags.\n"
    b"E0000 00:00:1795529313.501316    7328 cuda_platform.cc:52] failed call to cuInit: INTERNAL: "
    b"CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)\n")


def test_tensorflow_start_up_lines_are_dropped_when_asked_and_nothing_else():
    """Across reads cut anywhere and the status lines taken out between them;
    only on the stream that carries TensorFlow's logs (stderr)."""
    kept = (b"epoch 1 loss 0.3\n"
            b"E0000 00:00:1.0  1 some_kernel.cc:9] a real TensorFlow error stays\n")
    watch = JobWatch(TOKEN, 1, quiet_tf=True)
    data = TF_NOISE[:150] + status("start", 0, "h0") + TF_NOISE[150:] + kept + status("exit", 0, 0)
    chunks = [data[i:i + 37] for i in range(0, len(data), 37)]
    assert pump(watch, chunks, pause=0.01) == kept
    assert watch.ended == {0: ("exit", 0)}
    read_fd, write_fd = os.pipe()
    out = io.BytesIO()
    os.write(write_fd, TF_NOISE + kept)
    os.close(write_fd)
    JobWatch(TOKEN, 1, quiet_tf=True).pump(read_fd, out, idle_flush=0.05, carries_tf_logs=False)
    os.close(read_fd)
    assert out.getvalue() == TF_NOISE + kept
    assert pump(JobWatch(TOKEN, 1), [TF_NOISE + kept]) == TF_NOISE + kept


def test_in_process_wrapper_dies_of_a_signal_when_its_rank_did():
    """--recovery in-process: mpirun (ULFM) lets survivors go on after a rank
    dies of a signal, but ends the job for a non-zero exit, so the shell
    reports the kill and then dies of SIGKILL itself; other codes pass."""
    rc, _, err = run_wrapper(["sh", "-c", "kill -KILL $$"], die_like_the_rank=True)
    assert rc == -signal.SIGKILL
    assert err.endswith("%s exit 5 137\n" % TOKEN) and "exited with code 137" in err
    rc, _, err = run_wrapper(["sh", "-c", "exit 3"], die_like_the_rank=True)
    assert rc == 3 and err.endswith("%s exit 5 3\n" % TOKEN)
    rc, _, _ = run_wrapper(["sh", "-c", "kill -KILL $$"])  # the default: an exit code
    assert rc == 128 + signal.SIGKILL


def test_the_heartbeat_summary_is_printed_only_for_a_job_whose_ranks_ran(capfd):
    """An mpirun that failed to start is started once more; the summary of
    the first, which heard nothing, must not stand in for the second's (a
    CI run's test read 0.0 s silences from it)."""
    from tf_ring.run import launcher

    def run(script):
        watch = JobWatch(TOKEN, 2, {0: "h0", 1: "h0"})
        launcher._run_job(["sh", "-c", script], dict(os.environ), 2,
                          Supervision(watch, start_timeout=60, silence_timeout=30))
        return capfd.readouterr().err

    said = "The PMIx server's listener thread failed to start. We cannot continue."
    failed_start = run("echo \"%s\" >&2; exit 213" % said)
    assert said in failed_start  # the stand-in's stderr was read: its absence below means something
    assert "tfringrun: heartbeats" not in failed_start
    lines = [status(kind, r, v).decode().strip() for kind, r, v in (
        ("start", 0, "h0"), ("start", 1, "h0"), ("beat", 0, ""), ("beat", 1, ""),
        ("exit", 0, "0"), ("exit", 1, "0"))]
    script = "; ".join("echo '%s' >&2; sleep 0.3" % line for line in lines)
    summary = [l for l in run(script).splitlines() if "tfringrun: heartbeats" in l]
    assert len(summary) == 1, summary
    gap = float(summary[0].split(" s on mpirun's output")[0].rsplit(" ", 1)[1])
    assert 0.5 <= gap < 3, summary  # start to beat: two 0.3 s sleeps


def test_a_ranks_end_line_closes_its_last_silence(capfd):
    """A rank that beat no more before it ended was silent until its end
    line came: the summary counts that stretch too."""
    from tf_ring.run import launcher
    watch = JobWatch(TOKEN, 1, {0: "h0"})
    script = "echo '%s' >&2; sleep 1.2; echo '%s' >&2" % (
        status("start", 0, "h0").decode().strip(), status("exit", 0, "0").decode().strip())
    launcher._run_job(["sh", "-c", script], dict(os.environ), 1,
                      Supervision(watch, start_timeout=60, silence_timeout=30))
    assert 1.1 < watch.longest_gap["output"] < 5, capfd.readouterr().err


# What prterun printed when every Python process of rank 2 on node03 was
# killed, its wrapper too (on the simulated hosts, 2026-11-28): the wrapper
# could not report, and neither could rank 1, cut off by the teardown.
KILLED_WITH_ITS_WRAPPER = (b"--------------------------------------------------------------------------\n"
                           b"prterun noticed that process rank 2 with PID 4417 on node node03 exited on\n"
                           b"signal 9 (Killed).\n"
                           b"--------------------------------------------------------------------------\n")


def three_node_watch(started, mpirun_says=b""):
    """Ranks 0, 1, 2 on node01..03; rank 0 reports being stopped."""
    watch = JobWatch(TOKEN, 3, {0: "node01", 1: "node02", 2: "node03"})
    pump(watch, [status("start", r, h) for r, h in started.items()]
         + [status("stopped", 0, "143"), mpirun_says])
    return watch


def test_mpiruns_report_of_a_killed_rank_blames_only_its_host():
    from tf_ring.elastic_driver import elastic_plan
    watch = three_node_watch({0: "node01", 1: "node02"}, KILLED_WITH_ITS_WRAPPER)
    assert watch.signalled_ranks() == {2: ("node03", 9)}
    watch.take_mpirun_reports()
    assert watch.ended[2] == ("exit", 137) and watch.lost_ranks() == [1]
    rc, lost = elastic_plan.judge_world(0, dict(watch.ended), list(watch.end_order),
                                        watch.lost_ranks(), watch.lost_hosts_named(),
                                        watch.host_of, watch.mpi_error_ranks())
    assert lost == {"node03"}  # node02's rank was only cut off: no evidence against it
    rc, lost = elastic_plan.judge_in_process_world(
        dict(watch.ended), list(watch.end_order), watch.lost_ranks(), watch.lost_hosts_named(),
        watch.host_of, 3, None)
    assert "node03" in lost  # in-process, a rank that never ended counts too: survivors report


def test_without_mpiruns_report_both_silent_hosts_stay_suspects():
    watch = three_node_watch({0: "node01", 1: "node02", 2: "node03"})
    watch.take_mpirun_reports()
    assert watch.lost_ranks() == [1, 2]

"""Warm spares: an elastic restart without TensorFlow's import on its
critical path (tfringrun --warm-spares, docs/elastic.md).

A restarted world spends most of its seconds in new processes importing
TensorFlow. With --warm-spares, every rank's process (the stand-in, what
mpirun starts) first makes sure its host holds one spare for its local
slot: a detached Python that imports TensorFlow and tf_ring at a low
priority, then waits on a Unix socket in the job's host-local directory.
The stand-in of the next world's rank in that slot hands the spare its
environment (the rank's PMIx identity, which MPI_Init reads), its working
directory, CPU affinity and command, and its stdin, stdout and stderr
(SCM_RIGHTS); the spare runs the command's script or module as __main__
and reports its exit code, which the stand-in exits with. The stand-in
passes on the signals it gets, and dies of the spare's signal when the
spare dies of one; the spare dies the moment its stand-in does. Without a
ready spare, or for a command that is not this Python on a script or
module, the stand-in execs the command: a cold start, as without the flag.

A spare leaves when its socket is removed (the launcher removes the job's
directory at the end) or when no rank of the job has lived on its host for
TF_RING_SPARE_IDLE_S seconds (30; a restart begins the next world within
seconds): so it also leaves a host whose directory the launcher cannot remove.

    python warm_spares.py stand-in -- COMMAND...   # mpirun's rank command
    python warm_spares.py spare DIRECTORY SLOT     # started by a stand-in
    python warm_spares.py seed BASE SLOTS WAIT_S   # spares on an added host
"""
import array
import atexit
import importlib.util
import json
import os
import resource
import runpy
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time



def _floor_module(name):
    """tf_ring.plumbing's `name`, loaded from its file: run by path on a
    rank's start, this file imports no package (tf_ring's would be the first)."""
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "plumbing",
                        name + ".py")
    spec = importlib.util.spec_from_file_location("tf_ring_spare_" + name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if __package__:
    from tf_ring.plumbing import env_names, private_dirs
else:  # run by path (a rank's start)
    env_names, private_dirs = _floor_module("env_names"), _floor_module("private_dirs")

DEFAULT_IMPORTS = "tensorflow,tf_ring"
DEFAULT_IDLE_S = 30.0
HANDED_OVER_S = 10.0  # a spare that does not confirm a hand-over within this is not used
EXIT_GRACE_S = 30.0  # from a rank's exit code to its process's end
SCRIPT = os.path.abspath(__file__)  # run by path: no package import on a rank's start
_FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1,
                      signal.SIGUSR2)


def rank_command(job):
    """The argv mpirun runs for each rank of `job` (inside the rank wrapper)."""
    if job.elastic is None or not job.elastic.warm_spares:
        return list(job.command)
    return [sys.executable, SCRIPT, "stand-in", "--"] + list(job.command)


def host_directory(base):
    """This host's spare folder under the job's directory `base`/.. (each
    level made private here, or refused if another user made it first)."""
    job, spares = os.path.split(base)
    host = private_dirs.make_private_tree(job, spares, socket.gethostname())
    private_dirs.make_private_dir(os.path.join(host, "ranks"))
    return host


def _same_user(conn):
    """Whether the process at the other end of a Unix socket runs as this
    user (SO_PEERCRED): a spare and a stand-in hand a rank's environment,
    secrets included, and its command only to one of their own."""
    pid, uid, gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                        struct.calcsize("3i")))
    return uid == os.geteuid()


def runnable_target(argv, interpreter=sys.executable):
    """("script" | "module", name, arguments) when `argv` runs `interpreter`
    (this very Python) on a script or a module, which a spare can run; else None."""
    found = shutil.which(argv[0]) if argv else None
    if not found or os.path.dirname(os.path.abspath(found)) != os.path.dirname(interpreter) \
            or os.path.realpath(found) != os.path.realpath(interpreter):
        return None
    rest = list(argv[1:])
    while rest and rest[0] == "-u":  # unbuffered: a spare's output is line-buffered anyway
        rest.pop(0)
    if len(rest) >= 2 and rest[0] == "-m":
        return ("module", rest[1], rest[2:])
    if rest and not rest[0].startswith("-"):
        return ("script", rest[0], rest[1:])
    return None


# ---- the stand-in: the process mpirun starts for a rank ----

def stand_in(command):
    try:
        directory = host_directory(os.environ[env_names.SPARE_DIR])
    except private_dirs.UnsafeDirectory as e:
        print(e, file=sys.stderr, flush=True)  # names the refused directory; no traceback
        os._exit(1)
    slot = os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0")
    private_dirs.create_private_file(os.path.join(directory, "ranks", str(os.getpid()))).close()  # keeps spares here
    target = runnable_target(command)
    conn = _claim(directory, slot, target) if target else None
    _ensure_spare(directory, slot)  # for the next world
    if conn is None:
        try:
            os.execvp(command[0], command)  # cold: as without --warm-spares
        except OSError as e:
            print("tfringrun: cannot run %s: %s" % (command[0], e.strerror), file=sys.stderr)
            os._exit(127 if isinstance(e, FileNotFoundError) else 126)  # as sh says it
    _relay(conn)


def _claim(directory, slot, target):
    """A connection to this slot's ready spare, which now runs `target`; or None."""
    path = os.path.join(directory, slot + ".sock")
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
        if not _same_user(conn):
            print("tfringrun: refusing the spare socket %s: another user listens there" % path,
                  file=sys.stderr, flush=True)
            conn.close()
            return None
        os.remove(path)  # the slot is free for the next world's spare
        message = {"env": dict(os.environ, **{env_names.WARM_SPARE: "1"}), "cwd": os.getcwd(),
                   "target": target, "cpus": sorted(os.sched_getaffinity(0)),
                   # the rank starts with the signals the stand-in ignores ignored
                   "ignored": [int(n) for n in _FORWARDED_SIGNALS
                               if signal.getsignal(n) == signal.SIG_IGN]}
        body = json.dumps(message).encode()
        conn.sendmsg([struct.pack("!Q", len(body)) + body],
                     [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]).tobytes())])
        conn.settimeout(HANDED_OVER_S)
        if conn.recv(1) != b"+":
            raise OSError("the spare did not take the rank")
        conn.settimeout(None)
        os.remove(os.path.join(directory, slot + ".pid"))  # a rank now, no longer the spare
        return conn
    except OSError:
        conn.close()  # no spare, or a dead one: a cold start
        return None


def _ensure_spare(directory, slot):
    pid_file = os.path.join(directory, slot + ".pid")
    try:
        with open(pid_file) as f:
            if _alive(int(f.read() or 0)):
                return  # importing, or ready
    except (OSError, ValueError):
        pass
    log_fd = os.open(os.path.join(directory, slot + ".log"),
                     os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    with os.fdopen(log_fd, "ab") as log:
        spare = subprocess.Popen([sys.executable, SCRIPT, "spare", directory, slot],
                                 stdin=subprocess.DEVNULL, stdout=log, stderr=log, close_fds=True,
                                 # Its own process group, out of the world's teardown; but
                                 # the ranks' session, where its low priority counts
                                 # (the kernel shares the CPU fairly between sessions).
                                 preexec_fn=os.setpgrp)
    with private_dirs.create_private_file(pid_file) as f:
        f.write(str(spare.pid).encode())


def _alive(pid):
    try:
        os.kill(pid, 0)
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _relay(conn):
    """Waits for the spare that became this rank; exits as it did."""
    spare_pid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                    struct.calcsize("3i")))[0]
    last = [signal.SIGKILL]

    def forward(signum, _frame):
        last[0] = signum
        try:
            os.kill(spare_pid, signum)
        except OSError:
            pass
    for signum in _FORWARDED_SIGNALS:
        signal.signal(signum, forward)
    said = b""
    while not said.endswith(b"\n"):
        chunk = conn.recv(64)
        if not chunk:
            break
        said += chunk
    if said.startswith(b"exit "):
        # As with a cold rank, mpirun sees the rank end when its process has
        # (the rest of Python's exit: files flushed, modules torn down).
        conn.settimeout(EXIT_GRACE_S)
        try:
            while conn.recv(64):
                pass
        except socket.timeout:
            os.kill(spare_pid, signal.SIGKILL)  # stuck in its exit: end it as mpirun would
        os._exit(int(said.split()[1]))
    # The spare died without a word: of a signal, most likely the one passed on.
    signal.signal(last[0], signal.SIG_DFL)
    os.kill(os.getpid(), last[0])
    os._exit(128 + last[0])


# ---- seeding: spares on a host before any rank runs there ----

def seed(base, slots, wait_s):
    """Starts a spare for each of `slots` slots on this host (tfringrun runs
    it through the remote agent on a host discovery added); 0 once every one
    is ready, 1 if they are not within wait_s seconds."""
    try:
        directory = host_directory(base)
    except private_dirs.UnsafeDirectory as e:
        print(e, file=sys.stderr, flush=True)  # names the refused directory; no traceback
        return 1
    for slot in range(slots):
        _ensure_spare(directory, str(slot))
    deadline = time.monotonic() + wait_s
    while not all(os.path.exists(os.path.join(directory, "%d.sock" % s)) for s in range(slots)):
        if time.monotonic() > deadline:
            return 1
        time.sleep(0.1)
    return 0


# ---- the spare ----

def spare(directory, slot):
    del sys.path[0]  # this file's folder must not shadow the user's modules
    if _may_raise_priority():
        # Only the CPU the ranks beside it leave over; undone at the hand-over,
        # which is tried once here (root in a container may lack the right).
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        try:
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        except OSError:
            return "cannot restore a rank's priority after lowering it: no spare here"
    for name in filter(None, os.environ.get(env_names.SPARE_IMPORTS, DEFAULT_IMPORTS).split(",")):
        __import__(name.strip())
        if name.strip() == "tf_ring":
            sys.modules["tf_ring"]._load_api()  # the ops, their gradients, the native library
    path = os.path.join(directory, slot + ".sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        os.remove(path + ".new")  # left by a spare of this slot killed right here
    except FileNotFoundError:
        pass
    server.bind(path + ".new")
    server.listen(1)
    os.rename(path + ".new", path)  # ready when it appears: a connect never meets a bound, deaf one
    idle_s = float(os.environ.get(env_names.SPARE_IDLE_S, DEFAULT_IDLE_S))
    last_rank_seen = time.monotonic()
    while True:
        conn = _accept(server, 0.5)
        if conn is not None and not _same_user(conn):
            conn.close()  # another user's process: it gets nothing and runs nothing
            continue
        if conn is not None:
            break
        if not os.path.exists(path):
            # The job's directory is gone, or a stand-in just took the slot
            # (it removes the path as it connects): one last look.
            conn = _accept(server, 0.2)
            if conn is None or not _same_user(conn):
                return 0
            break
        if _ranks_alive(directory):
            last_rank_seen = time.monotonic()
        elif time.monotonic() - last_rank_seen > idle_s:
            os.remove(path)
            return 0
    server.close()
    return _become_rank(conn)


def _may_raise_priority():
    """Whether a spare may lower its priority: only where it can raise it back
    for the rank (root, or RLIMIT_NICE up to nice 0); else it never lowers it."""
    return os.geteuid() == 0 or resource.getrlimit(resource.RLIMIT_NICE)[0] >= 20


def _accept(server, timeout):
    server.settimeout(timeout)
    try:
        return server.accept()[0]
    except socket.timeout:
        return None


def _ranks_alive(directory):
    ranks = os.path.join(directory, "ranks")
    alive = False
    for name in os.listdir(ranks) if os.path.isdir(ranks) else ():
        if name.isdigit() and _alive(int(name)):
            alive = True
        else:
            try:
                os.remove(os.path.join(ranks, name))
            except OSError:
                pass
    return alive


def _become_rank(conn):
    """Takes over the rank the stand-in hands on, runs its command, and
    reports its exit code; returns that code."""
    fds = array.array("i")
    data, ancillary, _, _ = conn.recvmsg(1 << 16, socket.CMSG_SPACE(3 * fds.itemsize))
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
    length = struct.unpack("!Q", data[:8])[0]
    while len(data) < 8 + length:
        more = conn.recv(1 << 16)
        if not more or len(fds) != 3:
            return 1  # the stand-in died mid-hand-over: nothing was ours yet
        data += more
    message = json.loads(data[8:8 + length].decode())
    sys.stdout.flush()
    sys.stderr.flush()
    for target_fd, fd in enumerate(fds):
        os.dup2(fd, target_fd)
        os.close(fd)
    os.environ.clear()
    os.environ.update(message["env"])  # the rank's identity, before anything calls MPI_Init
    os.chdir(message["cwd"])
    try:
        os.sched_setaffinity(0, message["cpus"])  # as mpirun bound the stand-in
    except OSError:
        pass  # CPUs this process may not use: it runs where it may
    if _may_raise_priority():
        for thread in os.listdir("/proc/self/task"):  # the import's threads too
            try:
                os.sched_setscheduler(int(thread), os.SCHED_OTHER, os.sched_param(0))
            except OSError:
                pass  # a thread that has ended
    for signum in _FORWARDED_SIGNALS:  # as a fresh Python under the stand-in would have them
        fresh = signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL
        signal.signal(signum, signal.SIG_IGN if int(signum) in message["ignored"] else fresh)
    conn.sendall(b"+")
    threading.Thread(target=_die_with_stand_in, args=(conn,), daemon=True).start()
    code = [1]

    def report(exit_code=None):
        if exit_code is None:  # at exit: the stand-in ends on the word, and the rank with it
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass
        try:
            conn.sendall(b"exit %d\n" % (code[0] if exit_code is None else exit_code))
        except OSError:
            pass
    atexit.register(report)  # first registered, so it runs after the job's own (MPI_Finalize)
    real_exit = os._exit
    os._exit = lambda status: (report(status), real_exit(status))  # exit_for_relaunch uses it
    code[0] = _run_target(*message["target"])
    return code[0]


def _die_with_stand_in(conn):
    """mpirun's teardown, or a lost host, kills the stand-in: the rank goes too.
    (Python ends this thread once the interpreter's exit has begun; the
    stand-in then waits for the process to end, up to EXIT_GRACE_S.)"""
    while conn.recv(64):
        pass
    os.kill(os.getpid(), signal.SIGKILL)


def _run_target(kind, name, arguments):
    """Runs a script or module as `python` would; returns the exit code."""
    sys.argv = [name] + list(arguments)
    # sys.path[0] as `python` sets it: the script's folder, or (-m) the working directory
    sys.path.insert(0, os.path.dirname(os.path.abspath(name)) if kind == "script" else os.getcwd())
    if kind == "script" and not os.path.isfile(name):
        print("%s: can't open file %r: [Errno 2] No such file or directory"
              % (sys.executable, os.path.abspath(name)), file=sys.stderr)
        return 2
    if kind == "module" and importlib.util.find_spec(name) is None:
        print("%s: No module named %s" % (sys.executable, name), file=sys.stderr)
        return 1
    try:
        if kind == "script":
            runpy.run_path(name, run_name="__main__")
        else:
            runpy.run_module(name, run_name="__main__", alter_sys=True)
        return 0
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        print(e.code, file=sys.stderr)
        return 1
    except BaseException as e:  # noqa: B902  (what the interpreter would print)
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename in (SCRIPT, runpy.__file__) \
                or tb is not None and tb.tb_frame.f_code.co_filename.startswith("<frozen runpy"):
            tb = tb.tb_next  # the user's frames only, as a cold start shows them
        sys.excepthook(type(e), e.with_traceback(tb), tb)
        return 128 + signal.SIGINT if isinstance(e, KeyboardInterrupt) else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["stand-in"]:
        stand_in(sys.argv[3:] if sys.argv[2:3] == ["--"] else sys.argv[2:])
    elif sys.argv[1:2] == ["spare"]:
        sys.exit(spare(sys.argv[2], sys.argv[3]))
    elif sys.argv[1:2] == ["seed"]:
        sys.exit(seed(sys.argv[2], int(sys.argv[3]), float(sys.argv[4])))
    else:
        sys.exit(__doc__)

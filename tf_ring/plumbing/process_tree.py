"""Finding and killing a process's descendants on this machine, through
/proc (mpirun's agents such as ssh, which may outlive it when it hangs)."""
import os
import signal


def descendants(pid):
    """Every live process below `pid`."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/stat" % entry) as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill(pids):
    """SIGKILLs each of `pids` that still exists."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def kill_tree(pid):
    """SIGKILLs `pid` and everything below it on this machine (remote
    processes end when their daemon loses mpirun)."""
    kill(descendants(pid) + [pid])

"""How the job starts a Python module in a child process without the
working directory on its module path: `python -m` puts the directory it
starts in first, so a module another user planted in a shared one (/tmp,
an executor's work directory) would run as the job's user, with the job's
secret in its environment.

Python 3.11 and later get -P (no such first entry). An older Python, or
one whose version is not known here (a task host's), gets -c with a line
that drops the working directory's entry from the path before importing
anything, then runs the module as -m would; the working directory itself
stays what it was (a rank's relative paths keep their meaning)."""
import shlex
import sys

_RUN = ("import sys; sys.path[:] = [p for p in sys.path if p not in ('', '.')]; "
        "import runpy; runpy.run_module('%s', run_name='__main__', alter_sys=True)")


def module_argv(module, python=None, version=None):
    """[python, flags..., module's arguments go after]: `version` is the
    child's Python's sys.version_info, None when it is not known."""
    python = python or sys.executable
    if version is None and python == sys.executable:
        version = sys.version_info
    if version is not None and tuple(version[:2]) >= (3, 11):
        return [python, "-P", "-m", module]
    return [python, "-c", _RUN % module]


def module_shell(module, python_expression):
    """The same as one shell command for a Python named by a shell word
    (e.g. "${TF_RING_TASK_PYTHON:-python3}", whose version is not known)."""
    return "exec %s -c %s" % (python_expression, shlex.quote(_RUN % module))

"""tfringrun in the launcher pod of a Kubeflow MPI Operator job (MPIJob v2beta1).

The operator mounts a host file (`<pod>.<job>.<ns>.svc slots=N` per worker)
and describes it with Open MPI 4's (ORTE's) variable names. Open MPI 5's
runtime, PRRTE, reads none of them (mpi-operator#842): a plain mpirun there
ran every rank in the launcher pod and reported success. tfringrun reads the
host file itself and passes the settings on under PRRTE's names.
"""

ROLE_ENV = "K_MPI_JOB_ROLE"  # "launcher" in the launcher pod, "worker" in the others
HOSTFILE_ENV = "OMPI_MCA_orte_default_hostfile"
DEFAULT_HOSTFILE = "/etc/mpi/hostfile"

# Open MPI 4 variable the operator sets -> the PRRTE setting that does the same.
PRRTE_NAMES = {
    "OMPI_MCA_plm_rsh_args": "plm_ssh_args",
    "OMPI_MCA_orte_keep_fqdn_hostnames": "prte_keep_fqdn_hostnames",
}


def hostfile(environ):
    """(path, where it came from) of the operator's host file, or (None, None)."""
    if environ.get(HOSTFILE_ENV):
        return environ[HOSTFILE_ENV], HOSTFILE_ENV
    if environ.get(ROLE_ENV) == "launcher":
        return DEFAULT_HOSTFILE, "%s=launcher" % ROLE_ENV
    return None, None


def _set_by_user(name, environ, mpi_args):
    """The user gave PRRTE this setting directly: theirs wins."""
    return "PRTE_MCA_" + name in environ or name in mpi_args.split()


def prrte_settings(environ, mpi_args=""):
    """{PRRTE setting: value} carried over from the operator's ORTE variables."""
    return {prrte: environ[orte] for orte, prrte in sorted(PRRTE_NAMES.items())
            if environ.get(orte) and not _set_by_user(prrte, environ, mpi_args)}


def with_ssh_port(settings, ssh_port):
    """`settings` with --ssh-port's "-p P" added to plm_ssh_args (one value
    holds every ssh option: a second --prtemca plm_ssh_args would replace it)."""
    if ssh_port is None:
        return settings
    ssh_args = (settings.get("plm_ssh_args", "") + " -p %d" % ssh_port).strip()
    return dict(settings, plm_ssh_args=ssh_args)


def orte_warning(environ, hosts_source, settings):
    """One line on the ORTE variables set here, which Open MPI 5 ignores,
    saying what tfringrun did with each; None when there are none."""
    names = sorted(k for k in environ if k.startswith("OMPI_MCA_orte_") or k in PRRTE_NAMES)
    if not names:
        return None
    said = []
    for name in names:
        if name == HOSTFILE_ENV:
            used = hosts_source is not None and HOSTFILE_ENV in hosts_source
            said.append("%s (%s)" % (name, "read by tfringrun as the host file" if used
                                     else "not used: the hosts came from elsewhere"))
        elif PRRTE_NAMES.get(name) in settings:
            said.append("%s (passed on as --prtemca %s)" % (name, PRRTE_NAMES[name]))
        elif name in PRRTE_NAMES:
            said.append("%s (not used: PRRTE's %s is set)" % (name, PRRTE_NAMES[name]))
        else:
            rest = name[len("OMPI_MCA_orte_"):]
            said.append("%s (ignored; PRRTE's name is usually prte_%s: set PRTE_MCA_prte_%s)"
                        % (name, rest, rest))
    return ("tfringrun: Open MPI 5 ignores these Open MPI 4 (ORTE) variables: %s"
            % "; ".join(said))

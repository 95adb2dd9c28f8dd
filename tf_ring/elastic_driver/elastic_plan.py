"""The elastic driver's decisions that need no processes: which hosts the
next world runs on and how many ranks, and what a rank's exit means.

Kept apart from the loop that runs mpirun so each rule is unit-tested."""

from tf_ring.plumbing.env_names import EXIT_HOSTS_UPDATED


class BelowMinimum(Exception):
    """Fewer usable slots than --min-np."""


def plan_world(discovered, blacklist, min_np, max_np, survivors=()):
    """(hosts, np) for the next launch. `discovered` is [(host, slots)] in
    discovery order; blacklisted hosts are dropped; hosts in `survivors`
    (those that ran the last world) come first, so rank 0 of the new world is
    on a host that holds the in-memory mirror of the last commit.
    np = min(max_np, usable slots); BelowMinimum if that is under min_np."""
    usable = blacklist.usable(discovered)
    kept = set(survivors)
    ordered = [h for h in usable if h[0] in kept] + [h for h in usable if h[0] not in kept]
    slots = sum(s for _, s in ordered)
    np = slots if max_np is None else min(max_np, slots)
    if np < min_np:
        raise BelowMinimum("%d usable slots on %s; --min-np needs at least %d"
                           % (slots, ", ".join(h for h, _ in ordered) or "no hosts", min_np))
    # Trim hosts the ranks do not reach, so mpirun is not asked to visit them.
    chosen, left = [], np
    for host, s in ordered:
        if left <= 0:
            break
        chosen.append((host, min(s, left)))
        left -= min(s, left)
    return chosen, np


def added_slots(previous, discovered, blacklist):
    """The usable hosts [(host, slots)] discovery now offers more slots on
    than the running world has (empty: nothing to notice rank 0 of)."""
    before = dict(previous)
    return [(h, s) for h, s in blacklist.usable(discovered) if s > before.get(h, 0)]


def judge_world(rc, ended, end_order, silent, named_hosts, host_of, mpi_errors=()):
    """(rc, lost hosts) for one elastic world that has ended.

    ended: {rank: (kind, code)} from the ranks' wrappers; end_order: those
    ranks in the order they reported; silent: ranks that never reported an
    end; named_hosts: hosts mpirun said it lost; mpi_errors: ranks whose MPI
    library aborted on an error (MPI_ERRORS_ARE_FATAL, e.g. "Socket closed").
    A rank killed by a signal (code >= 128) counts as lost; a silent one
    does too when no rank reported a kill (its host died); unless
    the first rank to fail did so with an ordinary error: then mpirun's
    teardown of that failure killed or silenced the rest, and restarting
    would only repeat the error. An MPI error abort is no such first error
    when a rank was killed or went silent: a peer's socket closing is how the
    survivors see the loss, and their reports can arrive before the killed
    rank's (seen on the simulated hosts: ranks 0 and 1 "exited with code 14"
    first, Open MPI's message named rank 1 only). Nor is it one after a rank
    left with EXIT_HOSTS_UPDATED, whatever the order of the reports.
    """
    killed = [r for r, (kind, code) in ended.items() if kind == "exit" and code >= 128]
    consequences = set()
    # A rank that left for a relaunch closes its sockets as it goes; a peer
    # still in an MPI call may abort on that ("Socket closed", seen in CI)
    # before it reaches its own exit 75, and its report may reach the
    # launcher first (seen on hosts with their own /dev/shm).
    asked_anywhere = any(kind == "exit" and code == EXIT_HOSTS_UPDATED for kind, code in ended.values())
    if killed or silent or asked_anywhere:
        # Open MPI prints its error once per node at most, so a rank that
        # exited with the same code as a named MPI error is one too.
        mpi_codes = {ended[r][1] for r in mpi_errors if r in ended}
        consequences = set(mpi_errors) | {r for r, (kind, code) in ended.items()
                                          if kind == "exit" and code in mpi_codes}
    codes = [ended[r][1] for r in end_order
             if ended[r][0] == "exit" and ended[r][1] != 0 and r not in consequences]
    asked = [c for c in codes if c == EXIT_HOSTS_UPDATED]
    ordinary = [c for c in codes if c not in (EXIT_HOSTS_UPDATED,) and c < 128]
    if asked and not ordinary and not killed:
        # Ranks asked to relaunch at the new size; mpirun tears down the rest
        # as soon as the first leaves, so those may not report an end.
        return EXIT_HOSTS_UPDATED, set()
    if codes and codes[0] < 128 and codes[0] != EXIT_HOSTS_UPDATED and not named_hosts:
        return rc or codes[0], set()
    if killed or named_hosts:
        # A rank's wrapper reported its kill, so hosts were up to report, or
        # mpirun named the host it lost: ranks that said nothing else were
        # cut off by mpirun's teardown (seen on the simulated hosts: rank 0
        # silent after rank 2's kill; no rank reporting after a host's
        # daemon was killed).
        silent = []
    return rc, set(named_hosts) | {host_of(r) for r in list(silent) + killed}


def judge_in_process_world(ended, end_order, silent, named_hosts, host_of, np=None, shrunk_to=None,
                           survivors=None):
    """(rc, lost hosts) for a world run with --recovery in-process, where
    survivors carry on after a rank dies and mpirun's own code says little.

    Lost: ranks killed by a signal (code >= 128) and ranks that never
    reported (their host went away). The survivors' codes decide: a
    survivor's ordinary failure -> that failure; any EXIT_HOSTS_UPDATED -> a
    relaunch at a new size; all 0 -> 0 (the job finished on the ranks left).
    Survivors that mpirun stopped ("stopped": a lost host's daemon took the
    job down) leave it to the coordinated restart: (1, lost).

    `shrunk_to` is the world's size after its last shrink (rank 0 writes it;
    None when it never shrank) and `np` its size at the start. When as many
    ranks left with EXIT_HOSTS_UPDATED as the shrink kept, the leavers are
    exactly the survivors, so every other rank was lost, even one that went
    silently (link down): its host is lost unless a survivor shares it.

    `survivors` (the ranks the shrinks kept, as their reports named them;
    None when unknown) says the same without counting leavers: a rank no
    shrink kept is lost, even when mpirun stopped a survivor before it said,
    or when ULFM split the world into fragments that each found itself alone
    (seen in CI: ranks 0 and 1 each shrank to a world of one after rank 2's
    link went down; counting leavers blamed rank 0's healthy host)."""
    killed = [r for r, (kind, code) in ended.items() if kind == "exit" and code >= 128]
    # When mpirun names the host it lost, the other silent ranks were only cut
    # off by its teardown (seen on the simulated hosts: a killed host's
    # daemon ended the job, and no rank reported an end).
    lost = set(named_hosts) | {host_of(r) for r in killed + ([] if named_hosts else list(silent))}
    stopped = [r for r, (kind, _) in ended.items() if kind == "stopped"]
    codes = [ended[r][1] for r in end_order if ended[r][0] == "exit" and ended[r][1] < 128]
    failures = [c for c in codes if c not in (0, EXIT_HOSTS_UPDATED)]
    if failures:
        return failures[0], set()
    if EXIT_HOSTS_UPDATED in codes:
        # Ranks asked for a relaunch at a new size; mpirun may stop or kill
        # the rest as soon as the first leaves, so the silent ones are not lost.
        lost = set(named_hosts) | {host_of(r) for r in killed}
        leavers = {r for r, (kind, code) in ended.items() if kind == "exit" and code == EXIT_HOSTS_UPDATED}
        if survivors is not None and np is not None and len(survivors) < np:
            kept = {host_of(r) for r in survivors}
            lost |= {host_of(r) for r in range(np) if r not in survivors} - kept
        elif shrunk_to is not None and np is not None and shrunk_to < np and len(leavers) == shrunk_to:
            kept = {host_of(r) for r in leavers}
            lost |= {host_of(r) for r in range(np) if r not in leavers} - kept
        return EXIT_HOSTS_UPDATED, lost
    if codes and not stopped:
        return 0, lost
    return 1, lost  # lost with nobody finishing: the driver restarts on the rest


def survivors_finished(ended, expected):
    """True when `expected` ranks (the world's size after its last shrink)
    have ended on their own: under ULFM mpirun may wait for the dead ranks'
    hosts forever, so the launcher ends it then."""
    done = sum(1 for kind, code in ended.values() if kind == "exit" and code < 128)
    return done >= expected
